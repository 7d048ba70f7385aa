// The failure policy of a job, on a real PostgreSQL: fail_fast (the default), continue, and a
// max_failed_tasks threshold under both; a workload's default and a job's own; results of tasks
// cancelled while they ran; RetryJob after each; the reaper's and pending expiry's failures; and a
// race of a job's last failure with its other tasks' completions on several coordinators.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LeaseConflictError, ValidationError } from "../../src/queue/errors.js";
import type { CreateJobInput, FailurePolicy, Task } from "../../src/queue/types.js";
import { PostgresQueue } from "../../src/store/postgres/store.js";
import { queueFixture, sha, TEST_STORE_OPTIONS, type QueueFixture } from "../support/queue.js";

const W = "fp_render";
const WORKER = "fp-worker";

let f: QueueFixture;
let q: PostgresQueue;
/** Stores on pools of their own: three coordinators. */
let stores: PostgresQueue[];

beforeAll(async () => {
  f = await queueFixture();
  q = f.queue;
  stores = [q, new PostgresQueue(f.newPool(), TEST_STORE_OPTIONS), new PostgresQueue(f.newPool(), TEST_STORE_OPTIONS)];
  await q.putWorkload({ name: W, maxAttempts: 1, leaseSeconds: 60 });
});

afterAll(async () => {
  await f?.close();
});

const result = (t: Task) => ({
  taskId: t.id,
  workerId: t.leaseOwner!,
  attempt: t.attempt,
  resultUri: `s3://out/${t.id}`,
  resultSha256: sha(t.id),
});
const failure = (t: Task) => ({ taskId: t.id, workerId: t.leaseOwner!, attempt: t.attempt, errorCode: "bad_chunk", retryable: false });

let workloads = 0;

/**
 * A job of n chunks, every task of it claimed (in chunk order) unless `claim` says fewer; of a
 * workload of its own (one attempt per task) unless `workload` names one, so no other test's
 * tasks are claimed with it.
 */
async function runningJob(
  n: number,
  extra: Partial<CreateJobInput> = {},
  claim = n,
  workload?: string,
): Promise<{ jobId: string; tasks: Task[]; workload: string }> {
  const name = workload ?? `${W}_${++workloads}`;
  if (workload === undefined) await q.putWorkload({ name, maxAttempts: 1, leaseSeconds: 60 });
  const { job } = await q.createJob({
    workload: name,
    tasks: Array.from({ length: n }, (_, i) => ({ chunkIndex: i, inputUri: `s3://in/${i}`, inputSha256: sha(i) })),
    ...extra,
  });
  const tasks: Task[] = [];
  if (claim > 0) tasks.push(...(await q.claimTasks({ workerId: WORKER, workloads: [name], maxTasks: claim })));
  expect(tasks.every((t) => t.jobId === job.id)).toBe(true);
  tasks.sort((a, b) => a.chunkIndex - b.chunkIndex);
  return { jobId: job.id, tasks, workload: name };
}

async function finalEvents(jobId: string): Promise<string[]> {
  const { rows } = await f.pool.query(
    `SELECT status FROM task_events WHERE job_id = $1 AND kind = 'job_status' AND status IN ('completed', 'failed', 'cancelled') ORDER BY id`,
    [jobId],
  );
  return rows.map((r) => r.status as string);
}

async function status(jobId: string) {
  const s = await q.getJobStatus(jobId);
  return { status: s.job.status, counts: s.taskCounts, failure: s.failure };
}

