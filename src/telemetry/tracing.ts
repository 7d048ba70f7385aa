// Traces through the OpenTelemetry API. Spans are always made through
// trace.getTracer("leasehold"); without a registered SDK (OTEL_EXPORTER_OTLP_ENDPOINT
// unset) that is the API's no-op tracer and costs next to nothing.
//   - startTracing(): the SDK (NodeTracerProvider, BatchSpanProcessor, OTLP/HTTP
//     exporter configured by the standard OTEL_* variables, W3C trace context);
//     main.ts starts it only when the endpoint is configured and shuts it down
//     (flushing) at the end of a graceful stop.
//   - startRpcSpan()/endRpcSpan(): one SERVER span per RPC (used by the tracing
//     interceptor in src/api/interceptors.ts), child of the caller's `traceparent` header.
//   - TracedQueue (traceQueue()): one INTERNAL span "queue.<method>" per call of the queue it wraps.

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
import { QueueError } from "../queue/errors.js";
import type { PutScheduleInput, PutScheduleResult, Schedule } from "../queue/schedules.js";
import type { QueueService } from "../queue/service.js";
import type {
  KeyLimit,
  ListWorkloadKeysInput,
  ListWorkloadKeysResult,
  PutKeyLimitInput,
  BatchCompletedAndClaimed,
  CallOptions,
  CancelJobInput,
  ClaimTasksInput,
  CompletedAndClaimed,
  CompleteOutcome,
  CompleteTaskInput,
  CreateJobInput,
  CreateJobResult,
  ExpireLeasesResult,
  FailTaskInput,
  Job,
  JobStatusResult,
  JobUpdate,
  ListCompletedResultsInput,
  ListCompletedResultsResult,
  ListJobsInput,
  ListJobsResult,
  ListTasksInput,
  ListTasksResult,
  MaintenanceResult,
  PutWorkloadInput,
  RenewLeaseInput,
  ReportProgressInput,
  RetryJobInput,
  RetryJobResult,
  Task,
  TaskDetail,
  WatchOptions,
  Workload,
  WorkloadTaskStats,
} from "../queue/types.js";

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

/** Ends an RPC span: ids learnt during the call, and the Connect code ("ok" or the error's). */
export function endRpcSpan(
  span: Span,
  outcome: { code?: string; taskId?: string; jobId?: string; workerId?: string; protocol?: string },
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
  span.setAttributes(attrs);
  if (outcome.code !== "ok") span.setStatus({ code: SpanStatusCode.ERROR, message: outcome.code ?? "unknown" });
  span.end();
}

/** The ids an input object names, as span attributes. */
function inputAttributes(method: string, input: object): Attributes {
  const attrs: Attributes = { "leasehold.queue.method": method };
  const fields = input as { taskId?: unknown; jobId?: unknown; workerId?: unknown; workload?: unknown };
  if (typeof fields.taskId === "string" && fields.taskId !== "") attrs["leasehold.task_id"] = fields.taskId;
  if (typeof fields.jobId === "string" && fields.jobId !== "") attrs["leasehold.job_id"] = fields.jobId;
  if (typeof fields.workerId === "string" && fields.workerId !== "") attrs["leasehold.worker_id"] = fields.workerId;
  if (typeof fields.workload === "string" && fields.workload !== "") attrs["leasehold.workload"] = fields.workload;
  return attrs;
}

function failSpan(span: Span, err: unknown): void {
  const name = err instanceof Error ? err.name : "Error";
  span.setAttribute("error.type", name);
  // Expected outcomes (not found, lease conflict, …) carry their name; anything else its exception too.
  if (!(err instanceof QueueError)) span.recordException(err instanceof Error ? err : String(err));
  span.setStatus({ code: SpanStatusCode.ERROR, message: name });
}

/** Runs `call` inside an INTERNAL span "queue.<method>", child of the active span, until its promise settles. */
async function spanned<T>(method: string, attributes: Attributes, call: () => Promise<T>): Promise<T> {
  const span = tracer().startSpan(`queue.${method}`, { kind: SpanKind.INTERNAL, attributes });
  try {
    return await context.with(trace.setSpan(context.active(), span), call);
  } catch (err) {
    failSpan(span, err);
    throw err;
  } finally {
    span.end();
  }
}

/**
 * The queue with one INTERNAL span "queue.<method>" around every call, child of the active span
 * (the RPC's), with the ids the call names as attributes. Each method is written out, so the
 * compiler lists what is wrapped: a method added to QueueService does not compile here until it
 * is spanned too. watchJob is spanned for its creation only; its AsyncIterable is passed through
 * untouched, so streaming works as before.
 */
