// CreateJob's view (JobView, AIP-157): JOB_VIEW_BASIC answers the job alone, UNSPECIFIED and
// JOB_VIEW_FULL the job with its tasks, on every transport: REST (the body's `view`, short names
// too), gRPC, Connect JSON and binary, and gRPC-Web. Every job keeps all its tasks in the
// database whatever the view; the one-statement, the COPY (1,000 tasks and more) and the
// coalesced one-task paths answer alike, and so does an idempotent replay (which need not read
// the tasks back). A bad value is refused naming the field, with nothing written.
import { Code, createClient, type Client, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BadRequestSchema } from "../../gen/google/rpc/error_details_pb.js";
import { JobView, QueueService } from "../../gen/leasehold/queue/v1/queue_pb.js";
import { restCall, type RestAnswer } from "../support/rest.js";
import { rpcError } from "../support/rpc.js";
import { sha, queueFixture, type QueueFixture } from "../support/queue.js";
import { apiServerFixture, type ApiServerFixture } from "../support/api-server.js";

const W = "cjv_render";

let pool: pg.Pool;
let fx: QueueFixture;
let api: ApiServerFixture;
let base: string;

const rest = (method: string, path: string, body?: unknown): Promise<RestAnswer> => restCall(base, method, path, body);

async function counts(): Promise<{ jobs: number; tasks: number }> {
  const { rows } = await pool.query("SELECT (SELECT count(*)::int FROM jobs) AS jobs, (SELECT count(*)::int FROM tasks) AS tasks");
  return rows[0];
}

async function tasksOf(jobId: string): Promise<number[]> {
  const { rows } = await pool.query<{ chunk_index: number }>("SELECT chunk_index FROM tasks WHERE job_id = $1 ORDER BY chunk_index", [
    jobId,
  ]);
  return rows.map((r) => r.chunk_index);
}

const specs = (n: number, tag: string) =>
  Array.from({ length: n }, (_, i) => ({ chunk_index: i, input_uri: `s3://in/${tag}/${i}`, input_sha256: sha(`${tag}${i}`) }));

beforeAll(async () => {
  fx = await queueFixture({ defaultLeaseSeconds: 60, defaultMaxAttempts: 3, maxTasksPerJob: 2000 }, { max: 6 });
  pool = fx.pool;
  api = await apiServerFixture({ queue: fx.queue, maxBodyBytes: 8 * 1024 * 1024 });
  base = api.base;
  expect((await rest("PUT", `/workloads/${W}`, {})).status).toBe(200);
});

afterAll(async () => {
  await api?.close();
  await fx?.close();
});

describe("REST", () => {
  it("answers the job alone for view basic, the tasks otherwise; every task is written either way", async () => {
    for (const [view, listed] of [
      ["basic", false],
      ["JOB_VIEW_BASIC", false],
      ["full", true],
      ["JOB_VIEW_FULL", true],
      ["JOB_VIEW_UNSPECIFIED", true],
      [undefined, true],
    ] as const) {
      // 3 tasks (one statement), 1,200 (COPY).
      for (const n of [3, 1200]) {
        const a = await rest("POST", "/jobs", { workload: W, tasks: specs(n, `${view}-${n}`), ...(view === undefined ? {} : { view }) });
        expect(a.status, a.text.slice(0, 200)).toBe(201);
        expect(a.body.job).toMatchObject({ workload: W, status: "JOB_STATUS_PENDING" });
        expect(a.body.tasks, `${view} ${n}`).toHaveLength(listed ? n : 0);
        expect(await tasksOf(a.body.job.id)).toEqual(Array.from({ length: n }, (_, i) => i));
      }
    }
  });

  it("one-task jobs sent together (one coalesced statement) answer alike", async () => {
    const answers = await Promise.all(
      Array.from({ length: 12 }, (_, i) =>
        rest("POST", "/jobs", {
          workload: W,
          input_uri: `s3://one/${i}`,
          input_sha256: sha(`one${i}`),
          ...(i % 2 === 0 ? { view: "basic" } : {}),
        }),
      ),
    );
    for (const [i, a] of answers.entries()) {
      expect(a.status, a.text).toBe(201);
      expect(a.body.tasks).toHaveLength(i % 2 === 0 ? 0 : 1);
      expect(await tasksOf(a.body.job.id)).toEqual([0]);
    }
  });

  it("an idempotent replay may ask another view: the same job, with or without its tasks", async () => {
    const body = { workload: W, tasks: specs(4, "replay"), idempotency_key: "cjv-replay" };
    const first = await rest("POST", "/jobs", { ...body, view: "basic" });
    expect(first.status, first.text).toBe(201);
    expect(first.body.tasks).toEqual([]);
    const full = await rest("POST", "/jobs", body);
    expect(full.status, full.text).toBe(200);
    expect(full.body.job.id).toBe(first.body.job.id);
    expect(full.body.tasks.map((t: { chunk_index: number }) => t.chunk_index)).toEqual([0, 1, 2, 3]);
    const basic = await rest("POST", "/jobs", { ...body, view: "basic" });
    expect(basic.status, basic.text).toBe(200);
    expect(basic.body).toEqual({ job: full.body.job, tasks: [] });
  });

  it("refuses a bad view with a 400 naming the field, writing nothing", async () => {
    const before = await counts();
    for (const view of ["sometimes", "JOB_VIEW_SOME", 7, -1, true]) {
      const a = await rest("POST", "/jobs", { workload: W, input_uri: "s3://bad", input_sha256: sha("bad"), view });
      expect(a.status, `${JSON.stringify(view)}: ${a.text}`).toBe(400);
      expect(a.body.error.code).toBe("invalid_argument");
      expect(a.body.error.message).toContain("view");
      expect(a.body.error.violations.map((v: { field: string }) => v.field)).toEqual(["view"]);
      expect(a.body.error.request_id).toEqual(expect.any(String));
    }
    expect(await counts()).toEqual(before);
  });
});