describe("fail_fast (the default)", () => {
  it("a job takes its workload's policy; one failure fails it and cancels the rest, a leased task keeping its lease", async () => {
    const { jobId, tasks } = await runningJob(4, {}, 3);
    const job = (await q.getJobStatus(jobId)).job;
    expect(job).toMatchObject({ failurePolicy: "fail_fast", maxFailedTasks: 0 });
    await q.completeTask(result(tasks[0]));
    await q.failTask(failure(tasks[1]));
    expect(await status(jobId)).toMatchObject({
      status: "failed",
      counts: { pending: 0, leased: 0, completed: 1, failed: 1, cancelled: 2 },
      failure: { chunkIndex: 1, errorCode: "bad_chunk" },
    });
    const { rows } = await f.pool.query(
      `SELECT chunk_index, status, lease_owner, attempt, lease_expires_at FROM tasks WHERE job_id = $1 ORDER BY chunk_index`,
      [jobId],
    );
    // Chunk 2 was leased when it was cancelled: its lease stays (a late result is accepted until then); chunk 3 never was.
    expect(rows[2]).toMatchObject({ status: "cancelled", lease_owner: WORKER, attempt: 1, lease_expires_at: expect.any(Date) });
    expect(rows[3]).toMatchObject({ status: "cancelled", lease_owner: null, lease_expires_at: null });
    expect(await finalEvents(jobId)).toEqual(["failed"]);
  });
});

describe("continue", () => {
  it("every other chunk still runs; the job fails once all are final, its ordered results readable", async () => {
    const { jobId, tasks, workload } = await runningJob(5, { failurePolicy: "continue" }, 3);
    await q.failTask(failure(tasks[1]));
    await q.completeTask(result(tasks[0]));
    expect(await status(jobId)).toMatchObject({
      status: "running",
      counts: { pending: 2, leased: 1, completed: 1, failed: 1, cancelled: 0 },
    });
    const rest = await q.claimTasks({ workerId: WORKER, workloads: [workload], maxTasks: 5 });
    expect(rest.map((t) => t.chunkIndex).sort()).toEqual([3, 4]);
    await q.completeTasks([tasks[2], ...rest].map(result));
    expect(await status(jobId)).toMatchObject({
      status: "failed",
      counts: { pending: 0, leased: 0, completed: 4, failed: 1, cancelled: 0 },
      failure: { chunkIndex: 1, errorCode: "bad_chunk" },
    });
    const page = await q.listCompletedResults({ jobId });
    expect(page.results.map((r) => r.chunkIndex)).toEqual([0, 2, 3, 4]);
    expect(await finalEvents(jobId)).toEqual(["failed"]);
  });

  it("a failure that is the job's last final task ends the job", async () => {
    const { jobId, tasks } = await runningJob(2, { failurePolicy: "continue" });
    await q.completeTask(result(tasks[0]));
    await q.failTask(failure(tasks[1]));
    expect(await status(jobId)).toMatchObject({ status: "failed", counts: { completed: 1, failed: 1 } });
    expect(await finalEvents(jobId)).toEqual(["failed"]);
  });
});

