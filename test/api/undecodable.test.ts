// A request message that cannot be decoded is a client mistake: INVALID_ARGUMENT naming what failed,
// with a google.rpc.BadRequest detail and the request id, on gRPC, Connect binary and Connect JSON
// alike (never INTERNAL), and nothing written. Raw requests, since no client sends such bytes.
// Run with DIRECT_UNARY both ways (the router project); a compressed gRPC call and gRPC-Web are
// always served by connect-es' router (router-undecodable.ts).
import http from "node:http";
import http2 from "node:http2";
import { gzipSync } from "node:zlib";
import { fromBinary } from "@bufbuild/protobuf";
import { anyUnpack } from "@bufbuild/protobuf/wkt";
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BadRequestSchema, RequestInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { StatusSchema } from "../../gen/google/rpc/status_pb.js";
import { queueFixture, type QueueFixture } from "../support/queue.js";
import { apiServerFixture, type ApiServerFixture } from "../support/api-server.js";

const PATH = "/leasehold.queue.v1.QueueService/ClaimTasks";
// worker_id (field 1, length-delimited) announcing 5 bytes where 1 follows: the decoder runs out.
const TRUNCATED = Buffer.from([0x0a, 0x05, 0x61]);

let pool: pg.Pool;
let fx: QueueFixture;
let api: ApiServerFixture;
let port: number;

beforeAll(async () => {
  fx = await queueFixture(
    {
      defaultLeaseSeconds: 30,
      defaultMaxAttempts: 3,
      maxTasksPerJob: 10,
    },
    { max: 4 },
  );
  pool = fx.pool;
  const queue = fx.queue;
  api = await apiServerFixture({ queue });
  port = api.port;
});

afterAll(async () => {
  await api?.close();
  await fx?.close();
});

/** One HTTP/1.1 POST: the status and the whole body. */
function post(path: string, contentType: string, body: Buffer): Promise<{ status: number; body: Buffer }> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: "127.0.0.1",
        port,
        method: "POST",
        path,
        agent: false,
        headers: { "content-type": contentType, "content-length": body.length },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks) }));
        res.on("error", reject);
      },
    );
    req.on("error", reject);
    req.end(body);
  });
}

/** An enveloped message: a flag byte, the length, the data (gRPC, gRPC-Web and Connect streams alike). */
function envelope(flag: number, data: Buffer): Buffer {
  const f = Buffer.alloc(5 + data.length);
  f[0] = flag;
  f.writeUInt32BE(data.length, 1);
  data.copy(f, 5);
  return f;
}

/** A body's frames, in order. */
function frames(body: Buffer): { flag: number; data: Buffer }[] {
  const out: { flag: number; data: Buffer }[] = [];
  for (let at = 0; at + 5 <= body.length; at += 5 + body.readUInt32BE(at + 1)) {
    out.push({ flag: body[at], data: body.subarray(at + 5, at + 5 + body.readUInt32BE(at + 1)) });
  }
  return out;
}

type ConnectErrorJson = { code: string; message: string; details?: { type: string; value: string }[] };

async function connectPost(contentType: string, body: Buffer): Promise<{ status: number; json: ConnectErrorJson }> {
  const r = await post(PATH, contentType, body);
  return { status: r.status, json: JSON.parse(r.body.toString("utf8")) };
}

/** A Connect server stream (WatchJob) whose request is `message`: the HTTP status and the end-stream message's error. */
async function connectStreamCall(
  format: "proto" | "json",
  message: Buffer,
): Promise<{ status: number; error: ConnectErrorJson | undefined }> {
  const r = await post("/leasehold.queue.v1.QueueService/WatchJob", `application/connect+${format}`, envelope(0, message));
  const end = frames(r.body).find((f) => f.flag === 2);
  return { status: r.status, error: end ? (JSON.parse(end.data.toString("utf8")) as { error?: ConnectErrorJson }).error : undefined };
}

