// The flow-controlled claim under a held MVCC horizon (docs/flow-control-claim.md, "Under a held
// horizon"): a snapshot held by another session keeps every dead version; a claim of a keyed workload
// still reads a few index entries (pending tasks from its lane's bands, leases from the floor), never
// passes a task it could take (its choice is the one a claim from the front makes, step by step, as
// jobs arrive, caps fill and free), counts a lease held below the floor and one without a lease_seq,
// and with two coordinators leases every task once, no key past its cap. Runs both ways of
// FLOW_CLAIM_HINTS (the flow-claim-as-before project); the reads are only this switch's.
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Task } from "../../src/queue/types.js";
import { TaskListener } from "../../src/store/postgres/state/listener.js";
import type { RankHeads } from "../../src/store/postgres/state/rank-heads.js";
import { createPool, PostgresQueue } from "../../src/store/postgres/store.js";
import { createTestDatabase, type TestDatabase } from "../support/db.js";
import { FLOW_HINTS_ARG, sha, TEST_STORE_OPTIONS } from "../support/queue.js";
import { SWITCHES } from "../support/switches.js";

let db: TestDatabase;
const pools: pg.Pool[] = [];
const listeners: TaskListener[] = [];

interface Coordinator {
  q: PostgresQueue;
  pool: pg.Pool;
  /** The hints parameter this coordinator's next claim of `workload` would send. */
  hints(workload: string): string;
  /** Resolves once this coordinator has heard a wake-up for the workload (its hints have moved). */
  heard(workload: string): Promise<void>;
}