describe("max_failed_tasks", () => {
  it("fail_fast tolerates N failures and completes with them; the N+1th fails the job at once and cancels the rest", async () => {
    const tolerated = await runningJob(3, { maxFailedTasks: 1 });
    await q.failTask(failure(tolerated.tasks[0]));
    expect((await status(tolerated.jobId)).status).toBe("running");
    await q.completeTasks(tolerated.tasks.slice(1).map(result));
    expect(await status(tolerated.jobId)).toMatchObject({ status: "completed", counts: { completed: 2, failed: 1 }, failure: null });
    expect(await finalEvents(tolerated.jobId)).toEqual(["completed"]);

    const past = await runningJob(5, { maxFailedTasks: 1 }, 4);
    await q.failTask(failure(past.tasks[0]));
    await q.completeTask(result(past.tasks[1]));
    await q.failTask(failure(past.tasks[2]));
    expect(await status(past.jobId)).toMatchObject({
      status: "failed",
      counts: { pending: 0, leased: 0, completed: 1, failed: 2, cancelled: 2 },
    });
  });

  it("continue tolerates N failures; past them the job still runs every chunk and ends failed", async () => {
    const tolerated = await runningJob(3, { failurePolicy: "continue", maxFailedTasks: 2 });
    await q.failTask(failure(tolerated.tasks[0]));
    await q.failTask(failure(tolerated.tasks[2]));
    await q.completeTask(result(tolerated.tasks[1]));
    expect(await status(tolerated.jobId)).toMatchObject({ status: "completed", counts: { completed: 1, failed: 2 } });

    const past = await runningJob(4, { failurePolicy: "continue", maxFailedTasks: 1 });
    await q.failTask(failure(past.tasks[0]));
    await q.failTask(failure(past.tasks[1]));
    expect((await status(past.jobId)).status).toBe("running");
    await q.completeTasks(past.tasks.slice(2).map(result));
    expect(await status(past.jobId)).toMatchObject({ status: "failed", counts: { completed: 2, failed: 2, cancelled: 0 } });
  });

  it("a workload's policy is its jobs' default; a job's own wins; PutWorkload without it resets it", async () => {
    const name = "fp_defaults";
    const w = await q.putWorkload({ name, failurePolicy: "continue", maxFailedTasks: 3 });
    expect(w).toMatchObject({ failurePolicy: "continue", maxFailedTasks: 3 });
    const inherited = await runningJob(1, {}, 0, name);
    expect((await q.getJobStatus(inherited.jobId)).job).toMatchObject({ failurePolicy: "continue", maxFailedTasks: 3 });
    const own = await runningJob(1, { failurePolicy: "fail_fast", maxFailedTasks: 0 }, 0, name);
    expect((await q.getJobStatus(own.jobId)).job).toMatchObject({ failurePolicy: "fail_fast", maxFailedTasks: 0 });
    expect((await q.listWorkloads()).find((x) => x.name === name)).toMatchObject({ failurePolicy: "continue", maxFailedTasks: 3 });
    expect(await q.putWorkload({ name })).toMatchObject({ failurePolicy: "fail_fast", maxFailedTasks: 0 });
    // A job keeps the policy it was created with.
    expect((await q.getJobStatus(inherited.jobId)).job).toMatchObject({ failurePolicy: "continue", maxFailedTasks: 3 });
  });

  it("bad values are refused naming the field, and nothing is written", async () => {
    const before = { jobs: await f.count("jobs"), workloads: await f.count("workloads") };
    const cases: [() => Promise<unknown>, string][] = [
      [() => runningJob(1, { failurePolicy: "sometimes" as FailurePolicy }, 0, W), "failure_policy"],
      [() => runningJob(1, { maxFailedTasks: -1 }, 0, W), "max_failed_tasks"],
      [() => runningJob(1, { maxFailedTasks: 1.5 }, 0, W), "max_failed_tasks"],
      [() => runningJob(1, { maxFailedTasks: 1_000_001 }, 0, W), "max_failed_tasks"],
      [() => q.putWorkload({ name: "fp_bad", failurePolicy: "never" as FailurePolicy }), "failure_policy"],
      [() => q.putWorkload({ name: "fp_bad", maxFailedTasks: -2 }), "max_failed_tasks"],
    ];
    for (const [call, field] of cases) {
      const err = await call().then(
        () => undefined,
        (e) => e,
      );
      expect(err, field).toBeInstanceOf(ValidationError);
      expect((err as ValidationError).violations.map((v) => v.field)).toEqual([field]);
    }
    expect({ jobs: await f.count("jobs"), workloads: await f.count("workloads") }).toEqual(before);
  });
});

