// Delayed jobs against a real PostgreSQL: not claimable before run_at, scheduled until then,
// cancellable, and woken at the due time by the due-time timer (not by the poll floor), per job
// and per task; bad run_at values refused naming the field, with nothing written.
import { afterAll, beforeAll, expect, it } from "vitest";
import { ValidationError } from "../../src/queue/errors.js";
import { LongPollingQueue } from "../../src/queue/long-poll.js";
import { TaskListener } from "../../src/store/postgres/state/listener.js";
import { PostgresQueue } from "../../src/store/postgres/store.js";
import { queueFixture, sha, TEST_STORE_OPTIONS, type QueueFixture } from "../support/queue.js";

let f: QueueFixture;
let listener: TaskListener;
let seq = 0;

beforeAll(async () => {
  f = await queueFixture();
  listener = new TaskListener(f.db.url);
  await listener.start();
});
afterAll(async () => {
  f?.queue.stopTimers();
  await listener?.stop();
  await f?.close();
});

async function workload() {
  const name = `dl${++seq}`;
  await f.queue.putWorkload({ name });
  return name;
}

const until = async (cond: () => boolean, ms = 5000) => {
  const end = Date.now() + ms;
  while (!cond() && Date.now() < end) await new Promise((r) => setTimeout(r, 10));
  return cond();
};

it("a job due in 2 s is scheduled, not leased before its time, and leased within 1 s after by a parked long poll", async () => {
  // A poll floor far beyond the wait: only the due-time wake-up can deliver the task in time.
  const q = new LongPollingQueue(f.queue, listener, { pollIntervalMs: 60_000 });
  const w = await workload();
  const runAt = new Date(Date.now() + 2000);
  const { job, tasks } = await f.queue.createJob({ workload: w, inputUri: "s3://d/0", inputSha256: sha(0), runAt });
  expect(job.status).toBe("scheduled");
  expect(job.runAt?.getTime()).toBe(runAt.getTime());
  expect(tasks[0].runAfter.getTime()).toBe(runAt.getTime());
  expect((await f.queue.getJobStatus(job.id)).job.status).toBe("scheduled");
  expect((await f.queue.listJobs({ status: "scheduled", workload: w })).jobs.map((j) => j.id)).toEqual([job.id]);
  expect((await f.queue.listJobs({ status: "pending", workload: w })).jobs).toEqual([]);
  // Not before its time: a claim now finds nothing.
  expect(await f.queue.claimTasks({ workerId: "early", workloads: [w] })).toEqual([]);

  const parked = q.claimTasks({ workerId: "w1", workloads: [w], waitSeconds: 10 });
  const got = await parked;
  expect(got.map((t) => t.id)).toEqual([tasks[0].id]);
  // By the database's clock: leased at or after run_at, and within 1 s of it.
  const { rows } = await f.pool.query(
    `SELECT (extract(epoch FROM started_at - run_after) * 1000)::float8 AS late_ms FROM tasks WHERE id = $1`,
    [tasks[0].id],
  );
  expect(rows[0].late_ms).toBeGreaterThanOrEqual(0);
  expect(rows[0].late_ms).toBeLessThan(1000);
  expect((await f.queue.getJobStatus(job.id)).job.status).toBe("running");
  // The due time was announced once and its row is gone.
  expect(await f.count("due_wakeups" as "jobs", `workload = '${w}'`)).toBe(0);
  q.close();
});

it("a job due later can be cancelled before its time, and nothing of it is leased", async () => {
  const w = await workload();
  const { job } = await f.queue.createJob({ workload: w, inputUri: "s3://c/0", inputSha256: sha(1), runAt: new Date(Date.now() + 60_000) });
  expect(job.status).toBe("scheduled");
  const cancelled = await f.queue.cancelJob({ jobId: job.id, reason: "not needed" });
  expect(cancelled.status).toBe("cancelled");
  expect(await f.count("tasks", `job_id = '${job.id}' AND status = 'cancelled'`)).toBe(1);
  expect(await f.queue.claimTasks({ workerId: "w", workloads: [w] })).toEqual([]);
});

it("a run_at in the past means now, and a task's own run_at wins over the job's", async () => {
  const w = await workload();
  const past = await f.queue.createJob({ workload: w, inputUri: "s3://p/0", inputSha256: sha(2), runAt: new Date(Date.now() - 3_600_000) });
  expect(past.job.status).toBe("pending");
  expect(past.job.runAt).toBeNull();
  expect((await f.queue.claimTasks({ workerId: "w", workloads: [w] })).map((t) => t.jobId)).toEqual([past.job.id]);

  const later = new Date(Date.now() + 60_000);
  const mixed = await f.queue.createJob({
    workload: w,
    runAt: later,
    tasks: [
      { chunkIndex: 0, inputUri: "s3://m/0", inputSha256: sha(3), runAt: new Date(Date.now() - 1000) },
      { chunkIndex: 1, inputUri: "s3://m/1", inputSha256: sha(4) },
    ],
  });
  // One task is due now, so the job is not scheduled; the other waits for the job's run_at.
  expect(mixed.job.status).toBe("pending");
  const claimed = await f.queue.claimTasks({ workerId: "w", workloads: [w], maxTasks: 10 });
  expect(claimed.map((t) => t.chunkIndex)).toEqual([0]);
  const { rows } = await f.pool.query(`SELECT run_after FROM tasks WHERE job_id = $1 AND chunk_index = 1`, [mixed.job.id]);
  expect((rows[0].run_after as Date).getTime()).toBe(later.getTime());
});