async function coordinator(): Promise<Coordinator> {
  const pool = createPool({ connectionString: db.url, max: 6, statementTimeoutMs: 30_000, connectTimeoutMs: 10_000 });
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
  const hints = (q as unknown as { ctx: { claimHints: { begin(w: string[], labels: string): { json: string } } } }).ctx.claimHints;
  return {
    q,
    pool,
    hints: (w) => hints.begin([w], "{}").json,
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

async function holdSnapshot(c: Coordinator): Promise<{ release(): Promise<void> }> {
  const holder = await c.pool.connect();
  await holder.query("BEGIN ISOLATION LEVEL REPEATABLE READ");
  await holder.query("SELECT count(*) FROM jobs");
  return {
    release: async () => {
      await holder.query("ROLLBACK");
      holder.release();
    },
  };
}

async function complete(c: Coordinator, t: Task) {
  await c.q.completeTask({ taskId: t.id, workerId: t.leaseOwner!, attempt: t.attempt, resultUri: "s3://r", resultSha256: sha(t.id) });
}

/** A job of key `key` at `priority`, once this coordinator has heard its announcement. */
async function job(c: Coordinator, w: string, key: string, priority: number, n: number, tag: string) {
  const heard = c.heard(w);
  const created = await c.q.createJob({ workload: w, concurrencyKey: key, priority, tasks: specs(n, tag) });
  await heard;
  return created;
}

async function pendingOf(w: string): Promise<number> {
  const { rows } = await a.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM tasks WHERE workload = $1 AND status = 'pending'`, [
    w,
  ]);
  return rows[0].n;
}

async function firstRank(jobId: string): Promise<bigint> {
  const { rows } = await a.pool.query<{ r: string }>(`SELECT min(fair_rank)::text AS r FROM tasks WHERE job_id = $1`, [jobId]);
  return BigInt(rows[0].r);
}

describe("the flow claim under a held horizon", () => {
  it.runIf(SWITCHES.flowClaimHints)(
    "a keyed claim reads a few entries of the pending and the lease index from its hints, every dead one from the front",
    async () => {
      const w = "fh-reads";
      await a.q.putWorkload({ name: w, leaseSeconds: 300, maxLeasedPerKey: 4 });
      for (let j = 0; j < 60; j++) await job(a, w, `k${j % 10}`, j % 3, 40, `r${j}`);
      const held = await holdSnapshot(a);
      try {
        // 2,000 tasks leased and completed under the held snapshot: each leaves a dead pending entry and a dead lease.
        let done = 0;
        while (done < 2000) {
          const ts = await a.q.claimTasks({ workerId: "rw", workloads: [w], maxTasks: 8 });
          expect(ts.length).toBeGreaterThan(0);
          for (const t of ts) await complete(a, t);
          done += ts.length;
        }
        // Index entries one claim of 4 reads (this transaction's own counts), on a session of its own
        // (no floor of its own): from the front, and from the coordinator's hints (bands and floor).
        const readsOf = async (hints: string) => {
          const c = new pg.Client({ connectionString: db.url });
          await c.connect();
          try {
            const read = async (index: string) =>
              Number((await c.query<{ n: string }>(`SELECT pg_stat_get_xact_tuples_returned('${index}'::regclass)::text AS n`)).rows[0].n);
            await c.query("BEGIN");
            const [p0, l0] = [await read("tasks_claim_pending_idx"), await read("tasks_leased_seq_idx")];
            const { rows } = await c.query(
              `SELECT (f.task).id FROM leasehold_flow_claim_hinted($1, 4, 'x', NULL, '{}', NULL, $2::jsonb) f`,
              [[w], hints],
            );
            expect(rows).toHaveLength(4);
            return { pending: (await read("tasks_claim_pending_idx")) - p0, leases: (await read("tasks_leased_seq_idx")) - l0 };
          } finally {
            await c.query("ROLLBACK");
            await c.end();
          }
        };
        const fromFront = await readsOf("{}");
        const fromHints = await readsOf(a.hints(w));
        expect(JSON.parse(a.hints(w))).toMatchObject({ "~f": { [w]: expect.any(Array) }, "~l": { [w]: expect.any(String) } });
        expect(fromFront.pending).toBeGreaterThanOrEqual(1000);
        expect(fromFront.leases).toBeGreaterThanOrEqual(1000);
        expect(fromHints.pending).toBeLessThan(100);
        expect(fromHints.leases).toBeLessThan(100);
      } finally {
        await held.release();
      }
    },
    120_000,
  );

  it("each claim takes the task a claim from the front would, as jobs of three priorities arrive and caps fill and free", async () => {
    const w = "fh-order";
    const cap = 2;
    await a.q.putWorkload({ name: w, leaseSeconds: 300, maxLeasedPerKey: cap });
    const held = await holdSnapshot(a);
    // The first claimable task in claim order: pending, due, of a key below its cap.
    const expected = async () =>
      (
        await a.pool.query<{ id: string }>(
          `SELECT t.id FROM tasks t
           WHERE t.workload = $1 AND t.status = 'pending' AND t.run_after <= now()
             AND (SELECT count(*) FROM tasks l WHERE l.workload = $1 AND l.status = 'leased' AND l.concurrency_key = t.concurrency_key
                  AND l.lease_expires_at > now()) < $2
           ORDER BY t.priority DESC, t.fair_rank, t.created_at, t.chunk_index LIMIT 1`,
          [w, cap],
        )
      ).rows[0]?.id;
    try {
      let seed = 7;
      const rand = (n: number) => (seed = (seed * 1103515245 + 12345) % 2147483648) % n;
      const leased: Task[] = [];
      let jobs = 0;
      for (let step = 0; step < 240; step++) {
        const roll = rand(10);
        if (roll < 2 || jobs < 3) {
          await job(a, w, `k${rand(5)}`, rand(3), 1 + rand(6), `o${jobs++}`);
        } else if (roll < 5 && leased.length > 0) {
          await complete(a, leased.splice(rand(leased.length), 1)[0]);
        } else {
          const want = await expected();
          const got = await a.q.claimTasks({ workerId: "ow", workloads: [w], maxTasks: 1 });
          expect(got.map((t) => t.id)).toEqual(want ? [want] : []);
          leased.push(...got);
        }
      }
    } finally {
      await held.release();
    }
  }, 120_000);

  it("counts a lease held below the floor, and one written without a lease_seq, against its key's cap", async () => {
    const w = "fh-floor";
    await a.q.putWorkload({ name: w, leaseSeconds: 300, maxLeasedPerKey: 2 });
    await job(a, w, "held", 0, 4, "h");
    await job(a, w, "other", 0, 400, "x");
    const held = await holdSnapshot(a);
    try {
      const [old] = await a.q.claimTasks({ workerId: "fw", workloads: [w], maxTasks: 1 });
      expect(old.concurrencyKey).toBe("held");
      // An older release's lease: no lease_seq.
      const [legacy] = await a.q.claimTasks({ workerId: "fw", workloads: [w], maxTasks: 1 });
      expect(legacy.concurrencyKey).toBe("other");
      await a.pool.query(`UPDATE tasks SET lease_seq = NULL WHERE id = $1`, [legacy.id]);
      // Many leases of the other key begin and end: every session's floor moves past the held one.
      for (let i = 0; i < 60; i++) {
        const ts = await a.q.claimTasks({ workerId: "fw", workloads: [w], maxTasks: 1 });
        for (const t of ts) if (t.concurrencyKey === "other") await complete(a, t);
      }
      const { rows } = await a.pool.query<{ below: boolean }>(
        `SELECT (SELECT lease_seq FROM tasks WHERE id = $1) < txid_snapshot_xmin(txid_current_snapshot()) AS below`,
        [old.id],
      );
      expect(rows[0].below).toBe(true);
      // Each key holds at most its cap: the old lease and the legacy one are counted. "held" has the old
      // lease and its next task; "other" the legacy lease, so room for one more.
      const more = await a.q.claimTasks({ workerId: "fw", workloads: [w], maxTasks: 4 });
      expect(more.map((t) => t.concurrencyKey)).toEqual(["other"]);
      const counts = await a.pool.query<{ key: string; n: number }>(
        `SELECT concurrency_key AS key, count(*)::int AS n FROM tasks WHERE workload = $1 AND status = 'leased' GROUP BY 1 ORDER BY 1`,
        [w],
      );
      expect(counts.rows).toEqual([
        { key: "held", n: 2 },
        { key: "other", n: 2 },
      ]);
      // Once it ends, the key's slot is free for its next task.
      await complete(a, old);
      const next = await a.q.claimTasks({ workerId: "fw", workloads: [w], maxTasks: 4 });
      expect(next.map((t) => t.concurrencyKey)).toEqual(["held"]);
    } finally {
      await held.release();
    }
  }, 120_000);

  // A claim skips a task another claim holds locked (SKIP LOCKED); that claim may roll back, and
  // nothing announces the task then. The lane must not have moved past it: the next claim takes it
  // (no hint's age is waited for).
  for (const [name, settings] of [
    ["keys of their own (a cap of 4 per key)", { maxLeasedPerKey: 4 }],
    ["gates (a workload cap of 1,000)", { maxLeased: 1000 }],
  ] as const) {
    it(`a task another claim held locked and let go is the next claim's, with ${name}`, async () => {
      const w = `fh-locked-${"maxLeased" in settings ? "gates" : "keys"}`;
      await a.q.putWorkload({ name: w, leaseSeconds: 300, ...settings });
      await job(a, w, "k0", 1, 3, "l0");
      await job(a, w, "k1", 1, 3, "l1");
      const held = await holdSnapshot(a);
      const locker = await a.pool.connect();
      try {
        // The first task in claim order, locked as a claim of another coordinator would lock it.
        await locker.query("BEGIN");
        const { rows } = await locker.query<{ id: string }>(
          `SELECT id FROM tasks WHERE workload = $1 AND status = 'pending'
           ORDER BY priority DESC, fair_rank, created_at, chunk_index LIMIT 1 FOR UPDATE`,
          [w],
        );
        const first = rows[0].id;
        const [skipped] = await a.q.claimTasks({ workerId: "lw", workloads: [w], maxTasks: 1 });
        expect(skipped.id).not.toBe(first);
        await locker.query("ROLLBACK");
        const [next] = await a.q.claimTasks({ workerId: "lw", workloads: [w], maxTasks: 1 });
        expect(next.id).toBe(first);
      } finally {
        locker.release();
        await held.release();
      }
    }, 60_000);
  }

  it("two coordinators, three priorities, caps of 3 per key: every task leased once, no key past its cap", async () => {
    const b = await coordinator();
    const w = "fh-race";
    const cap = 3;
    await a.q.putWorkload({ name: w, leaseSeconds: 300, maxLeasedPerKey: cap, maxAttempts: 5 });
    const held = await holdSnapshot(a);
    try {
      let producing = true;
      const producer = (async () => {
        for (let j = 0; j < 30; j++) {
          await (j % 2 === 0 ? a : b).q.createJob({ workload: w, concurrencyKey: `k${j % 6}`, priority: j % 3, tasks: specs(20, `x${j}`) });
          await new Promise((r) => setTimeout(r, 15));
        }
        producing = false;
      })();
      let most = 0;
      const sampler = (async () => {
        while (
          producing ||
          (await a.pool.query(`SELECT 1 FROM tasks WHERE workload = $1 AND status <> 'completed' LIMIT 1`, [w])).rowCount
        ) {
          const { rows } = await a.pool.query<{ n: number }>(
            `SELECT count(*)::int AS n FROM tasks WHERE workload = $1 AND status = 'leased' AND lease_expires_at > now() GROUP BY concurrency_key`,
            [w],
          );
          for (const r of rows) most = Math.max(most, r.n);
        }
      })();
      const worker = async (c: Coordinator, n: number) => {
        for (;;) {
          const ts = await c.q.claimTasks({ workerId: `rw${n}`, workloads: [w], maxTasks: 1 + (n % 3) });
          if (ts.length === 0) {
            if (
              !producing &&
              (await a.pool.query(`SELECT 1 FROM tasks WHERE workload = $1 AND status <> 'completed' LIMIT 1`, [w])).rowCount === 0
            )
              return;
            await new Promise((r) => setTimeout(r, 5));
            continue;
          }
          for (const t of ts) await complete(c, t);
        }
      };
      await Promise.all([producer, ...[0, 1, 2, 3].map((n) => worker(a, n)), ...[4, 5, 6, 7].map((n) => worker(b, n)), sampler]);
      expect(most).toBeLessThanOrEqual(cap);
      expect(most).toBe(cap);
      const leases = await a.pool.query(
        `SELECT count(*)::int AS n, count(DISTINCT e.task_id)::int AS distinct_n
         FROM task_events e JOIN tasks t ON t.id = e.task_id WHERE t.workload = $1 AND e.kind = 'task_status' AND e.status = 'leased'`,
        [w],
      );
      expect(leases.rows[0]).toEqual({ n: 30 * 20, distinct_n: 30 * 20 });
    } finally {
      await held.release();
    }
  }, 180_000);

  it.runIf(SWITCHES.flowClaimHints)(
    "a CreateJob on a session that never found a head of fair ranks starts from the coordinator's, not from the front",
    async () => {
      const x = await coordinator();
      const w = "fh-heads";
      await x.q.putWorkload({ name: w, leaseSeconds: 300, maxLeasedPerKey: 4 });
      for (let j = 0; j < 60; j++) await x.q.createJob({ workload: w, concurrencyKey: `k${j % 10}`, tasks: specs(40, `h${j}`) });
      const held = await holdSnapshot(a);
      try {
        // 2,000 tasks leased and completed under the held snapshot: each leaves a dead entry in front of the head.
        let done = 0;
        while (done < 2000) {
          const ts = await x.q.claimTasks({ workerId: "hw", workloads: [w], maxTasks: 8 });
          expect(ts.length).toBeGreaterThan(0);
          for (const t of ts) await complete(x, t);
          done += ts.length;
        }
        // One more job through the coordinator: the head it finds (past the dead) is the coordinator's now.
        await x.q.createJob({ workload: w, concurrencyKey: "k0", tasks: specs(1, "h-next") });
        const heads = (x.q as unknown as { ctx: { flow: { rankHeads: RankHeads } } }).ctx.flow.rankHeads;
        expect(heads.get(w, 0)).not.toBeNull();
        // Every session of x ends, so the counts below are the measured statement's alone (a backend reports its own at exit).
        const stats = new pg.Client({ connectionString: db.url });
        await stats.connect();
        try {
          await stats.query("SET stats_fetch_consistency = none");
          const sessions = async () =>
            new Set(
              (
                await stats.query<{ pid: number }>(
                  `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`,
                )
              ).rows.map((r) => r.pid),
            );
          const open = x.pool.totalCount;
          const before = await sessions();
          pools.splice(pools.indexOf(x.pool), 1);
          await x.pool.end();
          for (;;) {
            const now = await sessions();
            if ([...before].filter((pid) => !now.has(pid)).length >= open) break;
            await new Promise((r) => setTimeout(r, 20));
          }
          const entriesRead = async () =>
            Number(
              (
                await stats.query<{ n: string }>(
                  `SELECT idx_tup_read::text AS n FROM pg_stat_user_indexes WHERE indexrelname = 'tasks_claim_pending_idx'`,
                )
              ).rows[0].n,
            );
          // A job created on a fresh session (a pool of one), with the coordinator's heads or with none.
          const readsOf = async (shared: RankHeads | undefined, tag: string) => {
            const pool = createPool({ connectionString: db.url, max: 1, statementTimeoutMs: 30_000, connectTimeoutMs: 10_000 });
            pools.push(pool);
            const q = new PostgresQueue(pool, TEST_STORE_OPTIONS);
            if (shared) (q as unknown as { ctx: { flow: { rankHeads: RankHeads } } }).ctx.flow.rankHeads = shared;
            await q.listWorkloads();
            await pool.query("SELECT pg_stat_force_next_flush()");
            await pool.query("SELECT 1");
            const before = await entriesRead();
            const created = await q.createJob({ workload: w, concurrencyKey: "k1", tasks: specs(1, tag) });
            await pool.query("SELECT pg_stat_force_next_flush()");
            await pool.query("SELECT 1");
            const reads = (await entriesRead()) - before;
            const { rows } = await stats.query<{ fair_rank: string }>(`SELECT fair_rank::text FROM tasks WHERE job_id = $1`, [
              created.job.id,
            ]);
            return { reads, rank: BigInt(rows[0].fair_rank) };
          };
          const withHeads = await readsOf(heads, "h-shared");
          const fromFront = await readsOf(undefined, "h-front");
          // This file's other sessions report their counts of this index too, up to seconds after
          // their last statement: the bound leaves them room, and is still a tenth of the walk from the front.
          expect(fromFront.reads).toBeGreaterThanOrEqual(1000);
          expect(withHeads.reads).toBeLessThan(200);
          // Both start at or past the head: the rank the front read finds is where the shared head let the other start.
          expect(withHeads.rank).toBeGreaterThanOrEqual(BigInt(heads.get(w, 0)!));
          expect(fromFront.rank).toBeGreaterThan(withHeads.rank);
        } finally {
          await stats.end();
        }
      } finally {
        await held.release();
      }
    },
    120_000,
  );

  it.runIf(SWITCHES.flowClaimHints)(
    "a CreateJob that finds nothing pending at its priority notes where it starts as the head, and the next job of another key starts there too",
    async () => {
      const w = "fh-empty-head";
      await a.q.putWorkload({ name: w, leaseSeconds: 300, maxLeasedPerKey: 4 });
      for (let j = 0; j < 6; j++) await a.q.createJob({ workload: w, concurrencyKey: `e${j % 3}`, tasks: specs(4, `e${j}`) });
      // Everything claimed and completed: nothing pending at priority 0.
      for (;;) {
        const ts = await a.q.claimTasks({ workerId: "ew", workloads: [w], maxTasks: 8 });
        if (ts.length === 0) break;
        for (const t of ts) await complete(a, t);
      }
      expect(await pendingOf(w)).toBe(0);
      const heads = (a.q as unknown as { ctx: { flow: { rankHeads: RankHeads } } }).ctx.flow.rankHeads;
      const first = await a.q.createJob({ workload: w, concurrencyKey: "e0", tasks: specs(2, "e-first") });
      const start = await firstRank(first.job.id);
      // The furthest any key had got: past every rank the six jobs took (ranks 0..3 of three keys, twice).
      expect(start).toBeGreaterThanOrEqual(8n);
      expect(heads.get(w, 0)).toBe(String(start));
      const next = await a.q.createJob({ workload: w, concurrencyKey: "e1", tasks: specs(2, "e-next") });
      expect(await firstRank(next.job.id)).toBe(start);
    },
  );

  it("the flow claim's hint argument: as the claim statements pass it in this project", () => {
    expect(JSON.parse(FLOW_HINTS_ARG)).toEqual(SWITCHES.flowClaimHints ? {} : { "~flow": "off" });
  });
});