export class TracedQueue implements QueueService {
  constructor(private readonly queue: QueueService) {}

  createJob(input: CreateJobInput, opts?: CallOptions): Promise<CreateJobResult> {
    return spanned("createJob", inputAttributes("createJob", input), () => this.queue.createJob(input, opts));
  }

  claimTasks(input: ClaimTasksInput, opts?: CallOptions): Promise<Task[]> {
    return spanned("claimTasks", inputAttributes("claimTasks", input), () => this.queue.claimTasks(input, opts));
  }

  renewLease(input: RenewLeaseInput, opts?: CallOptions): Promise<Task> {
    return spanned("renewLease", inputAttributes("renewLease", input), () => this.queue.renewLease(input, opts));
  }

  completeTask(input: CompleteTaskInput, opts?: CallOptions): Promise<Task> {
    return spanned("completeTask", inputAttributes("completeTask", input), () => this.queue.completeTask(input, opts));
  }

  completeTasks(inputs: CompleteTaskInput[], opts?: CallOptions): Promise<CompleteOutcome[]> {
    return spanned("completeTasks", batchAttributes("completeTasks", inputs), () => this.queue.completeTasks(inputs, opts));
  }

  completeTaskAndClaim(input: CompleteTaskInput, next: ClaimTasksInput, opts?: CallOptions): Promise<CompletedAndClaimed> {
    return spanned("completeTaskAndClaim", inputAttributes("completeTaskAndClaim", input), () =>
      this.queue.completeTaskAndClaim(input, next, opts),
    );
  }

  completeTasksAndClaim(inputs: CompleteTaskInput[], next: ClaimTasksInput, opts?: CallOptions): Promise<BatchCompletedAndClaimed> {
    return spanned("completeTasksAndClaim", batchAttributes("completeTasksAndClaim", inputs), () =>
      this.queue.completeTasksAndClaim(inputs, next, opts),
    );
  }

  failTask(input: FailTaskInput, opts?: CallOptions): Promise<Task> {
    return spanned("failTask", inputAttributes("failTask", input), () => this.queue.failTask(input, opts));
  }

  getJobStatus(jobId: string, opts?: CallOptions): Promise<JobStatusResult> {
    return spanned("getJobStatus", jobAttributes("getJobStatus", jobId), () => this.queue.getJobStatus(jobId, opts));
  }

  listCompletedResults(input: ListCompletedResultsInput, opts?: CallOptions): Promise<ListCompletedResultsResult> {
    return spanned("listCompletedResults", inputAttributes("listCompletedResults", input), () =>
      this.queue.listCompletedResults(input, opts),
    );
  }

  cancelJob(input: CancelJobInput, opts?: CallOptions): Promise<Job> {
    return spanned("cancelJob", inputAttributes("cancelJob", input), () => this.queue.cancelJob(input, opts));
  }

  putWorkload(input: PutWorkloadInput, opts?: CallOptions): Promise<Workload> {
    return spanned("putWorkload", inputAttributes("putWorkload", input), () => this.queue.putWorkload(input, opts));
  }

  listWorkloads(opts?: CallOptions): Promise<Workload[]> {
    return spanned("listWorkloads", { "leasehold.queue.method": "listWorkloads" }, () => this.queue.listWorkloads(opts));
  }

  putKeyLimit(input: PutKeyLimitInput, opts?: CallOptions): Promise<KeyLimit> {
    return spanned("putKeyLimit", { "leasehold.queue.method": "putKeyLimit", "leasehold.workload": input.name }, () =>
      this.queue.putKeyLimit(input, opts),
    );
  }

  pauseWorkload(name: string, opts?: CallOptions): Promise<Workload> {
    return spanned("pauseWorkload", { "leasehold.queue.method": "pauseWorkload", "leasehold.workload": name }, () =>
      this.queue.pauseWorkload(name, opts),
    );
  }

  resumeWorkload(name: string, opts?: CallOptions): Promise<Workload> {
    return spanned("resumeWorkload", { "leasehold.queue.method": "resumeWorkload", "leasehold.workload": name }, () =>
      this.queue.resumeWorkload(name, opts),
    );
  }

  listWorkloadKeys(input: ListWorkloadKeysInput, opts?: CallOptions): Promise<ListWorkloadKeysResult> {
    return spanned("listWorkloadKeys", { "leasehold.queue.method": "listWorkloadKeys", "leasehold.workload": input.name }, () =>
      this.queue.listWorkloadKeys(input, opts),
    );
  }