describe("results of tasks cancelled while they ran", () => {
  it("are accepted and kept within the lease, by its holder and attempt; the job keeps its status", async () => {
    const { jobId, tasks } = await runningJob(4);
    await q.cancelJob({ jobId, reason: "operator" });
    // Heartbeats and failures still learn of the cancellation; the message says until when a result is kept.
    const hb = await q.renewLease({ taskId: tasks[0].id, workerId: WORKER, attempt: 1 }).catch((e) => e);
    expect(hb).toBeInstanceOf(LeaseConflictError);
    expect(hb.reason).toBe("task_cancelled");
    expect(hb.message).toMatch(/still accepted until/);
    await expect(q.failTask(failure(tasks[3]))).rejects.toBeInstanceOf(LeaseConflictError);
    // Another worker or attempt is refused.
    await expect(q.completeTask({ ...result(tasks[0]), workerId: "thief" })).rejects.toBeInstanceOf(LeaseConflictError);
    const late = await q.completeTask(result(tasks[0]));
    expect(late).toMatchObject({ status: "completed", resultUri: `s3://out/${tasks[0].id}` });
    // A replay is the same result; another checksum is a conflict.
    expect((await q.completeTask(result(tasks[0]))).status).toBe("completed");
    // In a batch too.
    const outcomes = await q.completeTasks([result(tasks[1]), { ...result(tasks[2]), workerId: "thief" }]);
    expect(outcomes[0].task?.status).toBe("completed");
    expect(outcomes[1].error).toBeInstanceOf(LeaseConflictError);
    // After the lease would have expired, a result is refused.
    await f.pool.query(`UPDATE tasks SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, [tasks[2].id]);
    await expect(q.completeTask(result(tasks[2]))).rejects.toMatchObject({ reason: "task_cancelled" });
    expect(await status(jobId)).toMatchObject({ status: "cancelled", counts: { completed: 2, cancelled: 2 } });
    expect((await q.listCompletedResults({ jobId })).results.map((r) => r.chunkIndex)).toEqual([0, 1]);
    expect(await finalEvents(jobId)).toEqual(["cancelled"]);
  });

  it("a fail_fast job's cancelled chunks still deliver; RetryJob then retries only what has no result", async () => {
    const { jobId, tasks, workload } = await runningJob(4);
    await q.failTask(failure(tasks[0]));
    await q.completeTask(result(tasks[2]));
    expect(await status(jobId)).toMatchObject({ status: "failed", counts: { completed: 1, failed: 1, cancelled: 2 } });
    const retried = await q.retryJob({ jobId });
    expect(retried.retriedTasks).toBe(3);
    // The old lease of a retried task no longer counts.
    await expect(q.completeTask(result(tasks[1]))).rejects.toBeInstanceOf(LeaseConflictError);
    const again = await q.claimTasks({ workerId: WORKER, workloads: [workload], maxTasks: 10 });
    expect(again.map((t) => t.chunkIndex).sort()).toEqual([0, 1, 3]);
    await q.completeTasks(again.map(result));
    expect(await status(jobId)).toMatchObject({ status: "completed", counts: { completed: 4, failed: 0, cancelled: 0 } });
  });
});

describe("RetryJob", () => {
  it("retries a continue job's failed chunks only, and a completed job's tolerated failures", async () => {
    const failed = await runningJob(3, { failurePolicy: "continue" });
    await q.failTask(failure(failed.tasks[1]));
    await q.completeTasks([failed.tasks[0], failed.tasks[2]].map(result));
    expect((await status(failed.jobId)).status).toBe("failed");
    expect((await q.retryJob({ jobId: failed.jobId })).retriedTasks).toBe(1);

    const tolerated = await runningJob(2, { maxFailedTasks: 1 });
    await q.failTask(failure(tolerated.tasks[0]));
    await q.completeTask(result(tolerated.tasks[1]));
    expect((await status(tolerated.jobId)).status).toBe("completed");
    const r = await q.retryJob({ jobId: tolerated.jobId });
    expect(r).toMatchObject({ retriedTasks: 1, job: { status: "running" } });

    const clean = await runningJob(1);
    await q.completeTask(result(clean.tasks[0]));
    await expect(q.retryJob({ jobId: clean.jobId })).rejects.toThrow(/completed with no failed task/);
  });
});

describe("failures found by maintenance", () => {
  it("an expired last lease settles the job under its policy", async () => {
    const { jobId, tasks } = await runningJob(2, { failurePolicy: "continue" });
    await f.pool.query(`UPDATE tasks SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, [tasks[0].id]);
    expect(await q.expireLeases()).toMatchObject({ failed: 1 });
    expect((await status(jobId)).status).toBe("running");
    await q.completeTask(result(tasks[1]));
    expect(await status(jobId)).toMatchObject({ status: "failed", counts: { completed: 1, failed: 1 } });

    const ff = await runningJob(3, {}, 2);
    await f.pool.query(`UPDATE tasks SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, [ff.tasks[0].id]);
    await q.expireLeases();
    expect(await status(ff.jobId)).toMatchObject({ status: "failed", counts: { failed: 1, cancelled: 2 } });
  });

  it("the reaper settles a job a coordinator left unsettled (past its threshold, or with nothing unfinished)", async () => {
    const { jobId, tasks } = await runningJob(3);
    // As if the coordinator died between the failure's commit and its settle.
    await f.pool.query(
      `UPDATE tasks SET status = 'failed', completed_at = now(), lease_expires_at = NULL, error_code = 'x' WHERE id = $1`,
      [tasks[0].id],
    );
    expect((await status(jobId)).status).toBe("running");
    await q.expireLeases();
    expect(await status(jobId)).toMatchObject({ status: "failed", counts: { failed: 1, cancelled: 2 } });
  });

  it("pending tasks that expire settle a job that was never claimed", async () => {
    const name = "fp_expiring";
    await q.putWorkload({ name, maxPendingSeconds: 60, failurePolicy: "continue" });
    const { jobId } = await runningJob(2, {}, 0, name);
    await f.pool.query(
      `UPDATE tasks SET created_at = now() - interval '2 minutes', run_after = now() - interval '2 minutes' WHERE job_id = $1`,
      [jobId],
    );
    expect((await q.maintain()).expiredPending).toBe(2);
    expect(await status(jobId)).toMatchObject({ status: "failed", counts: { failed: 2 } });
    expect(await finalEvents(jobId)).toEqual(["failed"]);
  });
});

/*
 * The last chunks of a job fail and complete at the same moment through three coordinators (each
 * call on a store of its own pool, all started together), many times over: whatever order they
 * commit in, the job's final status and counts are the policy's, every call succeeds (no
 * deadlock, no lost settle), and the job has exactly one final status event.
 */
describe("a job's last failure racing its other completions, on three coordinators", () => {
  const ITERATIONS = 20;
  const variants: { policy: FailurePolicy; max: number; failing: number; expect: "completed" | "failed" }[] = [
    { policy: "fail_fast", max: 0, failing: 1, expect: "failed" },
    { policy: "continue", max: 0, failing: 1, expect: "failed" },
    { policy: "continue", max: 1, failing: 1, expect: "completed" },
    { policy: "fail_fast", max: 1, failing: 2, expect: "failed" },
    { policy: "fail_fast", max: 2, failing: 2, expect: "completed" },
    { policy: "continue", max: 1, failing: 2, expect: "failed" },
  ];
  it.each(variants)("$policy, max_failed_tasks $max, $failing failing: $expect every time", async (v) => {
    const CHUNKS = 6;
    for (let i = 0; i < ITERATIONS; i++) {
      const { jobId, tasks } = await runningJob(CHUNKS, { failurePolicy: v.policy, maxFailedTasks: v.max });
      // The last chunks fail; the others complete; each call through a coordinator picked at random.
      const calls = tasks.map((t, k) => {
        const store = stores[(i + k * 7) % stores.length];
        return k >= CHUNKS - v.failing ? store.failTask(failure(t)) : store.completeTask(result(t));
      });
      const settled = await Promise.allSettled(calls);
      expect(
        settled.filter((s) => s.status === "rejected").map((s) => String((s as PromiseRejectedResult).reason)),
        `iteration ${i}`,
      ).toEqual([]);
      const s = await status(jobId);
      // Results sent for chunks a fail_fast job cancelled meanwhile are accepted (within their lease): every chunk ends as its worker said.
      expect(s, `iteration ${i}`).toMatchObject({
        status: v.expect,
        counts: { pending: 0, leased: 0, completed: CHUNKS - v.failing, failed: v.failing, cancelled: 0 },
      });
      expect(await finalEvents(jobId), `iteration ${i}`).toEqual([v.expect]);
    }
  });
});
