// A unary call without the router's per-call machinery: the one service implementation
// (services/) behind the interceptor chain (interceptors.ts), invoked with a decoded request
// message, and the call's lifecycle (its signal, the client going away, the controller given
// back) written once for every direct path: gRPC (grpc.ts), Connect (connect.ts) and REST
// (rest.ts).
//
// The chain is applied by connect-es' own invokeUnaryImplementation, the function its router
// runs for every unary call, so both ways through the server wrap the implementation alike.
// What the router does on top of that, and this skips: a handler context with three
// AbortControllers (the request's, a deadline's, a linked one), aborted with no reason at the end
// of every call (a DOMException each), three Headers copies, and, for gRPC, the async-iterable
// plumbing of its streaming-shaped handler. The deadline interceptor owns the call's deadline;
// the signal here aborts only when the client goes away.

import type { DescMessage, DescMethod, DescService, MessageShape } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  createContextValues,
  createServiceImplSpec,
  type HandlerContext,
  type Interceptor,
  type MethodImplSpec,
  type ServiceImpl,
} from "@connectrpc/connect";
import { invokeUnaryImplementation } from "@connectrpc/connect/protocol";
import { type EarlyAnswer, earlyAnswerKey } from "../early-answer.js";
import { HttpError, INTERNAL_MESSAGE, toConnectError, undecodable } from "../errors.js";
import { callControllerKey } from "../interceptors.js";
import { requestInfoKey, type RequestInfo } from "../request-info.js";
import { prototypeKeyError } from "../prototype-keys.js";
import type { NodeRequest, NodeResponse } from "../node-http.js";
import { giveBackController, takeController } from "./call-controllers.js";

export interface UnaryCall {
  /** The caller's request headers (Web Headers, as the interceptors read them). */
  header: Headers;
  info: RequestInfo;
  /** "rest", "grpc", …: what HandlerContext.protocolName says. */
  protocolName: string;
  /** The request's URL, as HandlerContext.url says. */
  url: string;
  /** Offered to an implementation that learns its answer early (early-answer.ts). */
  early?: EarlyAnswer;
}

export interface UnaryAnswer {
  message: MessageShape<DescMessage>;
  /** Response headers and trailers the chain or the implementation set (possibly empty). */
  header: Headers;
  trailer: Headers;
}

/**
 * Calls one unary RPC for the request whose response is `res`: its signal aborts when the client
 * goes away before the answer is written; the controller is reused when nothing saw it.
 */
export type UnaryInvoker = (
  res: NodeResponse,
  method: DescMethod,
  input: MessageShape<DescMessage>,
  call: UnaryCall,
) => Promise<UnaryAnswer>;

/** Thrown into the call's signal when the client resets the stream or goes away before the answer. */
export const CLIENT_GONE = new ConnectError("the client went away", Code.Canceled);

/**
 * The unary methods of a service implementation, each run through `interceptors`. The method specs
 * are made as the router makes them (createServiceImplSpec).
 */
export function createUnaryInvoker<S extends DescService>(service: S, impl: ServiceImpl<S>, interceptors: Interceptor[]): UnaryInvoker {
  const specs = new Map<DescMethod, MethodImplSpec & { kind: "unary" }>();
  for (const spec of Object.values(createServiceImplSpec(service, impl).methods)) {
    if (spec.kind === "unary") specs.set(spec.method, spec);
  }
  return async (res, method, input, call) => {
    const spec = specs.get(method);
    if (!spec) throw new Error(`${method.name} is not a unary method of ${service.typeName}`);
    return withCallSignal(res, true, async (controller) => {
      const values = createContextValues().set(requestInfoKey, call.info).set(callControllerKey, controller);
      if (call.early) values.set(earlyAnswerKey, call.early);
      const ctx: HandlerContext = {
        method,
        service,
        signal: controller.signal,
        timeoutMs: () => undefined,
        requestMethod: "POST",
        requestHeader: call.header,
        responseHeader: new Headers(),
        responseTrailer: new Headers(),
        protocolName: call.protocolName,
        values,
        url: call.url,
      };
      const message = await invokeUnaryImplementation(spec, ctx, input, interceptors);
      return { message, header: ctx.responseHeader, trailer: ctx.responseTrailer };
    });
  };
}

/**
 * Runs `call` with an AbortController whose signal aborts (CLIENT_GONE) when the response closes
 * before it has finished. `reusable`: the controller comes from, and goes back to, the spare
 * ones (call-controllers.ts); a server stream's signal may outlive the call and gets its own.
 */
export async function withCallSignal<T>(
  res: NodeResponse,
  reusable: boolean,
  call: (controller: AbortController) => Promise<T>,
): Promise<T> {
  const controller = reusable ? takeController() : new AbortController();
  const onClose = () => {
    if (!res.writableFinished) controller.abort(CLIENT_GONE);
  };
  res.once("close", onClose);
  try {
    return await call(controller);
  } finally {
    res.removeListener("close", onClose);
    if (reusable) giveBackController(controller);
  }
}

/**
 * The answer to a request message that cannot be decoded (see undecodable): INVALID_ARGUMENT
 * with its BadRequest and request id, recorded for the request's log line with the decoder's error.
 */
export function refuseUndecodable(info: RequestInfo, method: DescMethod, format: "binary" | "JSON", err: unknown): ConnectError {
  const refused = undecodable(method.input, format, err);
  info.operation ??= method.name;
  info.code ??= "invalid_argument";
  info.refusal ??= refused.message;
  return toConnectError(refused, info.requestId);
}

/** The answer to a request holding a "__proto__" key at `path` (prototype-keys.ts): INVALID_ARGUMENT naming it, recorded as refuseUndecodable records. */
export function refusePrototypeKey(info: RequestInfo, method: DescMethod, path: string): ConnectError {
  const refused = prototypeKeyError(path);
  info.operation ??= method.name;
  info.code ??= "invalid_argument";
  info.refusal ??= refused.message;
  return toConnectError(refused, info.requestId);
}

/** A failure as connect-es reports it: the chain's own are ConnectErrors already; one before the chain (body, framing, decoding) becomes one. */
export function asConnectError(err: unknown): ConnectError {
  if (err instanceof ConnectError) return err;
  if (err instanceof HttpError) return new ConnectError(err.message, err.code);
  return new ConnectError(INTERNAL_MESSAGE, Code.Internal, undefined, undefined, err);
}

/** A Node request's headers as the Web Headers the interceptors read (pseudo-headers left out). */
export function webHeaders(req: NodeRequest): Headers {
  const h = new Headers();
  for (const [k, v] of Object.entries(req.headers)) {
    if (k.startsWith(":") || v === undefined) continue;
    if (Array.isArray(v)) for (const item of v) h.append(k, item);
    else h.set(k, v);
  }
  return h;
}