  putSchedule(input: PutScheduleInput, opts?: CallOptions): Promise<PutScheduleResult> {
    return spanned("putSchedule", { "leasehold.queue.method": "putSchedule", "leasehold.schedule": input.name }, () =>
      this.queue.putSchedule(input, opts),
    );
  }

  listSchedules(opts?: CallOptions): Promise<Schedule[]> {
    return spanned("listSchedules", { "leasehold.queue.method": "listSchedules" }, () => this.queue.listSchedules(opts));
  }

  getSchedule(name: string, opts?: CallOptions): Promise<Schedule> {
    return spanned("getSchedule", { "leasehold.queue.method": "getSchedule", "leasehold.schedule": name }, () =>
      this.queue.getSchedule(name, opts),
    );
  }

  deleteSchedule(name: string, opts?: CallOptions): Promise<Schedule> {
    return spanned("deleteSchedule", { "leasehold.queue.method": "deleteSchedule", "leasehold.schedule": name }, () =>
      this.queue.deleteSchedule(name, opts),
    );
  }

  pauseSchedule(name: string, opts?: CallOptions): Promise<Schedule> {
    return spanned("pauseSchedule", { "leasehold.queue.method": "pauseSchedule", "leasehold.schedule": name }, () =>
      this.queue.pauseSchedule(name, opts),
    );
  }

  resumeSchedule(name: string, opts?: CallOptions): Promise<Schedule> {
    return spanned("resumeSchedule", { "leasehold.queue.method": "resumeSchedule", "leasehold.schedule": name }, () =>
      this.queue.resumeSchedule(name, opts),
    );
  }

  reportProgress(input: ReportProgressInput, opts?: CallOptions): Promise<Task> {
    return spanned("reportProgress", inputAttributes("reportProgress", input), () => this.queue.reportProgress(input, opts));
  }

  retryJob(input: RetryJobInput, opts?: CallOptions): Promise<RetryJobResult> {
    return spanned("retryJob", inputAttributes("retryJob", input), () => this.queue.retryJob(input, opts));
  }

  listJobs(input: ListJobsInput, opts?: CallOptions): Promise<ListJobsResult> {
    return spanned("listJobs", inputAttributes("listJobs", input), () => this.queue.listJobs(input, opts));
  }

  listTasks(input: ListTasksInput, opts?: CallOptions): Promise<ListTasksResult> {
    return spanned("listTasks", inputAttributes("listTasks", input), () => this.queue.listTasks(input, opts));
  }

  getTask(taskId: string, opts?: CallOptions): Promise<TaskDetail> {
    return spanned("getTask", { "leasehold.queue.method": "getTask", "leasehold.task_id": taskId }, () => this.queue.getTask(taskId, opts));
  }

  /** Spanned for the stream's creation only: the AsyncIterable is the queue's own, untouched. */
  watchJob(jobId: string, opts?: WatchOptions): AsyncIterable<JobUpdate> {
    const span = tracer().startSpan("queue.watchJob", { kind: SpanKind.INTERNAL, attributes: jobAttributes("watchJob", jobId) });
    try {
      return context.with(trace.setSpan(context.active(), span), () => this.queue.watchJob(jobId, opts));
    } catch (err) {
      failSpan(span, err);
      throw err;
    } finally {
      span.end();
    }
  }

  expireLeases(opts?: CallOptions): Promise<ExpireLeasesResult> {
    return spanned("expireLeases", { "leasehold.queue.method": "expireLeases" }, () => this.queue.expireLeases(opts));
  }

  maintain(opts?: CallOptions): Promise<MaintenanceResult> {
    return spanned("maintain", { "leasehold.queue.method": "maintain" }, () => this.queue.maintain(opts));
  }

  taskStats(scope: "unfinished" | "all", opts?: CallOptions): Promise<WorkloadTaskStats[]> {
    return spanned("taskStats", { "leasehold.queue.method": "taskStats" }, () => this.queue.taskStats(scope, opts));
  }
}

function jobAttributes(method: string, jobId: string): Attributes {
  return { "leasehold.queue.method": method, "leasehold.job_id": jobId };
}

function batchAttributes(method: string, inputs: readonly unknown[]): Attributes {
  return { "leasehold.queue.method": method, "leasehold.batch_size": inputs.length };
}

/** The queue with a span per call (TracedQueue). */
export function traceQueue(queue: QueueService): TracedQueue {
  return new TracedQueue(queue);
}
