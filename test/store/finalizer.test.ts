// Finalizers against a real PostgreSQL: exactly one finalizer job when a job ends (even when its
// last two chunks complete at once on two coordinators), run after a failed or cancelled job only
// with run_on_failure, linked both ways, and able to read the parent's whole ordered manifest.
import { afterAll, beforeAll, expect, it } from "vitest";
import { NotFoundError, ValidationError } from "../../src/queue/errors.js";
import type { CreateJobInput } from "../../src/queue/types.js";
import { PostgresQueue } from "../../src/store/postgres/store.js";
import { queueFixture, sha, TEST_STORE_OPTIONS, type QueueFixture } from "../support/queue.js";

let f: QueueFixture;
let other: PostgresQueue;
const W = "chunks";
const STITCH = "stitch";

beforeAll(async () => {
  f = await queueFixture();
  other = new PostgresQueue(f.newPool(), TEST_STORE_OPTIONS);
  await f.queue.putWorkload({ name: W, maxAttempts: 1 });
  await f.queue.putWorkload({ name: STITCH });
});
afterAll(async () => {
  await f?.close();
});

function job(n: number, finalizer: CreateJobInput["finalizer"], extra: Partial<CreateJobInput> = {}): CreateJobInput {
  return {
    workload: W,
    tasks: Array.from({ length: n }, (_, i) => ({ chunkIndex: i, inputUri: `s3://in/${i}`, inputSha256: sha(i) })),
    finalizer,
    ...extra,
  };
}

async function finalizersOf(parent: string): Promise<{ id: string; parameters: Record<string, unknown> }[]> {
  const { rows } = await f.pool.query(`SELECT id, parameters FROM jobs WHERE parent_job_id = $1`, [parent]);
  return rows;
}

async function completeAll(jobId: string, q: PostgresQueue = f.queue): Promise<void> {
  for (;;) {
    const tasks = await q.claimTasks({ workerId: "w", workloads: [W], maxTasks: 100 });
    if (tasks.length === 0) return;
    await q.completeTasks(
      tasks.map((t) => ({
        taskId: t.id,
        workerId: "w",
        attempt: t.attempt,
        resultUri: `s3://out/${t.chunkIndex}`,
        resultSha256: sha(`r${t.chunkIndex}`),
      })),
    );
    expect(tasks.every((t) => t.jobId === jobId)).toBe(true);
  }
}

it("a completed job enqueues one finalizer job naming it, linked both ways", async () => {
  const { job: parent } = await f.queue.createJob(job(3, { workload: STITCH, parameters: { out: "s3://manifest" } }));
  expect(parent.finalizer).toEqual({ workload: STITCH, parameters: { out: "s3://manifest" }, runOnFailure: false });
  expect(parent.finalizerJobId).toBeNull();
  await completeAll(parent.id);
  const after = (await f.queue.getJobStatus(parent.id)).job;
  expect(after.status).toBe("completed");
  const fins = await finalizersOf(parent.id);
  expect(fins).toHaveLength(1);
  expect(after.finalizerJobId).toBe(fins[0].id);
  const fin = await f.queue.getJobStatus(fins[0].id);
  expect(fin.job).toMatchObject({ workload: STITCH, parentJobId: parent.id, status: "pending" });
  expect(fin.totalTasks).toBe(1);
  const [task] = await f.queue.claimTasks({ workerId: "s", workloads: [STITCH] });
  expect(task.jobId).toBe(fins[0].id);
  expect(task.parameters).toEqual({ out: "s3://manifest", parent_job_id: parent.id, parent_status: "completed" });
});

