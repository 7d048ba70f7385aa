// REST JSON routes: a thin transcoder onto the Connect router. The routes are the google.api.http
// options of the proto's RPCs (the grpc-gateway convention), read from the generated descriptors
// at start; the path parameter, and the query or the body, are merged into the RPC's request
// JSON, which goes to the router's own handler for that RPC, in process, as a Connect JSON call,
// so REST runs through the same interceptors (auth, deadline, span, metrics, error mapping) as
// every other transport. The Connect JSON answer already has the REST shape (proto field names,
// defaults present, the server's JSON options); errors become the REST error body, and a server
// stream becomes Server-Sent Events.
//
// Cost, measured on the coordinator process against an in-memory queue (2 shared cores, 5 x 4,000
// sequential REST claims, median server CPU per call): an empty claim 213 µs when REST called the
// service object directly, 233–253 µs through the router; a 1-task claim 240–255 µs, 280–315 µs.
// The request JSON goes over as a parsed object (no second JSON.parse) and the answer's bytes are
// sent as they are (no re-encoding); what remains is connect-es' per-call handler context.

import {
  fromBinary,
  fromJson,
  type JsonReadOptions,
  type JsonWriteOptions,
  type MessageShape,
  getOption,
  hasOption,
  type DescEnum,
  type DescMessage,
  type DescMethod,
  type DescService,
  type JsonObject,
  type JsonValue,
} from "@bufbuild/protobuf";
import { base64Decode } from "@bufbuild/protobuf/wire";
import { Http2ServerResponse } from "node:http2";
import type { connectNodeAdapter } from "@connectrpc/connect-node";
import { Code, createContextValues } from "@connectrpc/connect";
import {
  createAsyncIterable,
  encodeEnvelope,
  pipe,
  transformSplitEnvelope,
  type UniversalHandler,
  type UniversalServerResponse,
} from "@connectrpc/connect/protocol";
import { codeFromString, endStreamFlag } from "@connectrpc/connect/protocol-connect";
import { http as httpRule } from "../../gen/google/api/annotations_pb.js";
import { BadRequestSchema } from "../../gen/google/rpc/error_details_pb.js";
import type { HttpRule } from "../../gen/google/api/http_pb.js";
import type { ClaimTasksResponse } from "../../gen/leasehold/queue/v1/queue_pb.js";
import { ValidationError } from "../queue/errors.js";
import { requireUuid } from "../queue/validation.js";
import { endResponse, readBody } from "./body.js";
import { HttpError, recordFailure, restErrorBody, type MappedError } from "./errors.js";
import { earlyAnswerKey, type EarlyAnswer } from "./early-answer.js";
import { giveBackController, takeController } from "./call-controllers.js";
import { callControllerKey } from "./interceptors.js";
import { requestInfoKey, type RequestInfo } from "./request-info.js";
import type { UnaryInvoker } from "./unary.js";
import { readJson } from "./json-reader.js";
import { writeJsonChunks as messageJsonChunks, type JsonWriteOptions as CompiledWriterOptions } from "./json-writer.js";

/** The server's JSON options: the contract's one JSON shape (proto field names, implicit fields always present). */
export type JsonOptions = Partial<JsonReadOptions & JsonWriteOptions> & CompiledWriterOptions;

type NodeHandlerFn = ReturnType<typeof connectNodeAdapter>;
/** The request and response types connect-node serves (http or http2). */
export type NodeRequest = Parameters<NodeHandlerFn>[0];
export type NodeResponse = Parameters<NodeHandlerFn>[1];

/** One REST route: an HTTP method and path pattern for one RPC. */
export interface RestRoute {
  method: string;
  /** Literal segments, and `{field}` for the path parameter (a proto field name). */
  pattern: string;
  rpc: DescMethod;
  /** Where the rest of the request comes from: "body" (`body: "*"`) or "query" (no body). */
  from: "body" | "query";
}

const PATH_TEMPLATE = /^(\/([A-Za-z0-9._~-]+|\{[a-z][a-z0-9_]*\}))+$/;