const transports: [string, () => Transport][] = [
  ["gRPC", () => createGrpcTransport({ baseUrl: base })],
  ["Connect JSON", () => createConnectTransport({ baseUrl: base, httpVersion: "1.1" })],
  ["Connect binary", () => createConnectTransport({ baseUrl: base, httpVersion: "2", useBinaryFormat: true })],
  ["gRPC-Web", () => createGrpcWebTransport({ baseUrl: base, httpVersion: "1.1" })],
];

describe.each(transports)("%s", (label, transport) => {
  let client: Client<typeof QueueService>;
  const tag = label.replace(/\W/g, "").toLowerCase();

  beforeAll(() => {
    client = createClient(QueueService, transport());
  });

  it("answers the job alone for JOB_VIEW_BASIC, with its tasks for FULL and unset", async () => {
    const tasks = (v: string) =>
      [0, 1, 2].map((i) => ({ chunkIndex: i, inputUri: `s3://in/${tag}/${v}/${i}`, inputSha256: sha(`${tag}${v}${i}`) }));
    const basic = await client.createJob({ workload: W, tasks: tasks("b"), view: JobView.BASIC });
    expect(basic.job?.workload).toBe(W);
    expect(basic.tasks).toEqual([]);
    expect(await tasksOf(basic.job!.id)).toEqual([0, 1, 2]);
    for (const view of [JobView.FULL, JobView.UNSPECIFIED]) {
      const full = await client.createJob({ workload: W, tasks: tasks(`f${view}`), view });
      expect(full.tasks.map((t) => t.chunkIndex)).toEqual([0, 1, 2]);
    }
  });

  it("refuses an unknown view INVALID_ARGUMENT with a BadRequest naming the field, writing nothing", async () => {
    const before = await counts();
    for (const view of [3, 99] as unknown as JobView[]) {
      const err = await rpcError(client.createJob({ workload: W, inputUri: "s3://bad", inputSha256: sha("bad"), view }));
      expect(err.code).toBe(Code.InvalidArgument);
      expect(err.rawMessage).toContain("view");
      expect(err.findDetails(BadRequestSchema)[0]?.fieldViolations.map((v) => v.field)).toEqual(["view"]);
    }
    expect(await counts()).toEqual(before);
  });
});

describe("Connect JSON by hand", () => {
  it("refuses a view name that is not one, naming the field", async () => {
    const before = await counts();
    const res = await fetch(`${base}/leasehold.queue.v1.QueueService/CreateJob`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ workload: W, input_uri: "s3://bad", input_sha256: sha("bad"), view: "JOB_VIEW_SOME" }),
    });
    const body = (await res.json()) as { code: string; message: string };
    expect(res.status).toBe(400);
    expect(body.code).toBe("invalid_argument");
    expect(body.message).toContain("view");
    expect(await counts()).toEqual(before);
  });
});