it("a finalizer job and its task get time-ordered ids (UUID version 7), after its parent's, as every other id", async () => {
  const { job: parent, tasks } = await f.queue.createJob(job(2, { workload: STITCH }));
  await completeAll(parent.id);
  const [fin] = await finalizersOf(parent.id);
  const { rows } = await f.pool.query(`SELECT id::text FROM tasks WHERE job_id = $1`, [fin.id]);
  // Taken, so the later tests' claims of the stitch workload find only their own finalizers.
  const [claimed] = await f.queue.claimTasks({ workerId: "s", workloads: [STITCH] });
  expect(claimed.id).toBe(rows[0].id);
  await f.queue.completeTask({ taskId: claimed.id, workerId: "s", attempt: claimed.attempt, resultUri: "s3://m", resultSha256: sha("m") });
  const V7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
  for (const id of [parent.id, ...tasks.map((t) => t.id), fin.id, rows[0].id as string]) expect(id).toMatch(V7);
  // The first 48 bits are milliseconds: the finalizer's ids sort after its parent's and its tasks'.
  const ms = (id: string) => parseInt(id.replace(/-/g, "").slice(0, 12), 16);
  expect(ms(fin.id)).toBeGreaterThanOrEqual(ms(tasks[1].id));
  expect(ms(rows[0].id as string)).toBeGreaterThanOrEqual(ms(fin.id));
  expect(Math.abs(ms(fin.id) - Date.now())).toBeLessThan(60_000);
});

it("exactly one finalizer job when the last two chunks complete at the same instant on two coordinators (20 rounds)", async () => {
  for (let round = 0; round < 20; round++) {
    const { job: parent } = await f.queue.createJob(job(2, { workload: STITCH }));
    const [a, b] = await f.queue.claimTasks({ workerId: "w", workloads: [W], maxTasks: 2 });
    const result = (t: typeof a) => ({ taskId: t.id, workerId: "w", attempt: t.attempt, resultUri: "s3://o", resultSha256: sha(t.id) });
    await Promise.all([f.queue.completeTask(result(a)), other.completeTask(result(b))]);
    expect((await f.queue.getJobStatus(parent.id)).job.status).toBe("completed");
    expect(await finalizersOf(parent.id)).toHaveLength(1);
  }
  // Every finalizer task is there once, and nothing else was enqueued.
  expect(await f.count("jobs", `workload = '${STITCH}'`)).toBe(await f.count("jobs", "parent_job_id IS NOT NULL"));
});

it("a failed or cancelled job runs its finalizer only with run_on_failure", async () => {
  const fail = async (runOnFailure: boolean) => {
    const { job: parent } = await f.queue.createJob(job(2, { workload: STITCH, runOnFailure }));
    const [t] = await f.queue.claimTasks({ workerId: "w", workloads: [W] });
    await f.queue.failTask({ taskId: t.id, workerId: "w", attempt: t.attempt, errorCode: "bad", retryable: false });
    expect((await f.queue.getJobStatus(parent.id)).job.status).toBe("failed");
    return parent.id;
  };
  expect(await finalizersOf(await fail(false))).toHaveLength(0);
  const failed = await fail(true);
  const [fin] = await finalizersOf(failed);
  expect(fin.parameters).toMatchObject({ parent_job_id: failed, parent_status: "failed" });
  expect((await f.queue.getJobStatus(failed)).job.finalizerJobId).toBe(fin.id);

  const cancel = async (runOnFailure: boolean) => {
    const { job: parent } = await f.queue.createJob(job(2, { workload: STITCH, runOnFailure }));
    await f.queue.cancelJob({ jobId: parent.id, reason: "stop" });
    return parent.id;
  };
  expect(await finalizersOf(await cancel(false))).toHaveLength(0);
  const cancelled = await cancel(true);
  expect((await finalizersOf(cancelled))[0].parameters).toMatchObject({ parent_status: "cancelled" });
  // Drain the finalizer tasks so later tests' claims of STITCH start clean.
  while ((await f.queue.claimTasks({ workerId: "s", workloads: [STITCH], maxTasks: 100 })).length > 0);
});

