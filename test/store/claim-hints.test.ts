// Claim hints (src/store/postgres/state/claim-hints.ts): a claim starts its scan of pending tasks past
// what its coordinator has seen claimed, and every way a task becomes claimable still gets it
// claimed in order: a new job of higher priority, a retry due now, a reaped lease, a backoff that
// runs out without a wake-up. Under a held snapshot a hinted claim reads a few index entries where
// one from the front reads every dead one; two coordinators with hints lease each task once.
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TaskListener } from "../../src/store/postgres/state/listener.js";
import { createPool, PostgresQueue } from "../../src/store/postgres/store.js";
import { createTestDatabase, type TestDatabase } from "../support/db.js";
import { sha, TEST_STORE_OPTIONS } from "../support/queue.js";

let db: TestDatabase;
const pools: pg.Pool[] = [];
const listeners: TaskListener[] = [];

interface Coordinator {
  q: PostgresQueue;
  pool: pg.Pool;
  /** Resolves once this coordinator has heard a wake-up for the workload (its hints have moved). */
  heard(workload: string): Promise<void>;
}

async function coordinator(): Promise<Coordinator> {
  const pool = createPool({ connectionString: db.url, max: 10, statementTimeoutMs: 30_000, connectTimeoutMs: 10_000 });
  pools.push(pool);
  const listener = new TaskListener(db.url);
  listeners.push(listener);
  await listener.start();
  const q = new PostgresQueue(pool, { ...TEST_STORE_OPTIONS, taskWakes: listener, jobWakes: listener });
  const waiting = new Map<string, (() => void)[]>();
  listener.subscribe(
    (w) => {
      for (const done of waiting.get(w) ?? []) done();
      waiting.delete(w);
    },
    () => {},
  );
  return {
    q,
    pool,
    heard: (w) => new Promise<void>((resolve) => waiting.set(w, [...(waiting.get(w) ?? []), resolve])),
  };
}

let a: Coordinator;

beforeAll(async () => {
  db = await createTestDatabase();
  a = await coordinator();
});
afterAll(async () => {
  await Promise.all(listeners.map((l) => l.stop()));
  await Promise.all(pools.map((p) => p.end()));
  await db?.drop();
});

const specs = (n: number, tag: string) =>
  Array.from({ length: n }, (_, i) => ({ chunkIndex: i, inputUri: `s3://${tag}/${i}`, inputSha256: sha(`${tag}${i}`) }));

async function claimOne(c: Coordinator, workload: string, leaseSeconds?: number) {
  const [t] = await c.q.claimTasks({ workerId: "hw", workloads: [workload], maxTasks: 1, leaseSeconds });
  return t;
}

async function complete(c: Coordinator, t: { id: string; attempt: number; leaseOwner?: string | null }) {
  await c.q.completeTask({
    taskId: t.id,
    workerId: t.leaseOwner ?? "hw",
    attempt: t.attempt,
    resultUri: "s3://r",
    resultSha256: sha(t.id),
  });
}

