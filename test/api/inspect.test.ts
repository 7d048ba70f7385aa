// Why did it fail? Task inspection (ListTasks, GetTask, the failure of a failed job), resumable
// Server-Sent Events, and errors that explain themselves (google.rpc.BadRequest and RequestInfo
// details, every schema violation, accepted enum values, "is required"), end to end: a real
// server (the API-server fixture, port 0) over a real, migrated PostgreSQL, every RPC over the four
// transports and REST, each answer checked against the rows behind it.
import { randomUUID } from "node:crypto";
import { fromBinary } from "@bufbuild/protobuf";
import http from "node:http";
import { Code, createClient, type Client, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BadRequestSchema, RequestInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { StatusSchema } from "../../gen/google/rpc/status_pb.js";
import { AttemptOutcome, JobStatus, QueueService, TaskStatus, type TaskAttempt } from "../../gen/leasehold/queue/v1/queue_pb.js";
import { JOB_FAILURE, LIST_FAILED_TASKS, LIST_TASKS, TASK_ATTEMPT_EVENTS } from "../support/statements.js";
import { PostgresQueue } from "../../src/store/postgres/store.js";
import { rpcError } from "../support/rpc.js";
import { restCall, type RestAnswer } from "../support/rest.js";
import { sha, queueFixture, type QueueFixture } from "../support/queue.js";
import { apiServerFixture, type ApiServerFixture } from "../support/api-server.js";

const SCHEMA_WORKLOAD = "insp_schema";
const PARAMETERS_SCHEMA = {
  type: "object",
  required: ["model", "lr"],
  additionalProperties: false,
  properties: { model: { type: "string" }, lr: { type: "number" }, mode: { enum: ["fast", "exact"] } },
};

let pool: pg.Pool;
let fx: QueueFixture;
let queue: PostgresQueue;
let api: ApiServerFixture;
let base: string;

beforeAll(async () => {
  fx = await queueFixture(
    {
      defaultLeaseSeconds: 60,
      defaultMaxAttempts: 3,
      maxTasksPerJob: 50,
      watchPollIntervalMs: 100,
    },
    { max: 8 },
  );
  pool = fx.pool;
  queue = fx.queue;
  api = await apiServerFixture({ queue });
  base = api.base;
  await queue.putWorkload({ name: SCHEMA_WORKLOAD, parametersSchema: PARAMETERS_SCHEMA });
});

afterAll(async () => {
  await api?.close();
  await fx?.close();
});

/** A REST call to the server under test. */
function rest(method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<RestAnswer> {
  return restCall(base, method, path, body, headers);
}

/** Row counts of every table a bad request must leave alone. */
async function fingerprint(): Promise<Record<string, number>> {
  const { rows } = await pool.query(
    `SELECT (SELECT count(*)::int FROM jobs) AS jobs, (SELECT count(*)::int FROM tasks) AS tasks,
            (SELECT count(*)::int FROM task_events) AS events, (SELECT coalesce(sum(version), 0)::int FROM tasks) AS versions`,
  );
  return rows[0];
}

async function taskRows(jobId: string) {
  const { rows } = await pool.query(
    "SELECT id, chunk_index, status::text, attempt, lease_owner, error_code, error_message FROM tasks WHERE job_id = $1 ORDER BY chunk_index",
    [jobId],
  );
  return rows as {
    id: string;
    chunk_index: number;
    status: string;
    attempt: number;
    lease_owner: string | null;
    error_code: string | null;
    error_message: string | null;
  }[];
}

async function eventIds(jobId: string, after = 0): Promise<string[]> {
  const { rows } = await pool.query("SELECT e.id::text AS event_id FROM task_events e WHERE e.job_id = $1 AND e.id > $2 ORDER BY e.id", [
    jobId,
    after,
  ]);
  return rows.map((r) => r.event_id as string);
}

/** Leases of this workload expire now (as if their workers went silent), and the reaper runs. */
async function expireLeases(workload: string): Promise<void> {
  await pool.query("UPDATE tasks SET lease_expires_at = now() - interval '1 second' WHERE workload = $1 AND status = 'leased'", [workload]);
  await queue.expireLeases();
}

interface Scenario {
  jobId: string;
  /** task ids by chunk */
  ids: string[];
  workers: Record<"a" | "b" | "c" | "d" | "e", string>;
}

/**
 * A job of four chunks that fails, driven through `client`:
 *   chunk 0: leased by a, completed;
 *   chunk 1: leased by b, lease expired (reaper), leased again by c, progress 0.5, cancelled when the job fails;
 *   chunk 2: leased by d, failed retryably (nan), leased by e, failed for good (oom) — which fails the job;
 *   chunk 3: never leased, cancelled.
 */
async function failingJob(client: Client<typeof QueueService>, workload: string): Promise<Scenario> {
  await client.putWorkload({ name: workload, maxAttempts: 3, leaseSeconds: 60 });
  const created = await client.createJob({
    workload,
    tasks: [0, 1, 2, 3].map((i) => ({ chunkIndex: i, inputUri: `s3://insp/${workload}/${i}`, inputSha256: sha(`${workload}${i}`) })),
  });
  const jobId = created.job!.id;
  const ids = created.tasks.map((t) => t.id);
  const workers = { a: `${workload}-a`, b: `${workload}-b`, c: `${workload}-c`, d: `${workload}-d`, e: `${workload}-e` };
  const claim = async (workerId: string, chunk: number, attempt: number) => {
    const [t] = (await client.claimTasks({ workerId, workloads: [workload] })).tasks;
    expect([t.chunkIndex, t.attempt]).toEqual([chunk, attempt]);
    return t;
  };
  await claim(workers.a, 0, 1);
  await client.completeTask({
    taskId: ids[0],
    workerId: workers.a,
    attempt: 1,
    resultUri: `s3://out/${workload}/0`,
    resultSha256: sha("out0"),
  });
  await claim(workers.b, 1, 1);
  await expireLeases(workload);
  await claim(workers.c, 1, 2);
  await client.reportProgress({ taskId: ids[1], workerId: workers.c, attempt: 2, progress: 0.5, message: "half way" });
  await claim(workers.d, 2, 1);
  await client.failTask({
    taskId: ids[2],
    workerId: workers.d,
    attempt: 1,
    errorCode: "nan",
    errorMessage: "NaN in step 3117",
    retryAfterSeconds: 0,
  });
  await claim(workers.e, 2, 2);
  await client.failTask({
    taskId: ids[2],
    workerId: workers.e,
    attempt: 2,
    errorCode: "oom",
    errorMessage: "out of memory at step 12",
    retryable: false,
  });
  const rows = await taskRows(jobId);
  expect(rows.map((r) => [r.chunk_index, r.status, r.attempt])).toEqual([
    [0, "completed", 1],
    [1, "cancelled", 2],
    [2, "failed", 2],
    [3, "cancelled", 0],
  ]);
  return { jobId, ids, workers };
}

/** The attempts of each chunk of failingJob, as the API must tell them. */
function expectedAttempts(s: Scenario): Partial<TaskAttempt>[][] {
  return [
    [{ attempt: 1, workerId: s.workers.a, outcome: AttemptOutcome.COMPLETED, errorCode: "", retried: false }],
    [
      { attempt: 1, workerId: s.workers.b, outcome: AttemptOutcome.LEASE_EXPIRED, errorCode: "lease_expired", retried: true },
      { attempt: 2, workerId: s.workers.c, outcome: AttemptOutcome.CANCELLED, errorCode: "", retried: false },
    ],
    [
      {
        attempt: 1,
        workerId: s.workers.d,
        outcome: AttemptOutcome.FAILED,
        errorCode: "nan",
        errorMessage: "NaN in step 3117",
        retried: true,
      },
      {
        attempt: 2,
        workerId: s.workers.e,
        outcome: AttemptOutcome.FAILED,
        errorCode: "oom",
        errorMessage: "out of memory at step 12",
        retried: false,
      },
    ],
    [],
  ];
}

const transports: [string, () => Transport][] = [
  ["grpc (HTTP/2)", () => createGrpcTransport({ baseUrl: base })],
  ["grpc-web (HTTP/1.1)", () => createGrpcWebTransport({ baseUrl: base, httpVersion: "1.1" })],
  ["connect (HTTP/1.1)", () => createConnectTransport({ baseUrl: base, httpVersion: "1.1" })],
  ["connect (HTTP/2)", () => createConnectTransport({ baseUrl: base, httpVersion: "2" })],
];

describe.each(transports)("over %s", (label, makeTransport) => {
  let client: Client<typeof QueueService>;
  const workload = `insp_${label.replace(/[^a-z0-9]+/gi, "_").toLowerCase()}`.replace(/_+$/, "");
  let s: Scenario;

  beforeAll(async () => {
    client = createClient(QueueService, makeTransport());
    s = await failingJob(client, workload);
  });

  it("GetJob and the WatchJob snapshot of a failed job name the failing task, its chunk and error", async () => {
    const job = await client.getJob({ jobId: s.jobId });
    expect(job.job?.status).toBe(JobStatus.FAILED);
    expect(job.failure).toMatchObject({
      taskId: s.ids[2],
      chunkIndex: 2,
      errorCode: "oom",
      errorMessage: "out of memory at step 12",
      attempt: 2,
      workerId: s.workers.e,
    });
    expect(job.failure?.failedAt).toBeDefined();
    const messages = [];
    for await (const m of client.watchJob({ jobId: s.jobId })) messages.push(m);
    expect(messages).toHaveLength(1);
    expect(messages[0].update.case).toBe("snapshot");
    expect(messages[0].update.case === "snapshot" && messages[0].update.value.failure).toMatchObject({ chunkIndex: 2, errorCode: "oom" });
    // A job that did not fail has no failure.
    const other = await client.createJob({ workload, inputUri: "s3://insp/ok", inputSha256: sha("ok") });
    expect((await client.getJob({ jobId: other.job!.id })).failure).toBeUndefined();
    await client.cancelJob({ jobId: other.job!.id });
    expect((await client.getJob({ jobId: other.job!.id })).failure).toBeUndefined();
  });

  it("GetTask tells each attempt: its worker, when, how it ended, and its last progress", async () => {
    const expected = expectedAttempts(s);
    for (const chunk of [0, 1, 2, 3]) {
      const got = await client.getTask({ taskId: s.ids[chunk] });
      expect(got.task?.id).toBe(s.ids[chunk]);
      expect(got.task?.chunkIndex).toBe(chunk);
      expect(got.attempts).toHaveLength(expected[chunk].length);
      got.attempts.forEach((a, i) => {
        expect(a, `chunk ${chunk} attempt ${i + 1}`).toMatchObject(expected[chunk][i]);
        expect(a.leasedAt).toBeDefined();
        expect(a.endedAt).toBeDefined();
      });
    }
    const [, second] = (await client.getTask({ taskId: s.ids[1] })).attempts;
    expect(second.lastProgress).toMatchObject({ progress: 0.5, message: "half way" });
    expect((await client.getTask({ taskId: s.ids[1] })).attempts[0].lastProgress).toBeUndefined();
    // The attempts agree with the task rows: the last attempt is the task's current one.
    const rows = await taskRows(s.jobId);
    for (const r of rows) expect((await client.getTask({ taskId: r.id })).attempts.at(-1)?.attempt ?? 0).toBe(r.attempt);
  });

  it("GetTask of a running task shows its attempt as RUNNING, with no end", async () => {
    const job = await client.createJob({ workload, inputUri: "s3://insp/running", inputSha256: sha("running") });
    const [t] = (await client.claimTasks({ workerId: s.workers.a, workloads: [workload] })).tasks;
    expect(t.jobId).toBe(job.job!.id);
    const got = await client.getTask({ taskId: t.id });
    expect(got.attempts).toHaveLength(1);
    expect(got.attempts[0]).toMatchObject({ attempt: 1, workerId: s.workers.a, outcome: AttemptOutcome.RUNNING });
    expect(got.attempts[0].endedAt).toBeUndefined();
    await client.cancelJob({ jobId: job.job!.id });
    expect((await client.getTask({ taskId: t.id })).attempts[0].outcome).toBe(AttemptOutcome.CANCELLED);
  });

  it("ListTasks filters by status and pages in chunk order", async () => {
    const failed = await client.listTasks({ jobId: s.jobId, status: TaskStatus.FAILED });
    expect(failed.tasks.map((t) => t.task?.chunkIndex)).toEqual([2]);
    expect(failed.tasks[0].attempts.map((a) => [a.outcome, a.errorCode])).toEqual([
      [AttemptOutcome.FAILED, "nan"],
      [AttemptOutcome.FAILED, "oom"],
    ]);
    expect(failed.nextPageToken).toBe("");
    const cancelled = await client.listTasks({ jobId: s.jobId, status: TaskStatus.CANCELLED });
    expect(cancelled.tasks.map((t) => t.task?.chunkIndex)).toEqual([1, 3]);
    expect((await client.listTasks({ jobId: s.jobId, status: TaskStatus.PENDING })).tasks).toEqual([]);

    const first = await client.listTasks({ jobId: s.jobId, pageSize: 3 });
    expect(first.tasks.map((t) => t.task?.chunkIndex)).toEqual([0, 1, 2]);
    expect(first.nextPageToken).not.toBe("");
    const second = await client.listTasks({ jobId: s.jobId, pageSize: 3, pageToken: first.nextPageToken });
    expect(second.tasks.map((t) => t.task?.chunkIndex)).toEqual([3]);
    expect(second.nextPageToken).toBe("");
    const expected = expectedAttempts(s);
    [...first.tasks, ...second.tasks].forEach((t, chunk) => {
      expect(t.attempts.map((a) => a.outcome)).toEqual(expected[chunk].map((a) => a.outcome));
    });
    // A token is bound to its filter.
    const mixed = await rpcError(client.listTasks({ jobId: s.jobId, status: TaskStatus.FAILED, pageToken: first.nextPageToken }));
    expect(mixed.code).toBe(Code.InvalidArgument);
    expect(mixed.rawMessage).toContain("page_token");
  });

  it("an unknown job or task is NOT_FOUND; a malformed id is INVALID_ARGUMENT with a BadRequest detail", async () => {
    const job = await rpcError(client.listTasks({ jobId: randomUUID() }));
    expect(job.code).toBe(Code.NotFound);
    const task = await rpcError(client.getTask({ taskId: randomUUID() }));
    expect(task.code).toBe(Code.NotFound);
    expect(task.findDetails(RequestInfoSchema)).toHaveLength(1);
    const bad = await rpcError(client.getTask({ taskId: "chunk-3117" }));
    expect(bad.code).toBe(Code.InvalidArgument);
    expect(bad.findDetails(BadRequestSchema)[0]?.fieldViolations).toEqual([
      expect.objectContaining({ field: "task_id", description: "must be a UUID" }),
    ]);
    const missing = await rpcError(client.getTask({}));
    expect(missing.findDetails(BadRequestSchema)[0]?.fieldViolations.map((v) => [v.field, v.description])).toEqual([
      ["task_id", "is required"],
    ]);
  });

  it("a parameters-schema failure lists every violation with its path, as a BadRequest, and writes nothing", async () => {
    const before = await fingerprint();
    const err = await rpcError(
      client.createJob(
        { workload: SCHEMA_WORKLOAD, inputUri: "s3://insp/p", inputSha256: sha("p"), parameters: { lr: "fast", batch: 32, mode: "slow" } },
        { headers: { "x-request-id": `schema-${workload}` } },
      ),
    );
    expect(err.code).toBe(Code.InvalidArgument);
    const violations = err.findDetails(BadRequestSchema)[0]?.fieldViolations.map((v) => [v.field, v.description]);
    expect(violations).toEqual(
      expect.arrayContaining([
        ["parameters.model", "is required"],
        ["parameters.lr", "must be number"],
        ["parameters.batch", "is not allowed (the schema has no such property)"],
        ["parameters.mode", 'must be one of ["fast","exact"]'],
      ]),
    );
    expect(violations).toHaveLength(4);
    expect(err.rawMessage).toMatch(/^parameters: does not match the insp_schema schema \(4 problems\)/);
    expect(err.rawMessage).not.toContain("request_id");
    expect(err.findDetails(RequestInfoSchema).map((r) => r.requestId)).toEqual([`schema-${workload}`]);
    expect(await fingerprint()).toEqual(before);
  });

  it("a request breaking several fields lists every violation, each by its path", async () => {
    const before = await fingerprint();
    const lease = await rpcError(client.failTask({ taskId: "x", workerId: "", attempt: 0, errorCode: "Bad Code" }));
    expect(lease.code).toBe(Code.InvalidArgument);
    expect(lease.findDetails(BadRequestSchema)[0]?.fieldViolations.map((v) => v.field)).toEqual([
      "task_id",
      "worker_id",
      "attempt",
      "error_code",
    ]);
    expect(lease.rawMessage).toMatch(/^task_id: must be a UUID; worker_id: is required; attempt: is required .*; error_code: must match/);
    const chunks = await rpcError(
      client.createJob({ workload, tasks: [0, 1, 2].map((i) => ({ chunkIndex: i, inputUri: `s3://insp/${i}` })) }),
    );
    expect(chunks.findDetails(BadRequestSchema)[0]?.fieldViolations.map((v) => [v.field, v.description])).toEqual([
      ["tasks[0].input_sha256", "is required"],
      ["tasks[1].input_sha256", "is required"],
      ["tasks[2].input_sha256", "is required"],
    ]);
    const batch = await rpcError(
      client.completeTasks({
        results: [
          { taskId: s.ids[0], workerId: "w", attempt: 1, resultUri: "s3://x" },
          { taskId: "nope", workerId: "w", attempt: 1, resultUri: "s3://y", resultSha256: sha("y") },
        ],
      }),
    );
    expect(batch.findDetails(BadRequestSchema)[0]?.fieldViolations.map((v) => v.field)).toEqual([
      "results[0].result_sha256",
      "results[1].task_id",
    ]);
    expect(await fingerprint()).toEqual(before);
  });

  it("a missing attempt is required, an attempt ahead is not stale, and a result replay with other metrics is the same result", async () => {
    const job = await client.createJob({ workload, inputUri: "s3://insp/lease", inputSha256: sha("lease") });
    const [t] = (await client.claimTasks({ workerId: s.workers.b, workloads: [workload] })).tasks;
    expect(t.jobId).toBe(job.job!.id);
    const before = await fingerprint();
    const missing = await rpcError(client.renewLease({ taskId: t.id, workerId: s.workers.b }));
    expect(missing.code).toBe(Code.InvalidArgument);
    expect(missing.rawMessage).toMatch(/^attempt: is required/);
    expect(missing.findDetails(BadRequestSchema)[0]?.fieldViolations[0]?.field).toBe("attempt");
    const ahead = await rpcError(client.renewLease({ taskId: t.id, workerId: s.workers.b, attempt: 5 }));
    expect(ahead.code).toBe(Code.Aborted);
    expect(ahead.rawMessage).toContain("attempt 5");
    expect(ahead.rawMessage).toContain("never leased");
    expect(ahead.rawMessage).not.toContain("stale");
    expect(await fingerprint()).toEqual(before);

    const manifest = {
      taskId: t.id,
      workerId: s.workers.b,
      attempt: 1,
      resultUri: "s3://insp/out",
      resultSha256: sha("out"),
      metrics: { seconds: 12.5 },
    };
    const done = await client.completeTask(manifest);
    const replay = await client.completeTask({ ...manifest, metrics: { seconds: 13.1 } });
    expect(replay.task?.version).toBe(done.task?.version);
    expect(replay.task?.metrics).toEqual({ seconds: 12.5 });
    const conflict = await rpcError(client.completeTask({ ...manifest, resultSha256: sha("other") }));
    expect(conflict.code).toBe(Code.AlreadyExists);
    const { rows } = await pool.query("SELECT result_sha256, metrics, version FROM tasks WHERE id = $1", [t.id]);
    expect(rows[0]).toEqual({ result_sha256: sha("out"), metrics: { seconds: 12.5 }, version: done.task?.version });
  });

  it("WatchJob resumes after an event id: no snapshot, the events written after it, in order, to the end", async () => {
    const all = await eventIds(s.jobId);
    expect(all.length).toBeGreaterThan(8);
    const after = all[3];
    const resumed = [];
    for await (const m of client.watchJob({ jobId: s.jobId, afterEventId: BigInt(after) })) resumed.push(m);
    expect(resumed.every((m) => m.update.case === "event")).toBe(true);
    // As a live stream does, it ends with the event that made the job final (the cancellations its transaction wrote after it are not sent).
    const { rows: final } = await pool.query(
      "SELECT id::text FROM task_events WHERE job_id = $1 AND kind = 'job_status' AND status = 'failed'",
      [s.jobId],
    );
    const expected = (await eventIds(s.jobId, Number(after))).filter((id) => BigInt(id) <= BigInt(final[0].id));
    expect(resumed.map((m) => (m.update.case === "event" ? m.update.value.id.toString() : ""))).toEqual(expected);
    const last = resumed.at(-1)?.update;
    expect(last?.case === "event" && last.value.jobStatus).toBe(JobStatus.FAILED);
    // The failing event carries the worker's message.
    const failedEvent = resumed.find((m) => m.update.case === "event" && m.update.value.taskStatus === TaskStatus.FAILED);
    expect(failedEvent?.update.value).toMatchObject({ chunkIndex: 2, errorCode: "oom", errorMessage: "out of memory at step 12" });
    // An id that cannot be an event's is refused, naming the field.
    const negative = await rpcError(
      (async () => {
        for await (const m of client.watchJob({ jobId: s.jobId, afterEventId: -3n })) void m;
      })(),
    );
    expect(negative.code).toBe(Code.InvalidArgument);
    expect(negative.findDetails(BadRequestSchema)[0]?.fieldViolations.map((v) => v.field)).toEqual(["after_event_id"]);
    // Resumed after the last event: nothing is left, and the job is final.
    const none = [];
    for await (const m of client.watchJob({ jobId: s.jobId, afterEventId: BigInt(all.at(-1)!) })) none.push(m);
    expect(none).toEqual([]);
  });
});

describe("REST", () => {
  let client: Client<typeof QueueService>;
  let s: Scenario;
  const workload = "insp_rest";

  beforeAll(async () => {
    client = createClient(QueueService, createConnectTransport({ baseUrl: base, httpVersion: "1.1" }));
    s = await failingJob(client, workload);
  });

  it("GET /jobs/{id} names the failing task, chunk and error (proto field names)", async () => {
    const a = await rest("GET", `/jobs/${s.jobId}`);
    expect(a.status, a.text).toBe(200);
    expect(a.body.job.status).toBe("JOB_STATUS_FAILED");
    expect(a.body.failure).toMatchObject({
      task_id: s.ids[2],
      chunk_index: 2,
      error_code: "oom",
      error_message: "out of memory at step 12",
      attempt: 2,
      worker_id: s.workers.e,
    });
  });

  it("GET /jobs/{id}/tasks?status=failed, paging, and GET /tasks/{id} with attempts", async () => {
    const failed = await rest("GET", `/jobs/${s.jobId}/tasks?status=failed`);
    expect(failed.status, failed.text).toBe(200);
    expect(failed.body.tasks.map((t: { task: { chunk_index: number } }) => t.task.chunk_index)).toEqual([2]);
    expect(
      failed.body.tasks[0].attempts.map((a: Record<string, unknown>) => [a.worker_id, a.outcome, a.error_code, a.error_message, a.retried]),
    ).toEqual([
      [s.workers.d, "ATTEMPT_OUTCOME_FAILED", "nan", "NaN in step 3117", true],
      [s.workers.e, "ATTEMPT_OUTCOME_FAILED", "oom", "out of memory at step 12", false],
    ]);
    expect(failed.body.next_page_token).toBe("");
    expect((await rest("GET", `/jobs/${s.jobId}/tasks?status=TASK_STATUS_FAILED`)).body).toEqual(failed.body);

    const page1 = await rest("GET", `/jobs/${s.jobId}/tasks?page_size=2`);
    expect(page1.body.tasks.map((t: { task: { chunk_index: number } }) => t.task.chunk_index)).toEqual([0, 1]);
    const page2 = await rest("GET", `/jobs/${s.jobId}/tasks?page_size=2&page_token=${page1.body.next_page_token}`);
    expect(page2.body.tasks.map((t: { task: { chunk_index: number } }) => t.task.chunk_index)).toEqual([2, 3]);
    expect(page2.body.next_page_token).toBe("");

    const task = await rest("GET", `/tasks/${s.ids[1]}`);
    expect(task.status, task.text).toBe(200);
    expect(task.body.task.id).toBe(s.ids[1]);
    expect(task.body.attempts).toHaveLength(2);
    expect(task.body.attempts[0]).toMatchObject({
      attempt: 1,
      worker_id: s.workers.b,
      outcome: "ATTEMPT_OUTCOME_LEASE_EXPIRED",
      error_code: "lease_expired",
      retried: true,
    });
    expect(task.body.attempts[1]).toMatchObject({
      attempt: 2,
      worker_id: s.workers.c,
      outcome: "ATTEMPT_OUTCOME_CANCELLED",
      last_progress: { progress: 0.5, message: "half way" },
    });
    expect(typeof task.body.attempts[1].leased_at).toBe("string");
    expect(typeof task.body.attempts[1].ended_at).toBe("string");

    // GET /tasks/claim is still the claim route's (a wrong method), not a task id.
    expect((await rest("GET", "/tasks/claim")).status).toBe(405);
    const unknown = await rest("GET", `/tasks/${randomUUID()}`);
    expect(unknown.status).toBe(404);
    expect((await rest("GET", `/jobs/${randomUUID()}/tasks`)).status).toBe(404);
  });

  it("?status=done names the accepted values; the body lists the violation; the message has no request id", async () => {
    for (const path of ["/jobs?status=done", `/jobs/${s.jobId}/tasks?status=done`]) {
      const a = await rest("GET", path, undefined, { "x-request-id": "status-done" });
      expect(a.status, a.text).toBe(400);
      expect(a.body.error.code).toBe("invalid_argument");
      expect(a.body.error.request_id).toBe("status-done");
      const values = path.startsWith("/jobs?")
        ? "pending, running, completed, failed, cancelled"
        : "pending, leased, completed, failed, cancelled";
      expect(a.body.error.message).toMatch(new RegExp(`^status: "done" is not a value: must be one of ${values}`));
      expect(a.body.error.message).not.toContain("status-done");
      expect(a.body.error.violations).toEqual([{ field: "status", description: expect.stringContaining(values) }]);
    }
  });

  it("a parameters-schema failure lists every violation in the body; a missing attempt is required; nothing is written", async () => {
    const before = await fingerprint();
    const a = await rest("POST", "/jobs", {
      workload: SCHEMA_WORKLOAD,
      input_uri: "s3://insp/q",
      input_sha256: sha("q"),
      parameters: { lr: "x", batch: 1 },
    });
    expect(a.status, a.text).toBe(400);
    expect(a.body.error.violations).toEqual([
      { field: "parameters.model", description: "is required" },
      { field: "parameters.batch", description: "is not allowed (the schema has no such property)" },
      { field: "parameters.lr", description: "must be number" },
    ]);
    expect(a.body.error.message).toContain(
      "parameters.model is required; parameters.batch is not allowed (the schema has no such property); parameters.lr must be number",
    );

    // Per task: the path names the task.
    const tasks = await rest("POST", "/jobs", {
      workload: SCHEMA_WORKLOAD,
      parameters: { model: "m", lr: 0.1 },
      tasks: [{ chunk_index: 0, input_uri: "s3://insp/t0", input_sha256: sha("t0"), parameters: { lr: [1] } }],
    });
    expect(tasks.status, tasks.text).toBe(400);
    expect(tasks.body.error.violations).toEqual([{ field: "tasks[0].parameters.lr", description: "must be number" }]);

    const heartbeat = await rest("POST", `/tasks/${s.ids[0]}/heartbeat`, { worker_id: s.workers.a });
    expect(heartbeat.status).toBe(400);
    expect(heartbeat.body.error.message).toMatch(/^attempt: is required/);
    expect(heartbeat.body.error.violations).toEqual([{ field: "attempt", description: expect.stringMatching(/^is required/) }]);
    const noCode = await rest("POST", `/tasks/${s.ids[0]}/failure`, { worker_id: s.workers.a, attempt: 1 });
    expect(noCode.body.error.violations).toEqual([{ field: "error_code", description: "is required" }]);
    expect(await fingerprint()).toEqual(before);
  });

  it("a request breaking several fields lists every violation in the body", async () => {
    const before = await fingerprint();
    const a = await rest("POST", "/jobs", {
      workload,
      tasks: Array.from({ length: 25 }, (_, i) => ({ chunk_index: i, input_uri: `s3://insp/many/${i}` })),
    });
    expect(a.status, a.text).toBe(400);
    expect(a.body.error.violations).toHaveLength(20);
    expect(a.body.error.violations[19]).toEqual({ field: "tasks[19].input_sha256", description: "is required" });
    expect(a.body.error.message).toMatch(/^tasks\[0\]\.input_sha256: is required; tasks\[1\]\.input_sha256: is required; .*; and 5 more$/);
    const result = await rest("POST", `/tasks/${s.ids[0]}/result`, { worker_id: "w w", attempt: -1, result_sha256: "abc" });
    expect(result.body.error.violations.map((v: { field: string }) => v.field)).toEqual([
      "worker_id",
      "attempt",
      "result_uri",
      "result_sha256",
    ]);
    expect(await fingerprint()).toEqual(before);
  });

  it("at most 20 schema violations are listed, and the message counts them all", async () => {
    const many = Object.fromEntries(Array.from({ length: 30 }, (_, i) => [`extra_${i}`, i]));
    const a = await rest("POST", "/jobs", {
      workload: SCHEMA_WORKLOAD,
      input_uri: "s3://insp/m",
      input_sha256: sha("m"),
      parameters: { model: "m", lr: 1, ...many },
    });
    expect(a.status).toBe(400);
    expect(a.body.error.violations).toHaveLength(20);
    expect(a.body.error.message).toContain("(30 problems)");
    expect(a.body.error.message).toContain("and 10 more");
  });

  it("a result replay with other metrics is 200 and changes nothing; another checksum is 409", async () => {
    await client.createJob({ workload, inputUri: "s3://insp/rest-result", inputSha256: sha("rest-result") });
    const [t] = (await client.claimTasks({ workerId: "insp-rest-w", workloads: [workload] })).tasks;
    const body = {
      worker_id: "insp-rest-w",
      attempt: 1,
      result_uri: "s3://insp/rest-out",
      result_sha256: sha("rest-out"),
      metrics: { seconds: 1 },
    };
    const first = await rest("POST", `/tasks/${t.id}/result`, body);
    expect(first.status, first.text).toBe(200);
    const again = await rest("POST", `/tasks/${t.id}/result`, { ...body, metrics: { seconds: 2 } });
    expect(again.status, again.text).toBe(200);
    expect(again.body.task.version).toBe(first.body.task.version);
    expect(again.body.task.metrics).toEqual({ seconds: 1 });
    const conflict = await rest("POST", `/tasks/${t.id}/result`, { ...body, result_sha256: sha("else") });
    expect(conflict.status).toBe(409);
    expect(conflict.body.error.code).toBe("already_exists");
  });
});

/** A GET of an SSE route, read to its end: each event's `id:` (undefined when none) and parsed `data:`. */
function sse(
  path: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; events: { id?: string; data: unknown }[]; raw: string }> {
  return new Promise((resolve, reject) => {
    const req = http.get(base + path, { headers }, (res) => {
      let raw = "";
      res.setEncoding("utf8");
      res.on("data", (d: string) => (raw += d));
      res.on("end", () => {
        const events = raw
          .split("\n\n")
          .filter((block) => block.split("\n").some((l) => l.startsWith("data: ")))
          .map((block) => {
            const lines = block.split("\n");
            const id = lines.find((l) => l.startsWith("id: "))?.slice(4);
            const data = JSON.parse(lines.find((l) => l.startsWith("data: "))!.slice(6)) as unknown;
            return { id, data };
          });
        resolve({ status: res.statusCode ?? 0, events, raw });
      });
    });
    req.on("error", reject);
  });
}

describe("Server-Sent Events", () => {
  const workload = "insp_sse";
  let client: Client<typeof QueueService>;

  beforeAll(async () => {
    client = createClient(QueueService, createConnectTransport({ baseUrl: base, httpVersion: "2" }));
    await client.putWorkload({ name: workload });
  });

  it("sends an id: line per event (the event's id) and none for the snapshot", async () => {
    const jobId = (await client.createJob({ workload, inputUri: "s3://sse/1", inputSha256: sha("sse1") })).job!.id;
    const stream = sse(`/jobs/${jobId}/events`);
    // The stream registers a watcher before it reads the snapshot; drive the job once it has.
    for (let i = 0; i < 500 && (await pool.query("SELECT 1 FROM job_watchers WHERE job_id = $1", [jobId])).rowCount === 0; i++) {
      await new Promise((r) => setTimeout(r, 10));
    }
    const [t] = (await client.claimTasks({ workerId: "sse-w", workloads: [workload] })).tasks;
    await client.completeTask({ taskId: t.id, workerId: "sse-w", attempt: 1, resultUri: "s3://sse/out", resultSha256: sha("sse-out") });
    const { status, events } = await stream;
    expect(status).toBe(200);
    expect(events[0].id).toBeUndefined();
    expect(events[0].data).toHaveProperty("snapshot");
    const rest = events.slice(1);
    // The snapshot is read after the watcher registers, so it may already hold the lease's event, and
    // on a loaded machine the completion's too: then it shows the job completed and nothing follows.
    // Otherwise the events after it are the log's last ones, each with its id line.
    if (rest.length === 0) {
      expect(JSON.stringify(events[0].data)).toContain("JOB_STATUS_COMPLETED");
      return;
    }
    for (const e of rest) expect(e.id).toBe((e.data as { event: { id: string } }).event.id);
    const all = await eventIds(jobId);
    expect(rest.map((e) => e.id)).toEqual(all.slice(all.length - rest.length));
  });

  it("resumes after Last-Event-ID (and ?after_event_id=) with the events after it, without a snapshot", async () => {
    const jobId = (await client.createJob({ workload, inputUri: "s3://sse/2", inputSha256: sha("sse2") })).job!.id;
    const [t] = (await client.claimTasks({ workerId: "sse-w", workloads: [workload] })).tasks;
    await client.reportProgress({ taskId: t.id, workerId: "sse-w", attempt: 1, progress: 0.25 });
    await client.failTask({
      taskId: t.id,
      workerId: "sse-w",
      attempt: 1,
      errorCode: "oom",
      errorMessage: "out of memory",
      retryable: false,
    });
    const ids = await eventIds(jobId);
    expect(ids.length).toBeGreaterThanOrEqual(4);
    const resumed = await sse(`/jobs/${jobId}/events`, { "last-event-id": ids[0] });
    expect(resumed.status).toBe(200);
    expect(resumed.events.map((e) => e.id)).toEqual(ids.slice(1));
    expect(resumed.events.every((e) => "event" in (e.data as object))).toBe(true);
    const failed = resumed.events.find((e) => (e.data as { event: { task_status: string } }).event.task_status === "TASK_STATUS_FAILED");
    expect((failed?.data as { event: Record<string, unknown> }).event).toMatchObject({ error_code: "oom", error_message: "out of memory" });
    const byQuery = await sse(`/jobs/${jobId}/events?after_event_id=${ids[1]}`);
    expect(byQuery.events.map((e) => e.id)).toEqual(ids.slice(2));
    // A fresh stream of the failed job: its snapshot names the failure.
    const fresh = await sse(`/jobs/${jobId}/events`);
    expect(fresh.events).toHaveLength(1);
    expect((fresh.events[0].data as { snapshot: { failure: Record<string, unknown> } }).snapshot.failure).toMatchObject({
      task_id: t.id,
      error_code: "oom",
    });
  });

  it("a resumed stream with nothing new yet answers 200 at once and sends the next events as they commit", async () => {
    const jobId = (await client.createJob({ workload, inputUri: "s3://sse/4", inputSha256: sha("sse4") })).job!.id;
    const [t] = (await client.claimTasks({ workerId: "sse-w", workloads: [workload] })).tasks;
    const seen = await eventIds(jobId);
    const { status, body } = await new Promise<{ status: number; body: Promise<string> }>((resolve, reject) => {
      http
        .get(`${base}/jobs/${jobId}/events`, { headers: { "last-event-id": seen.at(-1)! } }, (res) => {
          let raw = "";
          res.setEncoding("utf8");
          res.on("data", (d: string) => (raw += d));
          resolve({ status: res.statusCode ?? 0, body: new Promise((done) => res.on("end", () => done(raw))) });
        })
        .on("error", reject);
    });
    // The status line came before anything happened to the job.
    expect(status).toBe(200);
    expect(await eventIds(jobId)).toEqual(seen);
    await client.completeTask({ taskId: t.id, workerId: "sse-w", attempt: 1, resultUri: "s3://sse/out4", resultSha256: sha("sse-out4") });
    const ids = [...(await body).matchAll(/^id: (\d+)$/gm)].map((m) => m[1]);
    expect(ids).toEqual(await eventIds(jobId, Number(seen.at(-1))));
    expect(ids.length).toBeGreaterThanOrEqual(2);
  });

  it("refuses a Last-Event-ID that is not an event id with a 400 naming the field", async () => {
    const jobId = (await client.createJob({ workload, inputUri: "s3://sse/3", inputSha256: sha("sse3") })).job!.id;
    const a = await rest("GET", `/jobs/${jobId}/events`, undefined, { "last-event-id": "yesterday" });
    expect(a.status, a.text).toBe(400);
    expect(a.body.error.message).toContain("after_event_id");
    const negative = await rest("GET", `/jobs/${jobId}/events?after_event_id=-5`);
    expect(negative.status, negative.text).toBe(400);
    expect(negative.body.error.violations?.[0]?.field).toBe("after_event_id");
    await client.cancelJob({ jobId });
  });
});

describe("ConnectError details", () => {
  it("travel in grpc-status-details-bin as a google.rpc.Status (what grpcio-status parses) with BadRequest and RequestInfo", async () => {
    const client = createClient(QueueService, createGrpcTransport({ baseUrl: base }));
    const err = await rpcError(client.getTask({ taskId: "nope" }, { headers: { "x-request-id": "details-bin" } }));
    expect(err.code).toBe(Code.InvalidArgument);
    const bin = err.metadata.get("grpc-status-details-bin");
    expect(bin).toBeTruthy();
    const status = fromBinary(StatusSchema, Buffer.from(bin!, "base64"));
    expect(status.code).toBe(Code.InvalidArgument);
    expect(status.message).toBe("task_id: must be a UUID");
    expect(status.details.map((d) => d.typeUrl)).toEqual([
      "type.googleapis.com/google.rpc.BadRequest",
      "type.googleapis.com/google.rpc.RequestInfo",
    ]);
    expect(fromBinary(RequestInfoSchema, status.details[1].value).requestId).toBe("details-bin");
    expect(fromBinary(BadRequestSchema, status.details[0].value).fieldViolations.map((v) => v.field)).toEqual(["task_id"]);
  });
});

describe("attempts from the event log (store)", () => {
  const workload = "insp_store";

  beforeAll(async () => {
    await queue.putWorkload({ name: workload, maxAttempts: 3, leaseSeconds: 60 });
  });

  it("a claim that takes an expired lease back ends the previous attempt as LEASE_EXPIRED; progress belongs to its attempt", async () => {
    const { job, tasks } = await queue.createJob({ workload, inputUri: "s3://insp/store", inputSha256: sha("store") });
    const [first] = await queue.claimTasks({ workerId: "store-a", workloads: [workload] });
    await queue.reportProgress({ taskId: first.id, workerId: "store-a", attempt: 1, progress: 0.3, message: "a third" });
    await queue.reportProgress({ taskId: first.id, workerId: "store-a", attempt: 1, progress: 0.6, message: "two thirds" });
    // The lease runs out and another worker's claim takes the task back (no reaper in between).
    await pool.query("UPDATE tasks SET lease_expires_at = now() - interval '1 second' WHERE id = $1", [first.id]);
    const [second] = await queue.claimTasks({ workerId: "store-b", workloads: [workload] });
    expect([second.id, second.attempt]).toEqual([first.id, 2]);
    const { rows } = await pool.query(
      "SELECT status, previous_status, attempt FROM task_events WHERE task_id = $1 AND kind = 'task_status' ORDER BY id",
      [first.id],
    );
    expect(rows.at(-1)).toEqual({ status: "leased", previous_status: "leased", attempt: 2 });

    const detail = await queue.getTask(first.id);
    expect(detail.task.id).toBe(tasks[0].id);
    expect(detail.attempts.map((a) => [a.attempt, a.workerId, a.outcome, a.errorCode, a.retried])).toEqual([
      [1, "store-a", "lease_expired", "lease_expired", true],
      [2, "store-b", "running", null, false],
    ]);
    expect(detail.attempts[0].lastProgress).toMatchObject({ progress: 0.6, message: "two thirds" });
    expect(detail.attempts[0].endedAt?.getTime()).toBe(detail.attempts[1].leasedAt.getTime());
    expect(detail.attempts[1].lastProgress).toBeNull();

    await queue.completeTask({
      taskId: first.id,
      workerId: "store-b",
      attempt: 2,
      resultUri: "s3://insp/store-out",
      resultSha256: sha("store-out"),
    });
    const page = await queue.listTasks({ jobId: job.id, status: "completed" });
    expect(page.tasks.map((t) => t.attempts.map((a) => a.outcome))).toEqual([["lease_expired", "completed"]]);
    expect((await queue.getJobStatus(job.id)).failure).toBeNull();
  });

  it("a retried job keeps its earlier attempts; its failure goes away and comes back with the new one", async () => {
    const { job, tasks } = await queue.createJob({ workload, inputUri: "s3://insp/retry", inputSha256: sha("retry"), maxAttempts: 1 });
    const [t] = await queue.claimTasks({ workerId: "store-c", workloads: [workload] });
    expect(t.id).toBe(tasks[0].id);
    await queue.failTask({ taskId: t.id, workerId: "store-c", attempt: 1, errorCode: "disk_full", errorMessage: "no space left" });
    expect((await queue.getJobStatus(job.id)).failure).toMatchObject({
      taskId: t.id,
      errorCode: "disk_full",
      errorMessage: "no space left",
      attempt: 1,
      workerId: "store-c",
    });
    await queue.retryJob({ jobId: job.id, maxAttempts: 1 });
    expect((await queue.getJobStatus(job.id)).failure).toBeNull();
    const [again] = await queue.claimTasks({ workerId: "store-d", workloads: [workload] });
    await queue.failTask({
      taskId: again.id,
      workerId: "store-d",
      attempt: 2,
      errorCode: "segfault",
      errorMessage: "signal 11",
      retryable: false,
    });
    expect((await queue.getJobStatus(job.id)).failure).toMatchObject({ errorCode: "segfault", attempt: 2, workerId: "store-d" });
    expect((await queue.getTask(t.id)).attempts.map((a) => [a.workerId, a.outcome, a.errorCode, a.errorMessage, a.retried])).toEqual([
      ["store-c", "failed", "disk_full", "no space left", false],
      ["store-d", "failed", "segfault", "signal 11", false],
    ]);
  });

  it("a task nobody claimed fails with 'expired' and no attempt; the job's failure says so", async () => {
    const name = "insp_expiring";
    await queue.putWorkload({ name, maxPendingSeconds: 60 });
    const { job, tasks } = await queue.createJob({ workload: name, inputUri: "s3://insp/expiring", inputSha256: sha("expiring") });
    await pool.query(
      "UPDATE tasks SET created_at = now() - interval '2 minutes', run_after = now() - interval '2 minutes' WHERE job_id = $1",
      [job.id],
    );
    expect((await queue.maintain()).expiredPending).toBe(1);
    const status = await queue.getJobStatus(job.id);
    expect(status.job.status).toBe("failed");
    expect(status.failure).toMatchObject({ taskId: tasks[0].id, chunkIndex: 0, errorCode: "expired", attempt: 0, workerId: null });
    expect((await queue.getTask(tasks[0].id)).attempts).toEqual([]);
  });
});

describe("plans", () => {
  async function plan(text: string, values: unknown[]): Promise<string> {
    const client = await pool.connect();
    try {
      const { rows } = await client.query(`EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) ${text}`, values);
      return rows.map((r) => r["QUERY PLAN"]).join("\n");
    } finally {
      client.release();
    }
  }

  it("failed tasks are read off their partial index, every task off the job's chunk order, whatever the job holds", async () => {
    const workload = "insp_plans";
    await queue.putWorkload({ name: workload });
    const { job } = await queue.createJob({ workload, inputUri: "s3://insp/plans", inputSha256: sha("plans") });
    await pool.query(
      `INSERT INTO tasks (job_id, chunk_index, workload, input_uri, input_sha256, max_attempts, status, completed_at, result_uri, result_sha256)
       SELECT $1, g, $2, 's3://insp/plans/' || g, $3, 3, 'completed', now(), 's3://insp/plans/out/' || g, $3 FROM generate_series(1, 5000) g`,
      [job.id, workload, sha("plans")],
    );
    await pool.query("UPDATE tasks SET status = 'failed', error_code = 'oom' WHERE job_id = $1 AND chunk_index IN (3117, 4000)", [job.id]);
    await pool.query("ANALYZE tasks");
    const failed = await plan(LIST_FAILED_TASKS, [job.id, -1, 101, null]);
    expect(failed).toMatch(/Index Scan using tasks_job_failed_idx on tasks/);
    expect(failed).not.toMatch(/Sort \(|Seq Scan|Rows Removed by Filter: \d{3,}/);
    const failure = await plan(JOB_FAILURE, [job.id]);
    expect(failure).toMatch(/tasks_job_failed_idx/);
    expect(failure).not.toMatch(/Seq Scan/);
    const page = await plan(LIST_TASKS, [job.id, 100, 101, null]);
    expect(page).toMatch(/Index Scan using tasks_job_chunk_idx on tasks/);
    expect(page).not.toMatch(/Sort \(|Seq Scan/);
    expect((await queue.listTasks({ jobId: job.id, status: "failed" })).tasks.map((t) => t.task.chunkIndex)).toEqual([3117, 4000]);
  });

  it("attempts are read through the job's events index", async () => {
    const { rows } = await pool.query("SELECT job_id, id FROM tasks WHERE workload = 'insp_plans' ORDER BY chunk_index LIMIT 1");
    const p = await plan(TASK_ATTEMPT_EVENTS, [rows[0].job_id, [rows[0].id]]);
    // The log is in time partitions, each read through its own (job_id, xid) index. The
    // coordinator's sessions leave sequential scans on, so a partition of a few pages (one created
    // ahead, the test's own few events) may be read whole, which costs what an index descent does.
    const nodes = p.split(/\n(?=\s*->)/).filter((n) => / on task_events/.test(n.split("\n")[0]));
    expect(nodes.length).toBeGreaterThan(0);
    const { rows: sizes } = await pool.query<{ name: string; pages: number }>(
      `SELECT c.relname AS name, (pg_relation_size(c.oid) / current_setting('block_size')::int)::int AS pages
       FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'task_events'::regclass`,
    );
    const pages = new Map(sizes.map((r) => [r.name, r.pages]));
    for (const n of nodes) {
      const relation = / on (\S+)/.exec(n)![1];
      if (/Seq Scan/.test(n)) expect(pages.get(relation), n).toBeLessThanOrEqual(8);
      else expect(n).toMatch(/Index Scan using \S*job_(id_)?xid_idx on task_events/);
    }
  });
});
