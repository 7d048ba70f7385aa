// Operating the queue: the task_events log, ReportProgress, WatchJob (store, REST/SSE and
// Connect), RetryJob, ListJobs, pending-task expiry and retention, against a real PostgreSQL.
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { JobEventKind, JobStatus, QueueService, TaskStatus } from "../../gen/leasehold/queue/v1/queue_pb.js";
import { FailedPreconditionError, LeaseConflictError, NotFoundError, UnavailableError, ValidationError } from "../../src/queue/errors.js";
import { LongPollingQueue } from "../../src/queue/long-poll.js";
import type { JobUpdate, Task } from "../../src/queue/types.js";
import { TaskListener } from "../../src/store/postgres/state/listener.js";
import { JOB_EVENTS_SINCE, LIST_JOBS, LIST_JOBS_BY_STATUS } from "../support/statements.js";
import { PostgresQueue } from "../../src/store/postgres/store.js";
import { queueFixture, sha, TEST_STORE_OPTIONS, type QueueFixture } from "../support/queue.js";
import { apiServerFixture, type ApiServerFixture } from "../support/api-server.js";

const W = "render";
const WORKER = "worker-1";

let fx: QueueFixture;
let listener: TaskListener;
/** Store with NOTIFY wake-ups and a slow poll floor, so a prompt event proves the NOTIFY path. */
let queue: PostgresQueue;
let api: ApiServerFixture;
let base: string;

beforeAll(async () => {
  fx = await queueFixture();
  listener = new TaskListener(fx.db.url);
  await listener.start();
  queue = new PostgresQueue(fx.pool, { ...TEST_STORE_OPTIONS, jobWakes: listener, watchPollIntervalMs: 30_000 });
  await queue.putWorkload({ name: W, maxAttempts: 3, leaseSeconds: 60 });
  api = await apiServerFixture({ queue, longPoll: new LongPollingQueue(queue, listener, { pollIntervalMs: 1000 }) });
  base = api.base;
});

afterAll(async () => {
  await api?.close(1000);
  await listener?.stop();
  await fx?.close();
});

async function newJob(tasks = 3, workload = W): Promise<string> {
  const r = await queue.createJob({
    workload,
    tasks: Array.from({ length: tasks }, (_, i) => ({ chunkIndex: i, inputUri: `s3://in/${i}`, inputSha256: sha(i) })),
  });
  return r.job.id;
}

async function claimAll(jobId: string, n: number, worker = WORKER): Promise<Task[]> {
  const tasks: Task[] = [];
  while (tasks.length < n) {
    const got = await queue.claimTasks({ workerId: worker, workloads: [W], maxTasks: Math.min(100, n - tasks.length) });
    if (got.length === 0) throw new Error("nothing to claim");
    tasks.push(...got.filter((t) => t.jobId === jobId));
  }
  return tasks.sort((a, b) => a.chunkIndex - b.chunkIndex);
}

const complete = (t: Task) =>
  queue.completeTask({
    taskId: t.id,
    workerId: t.leaseOwner!,
    attempt: t.attempt,
    resultUri: `s3://out/${t.chunkIndex}`,
    resultSha256: sha(`o${t.chunkIndex}`),
  });

async function events(jobId: string): Promise<{ kind: string; task_id: string | null; status: string; previous_status: string | null }[]> {
  const { rows } = await fx.pool.query(`SELECT kind, task_id, status, previous_status FROM task_events WHERE job_id = $1 ORDER BY id`, [
    jobId,
  ]);
  return rows;
}

/** Collects a watch stream in the background. */
function collect(stream: AsyncIterable<JobUpdate>): { updates: JobUpdate[]; done: Promise<void> } {
  const updates: JobUpdate[] = [];
  const done = (async () => {
    for await (const u of stream) updates.push(u);
  })();
  return { updates, done };
}

