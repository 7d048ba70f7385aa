// Two settlers racing through three coordinators (PostgresQueue on pools of their own, one
// database): each lists unsettled jobs through one coordinator and settles them through another,
// at once, while more jobs become final. Every job is settled exactly once (one job_settled
// event, the units its first settler wrote), none is missed, and the loser of each race gets the
// idempotent answer (same key and units) or ALREADY_EXISTS (another key).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SettlementConflictError } from "../../src/queue/errors.js";
import { PostgresQueue } from "../../src/store/postgres/store.js";
import { queueFixture, sha, TEST_STORE_OPTIONS, type QueueFixture } from "../support/queue.js";

const W = "billed";

let fx: QueueFixture;
let coordinators: PostgresQueue[];

beforeAll(async () => {
  fx = await queueFixture();
  coordinators = [0, 1, 2].map(() => new PostgresQueue(fx.newPool(), TEST_STORE_OPTIONS));
  await fx.queue.putWorkload({ name: W, maxAttempts: 1, leaseSeconds: 60 });
  await fx.pool.query(`INSERT INTO accounts (name) VALUES ('acme'), ('globex')`);
});

afterAll(async () => {
  await fx?.close();
});

/** Billable jobs, final at distinct instants (as many completions over time leave them). */
async function finalJobs(n: number, tag: string): Promise<string[]> {
  const { rows } = await fx.pool.query<{ id: string }>(
    `INSERT INTO jobs (id, workload, input_uri, parameters, status, priority, created_at, updated_at, completed_at,
                       failure_policy, max_failed_tasks, concurrency_key, account, reserved_units, billing_key)
     SELECT gen_random_uuid(), $1, 's3://in', '{}', 'completed', 0, now(), now(), now() - make_interval(secs => g),
            'fail_fast', 0, '', CASE WHEN g % 3 = 0 THEN NULL WHEN g % 3 = 1 THEN 'acme' ELSE 'globex' END, 100, $2::text || g
     FROM generate_series(1, $3::int) g RETURNING id`,
    [W, tag, n],
  );
  return rows.map((r) => r.id);
}

/** Jobs with tasks, still pending: the producer cancels them while the settlers run. */
async function pendingJobs(n: number): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    const r = await fx.queue.createJob({ workload: W, tasks: [{ chunkIndex: 0, inputUri: "s3://in/0", inputSha256: sha(i) }] });
    await fx.pool.query(`UPDATE jobs SET account = 'acme' WHERE id = $1`, [r.job.id]);
    ids.push(r.job.id);
  }
  return ids;
}

interface Outcome {
  settled: Map<string, { key: string; units: number }>;
  conflicts: number;
  answered: number;
}

/**
 * A settler: lists a page through one coordinator and settles each job through the next one
 * round, a few at a time, until the producer is done and a listing finds nothing.
 */
async function settler(name: string, keyOf: (jobId: string) => string, units: number, producing: () => boolean): Promise<Outcome> {
  const out: Outcome = { settled: new Map(), conflicts: 0, answered: 0 };
  let turn = name === "a" ? 0 : 1;
  for (;;) {
    const lister = coordinators[turn++ % 3];
    const done = !producing();
    const page = await lister.listSettlements({ pageSize: 7 });
    if (page.jobs.length === 0) {
      if (done) return out;
      await new Promise((r) => setImmediate(r));
      continue;
    }
    await Promise.all(
      page.jobs.map(async (job, i) => {
        const via = coordinators[(turn + i) % 3];
        try {
          const r = await via.settleJob({ jobId: job.id, settlementKey: keyOf(job.id), settledUnits: units });
          out.answered++;
          expect(r.settlement).not.toBeNull();
          out.settled.set(job.id, { key: r.settlement!.settlementKey, units: r.settlement!.settledUnits });
        } catch (err) {
          if (!(err instanceof SettlementConflictError)) throw err;
          out.conflicts++;
        }
      }),
    );
  }
}

async function eventsPerJob(ids: string[]): Promise<Map<string, { n: number; key: string; units: number }>> {
  const { rows } = await fx.pool.query<{ job_id: string; n: number; key: string; units: string }>(
    `SELECT job_id, count(*)::int AS n, min(settlement_key) AS key, min(settled_units)::text AS units
     FROM task_events WHERE kind = 'job_settled' AND job_id = ANY($1) GROUP BY job_id`,
    [ids],
  );
  return new Map(rows.map((r) => [r.job_id, { n: r.n, key: r.key, units: Number(r.units) }]));
}

