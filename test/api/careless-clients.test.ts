// A careless client's money-path mistakes are refused, named and write nothing, over the
// transports: a settlement without settled_units (0 is sent explicitly), a usage counter named like
// an object's own property ("__proto__", which the decoder would drop, "constructor",
// "prototype"), a billing or settlement key that is blank or has whitespace at an end, and a bound
// submitter's concurrency key outside its account. "__proto__" over gRPC and Connect is looked for
// by the direct paths (a server with DIRECT_UNARY on, whatever the project); REST in every project.
import http from "node:http";
import http2 from "node:http2";
import { create, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CompleteTaskRequestSchema, QueueService } from "../../gen/leasehold/queue/v1/queue_pb.js";
import { Authenticator } from "../../src/api/auth.js";
import type { Task } from "../../src/queue/types.js";
import { apiServerFixture, type ApiServerFixture } from "../support/api-server.js";
import { queueFixture, sha, type QueueFixture } from "../support/queue.js";

const W = "careless";
const WORKER = "careless-1";
const TOKENS = { admin: "careless-admin-0123456789", bound: "careless-bound-0123456789" };

let fx: QueueFixture;
let api: ApiServerFixture;
let direct: ApiServerFixture;

beforeAll(async () => {
  fx = await queueFixture();
  await fx.queue.putWorkload({ name: W, maxAttempts: 1, leaseSeconds: 60 });
  await fx.queue.putAccount({ name: "acme" });
  await fx.queue.putAccount({ name: "globex" });
  const auth = new Authenticator([
    { sha256: sha(TOKENS.admin), role: "admin" },
    { sha256: sha(TOKENS.bound), role: "submitter", account: "acme" },
  ]);
  api = await apiServerFixture({ queue: fx.queue, auth });
  direct = await apiServerFixture({ queue: fx.queue, auth, directUnary: true });
});

afterAll(async () => {
  await api?.close();
  await direct?.close();
  await fx?.close();
});

async function leased(): Promise<Task> {
  await fx.queue.createJob({ workload: W, account: "acme", inputUri: "s3://in/c", inputSha256: sha(Math.random()) });
  const [t] = await fx.queue.claimTasks({ workerId: WORKER, workloads: [W], maxTasks: 1 });
  return t;
}

interface RestError {
  status: number;
  error?: { code: string; message: string; request_id?: string; violations?: { field: string; description: string }[] };
  body: Record<string, unknown>;
}

async function rest(base: string, method: string, path: string, body: unknown, token = TOKENS.admin): Promise<RestError> {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  const json = (await res.json()) as { error?: RestError["error"] };
  return { status: res.status, error: json.error, body: json as Record<string, unknown> };
}

/** One raw HTTP/1.1 POST (Connect unary). */
function post(base: string, path: string, contentType: string, body: Buffer): Promise<{ status: number; body: string }> {
  const url = new URL(base);
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: url.hostname,
        port: url.port,
        method: "POST",
        path,
        agent: false,
        headers: { "content-type": contentType, "content-length": body.length, authorization: `Bearer ${TOKENS.admin}` },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString("utf8") }));
        res.on("error", reject);
      },
    );
    req.on("error", reject);
    req.end(body);
  });
}

/** One raw gRPC unary call: its grpc-status and message. */
function grpcCall(base: string, path: string, message: Buffer): Promise<{ status: string; message: string }> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(base);
    session.on("error", reject);
    const stream = session.request({
      ":method": "POST",
      ":path": path,
      "content-type": "application/grpc",
      te: "trailers",
      authorization: `Bearer ${TOKENS.admin}`,
    });
    const frame = Buffer.alloc(5 + message.length);
    frame.writeUInt32BE(message.length, 1);
    message.copy(frame, 5);
    let headers: http2.IncomingHttpHeaders = {};
    stream.on("response", (h) => (headers = h));
    stream.on("trailers", (t) => (headers = { ...headers, ...t }));
    stream.on("data", () => {});
    stream.on("end", () => {
      session.close();
      resolve({ status: String(headers["grpc-status"]), message: decodeURIComponent(String(headers["grpc-message"] ?? "")) });
    });
    stream.end(frame);
  });
}

const COMPLETE = "/leasehold.queue.v1.QueueService/CompleteTask";

/** A CompleteTask of `t` in binary whose usage holds a counter "__proto__" (made as "xxprotoxx", then its bytes replaced). */
function protoKeyBinary(t: Task): Buffer {
  const message = create(CompleteTaskRequestSchema, {
    taskId: t.id,
    workerId: WORKER,
    attempt: t.attempt,
    resultUri: "s3://out/c",
    resultSha256: sha("out"),
    usage: { gpu_ms: 1n, xxprotoxx: 5n },
  });
  const bytes = Buffer.from(toBinary(CompleteTaskRequestSchema, message));
  const at = bytes.indexOf("xxprotoxx");
  expect(at).toBeGreaterThan(0);
  bytes.write("__proto__", at);
  return bytes;
}

