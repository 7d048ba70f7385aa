// REST JSON routes, transcoded onto the RPCs. The routes are the google.api.http options of the
// proto's RPCs (the grpc-gateway convention), read from the generated descriptors at start; the
// path parameter, and the query or the body, are merged into the RPC's request JSON. A unary RPC
// is then served through the unary seam (direct/index.ts): by default decoded and answered by the
// direct path's compiled JSON codecs (direct/rest.ts), with DIRECT_UNARY=false sent to the
// router's own handler as an in-process Connect JSON call (direct/router.ts); either way through
// the same interceptors (auth, deadline, span, metrics, error mapping) as every other transport,
// and answered in the one JSON shape of the contract (proto field names, defaults present). A
// server stream goes to the router's handler and becomes Server-Sent Events (rest-events.ts).
// Errors become the REST error body (respond.ts, rest-errors.ts).

import {
  getOption,
  hasOption,
  type DescMessage,
  type DescMethod,
  type DescService,
  type JsonObject,
  type JsonValue,
} from "@bufbuild/protobuf";
import { Code, createContextValues } from "@connectrpc/connect";
import { createAsyncIterable, encodeEnvelope, type UniversalHandler } from "@connectrpc/connect/protocol";
import { http as httpRule } from "../../gen/google/api/annotations_pb.js";
import type { HttpRule } from "../../gen/google/api/http_pb.js";
import { ValidationError } from "../queue/errors.js";
import { requireUuid } from "../queue/validation.js";
import { readBody } from "./body.js";
import { prototypeKeyError, prototypeKeyInJson } from "./prototype-keys.js";
import type { UnarySeam } from "./direct/seam.js";
import { withCallSignal } from "./direct/invoke.js";
import { HttpError } from "./errors.js";
import type { NodeRequest, NodeResponse } from "./node-http.js";
import { requestInfoKey, type RequestInfo } from "./request-info.js";
import { writeError } from "./respond.js";
import { writeEventStream } from "./rest-events.js";

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
  if (!PATH_TEMPLATE.test(path)) throw new Error(`${where}: unsupported path template ${JSON.stringify(path)}`);
  if (rule.body !== "" && rule.body !== "*") throw new Error(`${where}: unsupported body ${JSON.stringify(rule.body)} (only "*" or none)`);
  if (rule.responseBody !== "") throw new Error(`${where}: response_body is not supported`);
  const params = [...path.matchAll(/\{([a-z0-9_]+)\}/g)].map((m) => m[1]);
  if (new Set(params).size !== params.length)
    throw new Error(`${where}: unsupported path template ${JSON.stringify(path)} (a field twice)`);
  for (const param of params) {
    if (!rpc.input.fields.some((f) => f.name === param)) throw new Error(`${where}: ${param} is not a field of ${rpc.input.typeName}`);
  }
  const route: RestRoute = { method, pattern: path, rpc, from: rule.body === "*" ? "body" : "query" };
  return [route, ...rule.additionalBindings.flatMap((binding) => routesOfRule(rpc, binding))];
}

/** The REST routes a service declares with google.api.http options on its methods. */
export function restRoutes(service: DescService): RestRoute[] {
  return service.methods.flatMap((rpc) => (hasOption(rpc, httpRule) ? routesOfRule(rpc, getOption(rpc, httpRule)) : []));
}

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
  /** The path parameters, in path order (most routes have one or none). */
  params: { field: string; value: string }[];
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
  // A "__proto__" key would be dropped by the decoder: refused, naming where (prototype-keys.ts).
  const protoKey = prototypeKeyInJson(value, text);
  if (protoKey) throw prototypeKeyError(protoKey);
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

export interface RestOptions {
  /** The Connect router's handlers (ConnectRouter.handlers): one per RPC; REST uses them for server streams. */
  handlers: readonly UniversalHandler[];
  /** Unary RPCs: served through the seam, by the direct path or the router. */
  unary: UnarySeam;
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
      const params: Match["params"] = [];
      let ok = true;
      for (let i = 0; i < segments.length && ok; i++) {
        const seg = segments[i];
        if (seg.startsWith("{")) {
          if (parts[i] === "") ok = false;
          else params.push({ field: seg.slice(1, -1), value: parts[i] });
        } else if (seg !== parts[i]) ok = false;
      }
      if (ok) out.push({ route, params });
    }
    // A literal path wins over a pattern: GET /tasks/claim is a wrong method on the claim route
    // (405), not a task id "claim" for GET /tasks/{task_id}.
    const literal = out.filter((m) => m.params.length === 0);
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
      const { route, params } = match;
      const rpc = route.route.rpc;
      info.operation = rpc.name;

      const pathValues: { field: string; value: string }[] = [];
      for (const param of params) {
        let pathValue: string;
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
        pathValues.push({ field: param.field, value: pathValue });
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
      for (const p of pathValues) applyPathParam(json, p.field, p.value);
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

      if (route.stream) {
        // A server stream's signal may outlive the call (direct/call-controllers.ts): its controller is its own.
        await withCallSignal(res, false, (controller) => {
          const answering = route.handler({
            httpVersion: "1.1",
            method: "POST",
            url: route.url,
            header: connectHeaders(req, true),
            body: createAsyncIterable([encodeEnvelope(0, new TextEncoder().encode(JSON.stringify(json)))]),
            signal: controller.signal,
            contextValues: createContextValues().set(requestInfoKey, info),
          });
          return writeEventStream(res, answering, rpc.input, json, info);
        });
        return;
      }
      const call = { rpc, json, header: connectHeaders(req, false), url: route.url, info };
      // The call owns the request JSON now: the direct path lets go of it once decoded (the parsed
      // body of a big CreateJob is 10,000 objects), so nothing here may keep it.
      json = {};
      await opts.unary.serveRest(res, call);
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