async function race(keyA: (id: string) => string, keyB: (id: string) => string, unitsA: number, unitsB: number) {
  const ids = await finalJobs(120, `race-${unitsA}-${unitsB}-`);
  const late = await pendingJobs(15);
  let producing = true;
  const producer = (async () => {
    for (const [i, id] of late.entries()) {
      await coordinators[i % 3].cancelJob({ jobId: id });
      await new Promise((r) => setImmediate(r));
    }
    producing = false;
  })();
  const [a, b] = await Promise.all([settler("a", keyA, unitsA, () => producing), settler("b", keyB, unitsB, () => producing), producer]);
  const all = [...ids, ...late];
  const events = await eventsPerJob(all);
  const { rows } = await fx.pool.query<{ id: string; settlement_key: string | null; settled_units: string | null }>(
    `SELECT id, settlement_key, settled_units::text FROM jobs WHERE id = ANY($1)`,
    [all],
  );
  expect(rows).toHaveLength(all.length);
  for (const r of rows) {
    const e = events.get(r.id);
    // Exactly once: one event, and it is what the row holds.
    expect(e?.n, r.id).toBe(1);
    expect(r.settlement_key).toBe(e?.key);
    expect(Number(r.settled_units)).toBe(e?.units);
  }
  expect((await fx.queue.listSettlements({})).jobs).toHaveLength(0);
  return { a, b, all, rows };
}

describe("two settlers through three coordinators", () => {
  it("with the same key and units: every job settled once, every call answered with that settlement", async () => {
    const key = (id: string) => `inv-${id}`;
    const { a, b, all, rows } = await race(key, key, 10, 10);
    expect(a.conflicts + b.conflicts).toBe(0);
    for (const r of rows) {
      expect(r.settlement_key).toBe(key(r.id));
      expect(Number(r.settled_units)).toBe(10);
    }
    // Every job was answered to at least one settler, and both answers agree.
    for (const id of all) expect(a.settled.has(id) || b.settled.has(id)).toBe(true);
    expect(a.answered + b.answered).toBeGreaterThanOrEqual(all.length);
  }, 120_000);

  it("with their own keys: each job's first settler wins, the other gets ALREADY_EXISTS", async () => {
    const { a, b, all, rows } = await race(
      (id) => `a-${id}`,
      (id) => `b-${id}`,
      1,
      2,
    );
    const byId = new Map(rows.map((r) => [r.id, r]));
    for (const id of all) {
      const won = [a.settled.get(id), b.settled.get(id)].filter((x) => x !== undefined);
      // One winner per job, and the row holds the winner's key and units.
      expect(won, id).toHaveLength(1);
      expect(byId.get(id)?.settlement_key).toBe(won[0].key);
      expect(Number(byId.get(id)?.settled_units)).toBe(won[0].units);
      expect(won[0].units).toBe(won[0].key.startsWith("a-") ? 1 : 2);
    }
    // Every call that did not win was a conflict: answers plus conflicts count each call once.
    expect(a.answered + b.answered).toBe(all.length);
  }, 120_000);
});

describe("a settle racing a retry of the same job", () => {
  it("one of them wins: settled and not retried, or retried and not settled", async () => {
    const ids: string[] = [];
    for (let i = 0; i < 20; i++) {
      const r = await fx.queue.createJob({ workload: W, tasks: [{ chunkIndex: 0, inputUri: "s3://in/0", inputSha256: sha(i) }] });
      await fx.pool.query(`UPDATE jobs SET account = 'globex' WHERE id = $1`, [r.job.id]);
      ids.push(r.job.id);
    }
    for (;;) {
      const tasks = await fx.queue.claimTasks({ workerId: "w", workloads: [W], maxTasks: 100 });
      if (tasks.length === 0) break;
      for (const t of tasks)
        await fx.queue.failTask({ taskId: t.id, workerId: "w", attempt: t.attempt, errorCode: "boom", retryable: false });
    }
    const outcomes = await Promise.all(
      ids.map(async (jobId, i) => {
        const [settled, retried] = await Promise.allSettled([
          coordinators[i % 3].settleJob({ jobId, settlementKey: `s-${jobId}`, settledUnits: 3 }),
          coordinators[(i + 1) % 3].retryJob({ jobId, maxAttempts: 1 }),
        ]);
        return { jobId, settled: settled.status === "fulfilled", retried: retried.status === "fulfilled" };
      }),
    );
    const { rows } = await fx.pool.query<{ id: string; status: string; settled: boolean; events: number; failed: number }>(
      `SELECT j.id, j.status, j.settled_at IS NOT NULL AS settled,
              (SELECT count(*)::int FROM task_events e WHERE e.job_id = j.id AND e.kind = 'job_settled') AS events,
              (SELECT count(*)::int FROM tasks t WHERE t.job_id = j.id AND t.status = 'failed') AS failed
       FROM jobs j WHERE j.id = ANY($1)`,
      [ids],
    );
    const byId = new Map(rows.map((r) => [r.id, r]));
    for (const o of outcomes) {
      const row = byId.get(o.jobId)!;
      expect(o.settled !== o.retried, o.jobId).toBe(true);
      if (o.settled) expect(row).toMatchObject({ status: "failed", settled: true, events: 1, failed: 1 });
      else expect(row).toMatchObject({ status: "running", settled: false, events: 0, failed: 0 });
    }
  }, 60_000);
});
