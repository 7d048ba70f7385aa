// An unknown workload answers one way wherever a request names it (a job's, a task's, a
// finalizer's, a schedule template's, a claim's, a workload operation's): NOT_FOUND (404) with one
// google.rpc.ErrorInfo, reason WORKLOAD_NOT_FOUND in domain leasehold, naming the workload and
// the field, over gRPC, gRPC-Web, Connect and REST (whose body carries the reason), with nothing
// written. Run with DIRECT_UNARY both ways (the router project), so REST's reason also survives
// the router's Connect answer.
import { Code, createClient, type Client } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorInfoSchema, RequestInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { QueueService } from "../../gen/leasehold/queue/v1/queue_pb.js";
import { queueFixture, sha, type QueueFixture } from "../support/queue.js";
import { restCall } from "../support/rest.js";
import { rpcError } from "../support/rpc.js";
import { apiServerFixture, type ApiServerFixture } from "../support/api-server.js";

const W = "wnf_known";
const NOPE = "wnf_nope";

let f: QueueFixture;
let api: ApiServerFixture;
let base: string;

type QueueClient = Client<typeof QueueService>;

interface Case {
  name: string;
  rpc: (c: QueueClient) => Promise<unknown>;
  rest: [method: string, path: string, body: Record<string, unknown>];
  field: string;
  /** The answer lists the registered workloads (a workload operation's does not look them up). */
  listsKnown: boolean;
}

const JOB = { workload: W, inputUri: "s3://in", inputSha256: sha("in") };
const REST_JOB = { workload: W, input_uri: "s3://in", input_sha256: sha("in") };
const TASK = { chunkIndex: 0, inputUri: "s3://in", inputSha256: sha("in"), workload: NOPE };
const REST_TASK = { chunk_index: 0, input_uri: "s3://in", input_sha256: sha("in"), workload: NOPE };

const CASES: Case[] = [
  {
    name: "CreateJob's workload",
    rpc: (c) => c.createJob({ ...JOB, workload: NOPE }),
    rest: ["POST", "/jobs", { ...REST_JOB, workload: NOPE }],
    field: "workload",
    listsKnown: true,
  },
  {
    name: "a task's workload",
    rpc: (c) => c.createJob({ workload: W, tasks: [TASK] }),
    rest: ["POST", "/jobs", { workload: W, tasks: [REST_TASK] }],
    field: "tasks[0].workload",
    listsKnown: true,
  },
  {
    name: "a finalizer's workload",
    rpc: (c) => c.createJob({ ...JOB, finalizer: { workload: NOPE } }),
    rest: ["POST", "/jobs", { ...REST_JOB, finalizer: { workload: NOPE } }],
    field: "finalizer.workload",
    listsKnown: true,
  },
  {
    name: "a claim's workload",
    rpc: (c) => c.claimTasks({ workerId: "w", workloads: [NOPE] }),
    rest: ["POST", "/tasks/claim", { worker_id: "w", workloads: [NOPE] }],
    field: "workloads[0]",
    listsKnown: true,
  },
  {
    name: "a schedule template's workload",
    rpc: (c) => c.putSchedule({ name: "wnf", cron: "0 3 * * *", job: { ...JOB, workload: NOPE } }),
    rest: ["PUT", "/schedules/wnf", { cron: "0 3 * * *", job: { ...REST_JOB, workload: NOPE } }],
    field: "job.workload",
    listsKnown: true,
  },
  {
    name: "a schedule template's task's workload",
    rpc: (c) => c.putSchedule({ name: "wnf", cron: "0 3 * * *", job: { workload: W, tasks: [TASK] } }),
    rest: ["PUT", "/schedules/wnf", { cron: "0 3 * * *", job: { workload: W, tasks: [REST_TASK] } }],
    field: "job.tasks[0].workload",
    listsKnown: true,
  },
  {
    name: "a schedule template's finalizer's workload",
    rpc: (c) => c.putSchedule({ name: "wnf", cron: "0 3 * * *", job: { ...JOB, finalizer: { workload: NOPE } } }),
    rest: ["PUT", "/schedules/wnf", { cron: "0 3 * * *", job: { ...REST_JOB, finalizer: { workload: NOPE } } }],
    field: "job.finalizer.workload",
    listsKnown: true,
  },
  {
    name: "PauseWorkload's name",
    rpc: (c) => c.pauseWorkload({ name: NOPE }),
    rest: ["POST", `/workloads/${NOPE}/pause`, {}],
    field: "name",
    listsKnown: false,
  },
];

async function written(): Promise<unknown> {
  const { rows } = await f.pool.query(
    `SELECT (SELECT count(*) FROM jobs) AS jobs, (SELECT count(*) FROM tasks) AS tasks,
            (SELECT count(*) FROM schedules) AS schedules, (SELECT count(*) FROM workloads) AS workloads`,
  );
  return rows[0];
}

beforeAll(async () => {
  f = await queueFixture();
  api = await apiServerFixture({ queue: f.queue, maxBodyBytes: 1 << 20, requestTimeoutMs: 10_000 });
  base = api.base;
  await f.queue.putWorkload({ name: W });
});

afterAll(async () => {
  await api?.close();
  await f?.close();
});

