// Usage counters on results and failures, against a real PostgreSQL: recorded once per accepted
// report on every store path (one result, a batch, each with and without claim_next, coalesced or
// not, a late result, a failure retried or final), shown per task, per attempt and per job; a
// refused, stale or replayed report adds nothing, and bad usage writes nothing.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LeaseConflictError, ResultConflictError, ValidationError } from "../../src/queue/errors.js";
import type { CompleteTaskInput, Task } from "../../src/queue/types.js";
import type { PostgresQueue } from "../../src/store/postgres/store.js";
import { queueFixture, sha, type QueueFixture } from "../support/queue.js";

const MODES = [
  { name: "one statement per call", coalescing: false as const },
  { name: "coalesced", coalescing: { maxBatch: 64 } },
];

describe.each(MODES)("usage ($name)", ({ coalescing }) => {
  let f: QueueFixture;
  let q: PostgresQueue;
  let seq = 0;

  beforeAll(async () => {
    f = await queueFixture({ coalescing });
    q = f.queue;
  });
  afterAll(async () => {
    await f?.close();
  });

  async function job(tasks = 1, maxAttempts = 3) {
    const w = `us${++seq}`;
    await q.putWorkload({ name: w, maxAttempts });
    const created = await q.createJob({
      workload: w,
      tasks: Array.from({ length: tasks }, (_, i) => ({ chunkIndex: i, inputUri: `s3://in/${i}`, inputSha256: sha(i) })),
    });
    return { w, jobId: created.job.id };
  }
  async function claim(w: string, n = 1, worker = "wk"): Promise<Task[]> {
    const tasks = await q.claimTasks({ workerId: worker, workloads: [w], maxTasks: n });
    expect(tasks).toHaveLength(n);
    return tasks;
  }
  const result = (t: Task, usage?: Record<string, number>, worker = "wk"): CompleteTaskInput => ({
    taskId: t.id,
    workerId: worker,
    attempt: t.attempt,
    resultUri: `s3://out/${t.id}`,
    resultSha256: sha(t.id),
    usage,
  });
  async function taskUsage(id: string) {
    const { rows } = await f.pool.query(`SELECT usage FROM tasks WHERE id = $1`, [id]);
    return rows[0].usage;
  }
  async function endEvents(id: string) {
    const { rows } = await f.pool.query(
      `SELECT status, previous_status, attempt, usage, error_code FROM task_events
       WHERE task_id = $1 AND kind = 'task_status' AND status <> 'leased' ORDER BY id`,
      [id],
    );
    return rows;
  }

  it("CompleteTask adds the report's usage to the task and its completion event; GetTask and GetJob show it", async () => {
    const { w, jobId } = await job(2);
    const [a, b] = await claim(w, 2);
    await q.completeTask(result(a, { gpu_ms: 1200, tokens: 7 }));
    const done = await q.completeTask(result(b, { gpu_ms: 30 }));
    expect(done.usage).toEqual({ gpu_ms: 30 });
    expect(await taskUsage(a.id)).toEqual({ gpu_ms: 1200, tokens: 7 });
    expect(await endEvents(a.id)).toMatchObject([{ status: "completed", usage: { gpu_ms: 1200, tokens: 7 } }]);
    const detail = await q.getTask(a.id);
    expect(detail.task.usage).toEqual({ gpu_ms: 1200, tokens: 7 });
    expect(detail.attempts).toHaveLength(1);
    expect(detail.attempts[0].usage).toEqual({ gpu_ms: 1200, tokens: 7 });
    const status = await q.getJobStatus(jobId);
    expect(status.job.usage).toEqual({ gpu_ms: 1230, tokens: 7 });
  });

  it("a report without usage writes none: NULL on the task and on the event, and a job without any shows none", async () => {
    const { w, jobId } = await job();
    const [t] = await claim(w);
    const done = await q.completeTask(result(t));
    expect(done.usage).toBeUndefined();
    expect(await taskUsage(t.id)).toBeNull();
    expect(await endEvents(t.id)).toMatchObject([{ status: "completed", usage: null }]);
    expect((await q.getJobStatus(jobId)).job.usage).toBeUndefined();
  });

  it("FailTask: a retried failure and the final one each add their usage; each attempt shows its own, the task and job the sum", async () => {
    const { w, jobId } = await job(1, 2);
    const [t1] = await claim(w);
    const retried = await q.failTask({
      taskId: t1.id,
      workerId: "wk",
      attempt: t1.attempt,
      errorCode: "oom",
      retryable: true,
      retryAfterSeconds: 0,
      usage: { gpu_ms: 500 },
    });
    expect(retried.status).toBe("pending");
    expect(retried.usage).toEqual({ gpu_ms: 500 });
    const [t2] = await claim(w);
    const failed = await q.failTask({
      taskId: t2.id,
      workerId: "wk",
      attempt: t2.attempt,
      errorCode: "oom",
      errorMessage: "out of memory",
      retryable: true,
      usage: { gpu_ms: 700, tokens: 3 },
    });
    expect(failed.status).toBe("failed");
    expect(await taskUsage(t1.id)).toEqual({ gpu_ms: 1200, tokens: 3 });
    // The events the statement writes in place of the trigger's keep the trigger's columns.
    expect(await endEvents(t1.id)).toMatchObject([
      { status: "pending", previous_status: "leased", attempt: 1, error_code: "oom", usage: { gpu_ms: 500 } },
      { status: "failed", previous_status: "leased", attempt: 2, error_code: "oom", usage: { gpu_ms: 700, tokens: 3 } },
    ]);
    const detail = await q.getTask(t1.id);
    expect(detail.attempts.map((a) => [a.outcome, a.retried, a.errorMessage, a.usage])).toEqual([
      ["failed", true, null, { gpu_ms: 500 }],
      ["failed", false, "out of memory", { gpu_ms: 700, tokens: 3 }],
    ]);
    expect((await q.getJobStatus(jobId)).job.usage).toEqual({ gpu_ms: 1200, tokens: 3 });
  });

  it("a failure then a completion: the job's usage sums both attempts", async () => {
    const { w, jobId } = await job(1, 3);
    const [t1] = await claim(w);
    await q.failTask({ taskId: t1.id, workerId: "wk", attempt: 1, errorCode: "flaky", retryAfterSeconds: 0, usage: { gpu_ms: 10 } });
    const [t2] = await claim(w);
    await q.completeTask(result(t2, { gpu_ms: 90 }));
    expect((await q.getJobStatus(jobId)).job).toMatchObject({ status: "completed", usage: { gpu_ms: 100 } });
    expect((await q.getTask(t1.id)).attempts.map((a) => a.usage)).toEqual([{ gpu_ms: 10 }, { gpu_ms: 90 }]);
  });

  it("CompleteTask with claim_next (one and several) records the usage and claims", async () => {
    const { w } = await job(4);
    const [t] = await claim(w);
    const one = await q.completeTaskAndClaim(result(t, { tokens: 5 }), { workerId: "wk", workloads: [w], maxTasks: 1 });
    expect(one.task.usage).toEqual({ tokens: 5 });
    expect(one.next).toHaveLength(1);
    const two = await q.completeTaskAndClaim(result(one.next[0], { tokens: 6 }), { workerId: "wk", workloads: [w], maxTasks: 2 });
    expect(two.next).toHaveLength(2);
    expect(await taskUsage(t.id)).toEqual({ tokens: 5 });
    expect(await taskUsage(one.next[0].id)).toEqual({ tokens: 6 });
    // The claimed tasks' events carry no usage.
    const { rows } = await f.pool.query(`SELECT count(*)::int AS n FROM task_events WHERE status = 'leased' AND usage IS NOT NULL`);
    expect(rows[0].n).toBe(0);
    expect(await endEvents(one.next[0].id)).toMatchObject([{ status: "completed", usage: { tokens: 6 } }]);
  });

  it("CompleteTasks, with and without claim_next: each result's usage on its own task and event", async () => {
    const { w, jobId } = await job(5);
    const tasks = await claim(w, 3);
    const outcomes = await q.completeTasks([result(tasks[0], { a: 1 }), result(tasks[1]), result(tasks[2], { a: 2, b: 3 })]);
    expect(outcomes.every((o) => "task" in o)).toBe(true);
    expect(await taskUsage(tasks[0].id)).toEqual({ a: 1 });
    expect(await taskUsage(tasks[1].id)).toBeNull();
    expect(await endEvents(tasks[2].id)).toMatchObject([{ status: "completed", usage: { a: 2, b: 3 } }]);
    const more = await claim(w, 2);
    const chained = await q.completeTasksAndClaim([result(more[0], { a: 10 }), result(more[1], { c: 1 })], {
      workerId: "wk",
      workloads: [w],
    });
    expect(chained.outcomes.map((o) => o.task?.usage ?? o.error)).toEqual([{ a: 10 }, { c: 1 }]);
    expect(await endEvents(more[1].id)).toMatchObject([{ status: "completed", usage: { c: 1 } }]);
    expect((await q.getJobStatus(jobId)).job.usage).toEqual({ a: 13, b: 3, c: 1 });
  });

  it("a replay with the same usage adds nothing; with other usage (or none) it is a ResultConflict and writes nothing", async () => {
    const { w } = await job(2);
    const [t, u] = await claim(w, 2);
    await q.completeTask(result(t, { gpu_ms: 5 }));
    const events = await f.count("task_events", `task_id = '${t.id}'`);
    // Key order does not matter.
    const again = await q.completeTask(result(t, { gpu_ms: 5 }));
    expect(again.usage).toEqual({ gpu_ms: 5 });
    await expect(q.completeTask(result(t, { gpu_ms: 6 }))).rejects.toBeInstanceOf(ResultConflictError);
    await expect(q.completeTask(result(t))).rejects.toBeInstanceOf(ResultConflictError);
    const batch = await q.completeTasks([result(t, { gpu_ms: 5 }), result(u, { gpu_ms: 1, x: 2 })]);
    expect("task" in batch[0]).toBe(true);
    const replayed = await q.completeTasks([result(u, { x: 2, gpu_ms: 1 })]);
    expect("task" in replayed[0]).toBe(true);
    const conflict = await q.completeTasks([result(u, { x: 3, gpu_ms: 1 })]);
    expect("error" in conflict[0] && conflict[0].error).toBeInstanceOf(ResultConflictError);
    expect(await taskUsage(t.id)).toEqual({ gpu_ms: 5 });
    expect(await taskUsage(u.id)).toEqual({ gpu_ms: 1, x: 2 });
    expect(await f.count("task_events", `task_id = '${t.id}'`)).toBe(events);
  });

  it("a stale report (lease lost) and a replayed FailTask add nothing", async () => {
    const { w } = await job(1, 3);
    const [t] = await claim(w);
    await f.pool.query(`UPDATE tasks SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, [t.id]);
    await expect(q.completeTask(result(t, { gpu_ms: 9 }))).rejects.toBeInstanceOf(LeaseConflictError);
    await expect(
      q.failTask({ taskId: t.id, workerId: "wk", attempt: t.attempt, errorCode: "x", usage: { gpu_ms: 9 } }),
    ).rejects.toBeInstanceOf(LeaseConflictError);
    expect(await taskUsage(t.id)).toBeNull();
    const [t2] = await claim(w);
    await q.failTask({ taskId: t2.id, workerId: "wk", attempt: t2.attempt, errorCode: "x", retryable: false, usage: { gpu_ms: 4 } });
    // FailTask's replay is refused today (the task is finished), so it adds nothing.
    await expect(
      q.failTask({ taskId: t2.id, workerId: "wk", attempt: t2.attempt, errorCode: "x", retryable: false, usage: { gpu_ms: 4 } }),
    ).rejects.toBeInstanceOf(LeaseConflictError);
    expect(await taskUsage(t.id)).toEqual({ gpu_ms: 4 });
  });

  it("a late result (its task cancelled within the lease) is accepted and its usage counts, once", async () => {
    const { w, jobId } = await job(1);
    const [t] = await claim(w);
    await q.cancelJob({ jobId, reason: "stop" });
    const late = await q.completeTask(result(t, { gpu_ms: 77 }));
    expect(late.status).toBe("completed");
    expect(late.usage).toEqual({ gpu_ms: 77 });
    expect(await endEvents(t.id)).toMatchObject([
      { status: "cancelled", usage: null },
      { status: "completed", previous_status: "cancelled", usage: { gpu_ms: 77 } },
    ]);
    await q.completeTask(result(t, { gpu_ms: 77 }));
    await expect(q.completeTask(result(t, { gpu_ms: 78 }))).rejects.toBeInstanceOf(ResultConflictError);
    expect(await taskUsage(t.id)).toEqual({ gpu_ms: 77 });
    expect((await q.getTask(t.id)).attempts[0].usage).toEqual({ gpu_ms: 77 });
    expect((await q.getJobStatus(jobId)).job).toMatchObject({ status: "cancelled", usage: { gpu_ms: 77 } });
  });

  it("bad usage is INVALID_ARGUMENT naming the field, and writes nothing", async () => {
    const { w } = await job(2);
    const [t, u] = await claim(w, 2);
    const before = await f.count("task_events");
    const bad: Array<[Record<string, number>, string]> = [
      [{ GPU: 1 }, "usage.GPU"],
      [{ "9x": 1 }, "usage.9x"],
      [{ gpu_ms: -1 }, "usage.gpu_ms"],
      [{ gpu_ms: 1.5 }, "usage.gpu_ms"],
      [{ gpu_ms: Number.MAX_SAFE_INTEGER + 2 }, "usage.gpu_ms"],
      [Object.fromEntries(Array.from({ length: 33 }, (_, i) => [`k${i}`, 1])), "usage"],
    ];
    for (const [usage, field] of bad) {
      const err = await q.completeTask(result(t, usage)).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ValidationError);
      expect((err as ValidationError).violations[0].field).toBe(field);
      const failErr = await q.failTask({ taskId: t.id, workerId: "wk", attempt: 1, errorCode: "x", usage }).catch((e: unknown) => e);
      expect((failErr as ValidationError).violations[0].field).toBe(field);
    }
    const batchErr = await q.completeTasks([result(t, { ok: 1 }), result(u, { "bad-key": 1 })]).catch((e: unknown) => e);
    expect(batchErr).toBeInstanceOf(ValidationError);
    expect((batchErr as ValidationError).violations[0].field).toBe("results[1].usage.bad-key");
    // 32 counters is the limit, not past it.
    const ok = Object.fromEntries(Array.from({ length: 32 }, (_, i) => [`k${i}`, Number.MAX_SAFE_INTEGER]));
    expect(await f.count("task_events")).toBe(before);
    expect(await taskUsage(t.id)).toBeNull();
    await q.completeTask(result(t, ok));
    expect(Object.keys(await taskUsage(t.id))).toHaveLength(32);
  });

  it("concurrent completions of one job's tasks sum exactly", async () => {
    const n = 40;
    const { w, jobId } = await job(n);
    const tasks = await claim(w, n);
    await Promise.all(tasks.map((t, i) => q.completeTask(result(t, { gpu_ms: i + 1, tokens: 2 }))));
    expect((await q.getJobStatus(jobId)).job).toMatchObject({
      status: "completed",
      usage: { gpu_ms: (n * (n + 1)) / 2, tokens: 2 * n },
    });
  });
});