const resultJson = (t: Task, usage: string) =>
  `{"task_id":"${t.id}","worker_id":"${WORKER}","attempt":${t.attempt},"result_uri":"s3://out/c","result_sha256":"${sha("out")}","usage":${usage}}`;

async function stillLeased(t: Task): Promise<void> {
  const row = (await fx.pool.query(`SELECT status, usage FROM tasks WHERE id = $1`, [t.id])).rows[0];
  expect(row).toEqual({ status: "leased", usage: null });
}

describe("a usage counter named like an object's own property", () => {
  it("REST: __proto__ is INVALID_ARGUMENT naming usage.__proto__, and the result is not taken", async () => {
    for (const server of [api, direct]) {
      const t = await leased();
      const r = await rest(server.base, "POST", `/tasks/${t.id}/result`, resultJson(t, `{"gpu_ms":"1","__proto__":"5"}`));
      expect(r.status, JSON.stringify(r.body)).toBe(400);
      expect(r.error?.code).toBe("invalid_argument");
      expect(r.error?.violations?.map((v) => v.field)).toEqual(["usage.__proto__"]);
      expect(r.error?.request_id).toMatch(/\S/);
      await stillLeased(t);
    }
  });

  it("REST: in a batch's result and in a CreateJob's parameters too", async () => {
    const t = await leased();
    const batch = `{"results":[${resultJson(t, `{"__proto__":"5"}`)}]}`;
    const r = await rest(api.base, "POST", `/tasks/results`, batch);
    expect([r.status, r.error?.violations?.map((v) => v.field)]).toEqual([400, ["results[0].usage.__proto__"]]);
    await stillLeased(t);
    const jobs = await fx.count("jobs");
    const c = await rest(
      api.base,
      "POST",
      "/jobs",
      `{"workload":"${W}","input_uri":"s3://in/p","input_sha256":"${sha("p")}","parameters":{"__proto__":{"x":1}}}`,
    );
    expect([c.status, c.error?.violations?.map((v) => v.field)]).toEqual([400, ["parameters.__proto__"]]);
    expect(await fx.count("jobs")).toBe(jobs);
  });

  it("Connect JSON, Connect binary and gRPC (direct paths): INVALID_ARGUMENT naming usage.__proto__, nothing written", async () => {
    const t = await leased();
    const json = await post(direct.base, COMPLETE, "application/json", Buffer.from(resultJson(t, `{"gpu_ms":"1","__proto__":"5"}`)));
    expect(json.status).toBe(400);
    expect(JSON.parse(json.body)).toMatchObject({ code: "invalid_argument", message: expect.stringContaining("usage.__proto__") });
    const binary = await post(direct.base, COMPLETE, "application/proto", protoKeyBinary(t));
    expect(binary.status).toBe(400);
    expect(JSON.parse(binary.body)).toMatchObject({ code: "invalid_argument", message: expect.stringContaining("usage.__proto__") });
    const grpc = await grpcCall(direct.base, COMPLETE, protoKeyBinary(t));
    expect(grpc.status).toBe("3");
    expect(grpc.message).toContain("usage.__proto__");
    await stillLeased(t);
  });

  it("constructor and prototype reach the rules and are refused by name, over Connect and REST", async () => {
    const t = await leased();
    const client = createClient(
      QueueService,
      createConnectTransport({ baseUrl: api.base, httpVersion: "1.1", interceptors: [bearer(TOKENS.admin)] }),
    );
    const err = await client
      .completeTask({
        taskId: t.id,
        workerId: WORKER,
        attempt: t.attempt,
        resultUri: "s3://out/c",
        resultSha256: sha("out"),
        usage: { constructor: 1n },
      })
      .catch((e: unknown) => ConnectError.from(e));
    expect((err as ConnectError).code).toBe(Code.InvalidArgument);
    expect((err as ConnectError).rawMessage).toContain("usage.constructor");
    const r = await rest(api.base, "POST", `/tasks/${t.id}/result`, resultJson(t, `{"prototype":"2"}`));
    expect([r.status, r.error?.violations?.map((v) => v.field)]).toEqual([400, ["usage.prototype"]]);
    await stillLeased(t);
  });
});

function bearer(token: string) {
  return (next: Parameters<import("@connectrpc/connect").Interceptor>[0]) =>
    (req: Parameters<Parameters<import("@connectrpc/connect").Interceptor>[0]>[0]) => {
      req.header.set("authorization", `Bearer ${token}`);
      return next(req);
    };
}

