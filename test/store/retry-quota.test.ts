// RetryJob is held to the account's quota as CreateJob is, against a real PostgreSQL: a retry that
// would pass max_pending_tasks is RESOURCE_EXHAUSTED naming the numbers and changes nothing, a
// replay of nothing to retry is not refused by it, and retries and creates racing on four
// coordinators (their own pools) never take the account past its quota.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { QuotaExceededError } from "../../src/queue/errors.js";
import type { CreateJobInput } from "../../src/queue/types.js";
import { PostgresQueue } from "../../src/store/postgres/store.js";
import { queueFixture, sha, TEST_STORE_OPTIONS, type QueueFixture } from "../support/queue.js";

const W = "rq_w";

let f: QueueFixture;
let q: PostgresQueue;
let seq = 0;

beforeAll(async () => {
  f = await queueFixture();
  q = f.queue;
  await q.putWorkload({ name: W, maxAttempts: 1 });
});
afterAll(async () => {
  await f?.close();
});

const job = (account: string, tasks: number): CreateJobInput => ({
  workload: W,
  account,
  tasks: Array.from({ length: tasks }, (_, i) => ({ chunkIndex: i, inputUri: `s3://in/${i}`, inputSha256: sha(`${++seq}-${i}`) })),
});

/** The job's row and its tasks' rows: what a refused retry must leave as they were. */
async function rowsOf(jobId: string): Promise<unknown> {
  const { rows } = await f.pool.query(
    `SELECT (SELECT to_jsonb(j) FROM jobs j WHERE j.id = $1) AS job,
            (SELECT jsonb_agg(to_jsonb(t) ORDER BY t.chunk_index) FROM tasks t WHERE t.job_id = $1) AS tasks`,
    [jobId],
  );
  return rows[0];
}

describe("RetryJob and max_pending_tasks", () => {
  it("refuses a retry past the quota with the numbers, changing nothing; within it, retries", async () => {
    await q.putAccount({ name: "rq-one", maxPendingTasks: 2 });
    const cancelled = await q.createJob(job("rq-one", 2));
    await q.cancelJob({ jobId: cancelled.job.id });
    const open = await q.createJob(job("rq-one", 2));
    expect((await q.getAccount("rq-one")).pendingTasks).toBe(2);
    const before = await rowsOf(cancelled.job.id);
    const err = await q.retryJob({ jobId: cancelled.job.id }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(QuotaExceededError);
    expect((err as Error).message).toBe('account: account "rq-one" has 2 pending tasks; 2 more would pass its max_pending_tasks of 2');
    expect(await rowsOf(cancelled.job.id)).toEqual(before);
    expect((await q.getAccount("rq-one")).pendingTasks).toBe(2);
    // The same from a bound caller of the account.
    await expect(q.retryJob({ jobId: cancelled.job.id }, { account: "rq-one" })).rejects.toBeInstanceOf(QuotaExceededError);
    // Room made, the retry goes through.
    await q.cancelJob({ jobId: open.job.id });
    expect(await q.retryJob({ jobId: cancelled.job.id })).toMatchObject({ retriedTasks: 2 });
    expect((await q.getAccount("rq-one")).pendingTasks).toBe(2);
  });

  it("counts a retried job's finalizer still to come", async () => {
    await q.putWorkload({ name: "rq_fin", maxAttempts: 1 });
    await q.putAccount({ name: "rq-fin", maxPendingTasks: 2 });
    const parent = await q.createJob({ ...job("rq-fin", 1), finalizer: { workload: "rq_fin" } });
    await q.cancelJob({ jobId: parent.job.id });
    await q.createJob(job("rq-fin", 1));
    // One task open; the retry would add the parent's task and its finalizer's: 3 > 2.
    await expect(q.retryJob({ jobId: parent.job.id })).rejects.toBeInstanceOf(QuotaExceededError);
  });

  it("holds across coordinators retrying and creating at once: the account's count never passes the limit", async () => {
    const limit = 10;
    await q.putAccount({ name: "rq-race", maxPendingTasks: 0 });
    // Twelve cancelled jobs of 1 or 2 tasks made without a quota, then the quota set.
    const sizes = Array.from({ length: 12 }, (_, i) => 1 + (i % 2));
    const jobs: string[] = [];
    for (const n of sizes) {
      const r = await q.createJob(job("rq-race", n));
      await q.cancelJob({ jobId: r.job.id });
      jobs.push(r.job.id);
    }
    await q.putAccount({ name: "rq-race", maxPendingTasks: limit });
    const coordinators = [q, ...Array.from({ length: 3 }, () => new PostgresQueue(f.newPool(), TEST_STORE_OPTIONS))];
    // The twelve retries (18 tasks) and eight CreateJobs of one task (8) at once: 26 asked of 10.
    const calls: Array<() => Promise<number>> = [
      ...jobs.map((id, i) => async () => (await coordinators[i % 4].retryJob({ jobId: id })).retriedTasks),
      ...Array.from({ length: 8 }, (_, i) => async () => (await coordinators[i % 4].createJob(job("rq-race", 1))).tasks.length),
    ];
    const outcomes = await Promise.allSettled(calls.map((c) => c()));
    for (const o of outcomes) if (o.status === "rejected") expect(o.reason).toBeInstanceOf(QuotaExceededError);
    const accepted = outcomes.reduce((n, o) => n + (o.status === "fulfilled" ? o.value : 0), 0);
    expect(accepted).toBeLessThanOrEqual(limit);
    // Refusals only when the next would not fit: filled to within one job of two tasks.
    expect(accepted).toBeGreaterThanOrEqual(limit - 1);
    const { rows } = await f.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM tasks t JOIN jobs j ON j.id = t.job_id
       WHERE j.account = 'rq-race' AND t.status IN ('pending', 'leased')`,
    );
    expect(rows[0].n).toBe(accepted);
    expect((await q.getAccount("rq-race")).pendingTasks).toBe(accepted);
    for (const c of coordinators.slice(1)) c.stopTimers();
  });
});
