// Jobs after jobs against a real PostgreSQL: a job with unfinished parents waits (its tasks in no
// claim's way), becomes pending in the transaction that ends its last parent, with the parents on
// its claimed tasks; the policies (all_completed, all_final, optional parents), the cascade of an
// unmeetable policy, cancel and retry, and what CreateJob refuses before writing anything.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FailedPreconditionError, NotFoundError, ValidationError } from "../../src/queue/errors.js";
import type { CreateJobInput, Dependency, Task } from "../../src/queue/types.js";
import { queueFixture, sha, type QueueFixture } from "../support/queue.js";

let f: QueueFixture;
const W = "deps";
const NEXT = "deps_next";

beforeAll(async () => {
  f = await queueFixture();
  await f.queue.putWorkload({ name: W, maxAttempts: 1 });
  await f.queue.putWorkload({ name: NEXT, maxAttempts: 1 });
});
afterAll(async () => {
  await f?.close();
});

let seq = 0;
function job(workload: string, after?: Dependency[], extra: Partial<CreateJobInput> = {}, tasks = 1): CreateJobInput {
  const n = ++seq;
  return {
    workload,
    tasks: Array.from({ length: tasks }, (_, i) => ({ chunkIndex: i, inputUri: `s3://in/${n}/${i}`, inputSha256: sha(`${n}/${i}`) })),
    ...(after ? { after } : {}),
    ...extra,
  };
}

/** The next task of the workload (tasks are claimed in creation order, one at a time): the tests keep their queues in order. */
async function claimOne(workload: string, jobId?: string): Promise<Task | undefined> {
  const [t] = await f.queue.claimTasks({ workerId: "w", workloads: [workload], maxTasks: 1 });
  if (t && jobId) expect(t.jobId, "the next task in the queue").toBe(jobId);
  return t;
}

async function complete(t: Task): Promise<void> {
  await f.queue.completeTask({
    taskId: t.id,
    workerId: "w",
    attempt: t.attempt,
    resultUri: `s3://out/${t.id}`,
    resultSha256: sha(`out${t.id}`),
  });
}

async function runJob(jobId: string, workload = W): Promise<void> {
  const t = await claimOne(workload, jobId);
  expect(t, `a task of ${jobId}`).toBeDefined();
  await complete(t!);
}

async function status(jobId: string) {
  return (await f.queue.getJobStatus(jobId)).job;
}