describe("claim hints", () => {
  it("a job of higher priority, a retry due now and a reaped lease are claimed first, after the hint has moved on", async () => {
    const w = "hints-order";
    await a.q.putWorkload({ name: w, maxAttempts: 5 });
    const { job } = await a.q.createJob({ workload: w, tasks: specs(60, "o") });
    // From the front, then from the hint: chunks in order either way.
    const first = [];
    for (let i = 0; i < 10; i++) {
      const t = await claimOne(a, w);
      first.push(t.chunkIndex);
      await complete(a, t);
    }
    expect(first).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);

    // A job of higher priority: its announcement moves the hint back to it.
    const heardUrgent = a.heard(w);
    const urgent = await a.q.createJob({ workload: w, priority: 5, tasks: specs(2, "u") });
    await heardUrgent;
    const u1 = await claimOne(a, w);
    const u2 = await claimOne(a, w);
    expect([u1.jobId, u2.jobId]).toEqual([urgent.job.id, urgent.job.id]);
    await complete(a, u1);
    await complete(a, u2);
    expect((await claimOne(a, w)).chunkIndex).toBe(10);

    // A retry due now goes back ahead of the hint (its chunk is older than the ones claimed since).
    const t11 = await claimOne(a, w);
    const t12 = await claimOne(a, w);
    expect([t11.chunkIndex, t12.chunkIndex]).toEqual([11, 12]);
    const heardRetry = a.heard(w);
    await a.q.failTask({ taskId: t11.id, workerId: "hw", attempt: t11.attempt, errorCode: "flaky", retryAfterSeconds: 0 });
    await heardRetry;
    const again = await claimOne(a, w);
    expect([again.chunkIndex, again.attempt]).toEqual([11, 2]);
    await complete(a, again);

    // A lease that expires and is reaped goes back ahead of the hint too.
    const short = await claimOne(a, w, 1);
    expect(short.chunkIndex).toBe(13);
    await expect
      .poll(
        async () => (await a.pool.query("SELECT lease_expires_at <= now() AS gone FROM tasks WHERE id = $1", [short.id])).rows[0].gone,
        {
          timeout: 10_000,
        },
      )
      .toBe(true);
    const heardReaped = a.heard(w);
    expect((await a.q.expireLeases()).requeued).toBe(1);
    await heardReaped;
    const reclaimed = await claimOne(a, w);
    expect([reclaimed.chunkIndex, reclaimed.attempt]).toEqual([13, 2]);
    await complete(a, reclaimed);
    await complete(a, t12);
    expect((await claimOne(a, w)).chunkIndex).toBe(14);
    expect((await a.q.getJobStatus(job.id)).job.status).toBe("running");
  });

  it("a retry in backoff is claimed when it falls due, ahead of the tasks after it", async () => {
    const w = "hints-backoff";
    await a.q.putWorkload({ name: w, maxAttempts: 5 });
    await a.q.createJob({ workload: w, tasks: specs(300, "b") });
    const t0 = await claimOne(a, w);
    await a.q.failTask({ taskId: t0.id, workerId: "hw", attempt: t0.attempt, errorCode: "flaky", retryAfterSeconds: 1 });
    // Claim on, one at a time: the retried chunk 0 comes back long before the job's end.
    const seen: number[] = [];
    for (;;) {
      const t = await claimOne(a, w);
      expect(t, "chunk 0 came back before the job ran out").toBeDefined();
      await complete(a, t);
      if (t.chunkIndex === 0) break;
      seen.push(t.chunkIndex);
      await new Promise((r) => setTimeout(r, 50));
    }
    // Due after 1 s, at one claim every 50 ms or so: well before the hints' age would have found it.
    expect(seen.length).toBeGreaterThan(0);
    expect(seen.length).toBeLessThan(60);
  });

  it("under a held snapshot a hinted claim reads a few index entries, one from the front every dead one", async () => {
    const w = "hints-horizon";
    await a.q.putWorkload({ name: w });
    await a.q.createJob({ workload: w, tasks: specs(3000, "h") });
    const holder = await a.pool.connect();
    try {
      await holder.query("BEGIN ISOLATION LEVEL REPEATABLE READ");
      await holder.query("SELECT count(*) FROM jobs");
      let last;
      for (let i = 0; i < 20; i++) {
        const ts = await a.q.claimTasks({ workerId: "hw", workloads: [w], maxTasks: 100 });
        await a.q.completeTasks(
          ts.map((t) => ({ taskId: t.id, workerId: "hw", attempt: t.attempt, resultUri: "s3://r", resultSha256: sha(t.id) })),
        );
        last = ts.at(-1)!;
      }
      const { rows } = await a.pool.query(
        `SELECT priority, fair_rank::text AS r, (extract(epoch FROM created_at) * 1000000)::bigint AS c, chunk_index FROM tasks WHERE id = $1`,
        [last!.id],
      );
      const hint = JSON.stringify({ [w]: { p: rows[0].priority, r: rows[0].r, c: String(rows[0].c), i: rows[0].chunk_index } });
      const { CLAIM_TASKS } = await import("../support/statements.js");
      // Index entries the claim's scans of tasks_claim_pending_idx read, dead ones included (this transaction's own counts).
      const readsOf = async (hints: string) => {
        const c = await a.pool.connect();
        try {
          // The backend's counts not yet flushed (they may hold earlier transactions'): the difference is the claim's.
          const read = async () =>
            Number(
              (await c.query<{ n: string }>("SELECT pg_stat_get_xact_tuples_returned('tasks_claim_pending_idx'::regclass)::text AS n"))
                .rows[0].n,
            );
          await c.query("BEGIN");
          const before = await read();
          await c.query(CLAIM_TASKS, [[w], 10, "x", null, "{}", hints]);
          return (await read()) - before;
        } finally {
          await c.query("ROLLBACK");
          c.release();
        }
      };
      const fromFront = await readsOf("{}");
      const fromHint = await readsOf(hint);
      // 2,000 claimed tasks' dead versions from the front; from the hint, the ten it takes and a few more.
      expect(fromFront).toBeGreaterThanOrEqual(2000);
      expect(fromHint).toBeLessThan(50);
    } finally {
      await holder.query("ROLLBACK");
      holder.release();
    }
  });

  it("under a held snapshot the reaper's probe above its floor reads a few lease entries, from the bottom every dead one", async () => {
    const w = "hints-leases";
    await a.q.putWorkload({ name: w });
    await a.q.createJob({ workload: w, tasks: specs(2000, "l") });
    const holder = await a.pool.connect();
    try {
      await holder.query("BEGIN ISOLATION LEVEL REPEATABLE READ");
      await holder.query("SELECT count(*) FROM jobs");
      // 2,000 leases of 1 s, each finished at once: their leased versions stay, and expire.
      for (let i = 0; i < 20; i++) {
        const ts = await a.q.claimTasks({ workerId: "lw", workloads: [w], maxTasks: 100, leaseSeconds: 1 });
        await a.q.completeTasks(
          ts.map((t) => ({ taskId: t.id, workerId: "lw", attempt: t.attempt, resultUri: "s3://r", resultSha256: sha(t.id) })),
        );
      }
      const floor = (await a.pool.query<{ f: string }>("SELECT (now() + interval '1 second')::text AS f")).rows[0].f;
      await expect
        .poll(async () => (await a.pool.query("SELECT now() > $1::timestamptz AS past", [floor])).rows[0].past, { timeout: 10_000 })
        .toBe(true);
      const { REAPER_DUE } = await import("../support/statements.js");
      const readsOf = async (f: string | null) => {
        const c = await a.pool.connect();
        try {
          const read = async () =>
            Number(
              (await c.query<{ n: string }>("SELECT pg_stat_get_xact_tuples_returned('tasks_lease_expiry_idx'::regclass)::text AS n"))
                .rows[0].n,
            );
          await c.query("BEGIN");
          const before = await read();
          const due = await REAPER_DUE.one(c, { floor: f, marginSeconds: 60 });
          expect(due.leases).toBe(false);
          return (await read()) - before;
        } finally {
          await c.query("ROLLBACK");
          c.release();
        }
      };
      expect(await readsOf(null)).toBeGreaterThanOrEqual(2000);
      expect(await readsOf(floor)).toBeLessThan(10);
    } finally {
      await holder.query("ROLLBACK");
      holder.release();
    }
  });

  it("two coordinators with hints, a held snapshot and jobs of three priorities: every task leased once per attempt and completed", async () => {
    const b = await coordinator();
    const w = "hints-race";
    await a.q.putWorkload({ name: w, maxAttempts: 5 });
    const holder = await a.pool.connect();
    await holder.query("BEGIN ISOLATION LEVEL REPEATABLE READ");
    await holder.query("SELECT count(*) FROM jobs");
    try {
      const jobs: string[] = [];
      let producing = true;
      const producer = (async () => {
        for (let j = 0; j < 24; j++) {
          const c = j % 2 === 0 ? a : b;
          jobs.push((await c.q.createJob({ workload: w, priority: j % 3, tasks: specs(40, `r${j}`) })).job.id);
          await new Promise((r) => setTimeout(r, 20));
        }
        producing = false;
      })();
      let failures = 0;
      const worker = async (c: Coordinator, n: number) => {
        for (;;) {
          const ts = await c.q.claimTasks({ workerId: `rw${n}`, workloads: [w], maxTasks: 1 + (n % 3) });
          if (ts.length === 0) {
            if (
              !producing &&
              (await a.pool.query(`SELECT count(*)::int AS n FROM tasks WHERE workload = $1 AND status <> 'completed'`, [w])).rows[0].n ===
                0
            )
              return;
            await new Promise((r) => setTimeout(r, 10));
            continue;
          }
          for (const t of ts) {
            if (t.attempt === 1 && failures < 40 && (t.chunkIndex + n) % 17 === 0) {
              failures++;
              await c.q.failTask({ taskId: t.id, workerId: `rw${n}`, attempt: t.attempt, errorCode: "flaky", retryAfterSeconds: 0 });
            } else {
              await c.q.completeTask({
                taskId: t.id,
                workerId: `rw${n}`,
                attempt: t.attempt,
                resultUri: "s3://r",
                resultSha256: sha(t.id),
              });
            }
          }
        }
      };
      await Promise.all([producer, ...[0, 1, 2, 3].map((n) => worker(a, n)), ...[4, 5, 6, 7].map((n) => worker(b, n))]);
      const { rows } = await a.pool.query(
        `SELECT count(*)::int AS tasks, count(*) FILTER (WHERE status = 'completed')::int AS completed, sum(attempt)::int AS attempts
         FROM tasks WHERE workload = $1`,
        [w],
      );
      expect(rows[0]).toEqual({ tasks: 24 * 40, completed: 24 * 40, attempts: 24 * 40 + failures });
      // Each attempt leased exactly once: one leased event per attempt, no task leased twice at one attempt.
      const leases = await a.pool.query(
        `SELECT count(*)::int AS n, count(DISTINCT (e.task_id, e.attempt))::int AS distinct_n
         FROM task_events e JOIN tasks t ON t.id = e.task_id WHERE t.workload = $1 AND e.kind = 'task_status' AND e.status = 'leased'`,
        [w],
      );
      expect(leases.rows[0]).toEqual({ n: 24 * 40 + failures, distinct_n: 24 * 40 + failures });
      // A completion that saw a task of its job still pending, which another worker then claimed and
      // completed before the first committed, leaves the job to the lease reaper's pass over
      // stalled jobs (fragments.ts, mayBeDoneJobs); this test runs no reaper, so it runs that pass.
      await a.q.expireLeases();
      for (const id of jobs) expect((await a.q.getJobStatus(id)).job.status).toBe("completed");
    } finally {
      await holder.query("ROLLBACK");
      holder.release();
    }
  });
});