async function until(check: () => boolean | Promise<boolean>, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > end) throw new Error("condition not met in time");
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe("task_events", () => {
  it("records every task and job status change, written by the statements themselves", async () => {
    const jobId = await newJob(3);
    const [a, b] = await claimAll(jobId, 2);
    await complete(a);
    await queue.failTask({ taskId: b.id, workerId: WORKER, attempt: b.attempt, errorCode: "boom", retryable: false });
    const log = await events(jobId);
    const taskEvents = log.filter((e) => e.kind === "task_status").map((e) => `${e.previous_status}>${e.status}`);
    expect(taskEvents).toEqual(["pending>leased", "pending>leased", "leased>completed", "leased>failed", "pending>cancelled"]);
    const jobEvents = log.filter((e) => e.kind === "job_status").map((e) => `${e.previous_status}>${e.status}`);
    expect(jobEvents).toEqual(["pending>running", "running>failed"]);
    const { rows } = await fx.pool.query(
      `SELECT error_code FROM task_events WHERE job_id = $1 AND kind = 'task_status' AND status = 'failed'`,
      [jobId],
    );
    expect(rows).toEqual([{ error_code: "boom" }]);
  });

  it("writes nothing for a heartbeat", async () => {
    const jobId = await newJob(1);
    const [t] = await claimAll(jobId, 1);
    const before = (await events(jobId)).length;
    await queue.renewLease({ taskId: t.id, workerId: WORKER, attempt: t.attempt });
    expect((await events(jobId)).length).toBe(before);
  });
});

describe("ReportProgress", () => {
  it("records a progress event and extends the lease", async () => {
    const jobId = await newJob(1);
    const [t] = await claimAll(jobId, 1);
    const renewed = await queue.reportProgress({
      taskId: t.id,
      workerId: WORKER,
      attempt: t.attempt,
      progress: 0.25,
      message: "frame 25/100",
      partialResultUri: "s3://out/partial/0",
      leaseSeconds: 600,
    });
    expect(renewed.leaseExpiresAt!.getTime()).toBeGreaterThan(t.leaseExpiresAt!.getTime());
    const { rows } = await fx.pool.query(
      `SELECT kind, progress, message, partial_result_uri, attempt, worker_id FROM task_events WHERE task_id = $1 AND kind = 'task_progress'`,
      [t.id],
    );
    expect(rows).toEqual([
      {
        kind: "task_progress",
        progress: 0.25,
        message: "frame 25/100",
        partial_result_uri: "s3://out/partial/0",
        attempt: 1,
        worker_id: WORKER,
      },
    ]);
  });

  it("refuses a stale attempt or a foreign worker and records nothing", async () => {
    const jobId = await newJob(1);
    const [t] = await claimAll(jobId, 1);
    await expect(queue.reportProgress({ taskId: t.id, workerId: WORKER, attempt: 2, progress: 0.5 })).rejects.toBeInstanceOf(
      LeaseConflictError,
    );
    await expect(queue.reportProgress({ taskId: t.id, workerId: "other", attempt: 1, progress: 0.5 })).rejects.toBeInstanceOf(
      LeaseConflictError,
    );
    await expect(queue.reportProgress({ taskId: t.id, workerId: WORKER, attempt: 1, progress: 1.5 })).rejects.toBeInstanceOf(
      ValidationError,
    );
    expect(await fx.count("tasks", `id = '${t.id}' AND version = ${t.version}`)).toBe(1);
    const { rows } = await fx.pool.query(`SELECT count(*)::int AS n FROM task_events WHERE task_id = $1 AND kind = 'task_progress'`, [
      t.id,
    ]);
    expect(rows[0].n).toBe(0);
  });
});