/** The Connect error body's details of `type`, decoded. */
function connectDetail<T>(
  details: { type: string; value: string }[] | undefined,
  schema: typeof BadRequestSchema | typeof RequestInfoSchema,
): T {
  const d = details?.find((x) => x.type === schema.typeName);
  expect(d, JSON.stringify(details)).toBeDefined();
  return fromBinary(schema, Buffer.from(d!.value, "base64")) as T;
}

function grpcCall(message: Buffer, gzip = false): Promise<{ status: string; message: string; details: Buffer | undefined }> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(`http://127.0.0.1:${port}`);
    session.on("error", reject);
    const stream = session.request({
      ":method": "POST",
      ":path": PATH,
      "content-type": "application/grpc",
      te: "trailers",
      ...(gzip ? { "grpc-encoding": "gzip" } : {}),
    });
    const frame = envelope(gzip ? 1 : 0, gzip ? gzipSync(message) : message);
    let headers: http2.IncomingHttpHeaders = {};
    stream.on("response", (h) => (headers = h));
    stream.on("trailers", (t) => (headers = { ...headers, ...t }));
    stream.on("data", () => {});
    stream.on("end", () => {
      session.close();
      const bin = headers["grpc-status-details-bin"];
      resolve({
        status: String(headers["grpc-status"]),
        message: decodeURIComponent(String(headers["grpc-message"] ?? "")),
        details: typeof bin === "string" ? Buffer.from(bin, "base64") : undefined,
      });
    });
    stream.end(frame);
  });
}

