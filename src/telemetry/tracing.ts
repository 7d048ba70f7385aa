// Traces through the OpenTelemetry API. Spans are always made through
// trace.getTracer("leasehold"); without a registered SDK (OTEL_EXPORTER_OTLP_ENDPOINT
// unset) that is the API's no-op tracer and costs next to nothing.
//   - startTracing(): the SDK (NodeTracerProvider, BatchSpanProcessor, OTLP/HTTP
//     exporter configured by the standard OTEL_* variables, W3C trace context);
//     main.ts starts it only when the endpoint is configured and shuts it down
//     (flushing) at the end of a graceful stop.
//   - startRpcSpan()/endRpcSpan(): the one span of an RPC, SERVER kind (made by the tracing
//     interceptor in src/api/interceptors.ts, around every RPC alike), child of the caller's
//     `traceparent` header; the queue below makes none of its own.

import {
  context,
  propagation,
  ProxyTracerProvider,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type Context,
  type Span,
  type TextMapGetter,
} from "@opentelemetry/api";

export const TRACER_NAME = "leasehold";
export const SERVICE_NAME = "leasehold";

export function tracer() {
  return trace.getTracer(TRACER_NAME);
}

/** What the API's global provider delegates to while no SDK is registered. */
const NO_SDK = new ProxyTracerProvider().getDelegate();

/**
 * Whether an SDK is registered (by startTracing, or by whoever embeds the coordinator). Without
 * one every span is a no-op, and the RPC span's making (a tracer, a context, the caller's
 * traceparent extracted) was ~3% of the API layer's CPU per call for nothing (bench:api).
 */
export function tracingActive(): boolean {
  const provider = trace.getTracerProvider();
  return !(provider instanceof ProxyTracerProvider) || provider.getDelegate() !== NO_SDK;
}

export interface Tracing {
  /** Flushes pending spans and stops the exporter. */
  shutdown(): Promise<void>;
}

/**
 * Starts and registers the tracing SDK: spans are batched and sent by OTLP/HTTP to
 * OTEL_EXPORTER_OTLP_ENDPOINT (the exporter reads that and the other OTEL_EXPORTER_OTLP_*
 * variables itself); incoming `traceparent` headers are honoured (W3C trace context).
 */
export async function startTracing(): Promise<Tracing> {
  // Loaded only here: the SDK and its exporter are ~8 MB of a coordinator's memory that one
  // without an OTLP endpoint never uses.
  const [{ W3CTraceContextPropagator }, { OTLPTraceExporter }, { resourceFromAttributes }, { BatchSpanProcessor, NodeTracerProvider }] =
    await Promise.all([
      import("@opentelemetry/core"),
      import("@opentelemetry/exporter-trace-otlp-http"),
      // A dependency of sdk-trace-base (pinned to the same 2.12.1), needed for the service name.
      import("@opentelemetry/resources"),
      import("@opentelemetry/sdk-trace-node"),
    ]);
  const provider = new NodeTracerProvider({
    resource: resourceFromAttributes({ "service.name": SERVICE_NAME }),
    spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter())],
  });
  provider.register({ propagator: new W3CTraceContextPropagator() });
  return { shutdown: () => provider.shutdown() };
}

const headersGetter: TextMapGetter<Headers> = {
  keys: (carrier) => [...carrier.keys()],
  get: (carrier, key) => carrier.get(key) ?? undefined,
};

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$/;

/**
 * The request's `traceparent` header when it is a valid W3C traceparent (version 00..fe,
 * non-zero ids); undefined otherwise (an invalid header is ignored, as W3C asks).
 */
export function traceparentHeader(headers: Headers): string | undefined {
  const value = headers.get("traceparent")?.trim();
  const m = value ? TRACEPARENT.exec(value) : null;
  if (!m || m[1] === "ff" || /^0+$/.test(m[2]) || /^0+$/.test(m[3])) return undefined;
  return value;
}

export interface RpcSpan {
  span: Span;
  /** The context to run the handler in: child spans nest under the RPC span. */
  context: Context;
}

/**
 * Starts the SERVER span of one RPC, named "<service>/<method>"
 * ("leasehold.queue.v1.QueueService/ClaimTasks"), child of the caller's traceparent.
 */
export function startRpcSpan(serviceTypeName: string, methodName: string, headers: Headers, attributes: Attributes): RpcSpan {
  const parent = propagation.extract(context.active(), headers, headersGetter);
  const span = tracer().startSpan(
    `${serviceTypeName}/${methodName}`,
    {
      kind: SpanKind.SERVER,
      attributes: { "rpc.system": "connect_rpc", "rpc.service": serviceTypeName, "rpc.method": methodName, ...attributes },
    },
    parent,
  );
  return { span, context: trace.setSpan(parent, span) };
}

/**
 * Ends an RPC span: ids learnt during the call, and the Connect code ("ok" or the error's); a
 * failure also names its error type (NotFoundError, LeaseConflictError, …), and an unexpected one
 * (answered INTERNAL) is recorded as an exception.
 */
export function endRpcSpan(
  span: Span,
  outcome: { code?: string; taskId?: string; jobId?: string; workerId?: string; protocol?: string; errorType?: string; error?: unknown },
): void {
  if (!span.isRecording()) {
    span.end();
    return;
  }
  const attrs: Attributes = { "rpc.connect_rpc.status_code": outcome.code ?? "unknown" };
  if (outcome.taskId) attrs["leasehold.task_id"] = outcome.taskId;
  if (outcome.jobId) attrs["leasehold.job_id"] = outcome.jobId;
  if (outcome.workerId) attrs["leasehold.worker_id"] = outcome.workerId;
  if (outcome.protocol) attrs["leasehold.protocol"] = outcome.protocol;
  if (outcome.errorType) attrs["error.type"] = outcome.errorType;
  span.setAttributes(attrs);
  if (outcome.error !== undefined) span.recordException(outcome.error instanceof Error ? outcome.error : String(outcome.error));
  if (outcome.code !== "ok") span.setStatus({ code: SpanStatusCode.ERROR, message: outcome.code ?? "unknown" });
  span.end();
}