it("a job reopened by RetryJob runs its finalizer once: after the retry when its failure ran none, never twice", async () => {
  const failOne = async (jobId: string) => {
    const [t] = await f.queue.claimTasks({ workerId: "w", workloads: [W] });
    expect(t.jobId).toBe(jobId);
    await f.queue.failTask({ taskId: t.id, workerId: "w", attempt: t.attempt, errorCode: "bad", retryable: false });
  };
  // Failed without run_on_failure: no finalizer; retried and completed: one.
  const { job: quiet } = await f.queue.createJob(job(1, { workload: STITCH }));
  await failOne(quiet.id);
  expect(await finalizersOf(quiet.id)).toHaveLength(0);
  await f.queue.retryJob({ jobId: quiet.id, maxAttempts: 2 });
  await completeAll(quiet.id);
  expect(await finalizersOf(quiet.id)).toHaveLength(1);
  // Failed with run_on_failure: one finalizer; retried and completed: still that one.
  const { job: loud } = await f.queue.createJob(job(1, { workload: STITCH, runOnFailure: true }));
  await failOne(loud.id);
  const [first] = await finalizersOf(loud.id);
  await f.queue.retryJob({ jobId: loud.id, maxAttempts: 2 });
  await completeAll(loud.id);
  expect((await f.queue.getJobStatus(loud.id)).job.status).toBe("completed");
  expect(await finalizersOf(loud.id)).toEqual([first]);
  while ((await f.queue.claimTasks({ workerId: "s", workloads: [STITCH], maxTasks: 100 })).length > 0);
});

it("a delayed job's finalizer runs once its tasks are done", async () => {
  const { job: parent } = await f.queue.createJob(job(1, { workload: STITCH }, { runAt: new Date(Date.now() - 1000) }));
  await completeAll(parent.id);
  expect(await finalizersOf(parent.id)).toHaveLength(1);
  while ((await f.queue.claimTasks({ workerId: "s", workloads: [STITCH], maxTasks: 100 })).length > 0);
});

it("the finalizer reads the full ordered manifest of a 10,000-task job with ListCompletedResults pages", async () => {
  const { job: parent } = await f.queue.createJob(job(10_000, { workload: STITCH, parameters: { manifest: "s3://out/manifest.json" } }));
  await completeAll(parent.id);
  const [fin] = await f.queue.claimTasks({ workerId: "stitcher", workloads: [STITCH] });
  expect(fin.parameters.parent_job_id).toBe(parent.id);
  const chunks: number[] = [];
  let pageToken = "";
  let pages = 0;
  do {
    const page = await f.queue.listCompletedResults({ jobId: String(fin.parameters.parent_job_id), pageSize: 1000, pageToken });
    chunks.push(...page.results.map((r) => r.chunkIndex));
    pageToken = page.nextPageToken;
    pages++;
  } while (pageToken);
  expect(pages).toBe(10);
  expect(chunks).toEqual(Array.from({ length: 10_000 }, (_, i) => i));
}, 120_000);

it("refuses a finalizer naming an unknown workload (or none), naming the field, and writes nothing", async () => {
  const before = await f.count("jobs");
  // A workload nobody registered is NOT_FOUND, as an unknown job workload is; a malformed one is a bad field.
  const unknown = await f.queue.createJob(job(1, { workload: "nope" })).catch((e: unknown) => e);
  expect(unknown).toBeInstanceOf(NotFoundError);
  expect((unknown as NotFoundError).field).toBe("finalizer.workload");
  const cases: [CreateJobInput["finalizer"], string][] = [
    [{ workload: "" }, "finalizer.workload"],
    [{ workload: STITCH, parameters: [] as unknown as Record<string, never> }, "finalizer.parameters"],
  ];
  for (const [finalizer, field] of cases) {
    const err = await f.queue.createJob(job(1, finalizer)).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ValidationError);
    expect((err as ValidationError).violations.map((v) => v.field)).toEqual([field]);
  }
  const err = await f.queue.createJob(job(1, { workload: "nope" })).catch((e: unknown) => e);
  expect((err as Error).message).toContain(STITCH);
  // A finalizer workload's parameters schema is checked at CreateJob, on the parameters its task will have.
  await f.queue.putWorkload({
    name: "stitch_schema",
    parametersSchema: { type: "object", required: ["manifest", "parent_job_id"], properties: { manifest: { type: "string" } } },
  });
  const refused = await f.queue.createJob(job(1, { workload: "stitch_schema", parameters: { manifest: 7 } })).catch((e: unknown) => e);
  expect(refused).toBeInstanceOf(ValidationError);
  expect((refused as ValidationError).violations[0].field).toMatch(/^finalizer\.parameters/);
  expect(await f.count("jobs")).toBe(before);
  const { job: accepted } = await f.queue.createJob(job(1, { workload: "stitch_schema", parameters: { manifest: "s3://m" } }));
  expect(accepted.finalizer?.workload).toBe("stitch_schema");
});