describe("WatchJob (store)", () => {
  it("streams the snapshot, then each change as it commits, and ends with the job", async () => {
    const jobId = await newJob(2);
    const watch = collect(queue.watchJob(jobId));
    await until(() => watch.updates.length === 1);
    expect(watch.updates[0].snapshot?.taskCounts.pending).toBe(2);
    expect(await fx.count("job_watchers" as "jobs", `job_id = '${jobId}'`)).toBe(1);

    const [a, b] = await claimAll(jobId, 2);
    // The poll floor is 30 s: seeing this within 5 s means the NOTIFY woke the stream.
    await until(() => watch.updates.some((u) => u.event?.kind === "task_status"));
    await queue.reportProgress({ taskId: a.id, workerId: WORKER, attempt: 1, progress: 0.5 });
    await complete(a);
    await complete(b);
    await watch.done;

    const kinds = watch.updates.slice(1).map((u) => `${u.event!.kind}:${u.event!.previousStatus ?? ""}>${u.event!.status ?? ""}`);
    expect(kinds).toEqual([
      "task_status:pending>leased",
      "task_status:pending>leased",
      "job_status:pending>running",
      "task_progress:>leased",
      "task_status:leased>completed",
      "task_status:leased>completed",
      "job_status:running>completed",
    ]);
    expect(await fx.count("job_watchers" as "jobs", `job_id = '${jobId}'`)).toBe(0);
  });

  it("ends after the snapshot when the job is already final, and refuses an unknown job", async () => {
    const jobId = await newJob(1);
    await queue.cancelJob({ jobId });
    const watch = collect(queue.watchJob(jobId));
    await watch.done;
    expect(watch.updates).toHaveLength(1);
    expect(watch.updates[0].snapshot?.job.status).toBe("cancelled");
    await expect(collect(queue.watchJob("00000000-0000-4000-8000-000000000000")).done).rejects.toBeInstanceOf(NotFoundError);
    expect(await fx.count("job_watchers" as "jobs")).toBe(0);
  });

  it("misses and repeats nothing while many completions commit concurrently", async () => {
    const n = 120;
    const jobId = await newJob(n);
    const tasks = await claimAll(jobId, n);
    // Polling only, every 50 ms, so batches of events land between reads in every order.
    const polling = new PostgresQueue(fx.pool, { ...TEST_STORE_OPTIONS, watchPollIntervalMs: 50 });
    const watch = collect(polling.watchJob(jobId));
    await until(() => watch.updates.length >= 1);
    const workers = Array.from({ length: 8 }, async (_, w) => {
      for (let i = w; i < tasks.length; i += 8) await complete(tasks[i]);
    });
    await Promise.all(workers);
    await watch.done;
    const seen = watch.updates.flatMap((u) => (u.event ? [u.event] : []));
    expect(new Set(seen.map((e) => e.id)).size).toBe(seen.length);
    const completed = seen.filter((e) => e.kind === "task_status" && e.status === "completed");
    expect(completed).toHaveLength(n - (watch.updates[0].snapshot?.taskCounts.completed ?? 0));
    expect(seen.at(-1)).toMatchObject({ kind: "job_status", status: "completed" });
  });

  it("ends with UNAVAILABLE when the coordinator shuts down", async () => {
    const jobId = await newJob(1);
    const lp = new LongPollingQueue(queue, listener, { pollIntervalMs: 1000 });
    const watch = collect(lp.watchJob(jobId));
    await until(() => watch.updates.length === 1);
    lp.close();
    await expect(watch.done).rejects.toBeInstanceOf(UnavailableError);
  });
});

describe("RetryJob", () => {
  it("puts a failed job's failed and cancelled tasks back with a fresh budget; attempts keep counting", async () => {
    const jobId = await newJob(3);
    const [a, b] = await claimAll(jobId, 2);
    await complete(a);
    await queue.failTask({ taskId: b.id, workerId: WORKER, attempt: 1, errorCode: "boom", retryable: false });
    expect((await queue.getJobStatus(jobId)).job.status).toBe("failed");

    const r = await queue.retryJob({ jobId, maxAttempts: 2 });
    expect(r.retriedTasks).toBe(2);
    expect(r.job.status).toBe("running");
    const { rows } = await fx.pool.query(
      `SELECT chunk_index, status, attempt, max_attempts, error_code FROM tasks WHERE job_id = $1 ORDER BY chunk_index`,
      [jobId],
    );
    expect(rows).toEqual([
      { chunk_index: 0, status: "completed", attempt: 1, max_attempts: 3, error_code: null },
      { chunk_index: 1, status: "pending", attempt: 1, max_attempts: 3, error_code: null },
      { chunk_index: 2, status: "pending", attempt: 0, max_attempts: 2, error_code: null },
    ]);
    // The old lease of task b can never match again: the next claim is attempt 2.
    const again = await claimAll(jobId, 2);
    expect(again.map((t) => t.attempt)).toEqual([2, 1]);
    for (const t of again) await complete(t);
    expect((await queue.getJobStatus(jobId)).job.status).toBe("completed");
  });

  it("refuses a job that is not failed or cancelled, and an unknown one", async () => {
    const jobId = await newJob(1);
    await expect(queue.retryJob({ jobId })).rejects.toBeInstanceOf(FailedPreconditionError);
    await expect(queue.retryJob({ jobId: "00000000-0000-4000-8000-000000000000" })).rejects.toBeInstanceOf(NotFoundError);
    expect(await fx.count("tasks", `job_id = '${jobId}' AND status = 'pending' AND version = 0`)).toBe(1);
  });

  it("brings a cancelled job that never ran back to pending", async () => {
    const jobId = await newJob(2);
    await queue.cancelJob({ jobId });
    const r = await queue.retryJob({ jobId });
    expect(r).toMatchObject({ retriedTasks: 2, job: { status: "pending", cancelReason: null, completedAt: null } });
  });
});