function routesOfRule(rpc: DescMethod, rule: HttpRule): RestRoute[] {
  const where = `${rpc.parent.typeName}.${rpc.name}`;
  const { pattern } = rule;
  if (pattern.case === undefined) throw new Error(`${where}: google.api.http option without a pattern`);
  const method = pattern.case === "custom" ? pattern.value.kind : pattern.case.toUpperCase();
  const path = pattern.case === "custom" ? pattern.value.path : pattern.value;
  // The transcoder takes the simple form of the grammar only: literal segments and whole-segment
  // field variables, the whole request as the body or none; refuse the rest at start, not per request.
  if (!PATH_TEMPLATE.test(path) || (path.match(/\{/g) ?? []).length > 1)
    throw new Error(`${where}: unsupported path template ${JSON.stringify(path)}`);
  if (rule.body !== "" && rule.body !== "*") throw new Error(`${where}: unsupported body ${JSON.stringify(rule.body)} (only "*" or none)`);
  if (rule.responseBody !== "") throw new Error(`${where}: response_body is not supported`);
  const param = /\{([a-z0-9_]+)\}/.exec(path)?.[1];
  if (param !== undefined && !rpc.input.fields.some((f) => f.name === param))
    throw new Error(`${where}: ${param} is not a field of ${rpc.input.typeName}`);
  const route: RestRoute = { method, pattern: path, rpc, from: rule.body === "*" ? "body" : "query" };
  return [route, ...rule.additionalBindings.flatMap((binding) => routesOfRule(rpc, binding))];
}

/** The REST routes a service declares with google.api.http options on its methods. */
export function restRoutes(service: DescService): RestRoute[] {
  return service.methods.flatMap((rpc) => (hasOption(rpc, httpRule) ? routesOfRule(rpc, getOption(rpc, httpRule)) : []));
}

/** Success statuses other than 200, by RPC: a created job is 201 (an idempotent replay 200), an empty claim 204 No Content. */
const SUCCESS_STATUS: Record<string, (message: MessageShape<DescMessage>, info: RequestInfo) => number> = {
  CreateJob: (_message, info) => (info.created === false ? 200 : 201),
  ClaimTasks: (message) => ((message as ClaimTasksResponse).tasks.length === 0 ? 204 : 200),
};

/** Path parameters that are ids: a malformed one is refused before any call. */
const UUID_PARAMS = new Set(["task_id", "job_id"]);

/**
 * Headers of the REST request the in-process Connect call must not see: its own framing and
 * encoding are set here, and a REST call has no client deadline of its own.
 */
const DROPPED_HEADERS = new Set([
  "content-type",
  "content-length",
  "content-encoding",
  "accept-encoding",
  "connect-protocol-version",
  "connect-timeout-ms",
  "connect-content-encoding",
  "connect-accept-encoding",
  "grpc-timeout",
]);

interface CompiledRoute {
  route: RestRoute;
  segments: string[];
  handler: UniversalHandler;
  url: string;
  stream: boolean;
}

interface Match {
  route: CompiledRoute;
  param?: { field: string; value: string };
}

function splitPath(path: string): string[] {
  return path.split("/").slice(1);
}

function snakeToCamel(s: string): string {
  return s.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase());
}

const utf8 = new TextDecoder("utf-8", { fatal: true });

