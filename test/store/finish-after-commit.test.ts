// A completion whose job-end check fails after it committed (here: the job's row held locked past
// the statement timeout) is answered as the completion it was, not as UNAVAILABLE ("nothing was
// written; retry", which would be false: a retry is a replay that checks no job). The job is left
// running for the lease reaper's sweep of stalled jobs. Single and batched reports, each way of
// COALESCE (this file runs in the default project; the store is built per test below).
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DeadlineExceededError } from "../../src/queue/errors.js";
import type { Task } from "../../src/queue/types.js";
import { createPool, PostgresQueue } from "../../src/store/postgres/store.js";
import { createTestDatabase, type TestDatabase } from "../support/db.js";
import { sha, TEST_STORE_OPTIONS } from "../support/queue.js";

let db: TestDatabase;
const pools: pg.Pool[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await Promise.all(pools.map((p) => p.end()));
  await db?.drop();
});

function store(coalesce: boolean): PostgresQueue {
  // A short statement timeout, so the job-end check gives up on the locked row quickly.
  const pool = createPool({ connectionString: db.url, max: 4, statementTimeoutMs: 1_000, connectTimeoutMs: 10_000 });
  pools.push(pool);
  return new PostgresQueue(pool, { ...TEST_STORE_OPTIONS, coalescing: coalesce ? { maxBatch: 64, mixResults: true } : false });
}

/** Runs `fn` while another session holds the job's row locked. */
async function withJobLocked<T>(jobId: string, fn: () => Promise<T>): Promise<T> {
  const locker = new pg.Client({ connectionString: db.url });
  await locker.connect();
  try {
    await locker.query("BEGIN");
    await locker.query("SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE", [jobId]);
    return await fn();
  } finally {
    await locker.query("ROLLBACK");
    await locker.end();
  }
}

const report = (t: Task) => ({
  taskId: t.id,
  workerId: t.leaseOwner!,
  attempt: t.attempt,
  resultUri: `s3://out/${t.id}`,
  resultSha256: sha(t.id),
});

describe.each([true, false])("coalescing %s", (coalesce) => {
  it("a single report is answered completed though its job-end check timed out; the job is left running", async () => {
    const q = store(coalesce);
    const w = `fac-single-${coalesce}`;
    await q.putWorkload({ name: w });
    const { job } = await q.createJob({ workload: w, tasks: [{ chunkIndex: 0, inputUri: "s3://in/0", inputSha256: sha(0) }] });
    const [t] = await q.claimTasks({ workerId: "w1", workloads: [w] });
    const done = await withJobLocked(job.id, () =>
      q.completeTask(report(t)).then(
        (task) => task,
        (err: unknown) => err,
      ),
    );
    if (!coalesce) {
      // One statement a call: the completion of a job's last task touches the job's row itself, so
      // it waits on the lock and times out with nothing written, and says so.
      expect(done).toBeInstanceOf(DeadlineExceededError);
      const { rows } = await pools[0].query(`SELECT status::text FROM tasks WHERE id = $1`, [t.id]);
      expect(rows[0].status).toBe("leased");
      return;
    }
    expect((done as Task).status).toBe("completed");
    const { rows } = await pools[0].query(
      `SELECT t.status::text AS task, j.status::text AS job FROM tasks t JOIN jobs j ON j.id = t.job_id WHERE t.id = $1`,
      [t.id],
    );
    expect(rows[0]).toEqual({ task: "completed", job: "running" });
    // Sent again, it is a replay: answered completed too.
    expect((await q.completeTask(report(t))).status).toBe("completed");
  });

  it("a batched report with claim_next gets every outcome and its claim though the job-end check timed out", async () => {
    const q = store(coalesce);
    const w = `fac-batch-${coalesce}`;
    await q.putWorkload({ name: w });
    const { job } = await q.createJob({
      workload: w,
      tasks: Array.from({ length: 2 }, (_, i) => ({ chunkIndex: i, inputUri: `s3://in/${i}`, inputSha256: sha(i) })),
    });
    const held = await q.claimTasks({ workerId: "w2", workloads: [w], maxTasks: 2 });
    await q.createJob({ workload: w, tasks: [{ chunkIndex: 0, inputUri: "s3://in/next", inputSha256: sha("next") }] });
    const answer = await withJobLocked(job.id, () => q.completeTasksAndClaim(held.map(report), { workerId: "w2", workloads: [w] }));
    expect(answer.outcomes.map((o) => o.task?.status)).toEqual(["completed", "completed"]);
    expect(answer.next).toHaveLength(1);
  });
});
