// The usage rollup and GetAccountUsage against a real PostgreSQL: each final job of an account is
// counted once into account_usage, also with two rollups running at once on two pools (two
// coordinators), and GetAccountUsage sums the rows of [from, to) per workload.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { NotFoundError, ValidationError } from "../../src/queue/errors.js";
import type { Task } from "../../src/queue/types.js";
import { UsageRollup } from "../../src/store/postgres/background/usage-rollup.js";
import type { PostgresQueue } from "../../src/store/postgres/store.js";
import { queueFixture, sha, type QueueFixture } from "../support/queue.js";

let f: QueueFixture;
let q: PostgresQueue;
let seq = 0;

beforeAll(async () => {
  f = await queueFixture();
  q = f.queue;
});
afterAll(async () => {
  await f?.close();
});

/** Accounts are made here by SQL: the rollup only needs the row the foreign keys point to. */
async function account(): Promise<string> {
  const name = `acct${++seq}`;
  await f.pool.query(`INSERT INTO accounts (name) VALUES ($1)`, [name]);
  return name;
}
async function workload(): Promise<string> {
  const name = `ru${++seq}`;
  await q.putWorkload({ name, maxAttempts: 2 });
  return name;
}
/** A job of `acct` with `n` tasks, its account set by SQL (CreateJob's account is another part's). */
async function job(acct: string | null, w: string, n: number): Promise<string> {
  const created = await q.createJob({
    workload: w,
    tasks: Array.from({ length: n }, (_, i) => ({ chunkIndex: i, inputUri: `s3://in/${i}`, inputSha256: sha(i) })),
  });
  if (acct) await f.pool.query(`UPDATE jobs SET account = $2 WHERE id = $1`, [created.job.id, acct]);
  return created.job.id;
}
async function claim(w: string, n: number): Promise<Task[]> {
  const tasks = await q.claimTasks({ workerId: "wk", workloads: [w], maxTasks: n });
  expect(tasks).toHaveLength(n);
  return tasks;
}
const complete = (t: Task, usage?: Record<string, number>) =>
  q.completeTask({ taskId: t.id, workerId: "wk", attempt: t.attempt, resultUri: "s3://out", resultSha256: sha(t.id), usage });

