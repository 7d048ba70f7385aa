// The API end to end: a real coordinator server (the API-server fixture, port 0) over
// a real, freshly migrated PostgreSQL database. Every RPC goes through the
// generated client over gRPC (HTTP/2), gRPC-Web and Connect (HTTP/1.1 and
// HTTP/2) on one port, and the REST routes through fetch.
import { randomUUID } from "node:crypto";
import { Writable } from "node:stream";
import { Code, createClient, type Client, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import type pg from "pg";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RequestInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { JobStatus, QueueService, TaskStatus } from "../../gen/leasehold/queue/v1/queue_pb.js";
import { PostgresQueue } from "../../src/store/postgres/store.js";
import { rpcError } from "../support/rpc.js";
import { restCall, type RestAnswer } from "../support/rest.js";
import { apiServerFixture, type ApiServerFixture } from "../support/api-server.js";
import { sha, queueFixture, TEST_STORE_OPTIONS, type QueueFixture } from "../support/queue.js";

const MAX_BODY_BYTES = 64 * 1024;
const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

let pool: pg.Pool;
let fx: QueueFixture;
let api: ApiServerFixture;
let base: string;
let ready = true;
const logLines: Record<string, unknown>[] = [];

async function count(table: "jobs" | "tasks" | "workloads"): Promise<number> {
  const { rows } = await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${table}`);
  return rows[0].n;
}

async function rowCounts(): Promise<{ jobs: number; tasks: number; workloads: number }> {
  return { jobs: await count("jobs"), tasks: await count("tasks"), workloads: await count("workloads") };
}

/** A REST call to the server under test. */
function rest(method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<RestAnswer> {
  return restCall(base, method, path, body, headers);
}

function expectRestError(a: RestAnswer, status: number, code: string, mentions?: string): void {
  expect(a.status, a.text).toBe(status);
  expect(a.body.error.code).toBe(code);
  expect(typeof a.body.error.message).toBe("string");
  if (mentions) expect(a.body.error.message).toContain(mentions);
  expect(a.body.error.request_id).toBe(a.headers.get("x-request-id"));
}

beforeAll(async () => {
  fx = await queueFixture(
    {
      defaultLeaseSeconds: 60,
      defaultMaxAttempts: 3,
      maxTasksPerJob: 50,
    },
    { max: 8 },
  );
  pool = fx.pool;
  const queue = fx.queue;
  const sink = new Writable({
    write(chunk: Buffer, _enc, cb) {
      for (const line of chunk.toString().split("\n")) if (line) logLines.push(JSON.parse(line));
      cb();
    },
  });
  api = await apiServerFixture({
    queue,
    // debug: the workers' successful calls are logged at that level (request-log.ts).
    logger: pino({ level: "debug" }, sink),
    maxBodyBytes: MAX_BODY_BYTES,
    readiness: async () => (ready ? { ready: true } : { ready: false, detail: "database unreachable (test)" }),
  });
  base = api.base;
});

afterAll(async () => {
  await api?.close();
  await fx?.close();
});

const transports: [string, () => Transport][] = [
  ["grpc (HTTP/2)", () => createGrpcTransport({ baseUrl: base })],
  ["grpc-web (HTTP/1.1)", () => createGrpcWebTransport({ baseUrl: base, httpVersion: "1.1" })],
  ["connect (HTTP/1.1)", () => createConnectTransport({ baseUrl: base, httpVersion: "1.1" })],
  ["connect (HTTP/2)", () => createConnectTransport({ baseUrl: base, httpVersion: "2" })],
];

describe.each(transports)("every RPC over %s", (label, makeTransport) => {
  let client: Client<typeof QueueService>;
  const workload = `rpc_${label.replace(/[^a-z0-9]+/gi, "_").toLowerCase()}`.replace(/_+$/, "");
  const worker = `worker-${workload}`;

  beforeAll(() => {
    client = createClient(QueueService, makeTransport());
  });

  it("runs put/list workloads → create → claim → renew → complete → fail → get → results → cancel", async () => {
    const put = await client.putWorkload({ name: workload, maxAttempts: 2, leaseSeconds: 30, parametersSchema: { type: "object" } });
    expect(put.workload).toMatchObject({ name: workload, maxAttempts: 2, leaseSeconds: 30, parametersSchema: { type: "object" } });
    expect(put.workload?.createdAt).toBeDefined();
    const listed = await client.listWorkloads({});
    expect(listed.workloads.map((w) => w.name)).toContain(workload);

    const before = await rowCounts();
    const created = await client.createJob({
      workload,
      parameters: { quality: "high" },
      priority: 5,
      tasks: [0, 1, 2].map((i) => ({ chunkIndex: i, inputUri: `s3://in/${i}`, inputSha256: sha(`in${i}`), parameters: { i } })),
    });
    const jobId = created.job!.id;
    expect(jobId).toMatch(UUID_RE);
    expect(created.job?.status).toBe(JobStatus.PENDING);
    expect(created.tasks.map((t) => t.chunkIndex)).toEqual([0, 1, 2]);
    expect(created.tasks[1].parameters).toEqual({ quality: "high", i: 1 });
    expect(await rowCounts()).toEqual({ ...before, jobs: before.jobs + 1, tasks: before.tasks + 3 });

    const claimed = await client.claimTasks({ workerId: worker, workloads: [workload], maxTasks: 2 });
    expect(claimed.tasks).toHaveLength(2);
    for (const t of claimed.tasks) {
      expect(t.status).toBe(TaskStatus.LEASED);
      expect(t.attempt).toBe(1);
      expect(t.leaseOwner).toBe(worker);
      expect(t.leaseExpiresAt).toBeDefined();
    }
    const [a, b] = claimed.tasks;

    const renewed = await client.renewLease({ taskId: a.id, workerId: worker, attempt: 1, leaseSeconds: 60 });
    expect(renewed.task?.leaseExpiresAt?.seconds).toBeGreaterThanOrEqual(a.leaseExpiresAt!.seconds);

    const stale = await rpcError(client.renewLease({ taskId: a.id, workerId: worker, attempt: 2 }));
    expect(stale.code).toBe(Code.Aborted);
    const foreign = await rpcError(
      client.completeTask({ taskId: a.id, workerId: "someone-else", attempt: 1, resultUri: "s3://out/x", resultSha256: sha("x") }),
    );
    expect(foreign.code).toBe(Code.Aborted);

    const manifest = {
      taskId: a.id,
      workerId: worker,
      attempt: 1,
      resultUri: `s3://out/${a.chunkIndex}`,
      resultSha256: sha("out"),
      metrics: { frames: 10 },
    };
    const done = await client.completeTask(manifest);
    expect(done.task).toMatchObject({ status: TaskStatus.COMPLETED, resultUri: manifest.resultUri, metrics: { frames: 10 } });
    const again = await client.completeTask(manifest);
    expect(again.task?.status).toBe(TaskStatus.COMPLETED);
    expect(again.task?.version).toBe(done.task?.version);
    const conflicting = await rpcError(client.completeTask({ ...manifest, resultSha256: sha("other") }));
    expect(conflicting.code).toBe(Code.AlreadyExists);

    const retried = await client.failTask({
      taskId: b.id,
      workerId: worker,
      attempt: 1,
      errorCode: "flaky",
      errorMessage: "try again",
      retryAfterSeconds: 0,
    });
    expect(retried.task).toMatchObject({ status: TaskStatus.PENDING, attempt: 1, errorCode: "flaky", errorMessage: "try again" });

    const status = await client.getJob({ jobId });
    expect(status.job?.status).toBe(JobStatus.RUNNING);
    expect(status.totalTasks).toBe(3);
    expect(status.taskCounts).toMatchObject({ pending: 2, leased: 0, completed: 1, failed: 0, cancelled: 0 });
    expect(status.progress).toBeCloseTo(1 / 3, 5);

    const results = await client.listCompletedResults({ jobId, pageSize: 10 });
    expect(results.results).toHaveLength(1);
    expect(results.results[0]).toMatchObject({
      taskId: a.id,
      chunkIndex: a.chunkIndex,
      resultUri: manifest.resultUri,
      resultSha256: manifest.resultSha256,
    });
    expect(results.results[0].metrics).toEqual({ frames: 10 });
    expect(results.nextPageToken).toBe("");

    const cancelled = await client.cancelJob({ jobId, reason: "enough" });
    expect(cancelled.job).toMatchObject({ status: JobStatus.CANCELLED, cancelReason: "enough" });
    expect(cancelled.job?.completedAt).toBeDefined();
    const after = await client.getJob({ jobId });
    expect(after.taskCounts).toMatchObject({ pending: 0, leased: 0, cancelled: 2, completed: 1, failed: 0 });
    const { rows } = await pool.query("SELECT status::text, count(*)::int AS n FROM tasks WHERE job_id = $1 GROUP BY 1 ORDER BY 1", [
      jobId,
    ]);
    expect(rows).toEqual(
      [
        { status: "completed", n: 1 },
        { status: "cancelled", n: 2 },
      ].sort((x, y) => x.status.localeCompare(y.status)),
    );

    // A task that fails for good fails its job.
    const job2 = await client.createJob({ workload, inputUri: "s3://in/single", inputSha256: sha("single") });
    const [only] = (await client.claimTasks({ workerId: worker, workloads: [workload] })).tasks;
    expect(only.jobId).toBe(job2.job?.id);
    const failed = await client.failTask({ taskId: only.id, workerId: worker, attempt: 1, errorCode: "bad_input", retryable: false });
    expect(failed.task).toMatchObject({ status: TaskStatus.FAILED, errorCode: "bad_input" });
    const status2 = await client.getJob({ jobId: job2.job!.id });
    expect(status2.job?.status).toBe(JobStatus.FAILED);
    expect(status2.taskCounts).toMatchObject({ failed: 1, pending: 0, completed: 0 });
    expect(status2.progress).toBe(0);

    const empty = await client.claimTasks({ workerId: worker, workloads: [workload] });
    expect(empty.tasks).toEqual([]);
  });

  it("CompleteTasks records a batch with one outcome per result", async () => {
    const created = await client.createJob({
      workload,
      tasks: [0, 1, 2].map((i) => ({ chunkIndex: i, inputUri: `s3://batch/${i}`, inputSha256: sha(`b${i}`) })),
    });
    const jobId = created.job!.id;
    const { tasks } = await client.claimTasks({ workerId: worker, workloads: [workload], maxTasks: 3 });
    expect(tasks.map((t) => t.jobId)).toEqual([jobId, jobId, jobId]);
    const result = (t: (typeof tasks)[number], attempt = t.attempt) => ({
      taskId: t.id,
      workerId: worker,
      attempt,
      resultUri: `s3://out/b${t.chunkIndex}`,
      resultSha256: sha(`ob${t.chunkIndex}`),
    });
    const batch = await client.completeTasks({ results: [result(tasks[0]), result(tasks[1], 2), result(tasks[2])] });
    expect(batch.outcomes).toHaveLength(3);
    expect(batch.outcomes[0]).toMatchObject({ taskId: tasks[0].id, task: { status: TaskStatus.COMPLETED } });
    expect(batch.outcomes[0].error).toBeUndefined();
    expect(batch.outcomes[1].taskId).toBe(tasks[1].id);
    expect(batch.outcomes[1].task).toBeUndefined();
    expect(batch.outcomes[1].error?.code).toBe("aborted");
    expect(batch.outcomes[2].task?.status).toBe(TaskStatus.COMPLETED);
    const { rows } = await pool.query("SELECT count(*)::int AS n FROM tasks WHERE job_id = $1 AND status = 'completed'", [jobId]);
    expect(rows[0].n).toBe(2);

    const replay = await client.completeTasks({ results: [result(tasks[0])] });
    expect(replay.outcomes[0].task?.status).toBe(TaskStatus.COMPLETED);
    const twice = await rpcError(client.completeTasks({ results: [result(tasks[1]), result(tasks[1])] }));
    expect(twice.code).toBe(Code.InvalidArgument);
    const empty = await rpcError(client.completeTasks({ results: [] }));
    expect(empty.code).toBe(Code.InvalidArgument);
    expect(empty.rawMessage).toContain("results");
    await client.cancelJob({ jobId });
  });

  it("maps errors to codes and carries the request id in metadata and a RequestInfo detail, not in the message", async () => {
    const missing = await rpcError(client.getJob({ jobId: randomUUID() }));
    expect(missing.code).toBe(Code.NotFound);
    const requestId = missing.metadata.get("x-request-id");
    expect(requestId).toBeTruthy();
    expect(missing.rawMessage).not.toContain("request_id");
    expect(missing.findDetails(RequestInfoSchema).map((d) => d.requestId)).toEqual([requestId!.split(",")[0].trim()]);

    const bad = await rpcError(client.getJob({ jobId: "not-a-uuid" }));
    expect(bad.code).toBe(Code.InvalidArgument);
    expect(bad.rawMessage).toContain("job_id");

    const unknownWorkload = await rpcError(
      client.createJob(
        { workload: "never_registered", inputUri: "s3://x", inputSha256: sha("x") },
        { headers: { "x-request-id": "client-id-1" } },
      ),
    );
    expect([Code.NotFound, Code.InvalidArgument]).toContain(unknownWorkload.code);
    expect(unknownWorkload.metadata.get("x-request-id")).toContain("client-id-1");
    expect(unknownWorkload.rawMessage).not.toContain("client-id-1");
    expect(unknownWorkload.findDetails(RequestInfoSchema)[0]?.requestId).toBe("client-id-1");
  });
});