describe("ListJobs", () => {
  it("pages newest first, by status and by workload, without repeats", async () => {
    await queue.putWorkload({ name: "listing" });
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push(await newJob(1, "listing"));
    await queue.cancelJob({ jobId: ids[1] });
    await queue.cancelJob({ jobId: ids[3] });

    const seen: string[] = [];
    let token = "";
    do {
      const page = await queue.listJobs({ workload: "listing", pageSize: 2, pageToken: token });
      expect(page.jobs.length).toBeLessThanOrEqual(2);
      seen.push(...page.jobs.map((j) => j.id));
      token = page.nextPageToken;
    } while (token);
    expect(seen).toEqual([...ids].reverse());

    const cancelled = await queue.listJobs({ workload: "listing", status: "cancelled" });
    expect(cancelled.jobs.map((j) => j.id)).toEqual([ids[3], ids[1]]);
    expect(cancelled.nextPageToken).toBe("");
    await expect(queue.listJobs({ pageToken: "bm9wZQ" })).rejects.toBeInstanceOf(ValidationError);
    await expect(queue.listJobs({ status: "done" as never })).rejects.toBeInstanceOf(ValidationError);
  });
});

describe("plans", () => {
  async function plan(text: string, values: unknown[]): Promise<string> {
    const client = await fx.pool.connect();
    try {
      const { rows } = await client.query(`EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) ${text}`, values);
      return rows.map((r) => r["QUERY PLAN"]).join("\n");
    } finally {
      client.release();
    }
  }

  it("ListJobs reads a page off the index in order, whatever the table holds", async () => {
    await fx.pool.query(
      `INSERT INTO jobs (workload, status, created_at) SELECT $1, 'completed', now() - g * interval '1 second' FROM generate_series(1, 20000) g`,
      [W],
    );
    await fx.pool.query("ANALYZE jobs");
    const first = await plan(LIST_JOBS, ["infinity", "ffffffff-ffff-ffff-ffff-ffffffffffff", 11, ""]);
    expect(first).toMatch(/Index Scan using jobs_created_idx on jobs/);
    expect(first).not.toMatch(/Sort|Seq Scan/);
    // A rare status among 20,000 others: read through the status index, not filtered out of the newest-first scan.
    const byStatus = await plan(LIST_JOBS_BY_STATUS, ["infinity", "ffffffff-ffff-ffff-ffff-ffffffffffff", 11, "", "failed"]);
    expect(byStatus).toMatch(/Index Scan using jobs_status_created_idx on jobs/);
    expect(byStatus).not.toMatch(/Sort \(|Seq Scan|Rows Removed by Filter: \d{3,}/);
  });

  it("a watch read touches only the job's events since its snapshot", async () => {
    const jobId = await newJob(1);
    const { rows } = await fx.pool.query(`SELECT pg_current_snapshot()::text AS s`);
    const p = await plan(JOB_EVENTS_SINCE, [jobId, rows[0].s, "-infinity"]); // no watermark: every partition up to now
    expect(p).toMatch(/Index (Only )?Scan using task_events\w*_job(_id)?_xid_idx/); // each partition's index on (job_id, xid)
    expect(p).not.toMatch(/Seq Scan on task_events/);
  });
});

describe("maintenance", () => {
  it("fails tasks nobody claimed within the workload's max_pending_seconds, and their job", async () => {
    await queue.putWorkload({ name: "abandoned", maxPendingSeconds: 60 });
    const old = await newJob(2, "abandoned");
    const fresh = await newJob(1, "abandoned");
    await fx.pool.query(
      `UPDATE tasks SET created_at = now() - interval '2 minutes', run_after = now() - interval '2 minutes' WHERE job_id = $1`,
      [old],
    );

    const r = await queue.maintain();
    expect(r.expiredPending).toBe(2);
    const { rows } = await fx.pool.query(`SELECT status, error_code FROM tasks WHERE job_id = $1`, [old]);
    expect(rows).toEqual([
      { status: "failed", error_code: "expired" },
      { status: "failed", error_code: "expired" },
    ]);
    expect((await queue.getJobStatus(old)).job.status).toBe("failed");
    expect((await queue.getJobStatus(fresh)).job.status).toBe("pending");
    expect((await queue.maintain()).expiredPending).toBe(0);
  });

  it("deletes finished jobs past the retention, with their tasks, and keeps the rest", async () => {
    const retaining = new PostgresQueue(fx.pool, { ...TEST_STORE_OPTIONS, retentionDays: 1 });
    const oldDone = await newJob(2);
    const recentDone = await newJob(1);
    const oldRunning = await newJob(1);
    await queue.cancelJob({ jobId: oldDone });
    await queue.cancelJob({ jobId: recentDone });
    await fx.pool.query(`UPDATE jobs SET completed_at = now() - interval '2 days', created_at = now() - interval '3 days' WHERE id = $1`, [
      oldDone,
    ]);
    await fx.pool.query(`UPDATE jobs SET created_at = now() - interval '3 days' WHERE id = $1`, [oldRunning]);
    expect((await events(oldDone)).length).toBeGreaterThan(0);

    const r = await retaining.maintain();
    expect(r.deletedJobs).toBeGreaterThanOrEqual(1);
    expect(await fx.count("jobs", `id = '${oldDone}'`)).toBe(0);
    expect(await fx.count("tasks", `job_id = '${oldDone}'`)).toBe(0);
    // Its events go with their partition of the log, dropped whole (test/store/event-partitions.test.ts).
    expect(await fx.count("jobs", `id IN ('${recentDone}', '${oldRunning}')`)).toBe(2);
    // Without RETENTION_DAYS nothing is deleted.
    await fx.pool.query(`UPDATE jobs SET completed_at = now() - interval '2 days' WHERE id = $1`, [recentDone]);
    expect((await queue.maintain()).deletedJobs).toBe(0);
    expect(await fx.count("jobs", `id = '${recentDone}'`)).toBe(1);
  });

  it("counts tasks by workload and status", async () => {
    await queue.putWorkload({ name: "counted" });
    const jobId = await newJob(3, "counted");
    await queue.cancelJob({ jobId });
    await newJob(2, "counted");
    const unfinished = (await queue.taskStats("unfinished")).find((s) => s.workload === "counted")!;
    expect(unfinished.counts).toEqual({ pending: 2, leased: 0, completed: 0, failed: 0, cancelled: 0, waiting: 0 });
    expect(unfinished.oldestPendingSeconds).toBeGreaterThanOrEqual(0);
    const all = (await queue.taskStats("all")).find((s) => s.workload === "counted")!;
    expect(all.counts).toEqual({ pending: 2, leased: 0, completed: 0, failed: 0, cancelled: 3, waiting: 0 });
  });
});

describe("over the API", () => {
  async function rest(method: string, path: string, body?: unknown) {
    const res = await fetch(base + path, {
      method,
      headers: body === undefined ? {} : { "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    return {
      status: res.status,
      headers: res.headers,
      text,
      body: text && res.headers.get("content-type")?.includes("json") ? JSON.parse(text) : undefined,
    };
  }

  it("POST /tasks/{id}/progress reports and renews; bad input is 400 and writes nothing", async () => {
    const jobId = await newJob(1);
    const [t] = await claimAll(jobId, 1);
    const ok = await rest("POST", `/tasks/${t.id}/progress`, { worker_id: WORKER, attempt: 1, progress: 0.75, message: "almost" });
    expect(ok.status, ok.text).toBe(200);
    expect(ok.body.task.id).toBe(t.id);
    const bad = await rest("POST", `/tasks/${t.id}/progress`, { worker_id: WORKER, attempt: 1, progress: -0.1 });
    expect(bad.status).toBe(400);
    expect(bad.body.error).toMatchObject({ code: "invalid_argument", request_id: bad.headers.get("x-request-id") });
    expect(bad.body.error.message).toContain("progress");
    const stale = await rest("POST", `/tasks/${t.id}/progress`, { worker_id: WORKER, attempt: 2, progress: 0.9 });
    expect(stale.status).toBe(409);
    const { rows } = await fx.pool.query(`SELECT progress FROM task_events WHERE task_id = $1 AND kind = 'task_progress'`, [t.id]);
    expect(rows).toEqual([{ progress: 0.75 }]);
  });

  it("GET /jobs filters by status name; POST /jobs/{id}/retry; retrying a live job is 400 failed_precondition", async () => {
    const jobId = await newJob(1);
    const live = await rest("POST", `/jobs/${jobId}/retry`, {});
    expect(live.status).toBe(400);
    expect(live.body.error.code).toBe("failed_precondition");
    await rest("POST", `/jobs/${jobId}/cancel`, { reason: "test" });
    const listed = await rest("GET", `/jobs?status=cancelled&page_size=1000`);
    expect(listed.status, listed.text).toBe(200);
    expect(listed.body.jobs.some((j: { id: string }) => j.id === jobId)).toBe(true);
    expect(listed.body.jobs.every((j: { status: string }) => j.status === "JOB_STATUS_CANCELLED")).toBe(true);
    const retried = await rest("POST", `/jobs/${jobId}/retry`, {});
    expect(retried.status, retried.text).toBe(200);
    expect(retried.body).toMatchObject({ retried_tasks: 1, job: { id: jobId, status: "JOB_STATUS_PENDING" } });
    expect((await rest("GET", `/jobs?status=finished`)).status).toBe(400);
  });

  it("GET /jobs/{id}/events streams Server-Sent Events until the job ends; an unknown job is a 404 JSON error", async () => {
    const jobId = await newJob(1);
    const res = await fetch(`${base}/jobs/${jobId}/events`);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toContain("text/event-stream");
    const body = res.text();
    const [t] = await claimAll(jobId, 1);
    await complete(t);
    const lines = (await body).split("\n").filter((l) => l.startsWith("data: "));
    const messages = lines.map((l) => JSON.parse(l.slice(6)));
    expect(messages[0].snapshot.job.id).toBe(jobId);
    expect(messages.slice(1).map((m) => m.event.kind)).toEqual([
      "JOB_EVENT_KIND_TASK_STATUS",
      "JOB_EVENT_KIND_JOB_STATUS",
      "JOB_EVENT_KIND_TASK_STATUS",
      "JOB_EVENT_KIND_JOB_STATUS",
    ]);
    expect(messages.at(-1).event.job_status).toBe("JOB_STATUS_COMPLETED");

    const missing = await rest("GET", `/jobs/00000000-0000-4000-8000-000000000000/events`);
    expect(missing.status).toBe(404);
    expect(missing.body.error.code).toBe("not_found");
  });

  it("WatchJob streams over Connect (HTTP/2) with the same messages", async () => {
    const client = createClient(QueueService, createConnectTransport({ baseUrl: base, httpVersion: "2" }));
    const jobId = await newJob(1);
    const got: { case: string | undefined; kind?: JobEventKind; task?: TaskStatus; job?: JobStatus }[] = [];
    const stream = (async () => {
      for await (const m of client.watchJob({ jobId })) {
        if (m.update.case === "event")
          got.push({ case: "event", kind: m.update.value.kind, task: m.update.value.taskStatus, job: m.update.value.jobStatus });
        else got.push({ case: m.update.case });
      }
    })();
    await until(() => got.length === 1);
    const [t] = await claimAll(jobId, 1);
    await queue.failTask({ taskId: t.id, workerId: WORKER, attempt: 1, errorCode: "bad_input", retryable: false });
    await stream;
    expect(got[0].case).toBe("snapshot");
    expect(got.at(-1)).toEqual({ case: "event", kind: JobEventKind.JOB_STATUS, task: TaskStatus.UNSPECIFIED, job: JobStatus.FAILED });
    const err = await (async () => {
      for await (const _ of client.watchJob({ jobId: "not-a-uuid" })) void _;
    })().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(Code.InvalidArgument);
  });
});