function isJsonContentType(value: string | undefined): boolean {
  if (value === "application/json") return true;
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

/**
 * `?status=failed` as well as the proto's `JOB_STATUS_FAILED`, and `"failure_policy": "continue"`
 * in a body as well as `FAILURE_POLICY_CONTINUE`: a top-level enum value may be the value's short name.
 */
function enumShortNames(schema: DescMessage, json: JsonObject): void {
  for (const [key, v] of Object.entries(json)) {
    if (typeof v !== "string" || !/^[a-z][a-z_]*$/.test(v)) continue;
    const field = schema.fields.find((f) => f.name === key || f.jsonName === key);
    if (field?.fieldKind !== "enum") continue;
    const value = field.enum.values.find((e) => e.localName === v.toUpperCase());
    if (value) json[key] = value.name;
  }
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
    if (!field) return new ValidationError(path ? `${path}.${key}` : key, unknownKey(schema));
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

/** What an unknown key of a request object is told: the fields the message has. */
function unknownKey(schema: DescMessage): string {
  return `is not a field of ${schema.name} (its fields: ${schema.fields.map((f) => f.name).join(", ")})`;
}

/** Path fields by their JSON name (task_id: taskId); a body may name the field either way. */
const camelNames = new Map<string, string>();

/** Sets the path parameter in the JSON request, refusing a body that says otherwise. */
function applyPathParam(json: JsonObject, field: string, value: string): void {
  let camel = camelNames.get(field);
  if (camel === undefined) camelNames.set(field, (camel = snakeToCamel(field)));
  for (const key of [field, camel]) {
    const given: JsonValue | undefined = json[key];
    if (given === undefined) continue;
    if (given !== value) throw new ValidationError(field, "does not match the path");
    // Only when given: a delete makes the object a slower dictionary for the decoding after it.
    delete json[key];
  }
  json[field] = value;
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
  const m = recordFailure(info, err);
  writeJson(res, m.httpStatus, restErrorBody(m, info.requestId), err instanceof HttpError ? err.headers : {});
}

export interface RestOptions {
  /** The Connect router's handlers (ConnectRouter.handlers): one per RPC; REST uses them for server streams. */
  handlers: readonly UniversalHandler[];
  /** Unary RPCs: the interceptor chain and the implementation, called directly. */
  invoke: UnaryInvoker;
  /** The server's JSON options (the ones the router's Connect JSON uses). */
  jsonOptions: JsonOptions;
  routes: readonly RestRoute[];
  maxBodyBytes: number;
}

export interface Rest {
  /** True when the path belongs to the REST surface (so the Connect router is not asked). */
  isRestPath(pathname: string): boolean;
  /**
   * Serves a request whose path isRestPath(). Every failure, including a bug here, is answered
   * as a REST error; nothing reaches the router before the route, path id and body have been
   * decoded.
   */
  handle(req: NodeRequest, res: NodeResponse, url: Pick<URL, "pathname" | "searchParams">, info: RequestInfo): Promise<void>;
}

export function createRest(opts: RestOptions): Rest {
  const compiled: CompiledRoute[] = opts.routes.map((route) => {
    const handler = opts.handlers.find((h) => h.method === route.rpc);
    if (!handler) throw new Error(`REST route ${route.method} ${route.pattern}: the router has no handler for ${route.rpc.name}`);
    return {
      route,
      segments: splitPath(route.pattern),
      handler,
      url: `http://rest.invalid${handler.requestPath}`,
      stream: route.rpc.methodKind === "server_streaming",
    };
  });
  // A literal segment wins over a path parameter (`/tasks/claim` is not a task id).
  compiled.sort((a, b) => a.segments.filter((x) => x.startsWith("{")).length - b.segments.filter((x) => x.startsWith("{")).length);

  /** Routes whose pattern matches the path (any method). Empty: not a REST path. */
  function matchPath(pathname: string): Match[] {
    const parts = splitPath(pathname);
    const out: Match[] = [];
    for (const route of compiled) {
      const { segments } = route;
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

  async function handle(
    req: NodeRequest,
    res: NodeResponse,
    url: Pick<URL, "pathname" | "searchParams">,
    info: RequestInfo,
  ): Promise<void> {
    info.protocol = "rest";
    try {
      const matches = matchPath(url.pathname);
      const match = matches.find((m) => m.route.route.method === req.method);
      if (!match) {
        const allow = [...new Set(matches.map((m) => m.route.route.method))].join(", ");
        throw new HttpError(Code.Unimplemented, `method ${req.method} is not allowed on ${url.pathname}`, 405, { allow });
      }
      const { route, param } = match;
      const rpc = route.route.rpc;
      info.operation = rpc.name;

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
      if (route.route.from === "query") {
        json = queryObject(url.searchParams);
        enumShortNames(rpc.input, json);
      } else {
        if ([...url.searchParams.keys()].length > 0)
          throw new HttpError(Code.InvalidArgument, "query parameters are not accepted on this route");
        json = await decodeBody(req, opts.maxBodyBytes);
        enumShortNames(rpc.input, json);
      }
      if (param && pathValue !== undefined) applyPathParam(json, param.field, pathValue);
      // EventSource resumes a stream by sending the last id it saw; ?after_event_id= says the same.
      const lastEventId = req.headers["last-event-id"];
      const resumable = route.stream && rpc.input.fields.some((f) => f.name === "after_event_id");
      if (
        resumable &&
        typeof lastEventId === "string" &&
        lastEventId !== "" &&
        json.after_event_id === undefined &&
        json.afterEventId === undefined
      ) {
        json.after_event_id = lastEventId;
      }

      // A server stream's signal may outlive the call (call-controllers.ts): its controller is its own.
      const abort = route.stream ? new AbortController() : takeController();
      const onClose = () => {
        if (!res.writableFinished) abort.abort(new Error("client closed the request"));
      };
      res.once("close", onClose);
      try {
        if (route.stream) {
          const answering = route.handler({
            httpVersion: "1.1",
            method: "POST",
            url: route.url,
            header: connectHeaders(req, true),
            body: createAsyncIterable([encodeEnvelope(0, new TextEncoder().encode(JSON.stringify(json)))]),
            signal: abort.signal,
            contextValues: createContextValues().set(requestInfoKey, info),
          });
          await writeEventStream(res, answering, rpc.input, json, info);
        } else {
          // A unary RPC: decoded here as connect-es would (the server's JSON options), then the
          // interceptor chain and the implementation, called directly (unary.ts).
          let input: MessageShape<DescMessage>;
          try {
            input = readJson(rpc.input, json, opts.jsonOptions);
          } catch (err) {
            throw decodeError(rpc.input, json, err as Error);
          }
          // Decoded: the parsed body (10,000 objects for a big CreateJob) need not live through the call.
          json = {};
          // An answer the implementation hands over early (a big CreateJob's, while PostgreSQL
          // copies its tasks) is encoded then, and sent if the call returns that very message.
          let early: { message: MessageShape<DescMessage>; body: string | Buffer[] } | undefined;
          const encodeEarly: EarlyAnswer = (message) => {
            early = { message, body: messageJsonChunks(rpc.output, message, opts.jsonOptions) };
          };
          const answer = await opts.invoke(rpc, input, {
            header: connectHeaders(req, false),
            signal: abort.signal,
            contextValues: createContextValues().set(requestInfoKey, info).set(callControllerKey, abort).set(earlyAnswerKey, encodeEarly),
            protocolName: "rest",
            url: route.url,
          });
          writeUnary(res, answer.message, rpc, info, opts.jsonOptions, early?.message === answer.message ? early.body : undefined);
        }
      } finally {
        res.removeListener("close", onClose);
        if (!route.stream) giveBackController(abort);
      }
    } catch (err) {
      writeError(res, err, info);
    }
  }

  return { isRestPath: (pathname) => matchPath(pathname).length > 0, handle };
}

function connectHeaders(req: NodeRequest, stream: boolean): Headers {
  const h = new Headers();
  for (const [k, v] of Object.entries(req.headers)) {
    if (k.startsWith(":") || v === undefined || DROPPED_HEADERS.has(k)) continue;
    if (Array.isArray(v)) for (const item of v) h.append(k, item);
    else h.set(k, v);
  }
  h.set("content-type", stream ? "application/connect+json" : "application/json");
  return h;
}

/** A Connect JSON error answer: `{"code", "message", "details": [{"type", "value"}]}`. */
interface ConnectErrorJson {
  code?: string;
  message?: string;
  details?: { type?: string; value?: string }[];
}

/**
 * The REST form of a Connect error answer, recorded on the RequestInfo when no interceptor saw it
 * (the router refused the request JSON before the call). A request JSON the message type refuses
 * is named by field, as protobuf-es does not for message fields; the field violations of a
 * google.rpc.BadRequest detail become the REST body's `violations`.
 */
function connectFailure(error: ConnectErrorJson | undefined, schema: DescMessage, json: JsonObject, info: RequestInfo): MappedError {
  const codeName = error?.code ?? "unknown";
  const code = codeFromString(codeName) ?? Code.Unknown;
  if (code === Code.InvalidArgument && info.code === undefined) {
    try {
      fromJson(schema, json);
    } catch (err) {
      return recordFailure(info, decodeError(schema, json, err as Error));
    }
  }
  const m = recordFailure(info, new HttpError(code, error?.message ?? ""));
  const badRequest = error?.details?.find((d) => d.type === BadRequestSchema.typeName);
  if (badRequest?.value !== undefined) {
    const violations = fromBinary(BadRequestSchema, base64Decode(badRequest.value)).fieldViolations;
    return { ...m, violations: violations.map((v) => ({ field: v.field, description: v.description })) };
  }
  return m;
}

function writeUnary(
  res: NodeResponse,
  message: MessageShape<DescMessage>,
  rpc: DescMethod,
  info: RequestInfo,
  jsonOptions: JsonOptions,
  /** The message's JSON, when it was written already. */
  encoded?: string | Buffer[],
): void {
  const status = SUCCESS_STATUS[rpc.name]?.(message, info) ?? 200;
  if (status === 204) {
    res.statusCode = 204;
    res.end();
    return;
  }
  const body = encoded ?? messageJsonChunks(rpc.output, message, jsonOptions);
  res.setHeader("content-type", "application/json");
  res.statusCode = status;
  if (typeof body === "string") {
    res.setHeader("content-length", Buffer.byteLength(body));
    res.end(body);
    return;
  }
  // A long answer (a 10,000-task CreateJob's is ~4.9 MB) comes as UTF-8 Buffers: written as they
  // are, no string of the whole answer is made (see json-writer.ts).
  let length = 0;
  for (const chunk of body) length += chunk.length;
  res.setHeader("content-length", length);
  for (const chunk of body) res.write(chunk);
  res.end();
}

/** The router's own answer, read in process: bounded only as connect-es bounds what it writes. */
const STREAM_FRAME_MAX_BYTES = 0xffffffff;

/** SSE comment lines this often keep proxies from closing a quiet stream. */
const SSE_KEEPALIVE_MS = 15_000;

const utf8Text = new TextDecoder();

/**
 * How long a stream that may start quiet (a resumed WatchJob sends no snapshot) waits for its first
 * message before the status line goes out anyway: long enough that a refusal (unknown job, bad
 * input, a few milliseconds normally) is still a plain REST error with its status, short enough
 * that a proxy does not give up on a resumed stream whose next event is minutes away.
 */
const SSE_QUIET_START_MS = 1000;

/** The SSE `id:` of a stream message: a WatchJob event's id (the snapshot has none). */
function eventIdOf(data: string): string | undefined {
  if (!data.startsWith('{"event"')) return undefined;
  const id = (JSON.parse(data) as { event?: { id?: unknown } }).event?.id;
  return typeof id === "string" || typeof id === "number" ? String(id) : undefined;
}

/**
 * A server stream as Server-Sent Events: one `data:` line of JSON per message (the same JSON as
 * the RPC's), so `EventSource` and `curl -N` both work, preceded by an `id:` line where the
 * message has one (EventSource sends the last as Last-Event-ID when it reconnects). An error
 * before the first message is a plain REST error answer; after it, an `event: error` carrying the
 * REST error body ends the stream.
 */
async function writeEventStream(
  res: NodeResponse,
  answering: Promise<UniversalServerResponse>,
  schema: DescMessage,
  json: JsonObject,
  info: RequestInfo,
): Promise<void> {
  // connect-es resolves a stream's answer with its first frame (so headers can still change
  // until then): the wait for the first message starts here.
  let frames: AsyncIterator<{ flags: number; data: Uint8Array }> | undefined;
  const open = async () => {
    const answer = await answering;
    if (answer.status !== 200 || !answer.body) throw new HttpError(Code.Internal, "internal error");
    return pipe(answer.body, transformSplitEnvelope(STREAM_FRAME_MAX_BYTES))[Symbol.asyncIterator]();
  };
  /** A frame's text, or the failure an end-of-stream frame carries (undefined: the stream ended well). */
  const read = async (): Promise<{ data?: string; failure?: MappedError; done: boolean }> => {
    frames ??= await open();
    const step = await frames.next();
    if (step.done) return { done: true };
    const text = utf8Text.decode(step.value.data);
    if ((step.value.flags & endStreamFlag) !== endStreamFlag) return { data: text, done: false };
    const end = JSON.parse(text) as { error?: ConnectErrorJson };
    if (!end.error) return { done: true };
    return { failure: connectFailure(end.error, schema, json, info), done: true };
  };
  // The first message (or error) decides the status line, unless a resumed stream stays quiet a while.
  const firstRead = read();
  let timer: NodeJS.Timeout | undefined;
  const resumed = json.after_event_id !== undefined || json.afterEventId !== undefined;
  const early = resumed
    ? await Promise.race([
        firstRead,
        new Promise<undefined>((resolve) => (timer = setTimeout(() => resolve(undefined), SSE_QUIET_START_MS))),
      ])
    : await firstRead;
  clearTimeout(timer);
  if (early?.failure) {
    writeJson(res, early.failure.httpStatus, restErrorBody(early.failure, info.requestId));
    return;
  }
  res.writeHead(200, { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache" });
  const send = (text: string) => void res.write(text);
  if (early === undefined) send(": waiting for the next event\n\n");
  const keepalive = setInterval(() => send(": keepalive\n\n"), SSE_KEEPALIVE_MS);
  try {
    for (let step = await firstRead; ; step = await read()) {
      if (step.data !== undefined) {
        const id = eventIdOf(step.data);
        send(`${id === undefined ? "" : `id: ${id}\n`}data: ${step.data}\n\n`);
      }
      if (step.failure) send(`event: error\ndata: ${JSON.stringify(restErrorBody(step.failure, info.requestId))}\n\n`);
      if (step.done) break;
    }
  } catch (err) {
    const m = recordFailure(info, err);
    send(`event: error\ndata: ${JSON.stringify(restErrorBody(m, info.requestId))}\n\n`);
  } finally {
    clearInterval(keepalive);
    res.end();
  }
}
