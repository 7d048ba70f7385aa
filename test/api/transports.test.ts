// The requests the direct unary paths (src/api/direct/) leave to connect-es' router, answered for
// real: gzip-compressed gRPC and Connect requests, Connect GET, Connect binary, gRPC-Web, each
// from connect-es' clients and, where a raw request says more, by hand. Every case runs against a
// server with the direct paths on and one with DIRECT_UNARY's switch off (everything through the
// router), over a real PostgreSQL; the answers and the rows must be the same.
import http2 from "node:http2";
import { gunzipSync, gzipSync } from "node:zlib";
import { fromBinary, toBinary, create } from "@bufbuild/protobuf";
import { createClient, type Client, type Transport } from "@connectrpc/connect";
import { compressionGzip, createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  ClaimTasksRequestSchema,
  ClaimTasksResponseSchema,
  JobStatus,
  QueueService,
  TaskStatus,
} from "../../gen/leasehold/queue/v1/queue_pb.js";
import { parseDirectUnary, ConfigError } from "../../src/config/index.js";
import { apiServerFixture, type ApiServerFixture } from "../support/api-server.js";
import { sha, queueFixture, type QueueFixture } from "../support/queue.js";

let pool: pg.Pool;
let fx: QueueFixture;
const servers: ApiServerFixture[] = [];
const bases = new Map<boolean, string>();

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
  for (const directUnary of [true, false]) {
    const api = await apiServerFixture({ queue, directUnary });
    servers.push(api);
    bases.set(directUnary, api.base);
  }
});

afterAll(async () => {
  for (const s of servers) await s.close();
  await fx?.close();
});

async function taskRow(id: string): Promise<{ status: string; result_uri: string | null }> {
  const { rows } = await pool.query<{ status: string; result_uri: string | null }>("SELECT status, result_uri FROM tasks WHERE id = $1", [
    id,
  ]);
  return rows[0];
}

/**
 * A job of three tasks (parameters with text outside ASCII), every task claimed and completed,
 * then read back: the whole unary surface a worker and a submitter use, over one transport.
 */
async function roundTrip(client: Client<typeof QueueService>, workload: string): Promise<void> {
  await client.putWorkload({ name: workload, maxAttempts: 2, leaseSeconds: 30 });
  const created = await client.createJob({
    workload,
    tasks: [0, 1, 2].map((i) => ({
      chunkIndex: i,
      inputUri: `s3://in/${workload}/${i}`,
      inputSha256: sha(`${workload}-${i}`),
      parameters: { label: `Grüße ✓ 🚀 ${i}`, n: i },
    })),
  });
  const jobId = created.job!.id;
  expect(created.tasks).toHaveLength(3);
  expect(created.tasks[1].parameters).toEqual({ label: "Grüße ✓ 🚀 1", n: 1 });

  const claimed = await client.claimTasks({ workerId: `w-${workload}`, workloads: [workload], maxTasks: 3 });
  expect(claimed.tasks.map((t) => t.chunkIndex).sort()).toEqual([0, 1, 2]);
  for (const t of claimed.tasks) {
    const done = await client.completeTask({
      taskId: t.id,
      workerId: `w-${workload}`,
      attempt: t.attempt,
      resultUri: `s3://out/${t.id}`,
      resultSha256: sha(t.id),
    });
    expect(done.task?.status).toBe(TaskStatus.COMPLETED);
    expect(await taskRow(t.id)).toEqual({ status: "completed", result_uri: `s3://out/${t.id}` });
  }
  const job = await client.getJob({ jobId });
  expect(job.job?.status).toBe(JobStatus.COMPLETED);
  expect(job.totalTasks).toBe(3);
  expect(job.progress).toBe(1);
  const results = await client.listCompletedResults({ jobId });
  expect(results.results.map((r) => r.chunkIndex)).toEqual([0, 1, 2]);
  const tasks = await client.listTasks({ jobId });
  expect(tasks.tasks.map((t) => t.task?.parameters)).toEqual([0, 1, 2].map((i) => ({ label: `Grüße ✓ 🚀 ${i}`, n: i })));
}

const cases: [string, (base: string) => Transport][] = [
  ["gRPC, gzip-compressed", (baseUrl) => createGrpcTransport({ baseUrl, sendCompression: compressionGzip, compressMinBytes: 0 })],
  [
    "Connect JSON over HTTP/1.1, gzip-compressed",
    (baseUrl) => createConnectTransport({ baseUrl, httpVersion: "1.1", sendCompression: compressionGzip, compressMinBytes: 0 }),
  ],
  [
    "Connect binary over HTTP/2, gzip-compressed",
    (baseUrl) =>
      createConnectTransport({ baseUrl, httpVersion: "2", useBinaryFormat: true, sendCompression: compressionGzip, compressMinBytes: 0 }),
  ],
  [
    "Connect GET for the calls without side effects",
    (baseUrl) => createConnectTransport({ baseUrl, httpVersion: "1.1", useHttpGet: true }),
  ],
  ["Connect binary over HTTP/1.1", (baseUrl) => createConnectTransport({ baseUrl, httpVersion: "1.1", useBinaryFormat: true })],
  ["Connect binary over HTTP/2", (baseUrl) => createConnectTransport({ baseUrl, httpVersion: "2", useBinaryFormat: true })],
  ["gRPC-Web binary over HTTP/1.1", (baseUrl) => createGrpcWebTransport({ baseUrl, httpVersion: "1.1" })],
  ["gRPC-Web JSON over HTTP/2", (baseUrl) => createGrpcWebTransport({ baseUrl, httpVersion: "2", useBinaryFormat: false })],
];

