// Cross-cutting work on every RPC, as Connect interceptors: one chain for gRPC, gRPC-Web, Connect
// and REST, whichever way a call is served. connect-es' router runs it around each handler; the
// direct unary paths (direct/invoke.ts) run the same chain through the router's own function for
// it (invokeUnaryImplementation). Outermost first:
//   rpcMetrics     leasehold_rpc_duration_seconds by RPC name and Connect code
//   rpcTracing     one SERVER span per RPC, child of the caller's traceparent; the call runs inside it
//   requestFacts   the RequestInfo fields of the log line and the span: operation, ids, jobId from the answer
//   errorMapping   every failure becomes the ConnectError of errors.ts, recorded once on the RequestInfo
//   authorization  with tokens configured, the role and worker_id rules of auth.ts; keeps the
//                  principal (principalKey), whose bound account the handlers hand to the queue
//   deadline       min(client deadline, requestTimeoutMs (+ wait_seconds for a long poll))
// A server stream (WatchJob) lives as long as the job runs or the client stays: it gets no span,
// no duration and no request deadline (each database read inside has its own); the rest applies.

import { type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import { createContextKey, type Interceptor, type StreamRequest, type UnaryRequest } from "@connectrpc/connect";
import { parseTimeout as parseConnectTimeout } from "@connectrpc/connect/protocol-connect";
import { parseTimeout as parseGrpcTimeout } from "@connectrpc/connect/protocol-grpc";
import { context } from "@opentelemetry/api";
import { DeadlineExceededError, QueueError } from "../queue/errors.js";
import type { ApiMetrics } from "../telemetry/metrics.js";
import { endRpcSpan, startRpcSpan, tracingActive } from "../telemetry/tracing.js";
import { workerIdsOf, type Authenticator, type MethodName, type Principal } from "./auth.js";
import { recordFailure, toConnectError } from "./errors.js";
import { requestInfoOf } from "./request-info.js";

type AnyRequest = UnaryRequest | StreamRequest;

/** The absolute deadline (ms since the epoch) a long poll must answer by; set by the deadline interceptor. */
export const deadlineKey = createContextKey<number | undefined>(undefined, { description: "leasehold call deadline" });

/** The caller's principal, set by the authorization interceptor (unset when the API is open). */
export const principalKey = createContextKey<Principal | undefined>(undefined, { description: "leasehold principal" });

/**
 * The AbortController whose signal a transport passed as the request's signal, lent to the deadline
 * interceptor (which aborts it at the deadline) instead of a second controller linked to the first.
 */
export const callControllerKey = createContextKey<AbortController | undefined>(undefined, { description: "leasehold call controller" });

/** Margin a long poll gets beyond its wait_seconds: requestTimeoutMs. */
export function callTimeoutMs(requestTimeoutMs: number, waitSeconds = 0): number {
  const wait = Number.isFinite(waitSeconds) ? Math.min(Math.max(waitSeconds, 0), 3600) : 0;
  return requestTimeoutMs + wait * 1000;
}

/**
 * The one input message of a unary or server-streaming call. A server stream's input arrives as
 * an iterable of one; it is read here and handed on as a fresh iterable, so the handler still
 * gets it.
 */
async function singleInput(req: StreamRequest): Promise<{ req: AnyRequest; message: MessageShape<DescMessage> }> {
  const messages: MessageShape<DescMessage>[] = [];
  for await (const m of req.message) messages.push(m);
  return {
    req: {
      ...req,
      message: (async function* () {
        yield* messages;
      })(),
    },
    message: messages[0],
  };
}

function stringField(message: object, field: string): string | undefined {
  const value = (message as Record<string, unknown>)[field];
  return typeof value === "string" && value !== "" ? value : undefined;
}

/** How long a request asked to wait for work: a claim's wait_seconds, or its claim_next's. */
function waitSecondsOf(message: object): number {
  const m = message as { waitSeconds?: unknown; claimNext?: { waitSeconds?: unknown } };
  const wait = typeof m.waitSeconds === "number" ? m.waitSeconds : m.claimNext?.waitSeconds;
  return typeof wait === "number" && Number.isFinite(wait) ? wait : 0;
}

/** The RequestInfo fields a request and its answer name: operation, task, job and worker. */
export const requestFacts: Interceptor = (next) => async (request) => {
  const info = requestInfoOf(request.contextValues, request.header);
  info.operation = request.method.name;
  // A unary call's input is at hand; only a stream's needs reading (and handing on).
  const { req, message } = request.stream ? await singleInput(request) : { req: request, message: request.message };
  if (message) {
    const taskId = stringField(message, "taskId");
    const jobId = stringField(message, "jobId");
    if (taskId) info.taskId = taskId;
    if (jobId) info.jobId = jobId;
    // The worker a request acts as, when it acts as exactly one.
    const workers = workerIdsOf(req.method.localName as MethodName, message as never);
    let one: string | undefined = workers[0];
    for (const w of workers) if (w !== one) one = undefined;
    if (one !== undefined) info.workerId = one || info.workerId;
    const waitSeconds = waitSecondsOf(message);
    if (waitSeconds > 0) info.waitMs = waitSeconds * 1000;
  }
  const res = await next(req);
  if (!res.stream && !info.jobId) {
    // A call on a task (or creating a job) learns its job from the answer.
    const out = res.message as { job?: { id?: string }; task?: { jobId?: string } };
    info.jobId = out.job?.id || out.task?.jobId || undefined;
  }
  return res;
};

export function rpcMetrics(metrics: Pick<ApiMetrics, "observeRpc">): Interceptor {
  return (next) => async (req) => {
    if (req.stream) return next(req);
    const started = performance.now();
    try {
      return await next(req);
    } finally {
      const info = requestInfoOf(req.contextValues, req.header);
      metrics.observeRpc(req.method.name, info.code ?? "unknown", (performance.now() - started) / 1000);
    }
  };
}

/**
 * The RPC's one span, SERVER kind, with the workload its request names; the rest of the chain and
 * the handler run in its context, so spans of libraries below (pg, if instrumented) nest.
 */
export const rpcTracing: Interceptor = (next) => async (req) => {
  if (req.stream || !tracingActive()) return next(req);
  const info = requestInfoOf(req.contextValues, req.header);
  const attributes: Record<string, string> = { "leasehold.request_id": info.requestId };
  const workload = stringField(req.message, "workload");
  if (workload) attributes["leasehold.workload"] = workload;
  const rpc = startRpcSpan(req.service.typeName, req.method.name, req.header, attributes);
  try {
    return await context.with(rpc.context, () => next(req));
  } finally {
    endRpcSpan(rpc.span, info);
  }
};

/**
 * The outcome of every call, recorded on its RequestInfo in one place (recordFailure), and every
 * failure thrown as the ConnectError errors.ts makes of it; a stream's failure may come mid-stream.
 */
export const errorMapping: Interceptor = (next) => async (req) => {
  const info = requestInfoOf(req.contextValues, req.header);
  const fail = (err: unknown) => {
    recordFailure(info, err);
    return toConnectError(err, info.requestId);
  };
  try {
    const res = await next(req);
    if (!res.stream) {
      info.code = "ok";
      return res;
    }
    const messages = res.message;
    return {
      ...res,
      message: (async function* () {
        try {
          yield* messages;
          info.code = "ok";
        } catch (err) {
          throw fail(err);
        }
      })(),
    };
  } catch (err) {
    throw fail(err);
  }
};

/** With tokens configured: may this caller make this call? Throws Unauthenticated / PermissionDenied. */
export function authorization(auth: Authenticator): Interceptor {
  return (next) => async (request) => {
    const info = requestInfoOf(request.contextValues, request.header);
    const { req, message } = request.stream ? await singleInput(request) : { req: request, message: request.message };
    const principal = auth.authorize(
      req.header.get("authorization"),
      req.method.localName as MethodName,
      req.method.name,
      message as never,
    );
    info.role = principal.role;
    // The handlers read it to scope their queue calls to a bound token's account (services/call-options.ts).
    req.contextValues.set(principalKey, principal);
    return next(req);
  };
}

/** The client's own deadline (connect-timeout-ms, or grpc-timeout for gRPC and gRPC-Web), in ms from now. */
function clientTimeoutMs(header: Headers): number | undefined {
  const connect = header.get("connect-timeout-ms");
  if (connect !== null) return parseConnectTimeout(connect, Number.MAX_SAFE_INTEGER).timeoutMs;
  const grpc = header.get("grpc-timeout");
  if (grpc !== null) return parseGrpcTimeout(grpc, Number.MAX_SAFE_INTEGER).timeoutMs;
  return undefined;
}

/**
 * The handler's signal aborts at the client's deadline (connect-es already links it to the
 * request's signal), when the client goes away, or after requestTimeoutMs, whichever is first.
 * A long poll (a wait_seconds field) extends that timeout by its wait, so requestTimeoutMs never
 * cuts a wait short, and learns the deadline (deadlineKey) so an empty answer beats it. The answer
 * never waits past the signal even if the queue does not honour it.
 */
export function deadline(requestTimeoutMs: number): Interceptor {
  return (next) => async (req) => {
    if (req.stream) return next(req);
    const waitSeconds = (req.message as { waitSeconds?: unknown }).waitSeconds;
    const timeoutMs = callTimeoutMs(requestTimeoutMs, typeof waitSeconds === "number" ? waitSeconds : 0);
    // The client's own deadline, when shorter, is the call's: connect-es' handler also enforces it,
    // but the direct paths (direct/invoke.ts) have only this timer.
    const limitMs = Math.min(timeoutMs, clientTimeoutMs(req.header) ?? Infinity);
    req.contextValues.set(deadlineKey, Date.now() + limitMs);
    // One controller, a timer and a listener, all released when the call ends: AbortSignal.any
    // and AbortSignal.timeout cost several times as much per call (measured: ~70 µs against ~10).
    // A transport that made the request's signal from a controller of its own (the direct REST,
    // gRPC and Connect paths, direct/invoke.ts) lends it here, so a call makes one controller, not two.
    const lent = req.contextValues.get(callControllerKey);
    const controller = lent !== undefined && lent.signal === req.signal ? lent : new AbortController();
    const { signal } = controller;
    let reject!: (err: unknown) => void;
    const aborted = new Promise<never>((_, r) => (reject = r));
    const onAbort = () => reject(new DeadlineExceededError("the request deadline passed before the queue answered"));
    const onTimeout = () => {
      if (!signal.aborted) controller.abort(new DOMException("the request deadline passed", "TimeoutError"));
      onAbort();
    };
    const timer = setTimeout(onTimeout, limitMs);
    timer.unref();
    // A lent controller is the request's own signal: the queue already gets it as it is, and the
    // client going away aborts it there (the transport does). Only the timer needs this
    // interceptor; nobody waits for the answer of a request whose client has gone. A listener on
    // it cost ~3% of the API layer's CPU per call (bench:api). With a controller of its own,
    // the client going away aborts it too, and the answer does not wait for the queue.
    const own = controller !== lent;
    const onClientAbort = () => {
      if (!signal.aborted) controller.abort(req.signal.reason);
      onAbort();
    };
    if (own) {
      if (req.signal.aborted) onClientAbort();
      else req.signal.addEventListener("abort", onClientAbort, { once: true });
    } else if (signal.aborted) onAbort();
    try {
      return await Promise.race([next(own ? { ...req, signal } : req), aborted]);
    } catch (err) {
      // A call cut short by the deadline may surface as a driver error: it is still the deadline.
      throw signal.aborted && !(err instanceof QueueError) ? new DeadlineExceededError("the request deadline passed", { cause: err }) : err;
    } finally {
      clearTimeout(timer);
      if (own) req.signal.removeEventListener("abort", onClientAbort);
    }
  };
}

export interface RpcInterceptorOptions {
  /** Deadline of a call without a shorter client deadline. */
  requestTimeoutMs: number;
  /** Bearer-token check; undefined: the API is open (no tokens configured). */
  auth?: Authenticator;
  /** Told the duration and Connect code of every call (leasehold_rpc_duration_seconds). */
  metrics?: Pick<ApiMetrics, "observeRpc">;
}

/** The chain every RPC runs through, outermost first. */
export function rpcInterceptors(opts: RpcInterceptorOptions): Interceptor[] {
  return [
    ...(opts.metrics ? [rpcMetrics(opts.metrics)] : []),
    rpcTracing,
    requestFacts,
    errorMapping,
    ...(opts.auth ? [authorization(opts.auth)] : []),
    deadline(opts.requestTimeoutMs),
  ];
}