const transports: [string, () => QueueClient][] = [
  ["gRPC", () => createClient(QueueService, createGrpcTransport({ baseUrl: base }))],
  ["gRPC-Web", () => createClient(QueueService, createGrpcWebTransport({ baseUrl: base, httpVersion: "1.1" }))],
  ["Connect", () => createClient(QueueService, createConnectTransport({ baseUrl: base, httpVersion: "1.1" }))],
];

describe.each(transports)("%s", (_label, client) => {
  it.each(CASES)("$name: NOT_FOUND with ErrorInfo WORKLOAD_NOT_FOUND naming the workload and field", async (c) => {
    const before = await written();
    const err = await rpcError(c.rpc(client()));
    expect(err.code, err.rawMessage).toBe(Code.NotFound);
    expect(err.rawMessage).toContain(c.field);
    const infos = err.findDetails(ErrorInfoSchema);
    expect(infos).toHaveLength(1);
    expect(infos[0]).toMatchObject({ reason: "WORKLOAD_NOT_FOUND", domain: "leasehold" });
    expect(infos[0].metadata).toMatchObject({ workload: NOPE, field: c.field });
    if (c.listsKnown) expect(infos[0].metadata.known_workloads.split(",")).toContain(W);
    expect(err.findDetails(RequestInfoSchema)[0]?.requestId).toBeTruthy();
    expect(await written()).toEqual(before);
  });
});

describe("REST", () => {
  it.each(CASES)("$name: 404 with reason WORKLOAD_NOT_FOUND in the body", async (c) => {
    const before = await written();
    const [method, path, body] = c.rest;
    const r = await restCall(base, method, path, body);
    expect(r.status, r.text).toBe(404);
    expect(r.body.error).toMatchObject({ code: "not_found", reason: "WORKLOAD_NOT_FOUND" });
    expect(r.body.error.message).toContain(c.field);
    expect(r.body.error.request_id).toBeTruthy();
    if (c.listsKnown) expect(r.body.error.known_workloads).toContain(W);
    expect(await written()).toEqual(before);
  });

  it("an unknown job is 404 without the workload's reason", async () => {
    const r = await restCall(base, "GET", "/jobs/3f1e2d4c-5b6a-4978-8a9b-0c1d2e3f4a5b");
    expect(r.status, r.text).toBe(404);
    expect(r.body.error.reason).toBeUndefined();
  });
});

describe("with many workloads registered", () => {
  // Names as long as a team's might be: 300 of them listed in full made the error's trailers
  // ~10 KiB, past the 8 KiB of metadata grpcio accepts (it then reports RESOURCE_EXHAUSTED).
  const MANY = 300;
  const name = (i: number) => `wnf_many_${String(i).padStart(3, "0")}_${"x".repeat(48)}`;

  beforeAll(async () => {
    for (let i = 0; i < MANY; i++) await f.queue.putWorkload({ name: name(i) });
  });

  it("gRPC: the answer's headers and trailers stay under 8 KiB, NOT_FOUND listing the first 20 and the total", async () => {
    const { connect } = await import("node:http2");
    const { create, toBinary } = await import("@bufbuild/protobuf");
    const { CreateJobRequestSchema } = await import("../../gen/leasehold/queue/v1/queue_pb.js");
    const message = toBinary(CreateJobRequestSchema, create(CreateJobRequestSchema, { ...JOB, workload: NOPE }));
    const frame = Buffer.alloc(5 + message.length);
    frame.writeUInt32BE(message.length, 1);
    frame.set(message, 5);
    const session = connect(base);
    try {
      const fields = await new Promise<Record<string, string>>((resolve, reject) => {
        const req = session.request({
          ":method": "POST",
          ":path": "/leasehold.queue.v1.QueueService/CreateJob",
          "content-type": "application/grpc",
          te: "trailers",
        });
        const seen: Record<string, string> = {};
        const keep = (h: Record<string, unknown>) => {
          for (const [k, v] of Object.entries(h)) seen[k] = String(v);
        };
        req.on("response", keep);
        req.on("trailers", keep);
        req.on("data", () => {});
        req.on("end", () => resolve(seen));
        req.on("error", reject);
        req.end(frame);
      });
      const bytes = Object.entries(fields).reduce((n, [k, v]) => n + k.length + v.length, 0);
      expect(fields["grpc-status"], JSON.stringify(fields)).toBe(String(Code.NotFound));
      expect(bytes).toBeLessThan(8192);
      expect(decodeURIComponent(fields["grpc-message"])).toContain(`and ${MANY + 1 - 20} more`);
    } finally {
      session.close();
    }
  });

  it.each(transports)("%s: ErrorInfo lists the first 20 and known_workloads_total counts them all", async (_label, client) => {
    const err = await rpcError(client().createJob({ ...JOB, workload: NOPE }));
    expect(err.code, err.rawMessage).toBe(Code.NotFound);
    const info = err.findDetails(ErrorInfoSchema)[0];
    expect(info.metadata.known_workloads.split(",")).toHaveLength(20);
    expect(info.metadata.known_workloads.split(",")[0]).toBe(W);
    expect(info.metadata.known_workloads_total).toBe(String(MANY + 1));
  });

  it("REST: known_workloads has the first 20 and known_workloads_total the count", async () => {
    const r = await restCall(base, "POST", "/jobs", { ...REST_JOB, workload: NOPE });
    expect(r.status, r.text).toBe(404);
    expect(r.body.error.known_workloads).toHaveLength(20);
    expect(r.body.error.known_workloads_total).toBe(MANY + 1);
  });
});