describe.each([
  ["direct paths on", true],
  ["DIRECT_UNARY off", false],
])("with the %s", (_label, directUnary) => {
  const base = () => bases.get(directUnary)!;
  const tag = directUnary ? "d" : "r";

  it.each(cases.map(([name, make], i) => [name, make, i] as const))(
    "%s: every unary call a worker and a submitter make",
    async (_name, make, i) => {
      await roundTrip(createClient(QueueService, make(base())), `tr_${tag}_${i}`);
    },
  );

  it("a Connect GET by hand: the message in the query, the JSON answer", async () => {
    const client = createClient(QueueService, createConnectTransport({ baseUrl: base(), httpVersion: "1.1" }));
    await client.putWorkload({ name: `get_${tag}` });
    const created = await client.createJob({
      workload: `get_${tag}`,
      tasks: [{ chunkIndex: 0, inputUri: "s3://x", inputSha256: sha("x") }],
    });
    const message = encodeURIComponent(JSON.stringify({ job_id: created.job!.id }));
    const res = await fetch(`${base()}/leasehold.queue.v1.QueueService/GetJob?connect=v1&encoding=json&message=${message}`);
    expect(res.status).toBe(200);
    const body = (await res.json()) as { job: { id: string; status: string }; total_tasks: number };
    expect(body.job).toMatchObject({ id: created.job!.id, status: "JOB_STATUS_PENDING" });
    expect(body.total_tasks).toBe(1);
  });

  it("a gzip-compressed Connect JSON POST by hand, and a gzip-compressed answer when asked", async () => {
    const res = await fetch(`${base()}/leasehold.queue.v1.QueueService/ListWorkloads`, {
      method: "POST",
      headers: { "content-type": "application/json", "content-encoding": "gzip", "accept-encoding": "gzip" },
      body: gzipSync(Buffer.from("{}")),
    });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { workloads: { name: string }[] };
    expect(body.workloads.map((w) => w.name)).toContain(`get_${tag}`);
  });

  it("a gzip-compressed gRPC frame by hand: the grpc-encoding honoured, status 0 in the trailers", async () => {
    const client = createClient(QueueService, createConnectTransport({ baseUrl: base(), httpVersion: "1.1" }));
    await client.putWorkload({ name: `raw_${tag}` });
    const session = http2.connect(base());
    try {
      const request = create(ClaimTasksRequestSchema, { workerId: "raw", workloads: [`raw_${tag}`] });
      const packed = gzipSync(toBinary(ClaimTasksRequestSchema, request));
      const frame = Buffer.alloc(5 + packed.length);
      frame[0] = 1; // compressed
      frame.writeUInt32BE(packed.length, 1);
      packed.copy(frame, 5);
      const stream = session.request({
        ":method": "POST",
        ":path": "/leasehold.queue.v1.QueueService/ClaimTasks",
        "content-type": "application/grpc",
        "grpc-encoding": "gzip",
        "grpc-accept-encoding": "gzip",
        te: "trailers",
      });
      const chunks: Buffer[] = [];
      let headers: http2.IncomingHttpHeaders = {};
      let trailers: http2.IncomingHttpHeaders = {};
      stream.on("response", (h) => (headers = h));
      stream.on("trailers", (t) => (trailers = t));
      stream.on("data", (c: Buffer) => chunks.push(c));
      await new Promise<void>((resolve, reject) => {
        stream.on("end", resolve);
        stream.on("error", reject);
        stream.end(frame);
      });
      expect(headers[":status"]).toBe(200);
      expect(trailers["grpc-status"] ?? headers["grpc-status"]).toBe("0");
      const answer = Buffer.concat(chunks);
      const payload = answer.subarray(5, 5 + answer.readUInt32BE(1));
      const bytes = answer[0] === 1 ? gunzipSync(payload) : payload;
      expect(fromBinary(ClaimTasksResponseSchema, bytes).tasks).toEqual([]);
    } finally {
      session.close();
    }
  });
});

describe("DIRECT_UNARY", () => {
  it("is true unless set to false, and a config error otherwise", () => {
    expect(parseDirectUnary({})).toBe(true);
    expect(parseDirectUnary({ DIRECT_UNARY: "" })).toBe(true);
    expect(parseDirectUnary({ DIRECT_UNARY: "true" })).toBe(true);
    expect(parseDirectUnary({ DIRECT_UNARY: "FALSE" })).toBe(false);
    expect(() => parseDirectUnary({ DIRECT_UNARY: "no" })).toThrow(ConfigError);
    expect(() => parseDirectUnary({ DIRECT_UNARY: "no" })).toThrow(/^DIRECT_UNARY: /);
  });
});
