// Flow control's settings and bad input, on every transport: caps, rates and bursts, labels and
// concurrency keys are checked before anything is written (400 / INVALID_ARGUMENT naming the
// field, no row changed), PutKeyLimit, PauseWorkload and ResumeWorkload answer over REST, gRPC,
// gRPC-Web and Connect, and an unknown workload is 404 / NOT_FOUND.
import { Code, createClient, type Client } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { QueueService } from "../../gen/leasehold/queue/v1/queue_pb.js";
import { sha, queueFixture, type QueueFixture } from "../support/queue.js";
import { restCall } from "../support/rest.js";
import { rpcError } from "../support/rpc.js";
import { apiServerFixture, type ApiServerFixture } from "../support/api-server.js";

let pool: pg.Pool;
let fx: QueueFixture;
let api: ApiServerFixture;
let base: string;
let clients: Record<string, Client<typeof QueueService>>;

const W = "flowin";

async function snapshot(): Promise<string> {
  const { rows } = await pool.query(`
    SELECT (SELECT count(*) FROM jobs) AS jobs, (SELECT count(*) FROM tasks) AS tasks,
      (SELECT count(*) FROM workload_key_limits) AS limits,
      (SELECT json_agg(w ORDER BY name) FROM (SELECT name, max_leased, max_leased_per_key, max_leases_per_second, leases_burst, paused FROM workloads) w) AS workloads`);
  return JSON.stringify(rows[0]);
}

beforeAll(async () => {
  fx = await queueFixture(
    {
      defaultLeaseSeconds: 60,
      defaultMaxAttempts: 3,
      maxTasksPerJob: 1000,
    },
    { max: 6 },
  );
  pool = fx.pool;
  const queue = fx.queue;
  api = await apiServerFixture({ queue, maxBodyBytes: 1 << 20, requestTimeoutMs: 10_000 });
  base = api.base;
  clients = {
    grpc: createClient(QueueService, createGrpcTransport({ baseUrl: base })),
    "grpc-web": createClient(QueueService, createGrpcWebTransport({ baseUrl: base, httpVersion: "1.1" })),
    connect: createClient(QueueService, createConnectTransport({ baseUrl: base, httpVersion: "1.1" })),
  };
  await queue.putWorkload({ name: W });
});

afterAll(async () => {
  await api?.close();
  await fx?.close();
});

const tooManyLabels = Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, "v"]));