describe("keys of the money path", () => {
  it("a billing key that is blank or has whitespace at an end is INVALID_ARGUMENT naming it, and writes nothing", async () => {
    const jobs = await fx.count("jobs");
    for (const key of [" ", "  ", " order-1", "order-1 ", "\torder"]) {
      const r = await rest(api.base, "POST", "/jobs", {
        workload: W,
        input_uri: "s3://in/b",
        input_sha256: sha("b"),
        billing: { reserved_units: "5", billing_key: key },
      });
      expect([key, r.status, r.error?.violations?.map((v) => v.field)]).toEqual([key, 400, ["billing.billing_key"]]);
    }
    expect(await fx.count("jobs")).toBe(jobs);
  });

  it("a bound submitter's concurrency key is its account's: another is PERMISSION_DENIED, its own and one under it are taken", async () => {
    const create = (key: string) =>
      rest(
        api.base,
        "POST",
        "/jobs",
        { workload: W, input_uri: "s3://in/k", input_sha256: sha(Math.random()), concurrency_key: key },
        TOKENS.bound,
      );
    const jobs = await fx.count("jobs");
    for (const key of ["globex", "acme-2", "globex/acme", "other"]) {
      const r = await create(key);
      expect([key, r.status, r.error?.code]).toEqual([key, 403, "permission_denied"]);
      expect(r.error?.message).toMatch(/^concurrency_key: /);
    }
    expect(await fx.count("jobs")).toBe(jobs);
    for (const [key, stored] of [
      ["", "acme"],
      ["acme", "acme"],
      ["acme/batch-7", "acme/batch-7"],
    ]) {
      const r = await create(key);
      expect(r.status, JSON.stringify(r.body)).toBe(201);
      const id = (r.body as { job: { id: string } }).job.id;
      expect((await fx.pool.query(`SELECT concurrency_key FROM jobs WHERE id = $1`, [id])).rows[0].concurrency_key).toBe(stored);
      await fx.queue.cancelJob({ jobId: id });
    }
    // An admin (unbound) names any key.
    expect(
      (await rest(api.base, "POST", "/jobs", { workload: W, input_uri: "s3://in/k", input_sha256: sha("a"), concurrency_key: "globex" }))
        .status,
    ).toBe(201);
  });
});

describe("SettleJob's settled_units", () => {
  async function finalJob(): Promise<string> {
    const r = await fx.queue.createJob({ workload: W, account: "acme", inputUri: "s3://in/s", inputSha256: sha(Math.random()) });
    await fx.queue.cancelJob({ jobId: r.job.id });
    return r.job.id;
  }
  const settled = async (id: string) => (await fx.pool.query(`SELECT settled_at IS NOT NULL AS s FROM jobs WHERE id = $1`, [id])).rows[0].s;

  it("is required over REST, Connect and gRPC (INVALID_ARGUMENT naming it, nothing settled); 0 given explicitly settles at 0", async () => {
    const id = await finalJob();
    const r = await rest(api.base, "POST", `/jobs/${id}/settle`, { settlement_key: "k-1" });
    expect([r.status, r.error?.violations?.map((v) => v.field)]).toEqual([400, ["settled_units"]]);
    for (const transport of [
      createConnectTransport({ baseUrl: api.base, httpVersion: "1.1", interceptors: [bearer(TOKENS.admin)] }),
      createGrpcTransport({ baseUrl: api.base, interceptors: [bearer(TOKENS.admin)] }),
    ]) {
      const client = createClient(QueueService, transport);
      const err = await client.settleJob({ jobId: id, settlementKey: "k-1" }).catch((e: unknown) => ConnectError.from(e));
      expect((err as ConnectError).code).toBe(Code.InvalidArgument);
      expect((err as ConnectError).rawMessage).toContain("settled_units");
    }
    const blank = await rest(api.base, "POST", `/jobs/${id}/settle`, { settlement_key: " ", settled_units: "0" });
    expect([blank.status, blank.error?.violations?.map((v) => v.field)]).toEqual([400, ["settlement_key"]]);
    expect(await settled(id)).toBe(false);

    const zero = createClient(QueueService, createGrpcTransport({ baseUrl: api.base, interceptors: [bearer(TOKENS.admin)] }));
    const done = await zero.settleJob({ jobId: id, settlementKey: "k-1", settledUnits: 0n });
    expect(done.job?.settlement).toMatchObject({ settlementKey: "k-1", settledUnits: 0n });
    const restZero = await rest(api.base, "POST", `/jobs/${await finalJob()}/settle`, { settlement_key: "k-2", settled_units: 0 });
    expect(restZero.status).toBe(200);
  });
});