describe("usage rollup", () => {
  it("counts a final job of an account once: jobs, tasks completed and failed, lease seconds, usage; GetAccountUsage sums them", async () => {
    const acct = await account();
    const w = await workload();
    const jobId = await job(acct, w, 3);
    const [a, b, c] = await claim(w, 3);
    // Leases that started 10 s ago, so the lease seconds are measurable.
    await f.pool.query(`UPDATE jobs SET created_at = created_at - interval '1 minute' WHERE id = $1`, [jobId]);
    await f.pool.query(`UPDATE task_events SET created_at = created_at - interval '10 seconds' WHERE job_id = $1 AND status = 'leased'`, [
      jobId,
    ]);
    await complete(a, { gpu_ms: 100 });
    await complete(b, { gpu_ms: 50, tokens: 4 });
    await q.failTask({ taskId: c.id, workerId: "wk", attempt: 1, errorCode: "bad", retryable: false, usage: { gpu_ms: 1 } });
    // Another job of no account, final too: not counted.
    const other = await workload();
    await job(null, other, 1);
    await complete((await claim(other, 1))[0]);
    expect((await q.getJobStatus(jobId)).job.status).toBe("failed");

    const result = await q.maintain();
    expect(result.rolledUpJobs).toBe(1);
    expect((await q.maintain()).rolledUpJobs).toBeUndefined(); // the probe finds nothing left
    const { rows } = await f.pool.query(`SELECT * FROM account_usage WHERE account = $1`, [acct]);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ workload: w, jobs: "1", tasks_completed: "2", tasks_failed: "1", usage: { gpu_ms: 151, tokens: 4 } });
    expect(rows[0].lease_seconds).toBeGreaterThanOrEqual(30);
    expect(rows[0].lease_seconds).toBeLessThan(60);
    expect(new Date(rows[0].hour).getUTCMinutes()).toBe(0);

    const usage = await q.getAccountUsage({ account: acct });
    expect(usage.account).toBe(acct);
    expect(usage.workloads).toEqual([
      { workload: w, jobs: 1, tasksCompleted: 2, tasksFailed: 1, leaseSeconds: rows[0].lease_seconds, usage: { gpu_ms: 151, tokens: 4 } },
    ]);
  });

  it("GetAccountUsage sums hours in [from, to) per workload; an unknown account is NOT_FOUND; bad input INVALID_ARGUMENT", async () => {
    const acct = await account();
    const insert = `INSERT INTO account_usage (account, hour, workload, jobs, tasks_completed, tasks_failed, lease_seconds, usage)
                    VALUES ($1, $2, $3, $4::bigint, $4::bigint, 0, $4::float8, $5)`;
    await f.pool.query(insert, [acct, "2026-01-01T10:00:00Z", "render", 1, { gpu_ms: 1 }]);
    await f.pool.query(insert, [acct, "2026-01-01T11:00:00Z", "render", 2, { gpu_ms: 2, tokens: 5 }]);
    await f.pool.query(insert, [acct, "2026-01-01T12:00:00Z", "render", 4, {}]);
    await f.pool.query(insert, [acct, "2026-01-01T11:00:00Z", "encode", 8, { tokens: 1 }]);
    const all = await q.getAccountUsage({ account: acct });
    expect(all.workloads.map((x) => [x.workload, x.jobs, x.leaseSeconds, x.usage])).toEqual([
      ["encode", 8, 8, { tokens: 1 }],
      ["render", 7, 7, { gpu_ms: 3, tokens: 5 }],
    ]);
    const some = await q.getAccountUsage({ account: acct, from: new Date("2026-01-01T11:00:00Z"), to: new Date("2026-01-01T12:00:00Z") });
    expect(some.workloads.map((x) => [x.workload, x.jobs, x.usage])).toEqual([
      ["encode", 8, { tokens: 1 }],
      ["render", 2, { gpu_ms: 2, tokens: 5 }],
    ]);
    expect((await q.getAccountUsage({ account: acct, from: new Date("2027-01-01T00:00:00Z") })).workloads).toEqual([]);
    await expect(q.getAccountUsage({ account: "nobody-here" })).rejects.toBeInstanceOf(NotFoundError);
    await expect(q.getAccountUsage({ account: "Bad Name" })).rejects.toBeInstanceOf(ValidationError);
    await expect(
      q.getAccountUsage({ account: acct, from: new Date("2026-01-02T00:00:00Z"), to: new Date("2026-01-01T00:00:00Z") }),
    ).rejects.toBeInstanceOf(ValidationError);
  });

  it("two rollups running at once on two coordinators' pools count every job exactly once", async () => {
    const acct = await account();
    const w = await workload();
    const jobs = 60;
    for (let i = 0; i < jobs; i++) await job(acct, w, 2);
    // Complete every task with usage 1 each, in batches.
    for (;;) {
      const tasks = await q.claimTasks({ workerId: "wk", workloads: [w], maxTasks: 50 });
      if (tasks.length === 0) break;
      await q.completeTasks(
        tasks.map((t) => ({
          taskId: t.id,
          workerId: "wk",
          attempt: t.attempt,
          resultUri: "s3://o",
          resultSha256: sha(t.id),
          usage: { n: 1 },
        })),
      );
    }
    const small = { batchJobs: 3, batchesPerPass: 1000 };
    const one = new UsageRollup(f.newPool(), small);
    const two = new UsageRollup(f.newPool(), small);
    const counted = await Promise.all([one.runOnce(undefined), two.runOnce(undefined), one.runOnce(undefined), two.runOnce(undefined)]);
    expect(counted.reduce((s, n) => s + n, 0)).toBe(jobs);
    const { rows } = await f.pool.query(
      `SELECT sum(jobs)::int AS jobs, sum(tasks_completed)::int AS tasks, sum((usage->>'n')::int)::int AS n FROM account_usage WHERE account = $1`,
      [acct],
    );
    expect(rows[0]).toEqual({ jobs, tasks: 2 * jobs, n: 2 * jobs });
    expect(await f.count("jobs", `account = '${acct}' AND rolled_up_at IS NULL`)).toBe(0);
    // Nothing is counted twice on a later pass.
    expect(await one.runOnce(undefined)).toBe(0);
  });
});
