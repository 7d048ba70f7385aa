// REST JSON routes over the SAME service implementation the Connect router
// serves. A route only says which RPC it is, where its path parameter goes and
// which success status it answers; bodies, path and query parameters are
// decoded with the generated message's JSON codec (proto names or lowerCamelCase,
// unknown fields rejected) and answers encoded with proto field names.

import { create, fromJson, toJson, type DescEnum, type DescMessage, type JsonObject, type JsonValue, type MessageShape } from "@bufbuild/protobuf";
import { Http2ServerResponse } from "node:http2";
import type { connectNodeAdapter } from "@connectrpc/connect-node";
import { Code, createContextValues, createHandlerContext, type HandlerContext } from "@connectrpc/connect";
import {
  CancelJobRequestSchema,
  CancelJobResponseSchema,
  ClaimTasksRequestSchema,
  ClaimTasksResponseSchema,
  CompleteTaskRequestSchema,
  CompleteTaskResponseSchema,
  CompleteTasksRequestSchema,
  CompleteTasksResponseSchema,
  CreateJobRequestSchema,
  CreateJobResponseSchema,
  FailTaskRequestSchema,
  FailTaskResponseSchema,
  GetJobRequestSchema,
  GetJobResponseSchema,
  GetTaskRequestSchema,
  GetTaskResponseSchema,
  JobStatus,
  ListTasksRequestSchema,
  ListTasksResponseSchema,
  TaskStatus,
  type WatchJobResponse,
  ListCompletedResultsRequestSchema,
  ListCompletedResultsResponseSchema,
  ListJobsRequestSchema,
  ListJobsResponseSchema,
  ListWorkloadsRequestSchema,
  ListWorkloadsResponseSchema,
  PutWorkloadRequestSchema,
  PutWorkloadResponseSchema,
  QueueService as QueueServiceDesc,
  RenewLeaseRequestSchema,
  RenewLeaseResponseSchema,
  ReportProgressRequestSchema,
  ReportProgressResponseSchema,
  RetryJobRequestSchema,
  RetryJobResponseSchema,
  WatchJobRequestSchema,
  WatchJobResponseSchema,
} from "../../gen/leasehold/queue/v1/queue_pb.js";
import { ValidationError } from "../queue/errors.js";
import { requireUuid } from "../queue/validation.js";
import { endResponse, readBody } from "./body.js";
import { HttpError, mapError, restErrorBody } from "./errors.js";
import { requestInfoKey, type QueueServiceImpl, type RequestInfo } from "./service.js";

type NodeHandlerFn = ReturnType<typeof connectNodeAdapter>;
/** The request and response types connect-node serves (http or http2). */
export type NodeRequest = Parameters<NodeHandlerFn>[0];
export type NodeResponse = Parameters<NodeHandlerFn>[1];

type MethodName = keyof QueueServiceImpl;

interface Route {
  method: "GET" | "POST" | "PUT";
  /** Literal segments, and `{field}` for the path parameter (a proto field name). */
  pattern: string;
  rpc: MethodName;
  request: DescMessage;
  response: DescMessage;
  /** Success status; default 200. */
  status?: (response: MessageShape<DescMessage>, info: RequestInfo) => number;
  /** Rewrites the decoded query or body before the message is decoded (friendlier REST spellings). */
  normalize?: (json: JsonObject) => void;
  /** A server-streaming RPC, served as Server-Sent Events. */
  stream?: true;
  /** Streams: the SSE `id:` of a message (an EventSource resumes after it with Last-Event-ID); undefined: none. */
  eventId?: (message: unknown) => string | undefined;
  /**
   * Streams: true when this request may have nothing to send for a while (a resumed WatchJob has
   * no snapshot), so the status line goes out after a short wait instead of with the first message.
   */
  mayStartQuiet?: (request: MessageShape<DescMessage>) => boolean;
}

/** `?status=failed` as well as the proto's `JOB_STATUS_FAILED`. */
function jobStatusName(json: JsonObject): void {
  const v = json.status;
  // protobuf-es enums drop the JOB_STATUS_ prefix on the TypeScript side.
  if (typeof v === "string" && /^[a-z]+$/.test(v) && v.toUpperCase() in JobStatus) json.status = `JOB_STATUS_${v.toUpperCase()}`;
}

