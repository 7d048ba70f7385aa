// run_at and the finalizer through the transports: REST JSON (run_at as an RFC 3339 string,
// JOB_STATUS_SCHEDULED, finalizer_job_id / parent_job_id), gRPC and Connect (Timestamp messages),
// and bad values refused with a 400 / INVALID_ARGUMENT naming the field, with nothing written.
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { Code, createClient, type Client, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BadRequestSchema } from "../../gen/google/rpc/error_details_pb.js";
import { JobStatus, QueueService } from "../../gen/leasehold/queue/v1/queue_pb.js";
import { PostgresQueue } from "../../src/store/postgres/store.js";
import { restCall, type RestAnswer } from "../support/rest.js";
import { rpcError } from "../support/rpc.js";
import { sha, queueFixture, type QueueFixture } from "../support/queue.js";
import { apiServerFixture, type ApiServerFixture } from "../support/api-server.js";

const W = "dfa_chunks";
const STITCH = "dfa_stitch";
const YEAR_AND_A_DAY_MS = 366 * 86_400_000;

let pool: pg.Pool;
let fx: QueueFixture;
let queue: PostgresQueue;
let api: ApiServerFixture;
let base: string;

const rest = (method: string, path: string, body?: unknown): Promise<RestAnswer> => restCall(base, method, path, body);

async function written(): Promise<{ jobs: number; tasks: number; wakes: number }> {
  const { rows } = await pool.query(
    `SELECT (SELECT count(*)::int FROM jobs) AS jobs, (SELECT count(*)::int FROM tasks) AS tasks, (SELECT count(*)::int FROM due_wakeups) AS wakes`,
  );
  return rows[0];
}

beforeAll(async () => {
  fx = await queueFixture({ defaultLeaseSeconds: 60, defaultMaxAttempts: 3, maxTasksPerJob: 50 }, { max: 6 });
  pool = fx.pool;
  queue = fx.queue;
  api = await apiServerFixture({ queue });
  base = api.base;
  await queue.putWorkload({ name: W });
  await queue.putWorkload({ name: STITCH });
});

afterAll(async () => {
  queue?.stopTimers();
  await api?.close();
  await fx?.close();
});

describe("REST", () => {
  it("takes run_at as an RFC 3339 string and shows the job scheduled, then the finalizer linked both ways", async () => {
    const runAt = new Date(Date.now() + 3_600_000);
    const made = await rest("POST", "/jobs", {
      workload: W,
      input_uri: "s3://a",
      input_sha256: sha("a"),
      run_at: runAt.toISOString(),
      finalizer: { workload: STITCH, parameters: { out: "s3://m" }, run_on_failure: true },
    });
    expect(made.status, made.text).toBe(201);
    expect(made.body.job).toMatchObject({ status: "JOB_STATUS_SCHEDULED", run_at: runAt.toISOString() });
    expect(made.body.job.finalizer).toMatchObject({ workload: STITCH, parameters: { out: "s3://m" }, run_on_failure: true });
    const id = made.body.job.id as string;
    const got = await rest("GET", `/jobs/${id}`);
    expect(got.body.job.status).toBe("JOB_STATUS_SCHEDULED");
    const listed = await rest("GET", `/jobs?status=JOB_STATUS_SCHEDULED&workload=${W}`);
    expect(listed.body.jobs.map((j: { id: string }) => j.id)).toEqual([id]);

    // Cancelled before it is due: the finalizer (run_on_failure) is enqueued, and both link.
    const cancelled = await rest("POST", `/jobs/${id}/cancel`, { reason: "not needed" });
    expect(cancelled.status, cancelled.text).toBe(200);
    const parent = (await rest("GET", `/jobs/${id}`)).body.job;
    expect(parent.status).toBe("JOB_STATUS_CANCELLED");
    expect(parent.finalizer_job_id).toMatch(/^[0-9a-f-]{36}$/);
    const fin = (await rest("GET", `/jobs/${parent.finalizer_job_id}`)).body.job;
    expect(fin).toMatchObject({ workload: STITCH, parent_job_id: id });
    expect(fin.parameters).toEqual({ out: "s3://m", parent_job_id: id, parent_status: "cancelled" });
  });

  it("refuses bad run_at and finalizer values with a 400 naming the field, writing nothing", async () => {
    const before = await written();
    const job = { workload: W, input_uri: "s3://b", input_sha256: sha("b") };
    const bad: [Record<string, unknown>, string][] = [
      [{ ...job, run_at: new Date(Date.now() + YEAR_AND_A_DAY_MS).toISOString() }, "run_at"],
      [
        { workload: W, tasks: [{ chunk_index: 0, input_uri: "s3://b", input_sha256: sha("b"), run_at: "2999-01-01T00:00:00Z" }] },
        "tasks[0].run_at",
      ],
      [{ ...job, run_at: "tomorrow" }, "run_at"],
      [{ ...job, finalizer: { parameters: {} } }, "finalizer.workload"],
    ];
    for (const [body, field] of bad) {
      const a = await rest("POST", "/jobs", body);
      expect(a.status, a.text).toBe(400);
      expect(a.body.error.code).toBe("invalid_argument");
      expect(a.headers.get("x-request-id")).toBeTruthy();
      expect(a.body.error.violations.map((v: { field: string }) => v.field)).toEqual([field]);
    }
    // A finalizer naming a workload nobody registered is 404, as an unknown job workload is.
    const unknown = await rest("POST", "/jobs", { ...job, finalizer: { workload: "dfa_nope" } });
    expect(unknown.status, unknown.text).toBe(404);
    expect(unknown.body.error).toMatchObject({ code: "not_found", reason: "WORKLOAD_NOT_FOUND" });
    expect(await written()).toEqual(before);
  });
});