describe("after", () => {
  it("waits while a parent runs, is in no claim, and is pending once the last parent completes", async () => {
    const a = (await f.queue.createJob(job(W))).job;
    const b = (await f.queue.createJob(job(W))).job;
    const c = await f.queue.createJob(job(NEXT, [{ jobId: a.id }, { jobId: b.id }]));
    expect(c.job).toMatchObject({ status: "waiting", waitingParents: 2, dependencyPolicy: "all_completed" });
    expect(c.tasks.map((t) => t.status)).toEqual(["waiting"]);
    expect(c.job.parents?.map((p) => p.jobId).sort()).toEqual([a.id, b.id].sort());
    expect(await claimOne(NEXT)).toBeUndefined();
    await runJob(a.id);
    expect(await status(c.job.id)).toMatchObject({ status: "waiting", waitingParents: 1 });
    expect(await claimOne(NEXT)).toBeUndefined();
    await runJob(b.id);
    expect(await status(c.job.id)).toMatchObject({ status: "pending", waitingParents: 0 });
    const t = await claimOne(NEXT, c.job.id);
    expect(t?.parents?.map((p) => [p.jobId, p.status, p.totalTasks, p.completedTasks]).sort()).toEqual(
      [
        [a.id, "completed", 1, 1],
        [b.id, "completed", 1, 1],
      ].sort(),
    );
    // A parent of one completed task carries its result.
    expect(t?.parents?.[0].result).toMatchObject({ chunkIndex: 0, resultUri: expect.stringMatching(/^s3:\/\/out\//) });
    await complete(t!);
  });

  it("is pending at once when every parent is final already", async () => {
    const a = (await f.queue.createJob(job(W))).job;
    await runJob(a.id);
    const c = await f.queue.createJob(job(NEXT, [{ jobId: a.id }]));
    expect(c.job.status).toBe("pending");
    expect(c.tasks[0]).toMatchObject({ status: "pending" });
    expect(c.tasks[0].parents?.[0]).toMatchObject({ jobId: a.id, status: "completed" });
    await runJob(c.job.id, NEXT);
  });

  it("cancels a job whose required parent failed, naming it, and cascades down; an all_final one runs", async () => {
    const a = (await f.queue.createJob(job(W))).job;
    const strict = (await f.queue.createJob(job(NEXT, [{ jobId: a.id }]))).job;
    const below = (await f.queue.createJob(job(NEXT, [{ jobId: strict.id }]))).job;
    const lenient = (await f.queue.createJob(job(NEXT, [{ jobId: a.id }], { dependencyPolicy: "all_final" }))).job;
    const optional = (await f.queue.createJob(job(NEXT, [{ jobId: a.id, optional: true }]))).job;
    const t = await claimOne(W, a.id);
    await f.queue.failTask({ taskId: t!.id, workerId: "w", attempt: t!.attempt, errorCode: "boom", retryable: false });
    expect(await status(a.id)).toMatchObject({ status: "failed" });
    expect(await status(strict.id)).toMatchObject({ status: "cancelled", cancelReason: `parent ${a.id} ended failed` });
    expect(await status(below.id)).toMatchObject({ status: "cancelled", cancelReason: `parent ${strict.id} was cancelled` });
    expect((await f.queue.getJobStatus(below.id)).taskCounts).toMatchObject({ cancelled: 1, waiting: 0 });
    expect(await status(lenient.id)).toMatchObject({ status: "pending" });
    expect(await status(optional.id)).toMatchObject({ status: "pending" });
    const claimed = await f.queue.claimTasks({ workerId: "w", workloads: [NEXT], maxTasks: 10 });
    expect(claimed.map((x) => x.jobId).sort()).toEqual([lenient.id, optional.id].sort());
    for (const x of claimed) await complete(x);
  });

  it("is refused when a required parent ended failed already, and writes nothing", async () => {
    const a = (await f.queue.createJob(job(W))).job;
    await f.queue.cancelJob({ jobId: a.id });
    const before = await f.count("jobs");
    await expect(f.queue.createJob(job(NEXT, [{ jobId: a.id }]))).rejects.toThrow(FailedPreconditionError);
    expect(await f.count("jobs")).toBe(before);
    // Optional, it runs at once.
    const ok = await f.queue.createJob(job(NEXT, [{ jobId: a.id, optional: true }]));
    expect(ok.job.status).toBe("pending");
    await runJob(ok.job.id, NEXT);
  });

  it("refuses an unknown parent naming the field, a repeated one, and more than 100", async () => {
    const missing = "0190f3a0-0000-7000-8000-000000000000";
    const a = (await f.queue.createJob(job(W))).job;
    const e = await f.queue.createJob(job(NEXT, [{ jobId: a.id }, { jobId: missing }])).catch((err: unknown) => err);
    expect(e).toBeInstanceOf(NotFoundError);
    expect((e as NotFoundError).field).toBe("after[1].job_id");
    await expect(f.queue.createJob(job(NEXT, [{ jobId: a.id }, { jobId: a.id }]))).rejects.toThrow(ValidationError);
    const many = Array.from({ length: 101 }, () => ({ jobId: a.id }));
    await expect(f.queue.createJob(job(NEXT, many))).rejects.toThrow(/at most 100/);
    await expect(f.queue.createJob(job(NEXT, [{ jobId: a.id }], { dependencyPolicy: "sometimes" as never }))).rejects.toThrow(
      ValidationError,
    );
    await f.queue.cancelJob({ jobId: a.id });
  });

  it("CancelJob cancels a waiting job and its waiting tasks; its children under all_completed follow", async () => {
    const a = (await f.queue.createJob(job(W))).job;
    const c = (await f.queue.createJob(job(NEXT, [{ jobId: a.id }], {}, 3))).job;
    const d = (await f.queue.createJob(job(NEXT, [{ jobId: c.id }]))).job;
    await f.queue.cancelJob({ jobId: c.id, reason: "no longer needed" });
    expect((await f.queue.getJobStatus(c.id)).taskCounts).toMatchObject({ cancelled: 3, waiting: 0 });
    expect(await status(d.id)).toMatchObject({ status: "cancelled" });
    await runJob(a.id);
    expect(await status(c.id)).toMatchObject({ status: "cancelled", cancelReason: "no longer needed" });
    expect(await claimOne(NEXT)).toBeUndefined();
  });

  it("a waiting task says why in GetTask, with its parents now", async () => {
    const a = (await f.queue.createJob(job(W))).job;
    const c = await f.queue.createJob(job(NEXT, [{ jobId: a.id }]));
    const got = await f.queue.getTask(c.tasks[0].id);
    expect(got.task.status).toBe("waiting");
    expect(got.waiting?.reason).toBe("parents");
    expect(got.waiting?.detail).toContain(`job ${a.id}`);
    expect(got.task.parents?.[0]).toMatchObject({ jobId: a.id, status: "pending" });
    expect((await f.queue.listJobs({ status: "waiting", workload: NEXT })).jobs.map((j) => j.id)).toContain(c.job.id);
    expect((await f.queue.listJobs({ status: "pending", workload: NEXT })).jobs.map((j) => j.id)).not.toContain(c.job.id);
    await runJob(a.id);
    await runJob(c.job.id, NEXT);
  });

  it("RetryJob of a failed parent makes a child still waiting count it again; the child runs once", async () => {
    const a = (await f.queue.createJob(job(W))).job;
    const b = (await f.queue.createJob(job(W))).job;
    const c = (await f.queue.createJob(job(NEXT, [{ jobId: a.id, optional: true }, { jobId: b.id }]))).job;
    const t = await claimOne(W, a.id);
    await f.queue.failTask({ taskId: t!.id, workerId: "w", attempt: t!.attempt, errorCode: "boom", retryable: false });
    expect(await status(c.id)).toMatchObject({ status: "waiting", waitingParents: 1 });
    await f.queue.retryJob({ jobId: a.id });
    expect(await status(c.id)).toMatchObject({ status: "waiting", waitingParents: 2 });
    // a's task, retried, is older than b's: the queue gives it first.
    await runJob(a.id);
    expect(await status(c.id)).toMatchObject({ status: "waiting", waitingParents: 1 });
    await runJob(b.id);
    expect(await status(c.id)).toMatchObject({ status: "pending", waitingParents: 0 });
    const promotions = await f.pool.query(
      `SELECT count(*)::int AS n FROM task_events WHERE job_id = $1 AND kind = 'job_status' AND previous_status = 'waiting'`,
      [c.id],
    );
    expect(promotions.rows[0].n).toBe(1);
    await runJob(c.id, NEXT);
  });

  it("RetryJob of a job cancelled by its parent is refused while the parent stays failed, and waits again after it is retried", async () => {
    const a = (await f.queue.createJob(job(W))).job;
    const c = (await f.queue.createJob(job(NEXT, [{ jobId: a.id }]))).job;
    const t = await claimOne(W, a.id);
    await f.queue.failTask({ taskId: t!.id, workerId: "w", attempt: t!.attempt, errorCode: "boom", retryable: false });
    expect(await status(c.id)).toMatchObject({ status: "cancelled" });
    await expect(f.queue.retryJob({ jobId: c.id })).rejects.toThrow(/ended failed/);
    await f.queue.retryJob({ jobId: a.id });
    const retried = await f.queue.retryJob({ jobId: c.id });
    expect(retried.job).toMatchObject({ status: "waiting", waitingParents: 1 });
    expect((await f.queue.getJobStatus(c.id)).taskCounts).toMatchObject({ waiting: 1, cancelled: 0 });
    await runJob(a.id);
    await runJob(c.id, NEXT);
    expect(await status(c.id)).toMatchObject({ status: "completed" });
  });
});

describe("the claim", () => {
  it("never meets a waiting task: 6,000 of them ahead in claim order are not in its index", async () => {
    await f.queue.putWorkload({ name: "deps_blocker" });
    await f.queue.putWorkload({ name: "deps_claim" });
    const blocker = (await f.queue.createJob(job("deps_blocker"))).job;
    // Older and of a higher priority than the one claimable task: first in claim order, were they in the index.
    await f.queue.createJob(job("deps_claim", [{ jobId: blocker.id }], { priority: 10 }, 6000));
    const claimable = (await f.queue.createJob(job("deps_claim"))).job;
    await f.pool.query("VACUUM ANALYZE tasks");
    const { rows: counted } = await f.pool.query(
      `SELECT count(*)::int AS n FROM tasks WHERE workload = 'deps_claim' AND status = 'waiting'`,
    );
    expect(counted[0].n).toBe(6000);
    const { CLAIM_TASKS } = await import("../support/statements.js");
    const client = await f.pool.connect();
    try {
      await client.query(`PREPARE waiting_claim AS ${CLAIM_TASKS}`);
      // The claim's scan of the index, as it is, and as it would be were the waiting tasks pending
      // ones not due (in the index, passed over inside it, as a retry's backoff is).
      const scanBuffers = async (instead?: string) => {
        await client.query("BEGIN");
        if (instead) await client.query(instead);
        const { rows } = await client.query(
          `EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, SUMMARY OFF) EXECUTE waiting_claim(ARRAY['deps_claim'], 1, 'x', NULL, '{}', '{}')`,
        );
        await client.query("ROLLBACK");
        const plan = rows.map((r) => r["QUERY PLAN"]).join("\n");
        if (process.env.SHOW_PLAN) console.log(plan);
        const scan = plan.slice(plan.indexOf("Index Scan using tasks_claim_pending_idx"));
        expect(scan).toMatch(/^[^\n]*rows=1\.00 loops=1/);
        return Number(/Buffers: shared hit=(\d+)/.exec(scan)![1]);
      };
      const waiting = await scanBuffers();
      const inTheIndex = await scanBuffers(
        `UPDATE tasks SET status = 'pending', run_after = 'infinity' WHERE workload = 'deps_claim' AND status = 'waiting'`,
      );
      expect(waiting).toBeLessThan(15);
      expect(inTheIndex).toBeGreaterThan(waiting + 20);
      await client.query("DEALLOCATE waiting_claim");
    } finally {
      client.release();
    }
    const [t] = await f.queue.claimTasks({ workerId: "w", workloads: ["deps_claim"] });
    expect(t.jobId).toBe(claimable.id);
    await complete(t);
    await f.queue.cancelJob({ jobId: blocker.id });
  });
});