describe("REST", () => {
  const workload = "rest_flow";
  const worker = "rest-worker-1";
  let jobId: string;
  let taskIds: string[];

  it("PUT /workloads/{name} and GET /workloads answer with proto field names, zeros included", async () => {
    const put = await rest("PUT", `/workloads/${workload}`, { maxAttempts: 3, lease_seconds: 30 });
    expect(put.status, put.text).toBe(200);
    expect(put.headers.get("content-type")).toMatch(/^application\/json/);
    expect(put.body.workload).toMatchObject({ name: workload, max_attempts: 3, lease_seconds: 30 });
    expect(put.body.workload.created_at).toMatch(/^\d{4}-\d\d-\d\dT.*Z$/);
    expect(put.body.workload).not.toHaveProperty("maxAttempts");

    const list = await rest("GET", "/workloads");
    expect(list.status).toBe(200);
    expect(list.body.workloads.map((w: { name: string }) => w.name)).toContain(workload);
  });

  it("POST /jobs accepts camelCase, answers 201 with proto names; an idempotent replay is 200", async () => {
    const before = await rowCounts();
    const request = {
      workload,
      idempotencyKey: "rest-job-1",
      tasks: [0, 1, 2, 3, 4].map((i) => ({ chunkIndex: i, input_uri: `s3://in/${i}`, inputSha256: sha(`r${i}`) })),
    };
    const created = await rest("POST", "/jobs", request);
    expect(created.status, created.text).toBe(201);
    jobId = created.body.job.id;
    expect(jobId).toMatch(UUID_RE);
    expect(created.body.job).toMatchObject({ workload, status: "JOB_STATUS_PENDING", priority: 0, idempotency_key: "rest-job-1" });
    expect(created.body.tasks).toHaveLength(5);
    expect(created.body.tasks[0]).toMatchObject({ job_id: jobId, chunk_index: 0, attempt: 0, status: "TASK_STATUS_PENDING" });
    taskIds = created.body.tasks.map((t: { id: string }) => t.id);
    expect(await rowCounts()).toEqual({ ...before, jobs: before.jobs + 1, tasks: before.tasks + 5 });

    const replay = await rest("POST", "/jobs", request);
    expect(replay.status, replay.text).toBe(200);
    expect(replay.body.job.id).toBe(jobId);
    const conflict = await rest("POST", "/jobs", { ...request, priority: 9 });
    expectRestError(conflict, 409, "already_exists");
    expect(await rowCounts()).toEqual({ ...before, jobs: before.jobs + 1, tasks: before.tasks + 5 });
  });

  it("POST /tasks/claim: 204 when nothing is claimable, 200 with tasks otherwise", async () => {
    const put = await rest("PUT", "/workloads/rest_idle", {});
    expect(put.status).toBe(200);
    const empty = await rest("POST", "/tasks/claim", { worker_id: worker, workloads: ["rest_idle"] });
    expect(empty.status).toBe(204);
    expect(empty.text).toBe("");
    expect(empty.headers.get("x-request-id")).toBeTruthy();

    const claimed = await rest("POST", "/tasks/claim", { worker_id: worker, workloads: [workload], max_tasks: 3 });
    expect(claimed.status, claimed.text).toBe(200);
    expect(claimed.body.tasks).toHaveLength(3);
    for (const t of claimed.body.tasks) {
      expect(t).toMatchObject({ status: "TASK_STATUS_LEASED", attempt: 1, lease_owner: worker, job_id: jobId });
      expect(t.lease_expires_at).toMatch(/Z$/);
    }
    expect(claimed.body.tasks.map((t: { chunk_index: number }) => t.chunk_index)).toEqual([0, 1, 2]);
    const { rows } = await pool.query("SELECT count(*)::int AS n FROM tasks WHERE job_id = $1 AND status = 'leased'", [jobId]);
    expect(rows[0].n).toBe(3);
  });

  it("heartbeat: 200 for the leaseholder, 409 for a stale attempt and for a foreign worker", async () => {
    const ok = await rest("POST", `/tasks/${taskIds[0]}/heartbeat`, { worker_id: worker, attempt: 1, lease_seconds: 45 });
    expect(ok.status, ok.text).toBe(200);
    expect(ok.body.task).toMatchObject({ id: taskIds[0], status: "TASK_STATUS_LEASED", attempt: 1 });

    const stale = await rest("POST", `/tasks/${taskIds[0]}/heartbeat`, { worker_id: worker, attempt: 2 });
    expectRestError(stale, 409, "aborted");
    const foreign = await rest("POST", `/tasks/${taskIds[0]}/heartbeat`, { worker_id: "intruder", attempt: 1 });
    expectRestError(foreign, 409, "aborted");
    const foreignResult = await rest("POST", `/tasks/${taskIds[1]}/result`, {
      worker_id: "intruder",
      attempt: 1,
      result_uri: "s3://x",
      result_sha256: sha("x"),
    });
    expectRestError(foreignResult, 409, "aborted");
    const { rows } = await pool.query("SELECT status, result_uri FROM tasks WHERE id = $1", [taskIds[1]]);
    expect(rows[0]).toEqual({ status: "leased", result_uri: null });
  });

  it("result: 200, the same manifest again 200 with the same body, a different one 409", async () => {
    const manifest = { worker_id: worker, attempt: 1, result_uri: "s3://out/0", result_sha256: sha("o0"), metrics: { seconds: 1.5 } };
    const first = await rest("POST", `/tasks/${taskIds[0]}/result`, manifest);
    expect(first.status, first.text).toBe(200);
    expect(first.body.task).toMatchObject({ status: "TASK_STATUS_COMPLETED", result_uri: "s3://out/0", metrics: { seconds: 1.5 } });
    const second = await rest("POST", `/tasks/${taskIds[0]}/result`, manifest);
    expect(second.status).toBe(200);
    expect(second.body).toEqual(first.body);
    const different = await rest("POST", `/tasks/${taskIds[0]}/result`, { ...manifest, result_sha256: sha("other") });
    expectRestError(different, 409, "already_exists");

    const r1 = await rest("POST", `/tasks/${taskIds[1]}/result`, { ...manifest, result_uri: "s3://out/1" });
    expect(r1.status, r1.text).toBe(200);
  });

  it("failure: a retryable failure returns the task to pending; a path id is the task", async () => {
    const failed = await rest("POST", `/tasks/${taskIds[2]}/failure`, {
      workerId: worker,
      attempt: 1,
      errorCode: "oom",
      retryable: true,
      retry_after_seconds: 0,
    });
    expect(failed.status, failed.text).toBe(200);
    expect(failed.body.task).toMatchObject({ id: taskIds[2], status: "TASK_STATUS_PENDING", error_code: "oom", attempt: 1 });
    const mismatch = await rest("POST", `/tasks/${taskIds[2]}/failure`, {
      task_id: taskIds[3],
      worker_id: worker,
      attempt: 1,
      error_code: "x",
    });
    expectRestError(mismatch, 400, "invalid_argument", "task_id");
  });

  it("GET /jobs/{job_id} aggregates task status", async () => {
    const status = await rest("GET", `/jobs/${jobId}`);
    expect(status.status, status.text).toBe(200);
    expect(status.body.job).toMatchObject({ id: jobId, status: "JOB_STATUS_RUNNING" });
    expect(status.body.task_counts).toEqual({ pending: 3, leased: 0, completed: 2, failed: 0, cancelled: 0, waiting: 0 });
    expect(status.body.total_tasks).toBe(5);
    expect(status.body.progress).toBeCloseTo(0.4, 5);
  });

  it("GET /jobs/{job_id}/results pages through the completed manifests", async () => {
    const first = await rest("GET", `/jobs/${jobId}/results?page_size=1`);
    expect(first.status, first.text).toBe(200);
    expect(first.body.results).toHaveLength(1);
    expect(first.body.results[0]).toMatchObject({ chunk_index: 0, task_id: taskIds[0], result_uri: "s3://out/0" });
    expect(first.body.next_page_token).not.toBe("");
    const second = await rest("GET", `/jobs/${jobId}/results?page_size=1&page_token=${encodeURIComponent(first.body.next_page_token)}`);
    expect(second.status).toBe(200);
    expect(second.body.results.map((r: { chunk_index: number }) => r.chunk_index)).toEqual([1]);
    const third = second.body.next_page_token
      ? await rest("GET", `/jobs/${jobId}/results?pageSize=1&pageToken=${encodeURIComponent(second.body.next_page_token)}`)
      : undefined;
    if (third) {
      expect(third.status).toBe(200);
      expect(third.body.results).toEqual([]);
      expect(third.body.next_page_token).toBe("");
    }
    const badToken = await rest("GET", `/jobs/${jobId}/results?page_token=garbage`);
    expectRestError(badToken, 400, "invalid_argument", "page_token");
    const unknownParam = await rest("GET", `/jobs/${jobId}/results?limit=3`);
    expectRestError(unknownParam, 400, "invalid_argument", "limit");
  });

  it("POST /jobs/{job_id}/cancel cancels what is left; the leaseholder's heartbeat then gets 409, its result within the lease is kept", async () => {
    const claimed = await rest("POST", "/tasks/claim", { worker_id: worker, workloads: [workload] });
    expect(claimed.status).toBe(200);
    const held = claimed.body.tasks[0];
    const cancelled = await rest("POST", `/jobs/${jobId}/cancel`, { reason: "changed my mind" });
    expect(cancelled.status, cancelled.text).toBe(200);
    expect(cancelled.body.job).toMatchObject({ status: "JOB_STATUS_CANCELLED", cancel_reason: "changed my mind" });
    const status = await rest("GET", `/jobs/${jobId}`);
    expect(status.body.task_counts).toEqual({ pending: 0, leased: 0, completed: 2, failed: 0, cancelled: 3, waiting: 0 });
    const heartbeat = await rest("POST", `/tasks/${held.id}/heartbeat`, { worker_id: worker, attempt: held.attempt });
    expectRestError(heartbeat, 409, "aborted", "cancelled");
    const late = await rest("POST", `/tasks/${held.id}/result`, {
      worker_id: worker,
      attempt: held.attempt,
      result_uri: "s3://late",
      result_sha256: sha("late"),
    });
    expect(late.status, late.text).toBe(200);
    expect(late.body.task).toMatchObject({ status: "TASK_STATUS_COMPLETED", result_uri: "s3://late" });
    const after = await rest("GET", `/jobs/${jobId}`);
    expect(after.body.job.status).toBe("JOB_STATUS_CANCELLED");
    expect(after.body.task_counts).toEqual({ pending: 0, leased: 0, completed: 3, failed: 0, cancelled: 2, waiting: 0 });
    const missing = await rest("POST", `/jobs/${randomUUID()}/cancel`);
    expectRestError(missing, 404, "not_found");
  });

  it("POST /tasks/results completes a batch with per-result outcomes", async () => {
    expect((await rest("PUT", "/workloads/rest_batch", {})).status).toBe(200);
    const job = await rest("POST", "/jobs", {
      workload: "rest_batch",
      tasks: [0, 1].map((i) => ({ chunk_index: i, input_uri: `s3://rb/${i}`, input_sha256: sha(`rb${i}`) })),
    });
    expect(job.status).toBe(201);
    const claim = await rest("POST", "/tasks/claim", { worker_id: "rb-worker", workloads: ["rest_batch"], max_tasks: 2 });
    expect(claim.body.tasks).toHaveLength(2);
    const [t0, t1] = claim.body.tasks;
    const results = [
      { task_id: t0.id, worker_id: "rb-worker", attempt: 1, result_uri: "s3://rb-out/0", result_sha256: sha("rbo0") },
      { taskId: t1.id, workerId: "someone-else", attempt: 1, resultUri: "s3://rb-out/1", resultSha256: sha("rbo1") },
    ];
    const answer = await rest("POST", "/tasks/results", { results });
    expect(answer.status, answer.text).toBe(200);
    expect(answer.body.outcomes[0]).toMatchObject({
      task_id: t0.id,
      task: { status: "TASK_STATUS_COMPLETED", result_uri: "s3://rb-out/0" },
    });
    expect(answer.body.outcomes[1]).toMatchObject({ task_id: t1.id, error: { code: "aborted" } });
    expect(answer.body.outcomes[1]).not.toHaveProperty("task");
    const status = await rest("GET", `/jobs/${job.body.job.id}`);
    expect(status.body.task_counts).toMatchObject({ completed: 1, leased: 1 });
    const badId = await rest("POST", "/tasks/results", { results: [{ ...results[0], task_id: "nope" }] });
    expectRestError(badId, 400, "invalid_argument", "results[0].task_id");
  });

  describe("bad requests are 4xx and write nothing", () => {
    const cases: [string, () => Promise<RestAnswer>, number, string, string?][] = [
      [
        "unknown field",
        () => rest("POST", "/tasks/claim", { worker_id: "w", workloads: [workload], bogus: 1 }),
        400,
        "invalid_argument",
        "bogus",
      ],
      [
        "wrong type",
        () => rest("POST", "/tasks/claim", { worker_id: "w", workloads: [workload], max_tasks: "many" }),
        400,
        "invalid_argument",
        "max_tasks",
      ],
      [
        "fractional int",
        () => rest("POST", "/jobs", { workload, tasks: [{ chunk_index: 1.5, input_uri: "s3://a", input_sha256: sha("a") }] }),
        400,
        "invalid_argument",
        "chunk_index",
      ],
      ["malformed JSON", () => rest("POST", "/jobs", "{not json"), 400, "invalid_argument", "JSON"],
      ["truncated JSON", () => rest("POST", "/jobs", `{"workload": "${workload}", "tasks": [`), 400, "invalid_argument", "JSON"],
      ["JSON array body", () => rest("POST", "/jobs", "[]"), 400, "invalid_argument", "object"],
      [
        "invalid field value",
        () => rest("POST", "/jobs", { workload, input_uri: "s3://a", input_sha256: "xyz" }),
        400,
        "invalid_argument",
        "input_sha256",
      ],
      [
        "NUL in a string",
        () => rest("POST", "/jobs", { workload, input_uri: "s3://a\u0000b", input_sha256: sha("a") }),
        400,
        "invalid_argument",
        "input_uri",
      ],
      [
        "duplicate chunk index",
        () =>
          rest("POST", "/jobs", { workload, tasks: [0, 0].map((i) => ({ chunk_index: i, input_uri: "s3://a", input_sha256: sha("a") })) }),
        400,
        "invalid_argument",
        "chunk_index",
      ],
      [
        "too many tasks",
        () =>
          rest("POST", "/jobs", {
            workload,
            tasks: Array.from({ length: 51 }, (_, i) => ({ chunk_index: i, input_uri: "s3://a", input_sha256: sha("a") })),
          }),
        400,
        "invalid_argument",
        "tasks",
      ],
      [
        "unregistered workload",
        () => rest("POST", "/jobs", { workload: "nobody_home", input_uri: "s3://a", input_sha256: sha("a") }),
        404,
        "not_found",
        "nobody_home",
      ],
      [
        "invalid UUID in path",
        () => rest("POST", "/tasks/not-a-uuid/heartbeat", { worker_id: "w", attempt: 1 }),
        400,
        "invalid_argument",
        "task_id",
      ],
      ["SQL in a path", () => rest("GET", "/jobs/1'%20OR%20'1'='1"), 400, "invalid_argument", "job_id"],
      ["invalid UUID in body", () => rest("POST", "/jobs/00000000-0000-0000-0000-00000000000g/cancel"), 400, "invalid_argument", "job_id"],
      ["invalid workload name in path", () => rest("PUT", "/workloads/Bad%20Name", {}), 400, "invalid_argument", "name"],
      ["unknown route", () => rest("GET", "/nope"), 404, "not_found"],
      ["unknown nested route", () => rest("POST", `/jobs/${randomUUID()}/explode`, {}), 404, "not_found"],
      ["wrong method", () => rest("DELETE", "/workloads"), 405, "unimplemented"],
      [
        "wrong content type",
        () => rest("POST", "/jobs", "workload=x", { "content-type": "application/x-www-form-urlencoded" }),
        415,
        "invalid_argument",
      ],
      [
        "body over the limit",
        () => rest("POST", "/jobs", { workload, parameters: { blob: "x".repeat(MAX_BODY_BYTES) } }),
        413,
        "resource_exhausted",
      ],
      ["query on a POST route", () => rest("POST", "/tasks/claim?x=1", { worker_id: "w", workloads: [workload] }), 400, "invalid_argument"],
      [
        "invalid UTF-8",
        () => fetchRaw("POST", "/jobs", Buffer.from([0x7b, 0x22, 0xff, 0xfe, 0x22, 0x3a, 0x31, 0x7d])),
        400,
        "invalid_argument",
        "UTF-8",
      ],
    ];

    it.each(cases)("%s", async (_name, send, status, code, mentions) => {
      const before = await rowCounts();
      const answer = await send();
      expectRestError(answer, status, code, mentions);
      expect(await rowCounts()).toEqual(before);
    });

    it("405 names the allowed methods", async () => {
      const a = await rest("GET", "/tasks/claim");
      expect(a.status).toBe(405);
      expect(a.headers.get("allow")).toBe("POST");
    });
  });
});