const transports: [string, () => Transport][] = [
  ["gRPC", () => createGrpcTransport({ baseUrl: base })],
  ["Connect", () => createConnectTransport({ baseUrl: base, httpVersion: "1.1" })],
];

describe.each(transports)("%s", (_label, transport) => {
  let client: Client<typeof QueueService>;

  beforeAll(() => {
    client = createClient(QueueService, transport());
  });

  it("takes run_at and a finalizer, shows the job scheduled, and refuses bad values naming the field, writing nothing", async () => {
    const runAt = new Date(Date.now() + 3_600_000);
    const { job } = await client.createJob({
      workload: W,
      inputUri: "s3://g",
      inputSha256: sha("g"),
      runAt: timestampFromDate(runAt),
      finalizer: { workload: STITCH },
    });
    expect(job?.status).toBe(JobStatus.SCHEDULED);
    expect(job?.finalizer?.workload).toBe(STITCH);
    expect((await client.getJob({ jobId: job!.id })).job?.status).toBe(JobStatus.SCHEDULED);

    const before = await written();
    const far = timestampFromDate(new Date(Date.now() + YEAR_AND_A_DAY_MS));
    const bad: [Promise<unknown>, string][] = [
      [client.createJob({ workload: W, inputUri: "s3://h", inputSha256: sha("h"), runAt: far }), "run_at"],
      [
        client.createJob({ workload: W, tasks: [{ chunkIndex: 0, inputUri: "s3://h", inputSha256: sha("h"), runAt: far }] }),
        "tasks[0].run_at",
      ],
    ];
    for (const [call, field] of bad) {
      const err = await rpcError(call);
      expect(err.code).toBe(Code.InvalidArgument);
      expect(err.findDetails(BadRequestSchema)[0]?.fieldViolations.map((v) => v.field)).toEqual([field]);
    }
    const unknown = await rpcError(
      client.createJob({ workload: W, inputUri: "s3://h", inputSha256: sha("h"), finalizer: { workload: "dfa_nope" } }),
    );
    expect(unknown.code).toBe(Code.NotFound);
    expect(unknown.rawMessage).toContain("finalizer.workload");
    expect(await written()).toEqual(before);
  });
});