/** A gRPC-Web call over HTTP/1.1: the trailer frame's fields, lower-cased. */
async function grpcWebCall(message: Buffer): Promise<Record<string, string>> {
  const r = await post(PATH, "application/grpc-web+proto", envelope(0, message));
  const fields: Record<string, string> = {};
  // The trailer's flag is 0x80; its data is header lines.
  for (const line of frames(r.body)
    .filter((f) => f.flag === 0x80)
    .flatMap((f) => f.data.toString("utf8").split("\r\n"))) {
    const i = line.indexOf(":");
    if (i > 0) fields[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
  }
  return fields;
}

function badRequestFields(details: Buffer): string[] | undefined {
  const status = fromBinary(StatusSchema, details);
  return status.details
    .map((a) => anyUnpack(a, BadRequestSchema))
    .find((x) => x !== undefined)
    ?.fieldViolations.map((v) => v.field);
}

describe("a request message that cannot be decoded", () => {
  it("gRPC: INVALID_ARGUMENT (3) with a BadRequest and the request id, not INTERNAL", async () => {
    const r = await grpcCall(TRUNCATED);
    expect(r.status).toBe("3");
    expect(r.message).toMatch(/cannot decode leasehold\.queue\.v1\.ClaimTasksRequest from binary: premature EOF/);
    expect(r.details).toBeDefined();
    const status = fromBinary(StatusSchema, r.details!);
    const badRequest = status.details.map((a) => anyUnpack(a, BadRequestSchema)).find((x) => x !== undefined);
    expect(badRequest?.fieldViolations.map((v) => v.field)).toEqual(["leasehold.queue.v1.ClaimTasksRequest"]);
    const info = status.details.map((a) => anyUnpack(a, RequestInfoSchema)).find((x) => x !== undefined);
    expect(info?.requestId).toMatch(/\S/);
  });

  it("gRPC, compressed (served by the router): INVALID_ARGUMENT (3) with a BadRequest, not INTERNAL", async () => {
    const r = await grpcCall(TRUNCATED, true);
    expect(r.status).toBe("3");
    expect(r.message).toMatch(/cannot decode leasehold\.queue\.v1\.ClaimTasksRequest from binary: premature EOF/);
    expect(badRequestFields(r.details!)).toEqual(["leasehold.queue.v1.ClaimTasksRequest"]);
  });

  it("gRPC-Web (served by the router): INVALID_ARGUMENT (3) in the trailer frame, with a BadRequest and the request id", async () => {
    const t = await grpcWebCall(TRUNCATED);
    expect(t["grpc-status"]).toBe("3");
    expect(decodeURIComponent(t["grpc-message"])).toMatch(/cannot decode leasehold\.queue\.v1\.ClaimTasksRequest from binary/);
    const details = Buffer.from(t["grpc-status-details-bin"], "base64");
    expect(badRequestFields(details)).toEqual(["leasehold.queue.v1.ClaimTasksRequest"]);
    const info = fromBinary(StatusSchema, details)
      .details.map((a) => anyUnpack(a, RequestInfoSchema))
      .find((x) => x !== undefined);
    expect(info?.requestId).toMatch(/\S/);
  });

  it("Connect binary: 400 invalid_argument with a BadRequest, not 500 internal", async () => {
    const r = await connectPost("application/proto", TRUNCATED);
    expect(r.status).toBe(400);
    expect(r.json.code).toBe("invalid_argument");
    expect(r.json.message).toMatch(/cannot decode leasehold\.queue\.v1\.ClaimTasksRequest from binary/);
    const br = connectDetail<{ fieldViolations: { field: string }[] }>(r.json.details, BadRequestSchema);
    expect(br.fieldViolations.map((v) => v.field)).toEqual(["leasehold.queue.v1.ClaimTasksRequest"]);
  });

  it("Connect JSON: a type error is 400 invalid_argument with a BadRequest naming the field", async () => {
    const r = await connectPost("application/json", Buffer.from(JSON.stringify({ worker_id: "w", workloads: ["x"], max_tasks: "many" })));
    expect(r.status).toBe(400);
    expect(r.json.code).toBe("invalid_argument");
    expect(r.json.message).toMatch(/^max_tasks: cannot decode field leasehold\.queue\.v1\.ClaimTasksRequest\.max_tasks from JSON/);
    const br = connectDetail<{ fieldViolations: { field: string; description: string }[] }>(r.json.details, BadRequestSchema);
    expect(br.fieldViolations.map((v) => v.field)).toEqual(["max_tasks"]);
    const info = connectDetail<{ requestId: string }>(r.json.details, RequestInfoSchema);
    expect(info.requestId).toMatch(/\S/);
  });

  it("Connect server stream, binary: the end-stream message is invalid_argument with a BadRequest and the request id, not internal", async () => {
    const r = await connectStreamCall("proto", TRUNCATED);
    expect(r.status).toBe(200);
    expect(r.error?.code).toBe("invalid_argument");
    expect(r.error?.message).toMatch(/cannot decode leasehold\.queue\.v1\.WatchJobRequest from binary/);
    const br = connectDetail<{ fieldViolations: { field: string }[] }>(r.error?.details, BadRequestSchema);
    expect(br.fieldViolations.map((v) => v.field)).toEqual(["leasehold.queue.v1.WatchJobRequest"]);
    const info = connectDetail<{ requestId: string }>(r.error?.details, RequestInfoSchema);
    expect(info.requestId).toMatch(/\S/);
  });

  it("Connect server stream, JSON: a type error is invalid_argument with a BadRequest naming the field", async () => {
    const r = await connectStreamCall("json", Buffer.from(JSON.stringify({ job_id: 7 })));
    expect(r.status).toBe(200);
    expect(r.error?.code).toBe("invalid_argument");
    const br = connectDetail<{ fieldViolations: { field: string }[] }>(r.error?.details, BadRequestSchema);
    expect(br.fieldViolations.map((v) => v.field)).toEqual(["job_id"]);
  });

  it("writes nothing", async () => {
    const { rows } = await pool.query<{ n: string }>("SELECT count(*) AS n FROM tasks");
    expect(Number(rows[0].n)).toBe(0);
  });
});
