// Unary calls without the router: the interceptor chain (interceptors.ts) and the one service
// implementation (service.ts), invoked directly with a decoded request message. REST and the
// gRPC fast path (grpc-unary.ts) call RPCs through this; everything else still goes through
// connect-es' router, which runs the same chain and the same implementation.
//
// What connect-es does per unary call on top of that, and this skips: a handler context with
// three AbortControllers (the request's, a deadline's, a linked one), aborted with no reason at
// the end of every call (a DOMException each), three Headers copies, and, for gRPC, the
// async-iterable plumbing of its streaming-shaped handler. The deadline interceptor already owns
// the call's deadline and signal; the caller's signal here aborts only when the client goes away.

import { create, isMessage, type DescMessage, type DescMethod, type DescService, type MessageShape } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  type ContextValues,
  type HandlerContext,
  type Interceptor,
  type UnaryRequest,
  type UnaryResponse,
} from "@connectrpc/connect";
import { QueueService as QueueServiceDesc } from "../../gen/leasehold/queue/v1/queue_pb.js";
import { HttpError, INTERNAL_MESSAGE } from "./errors.js";
import type { NodeRequest } from "./rest.js";
import type { QueueServiceImpl } from "./service.js";

export interface UnaryCall {
  /** The caller's request headers (Web Headers, as the interceptors read them). */
  header: Headers;
  /** Aborted when the client goes away; the deadline interceptor adds the call's deadline. */
  signal: AbortSignal;
  contextValues: ContextValues;
  /** "rest", "grpc", …: what HandlerContext.protocolName says. */
  protocolName: string;
  /** The request's URL, as HandlerContext.url says. */
  url: string;
}

export interface UnaryAnswer {
  message: MessageShape<DescMessage>;
  /** Response headers and trailers the chain or the implementation set (possibly empty). */
  header: Headers;
  trailer: Headers;
}

export type UnaryInvoker = (method: DescMethod, input: MessageShape<DescMessage>, call: UnaryCall) => Promise<UnaryAnswer>;

type AnyUnaryImpl = (input: MessageShape<DescMessage>, ctx: HandlerContext) => Promise<object> | object;

/** The unary methods of the service, each wrapped in the interceptor chain once, at start. */
export function createUnaryInvoker(impl: QueueServiceImpl, interceptors: readonly Interceptor[]): UnaryInvoker {
  return createServiceInvoker(QueueServiceDesc, impl as unknown as Record<string, AnyUnaryImpl>, interceptors);
}

export function createServiceInvoker(
  service: DescService,
  impl: Record<string, AnyUnaryImpl>,
  interceptors: readonly Interceptor[],
): UnaryInvoker {
  const chains = new Map<DescMethod, (req: UnaryRequest) => Promise<UnaryResponse>>();
  for (const method of service.methods) {
    if (method.methodKind !== "unary") continue;
    const fn = impl[method.localName];
    const output = method.output;
    const last = async (req: UnaryRequest): Promise<UnaryResponse> => {
      const ctx: HandlerContext = {
        method,
        service,
        signal: req.signal,
        timeoutMs: () => undefined,
        requestMethod: req.requestMethod,
        requestHeader: req.header,
        responseHeader: new Headers(),
        responseTrailer: new Headers(),
        protocolName: (req as UnaryRequest & { protocolName?: string }).protocolName ?? "",
        values: req.contextValues,
        url: req.url,
      };
      const out = await fn.call(impl, req.message, ctx);
      return {
        stream: false,
        service,
        method: method as never,
        message: isMessage(out, output) ? out : create(output, out as never),
        header: ctx.responseHeader,
        trailer: ctx.responseTrailer,
      };
    };
    // connect-es' applyInterceptors: the first interceptor is the outermost.
    const chain = interceptors.reduceRight<(req: UnaryRequest) => Promise<UnaryResponse>>(
      (next, interceptor) => interceptor(next as never) as never,
      last,
    );
    chains.set(method, chain);
  }
  return async (method, input, call) => {
    const chain = chains.get(method);
    if (!chain) throw new Error(`${method.name} is not a unary method of ${service.typeName}`);
    const req: UnaryRequest & { protocolName: string } = {
      stream: false,
      service,
      method: method as never,
      requestMethod: "POST",
      url: call.url,
      signal: call.signal,
      header: call.header,
      contextValues: call.contextValues,
      message: input,
      protocolName: call.protocolName,
    };
    const res = await chain(req);
    return { message: res.message, header: res.header, trailer: res.trailer };
  };
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