/** `?status=failed` as well as the proto's `TASK_STATUS_FAILED`. */
function taskStatusName(json: JsonObject): void {
  const v = json.status;
  if (typeof v === "string" && /^[a-z]+$/.test(v) && v.toUpperCase() in TaskStatus) json.status = `TASK_STATUS_${v.toUpperCase()}`;
}

/** A WatchJob event's id; the snapshot has none (a resumed stream sends no snapshot). */
function watchEventId(message: unknown): string | undefined {
  const u = (message as WatchJobResponse).update;
  return u.case === "event" ? u.value.id.toString() : undefined;
}

/** The REST surface of issue 3; each row serves the same messages as its RPC. */
export const ROUTES: readonly Route[] = [
  {
    method: "POST",
    pattern: "/jobs",
    rpc: "createJob",
    request: CreateJobRequestSchema,
    response: CreateJobResponseSchema,
    status: (_r, info) => (info.created === false ? 200 : 201),
  },
  {
    method: "POST",
    pattern: "/tasks/claim",
    rpc: "claimTasks",
    request: ClaimTasksRequestSchema,
    response: ClaimTasksResponseSchema,
    status: (r) => ((r as MessageShape<typeof ClaimTasksResponseSchema>).tasks.length === 0 ? 204 : 200),
  },
  { method: "POST", pattern: "/tasks/{task_id}/heartbeat", rpc: "renewLease", request: RenewLeaseRequestSchema, response: RenewLeaseResponseSchema },
  { method: "POST", pattern: "/tasks/{task_id}/result", rpc: "completeTask", request: CompleteTaskRequestSchema, response: CompleteTaskResponseSchema },
  { method: "POST", pattern: "/tasks/results", rpc: "completeTasks", request: CompleteTasksRequestSchema, response: CompleteTasksResponseSchema },
  { method: "POST", pattern: "/tasks/{task_id}/failure", rpc: "failTask", request: FailTaskRequestSchema, response: FailTaskResponseSchema },
  { method: "GET", pattern: "/jobs/{job_id}", rpc: "getJob", request: GetJobRequestSchema, response: GetJobResponseSchema },
  {
    method: "GET",
    pattern: "/jobs/{job_id}/results",
    rpc: "listCompletedResults",
    request: ListCompletedResultsRequestSchema,
    response: ListCompletedResultsResponseSchema,
  },
  { method: "POST", pattern: "/jobs/{job_id}/cancel", rpc: "cancelJob", request: CancelJobRequestSchema, response: CancelJobResponseSchema },
  { method: "POST", pattern: "/jobs/{job_id}/retry", rpc: "retryJob", request: RetryJobRequestSchema, response: RetryJobResponseSchema },
  { method: "GET", pattern: "/jobs", rpc: "listJobs", request: ListJobsRequestSchema, response: ListJobsResponseSchema, normalize: jobStatusName },
  {
    method: "GET",
    pattern: "/jobs/{job_id}/events",
    rpc: "watchJob",
    request: WatchJobRequestSchema,
    response: WatchJobResponseSchema,
    stream: true,
    eventId: watchEventId,
    mayStartQuiet: (r) => (r as MessageShape<typeof WatchJobRequestSchema>).afterEventId !== 0n,
  },
  { method: "GET", pattern: "/jobs/{job_id}/tasks", rpc: "listTasks", request: ListTasksRequestSchema, response: ListTasksResponseSchema, normalize: taskStatusName },
  { method: "GET", pattern: "/tasks/{task_id}", rpc: "getTask", request: GetTaskRequestSchema, response: GetTaskResponseSchema },
  {
    method: "POST",
    pattern: "/tasks/{task_id}/progress",
    rpc: "reportProgress",
    request: ReportProgressRequestSchema,
    response: ReportProgressResponseSchema,
  },
  { method: "PUT", pattern: "/workloads/{name}", rpc: "putWorkload", request: PutWorkloadRequestSchema, response: PutWorkloadResponseSchema },
  { method: "GET", pattern: "/workloads", rpc: "listWorkloads", request: ListWorkloadsRequestSchema, response: ListWorkloadsResponseSchema },
];

/** Path parameters that are ids: a malformed one is refused before any call. */
const UUID_PARAMS = new Set(["task_id", "job_id"]);

const JSON_WRITE = { useProtoFieldName: true, alwaysEmitImplicit: true } as const;