/** Bad requests: REST method and path, the JSON body, the RPC and its request, the field named. */
const cases: { name: string; rest: [string, string, unknown]; rpc: [string, Record<string, unknown>]; field: string }[] = [
  {
    name: "a zero max_leased",
    rest: ["PUT", `/workloads/${W}`, { max_leased: 0 }],
    rpc: ["putWorkload", { name: W, maxLeased: 0 }],
    field: "max_leased",
  },
  {
    name: "a negative max_leased_per_key",
    rest: ["PUT", `/workloads/${W}`, { max_leased_per_key: -2 }],
    rpc: ["putWorkload", { name: W, maxLeasedPerKey: -2 }],
    field: "max_leased_per_key",
  },
  {
    name: "a rate without a burst",
    rest: ["PUT", `/workloads/${W}`, { max_leases_per_second: 50 }],
    rpc: ["putWorkload", { name: W, maxLeasesPerSecond: 50 }],
    field: "leases_burst",
  },
  {
    name: "a burst below 1",
    rest: ["PUT", `/workloads/${W}`, { max_leases_per_second: 50, leases_burst: 0 }],
    rpc: ["putWorkload", { name: W, maxLeasesPerSecond: 50, leasesBurst: 0 }],
    field: "leases_burst",
  },
  {
    name: "a zero rate",
    rest: ["PUT", `/workloads/${W}`, { max_leases_per_second: 0, leases_burst: 5 }],
    rpc: ["putWorkload", { name: W, maxLeasesPerSecond: 0, leasesBurst: 5 }],
    field: "max_leases_per_second",
  },
  {
    name: "a zero key cap",
    rest: ["PUT", `/workloads/${W}/keys/tenant-a`, { max_leased: 0 }],
    rpc: ["putKeyLimit", { name: W, key: "tenant-a", maxLeased: 0 }],
    field: "max_leased",
  },
  {
    name: "a key over 128 bytes in PutKeyLimit",
    rest: ["PUT", `/workloads/${W}/keys/${"k".repeat(129)}`, { max_leased: 3 }],
    rpc: ["putKeyLimit", { name: W, key: "k".repeat(129), maxLeased: 3 }],
    field: "key",
  },
  {
    name: "a concurrency_key over 128 bytes",
    rest: ["POST", "/jobs", { workload: W, input_uri: "s3://x", input_sha256: sha(1), concurrency_key: "é".repeat(65) }],
    rpc: ["createJob", { workload: W, inputUri: "s3://x", inputSha256: sha(1), concurrencyKey: "é".repeat(65) }],
    field: "concurrency_key",
  },
  {
    name: "more than 16 required labels",
    rest: ["POST", "/jobs", { workload: W, input_uri: "s3://x", input_sha256: sha(1), required_labels: tooManyLabels }],
    rpc: ["createJob", { workload: W, inputUri: "s3://x", inputSha256: sha(1), requiredLabels: tooManyLabels }],
    field: "required_labels",
  },
  {
    name: "a label name outside [a-z0-9._/-]",
    rest: ["POST", "/jobs", { workload: W, input_uri: "s3://x", input_sha256: sha(1), required_labels: { GPU: "a100" } }],
    rpc: ["createJob", { workload: W, inputUri: "s3://x", inputSha256: sha(1), requiredLabels: { GPU: "a100" } }],
    field: "required_labels",
  },
  {
    name: "a label value over 63 characters on a task",
    rest: [
      "POST",
      "/jobs",
      { workload: W, tasks: [{ chunk_index: 0, input_uri: "s3://x", input_sha256: sha(1), required_labels: { gpu: "a".repeat(64) } }] },
    ],
    rpc: [
      "createJob",
      { workload: W, tasks: [{ chunkIndex: 0, inputUri: "s3://x", inputSha256: sha(1), requiredLabels: { gpu: "a".repeat(64) } }] },
    ],
    field: "tasks[0].required_labels[gpu]",
  },
  {
    name: "an empty label value in a claim",
    rest: ["POST", "/tasks/claim", { worker_id: "w", workloads: [W], labels: { gpu: "" } }],
    rpc: ["claimTasks", { workerId: "w", workloads: [W], labels: { gpu: "" } }],
    field: "labels[gpu]",
  },
  {
    name: "more than 16 labels in a claim",
    rest: ["POST", "/tasks/claim", { worker_id: "w", workloads: [W], labels: tooManyLabels }],
    rpc: ["claimTasks", { workerId: "w", workloads: [W], labels: tooManyLabels }],
    field: "labels",
  },
];

describe("flow control: bad input writes nothing, on every transport", () => {
  it.each(cases)("REST: $name", async (c) => {
    const before = await snapshot();
    const [method, path, body] = c.rest;
    const r = await restCall(base, method, path, body);
    expect(r.status, r.text).toBe(400);
    expect(r.body.error.code).toBe("invalid_argument");
    expect(r.body.error.request_id).toBeTruthy();
    expect(r.body.error.violations.map((v: { field: string }) => v.field)).toContain(c.field);
    expect(await snapshot()).toBe(before);
  });

  for (const transport of ["grpc", "grpc-web", "connect"]) {
    it.each(cases)(`${transport}: $name`, async (c) => {
      const before = await snapshot();
      const [method, request] = c.rpc;
      const call = (clients[transport] as unknown as Record<string, (r: unknown) => Promise<unknown>>)[method];
      const err = await rpcError(call(request));
      expect(err.code).toBe(Code.InvalidArgument);
      expect(err.rawMessage).toContain(c.field);
      expect(await snapshot()).toBe(before);
    });
  }

  it("pausing, resuming or limiting a key of an unknown workload is 404 / NOT_FOUND, writing nothing", async () => {
    const before = await snapshot();
    for (const [method, path, body] of [
      ["POST", "/workloads/nosuch/pause", {}],
      ["POST", "/workloads/nosuch/resume", {}],
      ["PUT", "/workloads/nosuch/keys/tenant", { max_leased: 2 }],
    ] as const) {
      const r = await restCall(base, method, path, body);
      expect(r.status, `${method} ${path}`).toBe(404);
      expect(r.body.error.code).toBe("not_found");
    }
    for (const client of Object.values(clients)) {
      expect((await rpcError(client.pauseWorkload({ name: "nosuch" }))).code).toBe(Code.NotFound);
      expect((await rpcError(client.resumeWorkload({ name: "nosuch" }))).code).toBe(Code.NotFound);
      expect((await rpcError(client.putKeyLimit({ name: "nosuch", key: "t", maxLeased: 2 }))).code).toBe(Code.NotFound);
    }
    expect(await snapshot()).toBe(before);
  });
});