async function fetchRaw(method: string, path: string, body: Buffer): Promise<RestAnswer> {
  const res = await fetch(base + path, { method, body, headers: { "content-type": "application/json" } });
  const text = await res.text();
  return { status: res.status, headers: res.headers, text, body: text ? JSON.parse(text) : undefined };
}

describe("one JSON shape on REST and Connect JSON", () => {
  const workload = "json_shape";
  /** A Connect unary call with a JSON body, as a plain HTTP client sends it. */
  const connect = async (method: string, body: unknown) => {
    const res = await fetch(`${base}/leasehold.queue.v1.QueueService/${method}`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    return { status: res.status, body: (await res.json()) as Record<string, any> }; // eslint-disable-line @typescript-eslint/no-explicit-any
  };

  it("answers with proto field names and every field present, defaults included, as REST does", async () => {
    expect((await connect("PutWorkload", { name: workload })).status).toBe(200);
    const empty = await connect("ClaimTasks", { worker_id: "shape-1", workloads: [workload] });
    expect(empty).toEqual({ status: 200, body: { tasks: [] } });
    const created = await connect("CreateJob", {
      workload,
      tasks: [{ chunkIndex: 0, input_uri: "s3://in/0", inputSha256: sha("shape") }],
    });
    expect(created.status).toBe(200);
    expect(created.body.tasks[0]).toMatchObject({ chunk_index: 0, attempt: 0, priority: 0, status: "TASK_STATUS_PENDING" });
    const viaConnect = await connect("ClaimTasks", { worker_id: "shape-1", workloads: [workload] });
    const task = viaConnect.body.tasks[0];
    expect(task).toMatchObject({ chunk_index: 0, attempt: 1, lease_owner: "shape-1", job_id: created.body.job.id });
    expect(task.lease_expires_at).toMatch(/^\d{4}-\d\d-\d\dT.*Z$/);
    expect(Object.keys(task).filter((k) => /[A-Z]/.test(k))).toEqual([]);
    // The same task read over REST has the same keys.
    const job = await rest("GET", `/jobs/${created.body.job.id}`);
    const viaRest = await connect("GetJob", { job_id: created.body.job.id });
    expect(Object.keys(viaRest.body.job).sort()).toEqual(Object.keys(job.body.job).sort());
    expect(viaRest.body.job.priority).toBe(0);
  });
});

describe("request ids, health and logs", () => {
  it("keeps a sane X-Request-Id and replaces an insane one", async () => {
    const kept = await rest("GET", "/workloads", undefined, { "x-request-id": "abc-123.def:4_5" });
    expect(kept.headers.get("x-request-id")).toBe("abc-123.def:4_5");
    const replaced = await rest("GET", "/workloads", undefined, { "x-request-id": "bad id <script>" });
    expect(replaced.headers.get("x-request-id")).toMatch(UUID_RE);
    const tooLong = await rest("GET", "/workloads", undefined, { "x-request-id": "a".repeat(129) });
    expect(tooLong.headers.get("x-request-id")).toMatch(UUID_RE);
    const fresh = await rest("GET", "/nope");
    expect(fresh.headers.get("x-request-id")).toMatch(UUID_RE);
    expect(fresh.body.error.request_id).toBe(fresh.headers.get("x-request-id"));
  });

  it("sets X-Request-Id on Connect and gRPC answers", async () => {
    for (const transport of [createGrpcTransport({ baseUrl: base }), createConnectTransport({ baseUrl: base, httpVersion: "1.1" })]) {
      const client = createClient(QueueService, transport);
      let header: string | null = null;
      await client.listWorkloads({}, { headers: { "x-request-id": "rid-conn-1" }, onHeader: (h) => (header = h.get("x-request-id")) });
      expect(header).toBe("rid-conn-1");
    }
  });

  it("GET /healthz is 200; GET /readyz follows readiness()", async () => {
    const health = await rest("GET", "/healthz");
    expect(health.status).toBe(200);
    expect(health.body).toEqual({ status: "ok" });
    expect(health.headers.get("x-request-id")).toBeTruthy();
    const readyAnswer = await rest("GET", "/readyz");
    expect(readyAnswer.status).toBe(200);
    ready = false;
    try {
      const notReady = await rest("GET", "/readyz");
      expect(notReady.status).toBe(503);
      expect(notReady.body).toEqual({ status: "not_ready", detail: "database unreachable (test)" });
    } finally {
      ready = true;
    }
  });

  it("logs one line per request with id, operation, ids, status and duration", async () => {
    const put = await rest("PUT", "/workloads/log_wl", {});
    expect(put.status).toBe(200);
    const job = await rest("POST", "/jobs", { workload: "log_wl", input_uri: "s3://l", input_sha256: sha("l") });
    expect(job.status).toBe(201);
    const claim = await rest("POST", "/tasks/claim", { worker_id: "log-worker", workloads: ["log_wl"] }, { "x-request-id": "log-claim-1" });
    const task = claim.body.tasks[0];
    const hb = await rest("POST", `/tasks/${task.id}/heartbeat`, { worker_id: "log-worker", attempt: 1 }, { "x-request-id": "log-hb-1" });
    expect(hb.status).toBe(200);
    // Each line is written when its response closes: wait for the last one, not for a fixed time.
    for (let i = 0; i < 500 && !logLines.some((l) => l.request_id === "log-hb-1"); i++) await new Promise((r) => setTimeout(r, 10));
    const claimLines = logLines.filter((l) => l.request_id === "log-claim-1");
    expect(claimLines).toHaveLength(1);
    expect(claimLines[0]).toMatchObject({
      level: 20,
      operation: "ClaimTasks",
      worker_id: "log-worker",
      status: 200,
      code: "ok",
      protocol: "rest",
    });
    const hbLines = logLines.filter((l) => l.request_id === "log-hb-1");
    expect(hbLines).toHaveLength(1);
    expect(hbLines[0]).toMatchObject({
      operation: "RenewLease",
      task_id: task.id,
      job_id: job.body.job.id,
      worker_id: "log-worker",
      status: 200,
    });
    expect(typeof hbLines[0].duration_ms).toBe("number");
  });
});

describe("close()", () => {
  it("does not wait for idle keep-alive or HTTP/2 connections", async () => {
    const queue = new PostgresQueue(pool, { ...TEST_STORE_OPTIONS, defaultLeaseSeconds: 60, maxTasksPerJob: 50 });
    const other = await apiServerFixture({ queue, maxBodyBytes: 1024, requestTimeoutMs: 1000 });
    const url = other.base;
    const res = await fetch(`${url}/healthz`);
    expect(res.status).toBe(200);
    const h2 = createClient(QueueService, createConnectTransport({ baseUrl: url, httpVersion: "2" }));
    expect((await h2.listWorkloads({})).workloads.length).toBeGreaterThan(0);
    const started = Date.now();
    await other.close(5000);
    expect(Date.now() - started).toBeLessThan(1500);
    await expect(fetch(`${url}/healthz`)).rejects.toThrow();
  });
});

describe("deadlines and unexpected errors", () => {
  // The real queue, with two calls slowed down or broken on purpose: the server
  // must cut slow calls at its deadline and hide unexpected errors.
  let slow: ApiServerFixture;
  let url: string;
  const lines: Record<string, unknown>[] = [];
  const aborts: { op: string; afterMs: number }[] = [];

  beforeAll(async () => {
    const real = new PostgresQueue(pool, { ...TEST_STORE_OPTIONS, defaultLeaseSeconds: 60, maxTasksPerJob: 50 });
    const waitForAbort = (op: string, signal: AbortSignal | undefined) =>
      new Promise<never>((_, reject) => {
        const started = Date.now();
        signal?.addEventListener("abort", () => {
          aborts.push({ op, afterMs: Date.now() - started });
          reject(signal.reason);
        });
      });
    const queue: import("../../src/queue/service.js").QueueService = {
      createJob: (i, o) => real.createJob(i, o),
      claimTasks: (i, o) => (i.waitSeconds ? waitForAbort("claim", o?.signal) : real.claimTasks(i, o)),
      renewLease: (i, o) => real.renewLease(i, o),
      completeTask: (i, o) => real.completeTask(i, o),
      completeTasks: (i, o) => real.completeTasks(i, o),
      completeTaskAndClaim: (i, n, o) => real.completeTaskAndClaim(i, n, o),
      completeTasksAndClaim: (i, n, o) => real.completeTasksAndClaim(i, n, o),
      failTask: (i, o) => real.failTask(i, o),
      expireLeases: (o) => real.expireLeases(o),
      getJobStatus: async () => {
        throw Object.assign(new Error('relation "secret_table" does not exist'), { code: "42P01" });
      },
      listCompletedResults: (i, o) => real.listCompletedResults(i, o),
      cancelJob: (i, o) => real.cancelJob(i, o),
      putWorkload: (i, o) => real.putWorkload(i, o),
      listWorkloads: (o) => waitForAbort("list", o?.signal),
      reportProgress: (i, o) => real.reportProgress(i, o),
      retryJob: (i, o) => real.retryJob(i, o),
      listJobs: (i, o) => real.listJobs(i, o),
      watchJob: (i, o) => real.watchJob(i, o),
      listTasks: (i, o) => real.listTasks(i, o),
      getTask: (i, o) => real.getTask(i, o),
      putKeyLimit: (i, o) => real.putKeyLimit(i, o),
      pauseWorkload: (i, o) => real.pauseWorkload(i, o),
      resumeWorkload: (i, o) => real.resumeWorkload(i, o),
      listWorkloadKeys: (i, o) => real.listWorkloadKeys(i, o),
      putSchedule: (i, o) => real.putSchedule(i, o),
      getSchedule: (i, o) => real.getSchedule(i, o),
      listSchedules: (o) => real.listSchedules(o),
      deleteSchedule: (i, o) => real.deleteSchedule(i, o),
      pauseSchedule: (i, o) => real.pauseSchedule(i, o),
      resumeSchedule: (i, o) => real.resumeSchedule(i, o),
      putAccount: (i, o) => real.putAccount(i, o),
      getAccount: (i, o) => real.getAccount(i, o),
      listAccounts: (o) => real.listAccounts(o),
      getAccountUsage: (i, o) => real.getAccountUsage(i, o),
      listSettlements: (i, o) => real.listSettlements(i, o),
      settleJob: (i, o) => real.settleJob(i, o),
      listAdjustments: (i, o) => real.listAdjustments(i, o),
      settleAdjustment: (i, o) => real.settleAdjustment(i, o),
      createWorkflow: (i, o) => real.createWorkflow(i, o),
      getWorkflow: (i, o) => real.getWorkflow(i, o),
      listWorkflows: (i, o) => real.listWorkflows(i, o),
      watchWorkflow: (i, o) => real.watchWorkflow(i, o),
      cancelWorkflow: (i, o) => real.cancelWorkflow(i, o),
      retryWorkflow: (i, o) => real.retryWorkflow(i, o),
      maintain: (o) => real.maintain(o),
      taskStats: (s, o) => real.taskStats(s, o),
    };
    const sink = new Writable({
      write(chunk: Buffer, _enc, cb) {
        for (const line of chunk.toString().split("\n")) if (line) lines.push(JSON.parse(line));
        cb();
      },
    });
    slow = await apiServerFixture({ queue, logger: pino({ level: "info" }, sink), maxBodyBytes: 4096, requestTimeoutMs: 300 });
    url = slow.base;
  });

  afterAll(async () => {
    await slow?.close(1000);
  });

  it("answers DEADLINE_EXCEEDED/504 at requestTimeoutMs and aborts the queue call", async () => {
    const started = Date.now();
    const res = await fetch(`${url}/workloads`);
    const body = (await res.json()) as { error: { code: string } };
    expect(res.status).toBe(504);
    expect(body.error.code).toBe("deadline_exceeded");
    expect(Date.now() - started).toBeLessThan(3000);
    expect(aborts.some((a) => a.op === "list" && a.afterMs >= 250)).toBe(true);
  });

  it("honours a shorter client deadline (connect-timeout-ms / grpc-timeout)", async () => {
    for (const transport of [createGrpcTransport({ baseUrl: url }), createConnectTransport({ baseUrl: url, httpVersion: "1.1" })]) {
      const client = createClient(QueueService, transport);
      const started = Date.now();
      const err = await rpcError(client.listWorkloads({}, { timeoutMs: 100 }));
      expect(err.code).toBe(Code.DeadlineExceeded);
      expect(Date.now() - started).toBeLessThan(290);
    }
  });

  it("does not cut a long poll shorter than wait_seconds", async () => {
    const started = Date.now();
    const res = await fetch(`${url}/tasks/claim`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ worker_id: "w", workloads: ["any"], wait_seconds: 1 }),
    });
    expect(res.status).toBe(504);
    expect(Date.now() - started).toBeGreaterThanOrEqual(1000);
    const claim = aborts.find((a) => a.op === "claim");
    expect(claim?.afterMs).toBeGreaterThanOrEqual(1250);
  });

  it("answers INTERNAL/500 with a generic message and logs the error server side", async () => {
    const res = await fetch(`${url}/jobs/${randomUUID()}`, { headers: { "x-request-id": "internal-1" } });
    const body = (await res.json()) as unknown;
    expect(res.status).toBe(500);
    expect(body).toEqual({ error: { code: "internal", message: "internal error", request_id: "internal-1" } });
    const err = await rpcError(createClient(QueueService, createGrpcTransport({ baseUrl: url })).getJob({ jobId: randomUUID() }));
    expect(err.code).toBe(Code.Internal);
    expect(err.rawMessage).not.toContain("secret_table");
    const line = lines.find((l) => l.request_id === "internal-1");
    expect(line).toMatchObject({ level: 50, operation: "GetJob", status: 500, code: "internal" });
    expect(JSON.stringify(line)).toContain("secret_table");
  });
});