interface Match {
  route: Route;
  param?: { field: string; value: string };
}

function splitPath(path: string): string[] {
  return path.split("/").slice(1);
}

const compiled = ROUTES.map((route) => ({ route, segments: splitPath(route.pattern) }));

function snakeToCamel(s: string): string {
  return s.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase());
}

/**
 * Routes whose pattern matches the path (any method). Empty: not a REST path.
 * Throws HttpError for an undecodable path segment.
 */
function matchPath(pathname: string): Match[] {
  const parts = splitPath(pathname);
  const out: Match[] = [];
  for (const { route, segments } of compiled) {
    if (segments.length !== parts.length) continue;
    let param: Match["param"];
    let ok = true;
    for (let i = 0; i < segments.length && ok; i++) {
      const seg = segments[i];
      if (seg.startsWith("{")) {
        if (parts[i] === "") ok = false;
        else param = { field: seg.slice(1, -1), value: parts[i] };
      } else if (seg !== parts[i]) ok = false;
    }
    if (ok) out.push({ route, param });
  }
  // A literal path wins over a pattern: GET /tasks/claim is a wrong method on the claim route
  // (405), not a task id "claim" for GET /tasks/{task_id}.
  const literal = out.filter((m) => m.param === undefined);
  return literal.length > 0 ? literal : out;
}

/** True when the path belongs to the REST surface (so the Connect router is not asked). */
export function isRestPath(pathname: string): boolean {
  return matchPath(pathname).length > 0;
}

const utf8 = new TextDecoder("utf-8", { fatal: true });

function isJsonContentType(value: string | undefined): boolean {
  if (!value) return false;
  const mediaType = value.split(";")[0].trim().toLowerCase();
  return mediaType === "application/json" || /^application\/[a-z0-9.+-]+\+json$/.test(mediaType);
}

async function decodeBody(req: NodeRequest, maxBytes: number): Promise<JsonObject> {
  const bytes = await readBody(req, maxBytes);
  if (bytes.length === 0) return {};
  if (!isJsonContentType(req.headers["content-type"])) {
    throw new HttpError(Code.InvalidArgument, "content-type must be application/json", 415);
  }
  let text: string;
  try {
    text = utf8.decode(bytes);
  } catch {
    throw new HttpError(Code.InvalidArgument, "request body is not valid UTF-8");
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new HttpError(Code.InvalidArgument, `request body is not valid JSON: ${(err as Error).message}`);
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new HttpError(Code.InvalidArgument, "request body must be a JSON object");
  }
  return value as JsonObject;
}

function queryObject(search: URLSearchParams): JsonObject {
  const out: JsonObject = {};
  for (const key of new Set(search.keys())) {
    const values = search.getAll(key);
    if (values.length > 1) throw new HttpError(Code.InvalidArgument, `query parameter ${JSON.stringify(key)} is given more than once`);
    out[key] = values[0];
  }
  return out;
}

/** "must be one of pending, running, … (or JOB_STATUS_PENDING, …)" for an enum field, without the UNSPECIFIED zero. */
function enumExpectation(e: DescEnum): string {
  const values = e.values.filter((v) => v.number !== 0);
  const short = values.map((v) => v.localName.toLowerCase());
  return `must be one of ${short.join(", ")} (or ${values.map((v) => v.name).join(", ")})`;
}

/**
 * protobuf-es names a scalar field that fails to decode, but not a message-typed one
 * ("cannot decode message google.protobuf.Struct from JSON Array(2)"), and for an enum only
 * the value it refused: find the field (and list index) that fails on its own, and refuse it as
 * a ValidationError naming it (with the accepted values of an enum). An error no field explains
 * stays an HttpError with protobuf-es' message.
 */