describe("flow control settings, read back", () => {
  it("PutWorkload sets caps and a rate; PutKeyLimit a key's cap; pause and resume show in Workload.paused", async () => {
    const put = await restCall(base, "PUT", "/workloads/flowset", {
      max_leased: 8,
      max_leased_per_key: 2,
      max_leases_per_second: 50,
      leases_burst: 10,
    });
    expect(put.status, put.text).toBe(200);
    expect(put.body.workload).toMatchObject({
      max_leased: 8,
      max_leased_per_key: 2,
      max_leases_per_second: 50,
      leases_burst: 10,
      paused: false,
    });
    const key = await restCall(base, "PUT", "/workloads/flowset/keys/premium%20tenant", { max_leased: 10 });
    expect(key.status, key.text).toBe(200);
    expect(key.body).toEqual({ name: "flowset", key: "premium tenant", max_leased: 10 });
    const { rows } = await pool.query(`SELECT key, max_leased FROM workload_key_limits WHERE workload = 'flowset'`);
    expect(rows).toEqual([{ key: "premium tenant", max_leased: 10 }]);

    const paused = await restCall(base, "POST", "/workloads/flowset/pause", {});
    expect(paused.status).toBe(200);
    expect(paused.body.workload.paused).toBe(true);
    const listed = await clients.grpc.listWorkloads({});
    expect(listed.workloads.find((w) => w.name === "flowset")?.paused).toBe(true);
    const resumed = await clients.connect.resumeWorkload({ name: "flowset" });
    expect(resumed.workload?.paused).toBe(false);
    expect((await clients["grpc-web"].pauseWorkload({ name: "flowset" })).workload?.paused).toBe(true);

    // PutWorkload without the fields takes the caps and the rate away, and keeps the pause.
    const cleared = await clients.grpc.putWorkload({ name: "flowset" });
    expect(cleared.workload).toMatchObject({ maxLeased: 0, maxLeasedPerKey: 0, maxLeasesPerSecond: 0, leasesBurst: 0, paused: true });
  });

  it("a job's concurrency_key and required_labels reach its tasks (a task's own labels on top)", async () => {
    const r = await restCall(base, "POST", "/jobs", {
      workload: W,
      concurrency_key: "customer-42",
      required_labels: { gpu: "a100", region: "eu" },
      tasks: [
        { chunk_index: 0, input_uri: "s3://l/0", input_sha256: sha(0) },
        { chunk_index: 1, input_uri: "s3://l/1", input_sha256: sha(1), required_labels: { region: "us", disk: "ssd" } },
      ],
    });
    expect(r.status, r.text).toBe(201);
    expect(r.body.job).toMatchObject({ concurrency_key: "customer-42", required_labels: { gpu: "a100", region: "eu" } });
    expect(r.body.tasks.map((t: { required_labels: unknown }) => t.required_labels)).toEqual([
      { gpu: "a100", region: "eu" },
      { disk: "ssd", gpu: "a100", region: "us" },
    ]);
    const { rows } = await pool.query(
      `SELECT chunk_index, concurrency_key, required_labels FROM tasks WHERE job_id = $1 ORDER BY chunk_index`,
      [r.body.job.id],
    );
    expect(rows).toEqual([
      { chunk_index: 0, concurrency_key: "customer-42", required_labels: { gpu: "a100", region: "eu" } },
      { chunk_index: 1, concurrency_key: "customer-42", required_labels: { disk: "ssd", gpu: "a100", region: "us" } },
    ]);
    const got = await clients.grpc.getTask({ taskId: r.body.tasks[1].id });
    expect(got.task?.requiredLabels).toEqual({ disk: "ssd", gpu: "a100", region: "us" });
    expect(got.task?.concurrencyKey).toBe("customer-42");
  });
});