it("a due time recorded through another coordinator is picked up by this one's maintenance refresh", async () => {
  const w = await workload();
  // Another coordinator writes the delayed job; its timer is stopped at once, as if it had died.
  const other = new PostgresQueue(f.newPool(), TEST_STORE_OPTIONS);
  const { tasks } = await other.createJob({ workload: w, inputUri: "s3://o/0", inputSha256: sha(5), runAt: new Date(Date.now() + 1500) });
  other.stopTimers();
  const q = new LongPollingQueue(f.queue, listener, { pollIntervalMs: 60_000 });
  const parked = q.claimTasks({ workerId: "w2", workloads: [w], waitSeconds: 10 });
  expect(await until(() => q.parked === 1)).toBe(true);
  await f.queue.maintain();
  expect((await parked).map((t) => t.id)).toEqual([tasks[0].id]);
  q.close();
});

it("refuses a run_at more than MAX_RUN_AT_AHEAD_DAYS ahead, naming the field, and writes nothing", async () => {
  const w = await workload();
  const before = await f.count("jobs");
  const tooFar = new Date(Date.now() + 366 * 86_400_000);
  const cases: [Parameters<PostgresQueue["createJob"]>[0], string][] = [
    [{ workload: w, inputUri: "s3://b/0", inputSha256: sha(6), runAt: tooFar }, "run_at"],
    [{ workload: w, tasks: [{ chunkIndex: 0, inputUri: "s3://b/0", inputSha256: sha(6), runAt: tooFar }] }, "tasks[0].run_at"],
    [{ workload: w, inputUri: "s3://b/0", inputSha256: sha(6), runAt: new Date(NaN) }, "run_at"],
  ];
  for (const [input, field] of cases) {
    const err = await f.queue.createJob(input).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ValidationError);
    expect((err as ValidationError).violations.map((v) => v.field)).toEqual([field]);
  }
  // The bound is configurable.
  const near = new PostgresQueue(f.pool, { ...TEST_STORE_OPTIONS, maxRunAtAheadDays: 1 });
  const err = await near
    .createJob({ workload: w, inputUri: "s3://b/1", inputSha256: sha(7), runAt: new Date(Date.now() + 2 * 86_400_000) })
    .catch((e: unknown) => e);
  expect((err as ValidationError).message).toContain("at most 1 days ahead");
  expect(await f.count("jobs")).toBe(before);
  expect(await f.count("due_wakeups" as "jobs", `workload = '${w}'`)).toBe(0);
});

it("a large delayed job (its tasks inserted by COPY) is scheduled whole, with one due-time row", async () => {
  const w = await workload();
  const runAt = new Date(Date.now() + 60_000);
  const { job, tasks } = await f.queue.createJob({
    workload: w,
    runAt,
    tasks: Array.from({ length: 1500 }, (_, i) => ({ chunkIndex: i, inputUri: `s3://big/${i}`, inputSha256: sha(i) })),
  });
  expect(job.status).toBe("scheduled");
  expect(tasks.every((t) => t.runAfter.getTime() === runAt.getTime())).toBe(true);
  expect(await f.count("tasks", `job_id = '${job.id}' AND run_after = '${runAt.toISOString()}'`)).toBe(1500);
  expect(await f.count("due_wakeups" as "jobs", `workload = '${w}'`)).toBe(1);
  expect(await f.queue.claimTasks({ workerId: "w", workloads: [w], maxTasks: 100 })).toEqual([]);
});

it("twenty jobs due 100 ms apart are each leased at or after their time and within 1 s of it by parked claims", async () => {
  const q = new LongPollingQueue(f.queue, listener, { pollIntervalMs: 60_000 });
  const w = await workload();
  const start = Date.now() + 1500;
  for (let i = 0; i < 20; i++) {
    await f.queue.createJob({ workload: w, inputUri: `s3://s/${i}`, inputSha256: sha(`s${i}`), runAt: new Date(start + i * 100) });
  }
  // Claimers park one task at a time and park again, until all twenty are leased.
  let leased = 0;
  await Promise.all(
    Array.from({ length: 4 }, async (_, k) => {
      while (leased < 20) {
        const got = await q.claimTasks({ workerId: `s${k}`, workloads: [w], waitSeconds: 10 });
        leased += got.length;
        // The others are parked for a task that will not come: let them go.
        if (leased >= 20) q.close();
      }
    }),
  );
  const { rows } = await f.pool.query(
    `SELECT (extract(epoch FROM started_at - run_after) * 1000)::float8 AS late_ms FROM tasks WHERE workload = $1 ORDER BY late_ms`,
    [w],
  );
  expect(rows).toHaveLength(20);
  expect(rows[0].late_ms).toBeGreaterThanOrEqual(0);
  expect(rows[19].late_ms).toBeLessThan(1000);
});