function decodeError(schema: DescMessage, json: JsonValue, err: Error, path = ""): Error {
  if (json === null || typeof json !== "object" || Array.isArray(json)) {
    return path ? new ValidationError(path, err.message) : new HttpError(Code.InvalidArgument, err.message);
  }
  for (const [key, value] of Object.entries(json)) {
    const field = schema.fields.find((f) => f.name === key || f.jsonName === key);
    if (!field) continue;
    const at = path ? `${path}.${field.name}` : field.name;
    try {
      fromJson(schema, { [key]: value });
      continue;
    } catch (fieldErr) {
      if (field.fieldKind === "list" && field.listKind === "message" && Array.isArray(value)) {
        for (let i = 0; i < value.length; i++) {
          try {
            fromJson(field.message, value[i]);
          } catch (itemErr) {
            return decodeError(field.message, value[i], itemErr as Error, `${at}[${i}]`);
          }
        }
      }
      if (field.fieldKind === "message" && field.message.typeName.startsWith("leasehold.")) {
        return decodeError(field.message, value, fieldErr as Error, at);
      }
      if (field.fieldKind === "enum" && typeof value === "string") {
        return new ValidationError(at, `${JSON.stringify(value)} is not a value: ${enumExpectation(field.enum)}`);
      }
      return new ValidationError(at, (fieldErr as Error).message);
    }
  }
  return path ? new ValidationError(path, err.message) : new HttpError(Code.InvalidArgument, err.message);
}

/** Sets the path parameter in the JSON request, refusing a body that says otherwise. */
function applyPathParam(json: JsonObject, field: string, value: string): void {
  for (const key of [field, snakeToCamel(field)]) {
    const given: JsonValue | undefined = json[key];
    if (given !== undefined && given !== value) throw new ValidationError(field, "does not match the path");
    delete json[key];
  }
  json[field] = value;
}

export interface RestHandlerOptions {
  impl: QueueServiceImpl;
  maxBodyBytes: number;
}

export function writeJson(res: NodeResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  if (res.headersSent) {
    res.end();
    return;
  }
  for (const [k, v] of Object.entries(headers)) {
    // Connection-specific headers are HTTP/1.1 only; HTTP/2 forbids them.
    if (k === "connection" && res instanceof Http2ServerResponse) continue;
    res.setHeader(k, v);
  }
  res.setHeader("content-type", "application/json");
  res.setHeader("content-length", Buffer.byteLength(text));
  res.statusCode = status;
  endResponse(res, text);
}

export function writeError(res: NodeResponse, err: unknown, info: RequestInfo): void {
  const m = mapError(err);
  info.code ??= m.codeName;
  if (m.internal) info.error ??= err;
  writeJson(res, m.httpStatus, restErrorBody(m, info.requestId), err instanceof HttpError ? err.headers : {});
}

/**
 * Serves a request whose path isRestPath(). Every failure, including a bug
 * here, is answered as a REST error; nothing reaches the queue before the
 * route, path id and body have been decoded.
 */
export async function handleRest(req: NodeRequest, res: NodeResponse, url: URL, info: RequestInfo, opts: RestHandlerOptions): Promise<void> {
  info.protocol = "rest";
  try {
    const matches = matchPath(url.pathname);
    const match = matches.find((m) => m.route.method === req.method);
    if (!match) {
      const allow = [...new Set(matches.map((m) => m.route.method))].join(", ");
      throw new HttpError(Code.Unimplemented, `method ${req.method} is not allowed on ${url.pathname}`, 405, { allow });
    }
    const { route, param } = match;
    const method = QueueServiceDesc.method[route.rpc];
    info.operation = method.name;

    let pathValue: string | undefined;
    if (param) {
      try {
        pathValue = decodeURIComponent(param.value);
      } catch {
        throw new ValidationError(param.field, "is not a valid path segment");
      }
      if (UUID_PARAMS.has(param.field)) {
        pathValue = requireUuid(param.field, pathValue);
        if (param.field === "task_id") info.taskId = pathValue;
        else info.jobId = pathValue;
      }
    }

    let json: JsonObject;
    if (route.method === "GET") {
      json = queryObject(url.searchParams);
    } else {
      if ([...url.searchParams.keys()].length > 0) throw new HttpError(Code.InvalidArgument, "query parameters are not accepted on this route");
      json = await decodeBody(req, opts.maxBodyBytes);
    }
    if (param && pathValue !== undefined) applyPathParam(json, param.field, pathValue);
    route.normalize?.(json);

    let request: MessageShape<DescMessage>;
    // EventSource resumes a stream by sending the last id it saw; ?after_event_id= says the same.
    const lastEventId = req.headers["last-event-id"];
    const resumable = route.stream && route.request.fields.some((f) => f.name === "after_event_id");
    if (resumable && typeof lastEventId === "string" && lastEventId !== "" && json.after_event_id === undefined && json.afterEventId === undefined) {
      json.after_event_id = lastEventId;
    }
    try {
      request = fromJson(route.request, json);
    } catch (err) {
      throw decodeError(route.request, json, err as Error);
    }

    const abort = new AbortController();
    const onClose = () => {
      if (!res.writableFinished) abort.abort(new Error("client closed the request"));
    };
    res.once("close", onClose);
    const ctx: HandlerContext = createHandlerContext({
      service: QueueServiceDesc,
      method,
      protocolName: "rest",
      requestMethod: req.method ?? "GET",
      url: url.toString(),
      requestHeader: headersOf(req),
      requestSignal: abort.signal,
      contextValues: createContextValues().set(requestInfoKey, info),
    });
    if (route.stream) {
      await writeEventStream(res, route, opts.impl[route.rpc] as StreamingHandler, request, ctx, info);
      res.removeListener("close", onClose);
      return;
    }
    const impl = opts.impl[route.rpc] as (r: MessageShape<DescMessage>, c: HandlerContext) => Promise<unknown>;
    const result = create(route.response, (await impl(request, ctx)) as never);
    res.removeListener("close", onClose);
    const status = route.status?.(result, info) ?? 200;
    if (status === 204) {
      res.statusCode = 204;
      res.end();
      return;
    }
    writeJson(res, status, toJson(route.response, result, JSON_WRITE));
  } catch (err) {
    writeError(res, err, info);
  }
}

type StreamingHandler = (r: MessageShape<DescMessage>, c: HandlerContext) => AsyncIterable<unknown>;

/** SSE comment lines this often keep proxies from closing a quiet stream. */
const SSE_KEEPALIVE_MS = 15_000;

/**
 * How long a stream that may start quiet waits for its first message before the status line goes
 * out anyway: long enough that a refusal (unknown job, bad input, a few milliseconds normally) is
 * still a plain REST error with its status, short enough that a proxy does not give up on a
 * resumed stream whose next event is minutes away.
 */
const SSE_QUIET_START_MS = 1000;

/**
 * A server stream as Server-Sent Events: one `data:` line of JSON per message (the same JSON as
 * the RPC's), so `EventSource` and `curl -N` both work, preceded by an `id:` line where the route
 * gives the message one (EventSource sends the last as Last-Event-ID when it reconnects). An error
 * before the first message is a plain REST error answer; after it, an `event: error` carrying the
 * REST error body ends the stream.
 */
async function writeEventStream(
  res: NodeResponse,
  route: Route,
  handler: StreamingHandler,
  request: MessageShape<DescMessage>,
  ctx: HandlerContext,
  info: RequestInfo,
): Promise<void> {
  const iterator = handler(request, ctx)[Symbol.asyncIterator]();
  // The first message (or error) decides the status line, unless a quiet stream stays silent a while.
  const first = iterator.next();
  let timer: NodeJS.Timeout | undefined;
  const early = route.mayStartQuiet?.(request)
    ? await Promise.race([first, new Promise<undefined>((resolve) => (timer = setTimeout(() => resolve(undefined), SSE_QUIET_START_MS)))])
    : await first;
  clearTimeout(timer);
  res.writeHead(200, { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache" });
  const send = (text: string) => void res.write(text);
  if (early === undefined) send(": waiting for the next event\n\n");
  const keepalive = setInterval(() => send(": keepalive\n\n"), SSE_KEEPALIVE_MS);
  try {
    for (let step = await first; !step.done; step = await iterator.next()) {
      const json = toJson(route.response, create(route.response, step.value as never), JSON_WRITE);
      const id = route.eventId?.(step.value);
      send(`${id === undefined ? "" : `id: ${id}\n`}data: ${JSON.stringify(json)}\n\n`);
    }
  } catch (err) {
    const m = mapError(err);
    info.code = m.codeName;
    if (m.internal) info.error ??= err;
    send(`event: error\ndata: ${JSON.stringify(restErrorBody(m, info.requestId))}\n\n`);
  } finally {
    clearInterval(keepalive);
    res.end();
  }
}

function headersOf(req: NodeRequest): Headers {
  const h = new Headers();
  for (const [k, v] of Object.entries(req.headers)) {
    if (k.startsWith(":") || v === undefined) continue;
    if (Array.isArray(v)) for (const item of v) h.append(k, item);
    else h.set(k, v);
  }
  return h;
}
