// The leasehold.queue.v1.QueueService implementation: one plain object typed by
// the generated service, shared by the Connect router (gRPC, gRPC-Web, Connect)
// and the REST routes. Each method is thin: decode (convert.ts) → call the
// QueueService under the request's deadline → encode (convert.ts). Errors are
// mapped in errors.ts only. With tokens configured, every call is authorized
// (auth.ts) before anything else, so all transports share that one check.

import { randomUUID } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { createContextKey, type ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import { context } from "@opentelemetry/api";
import {
  CancelJobResponseSchema,
  ClaimTasksResponseSchema,
  CompleteTaskResponseSchema,
  CreateJobResponseSchema,
  FailTaskResponseSchema,
  ListWorkloadsResponseSchema,
  PutWorkloadResponseSchema,
  QueueService as QueueServiceDesc,
  RenewLeaseResponseSchema,
  ReportProgressResponseSchema,
} from "../../gen/leasehold/queue/v1/queue_pb.js";
import { DeadlineExceededError, QueueError } from "../queue/errors.js";
import type { QueueService } from "../queue/service.js";
import type { ApiMetrics } from "../telemetry/metrics.js";
import { endRpcSpan, startRpcSpan, traceparentHeader } from "../telemetry/tracing.js";
import type { Authenticator, MethodName } from "./auth.js";
import * as convert from "./convert.js";
import { mapError, REQUEST_ID_HEADER, toConnectError } from "./errors.js";

/** Per-request facts gathered for the request log line (server.ts) and the REST status (rest.ts). */
export interface RequestInfo {
  requestId: string;
  /** "rest", "connect", "grpc", "grpc-web" or "http". */
  protocol?: string;
  /** RPC name, e.g. "ClaimTasks". */
  operation?: string;
  taskId?: string;
  jobId?: string;
  workerId?: string;
  /** Role of the caller's bearer token (unset when the API is open or the token was refused). */
  role?: string;
  /** Connect code name of the outcome ("ok", "aborted", …) when the handler ran. */
  code?: string;
  /** CreateJob: false for an idempotent replay (REST answers 200 instead of 201). */
  created?: boolean;
  /** An unexpected error (mapped to INTERNAL): logged server side, never sent. */
  error?: unknown;
}

/** Carries the RequestInfo of the current request into the handler (see server.ts / rest.ts). */
export const requestInfoKey = createContextKey<RequestInfo | undefined>(undefined, { description: "leasehold request info" });

export interface QueueServiceImplOptions {
  queue: QueueService;
  /** Deadline of a call without a shorter client deadline. */
  requestTimeoutMs: number;
  /** Bearer-token check; undefined: the API is open (no tokens configured). */
  auth?: Authenticator;
  /** Told the duration and Connect code of every call (leasehold_rpc_duration_seconds). */
  metrics?: Pick<ApiMetrics, "observeRpc">;
}

/** Margin a long poll gets beyond its wait_seconds: requestTimeoutMs. */
export function callTimeoutMs(requestTimeoutMs: number, waitSeconds = 0): number {
  const wait = Number.isFinite(waitSeconds) ? Math.min(Math.max(waitSeconds, 0), 3600) : 0;
  return requestTimeoutMs + wait * 1000;
}

export type QueueServiceImpl = ServiceImpl<typeof QueueServiceDesc>;

export function createQueueServiceImpl(opts: QueueServiceImplOptions): QueueServiceImpl {
  const { queue, requestTimeoutMs, auth } = opts;

  function infoOf(ctx: HandlerContext): RequestInfo {
    let info = ctx.values.get(requestInfoKey);
    if (!info) {
      // Used without server.ts (e.g. createRouterTransport in a test): make one up.
      info = { requestId: ctx.requestHeader.get(REQUEST_ID_HEADER) ?? randomUUID() };
      ctx.values.set(requestInfoKey, info);
    }
    info.protocol ??= ctx.protocolName;
    return info;
  }

  /**
   * Runs one call: the signal aborts at the client's deadline (Connect parses
   * connect-timeout-ms / grpc-timeout into ctx.signal), when the client goes
   * away, or after timeoutMs, whichever is first. The answer never waits past
   * that signal even if the queue does not honour it. Every call is one SERVER
   * span (child of the caller's traceparent; fn runs inside it, so queue spans
   * nest) and one observation of leasehold_rpc_duration_seconds.
   */
  /** With tokens configured: may this caller make this call? Throws Unauthenticated / PermissionDenied. */
  function authorize(ctx: HandlerContext, req: unknown, operation: string, info: RequestInfo): void {
    if (!auth) return;
    const method = ctx.method.localName as MethodName;
    info.role = auth.authorize(ctx.requestHeader.get("authorization"), method, operation, req as never).role;
  }

  /** Records the outcome of a failed call on its RequestInfo and makes the ConnectError to throw. */
  function rejection(cause: unknown, original: unknown, info: RequestInfo): ConnectError {
    const mapped = mapError(cause);
    info.code = mapped.codeName;
    if (mapped.internal) info.error = original;
    return toConnectError(cause, info.requestId);
  }

  async function run<T>(
    ctx: HandlerContext,
    req: unknown,
    operation: string,
    ids: { taskId?: string; jobId?: string; workerId?: string },
    fn: (signal: AbortSignal, info: RequestInfo) => Promise<T>,
    timeoutMs = requestTimeoutMs,
  ): Promise<T> {
    const started = performance.now();
    const info = infoOf(ctx);
    info.operation = operation;
    if (ids.taskId) info.taskId = ids.taskId;
    if (ids.jobId) info.jobId = ids.jobId;
    if (ids.workerId) info.workerId = ids.workerId;
    const rpc = startRpcSpan(ctx.service.typeName, operation, ctx.requestHeader, { "leasehold.request_id": info.requestId });
    const signal = AbortSignal.any([ctx.signal, AbortSignal.timeout(timeoutMs)]);
    let onAbort: (() => void) | undefined;
    try {
      authorize(ctx, req, operation, info);
      const aborted = new Promise<never>((_, reject) => {
        onAbort = () => reject(new DeadlineExceededError("the request deadline passed before the queue answered"));
        if (signal.aborted) onAbort();
        else signal.addEventListener("abort", onAbort, { once: true });
      });
      const result = await Promise.race([context.with(rpc.context, () => fn(signal, info)), aborted]);
      info.code = "ok";
      return result;
    } catch (err) {
      // A call cut short by the deadline may surface as a driver error: it is still the deadline.
      const cause = signal.aborted && !(err instanceof QueueError) ? new DeadlineExceededError("the request deadline passed", { cause: err }) : err;
      throw rejection(cause, err, info);
    } finally {
      if (onAbort) signal.removeEventListener("abort", onAbort);
      endRpcSpan(rpc.span, info);
      opts.metrics?.observeRpc(operation, info.code ?? "unknown", (performance.now() - started) / 1000);
    }
  }

  return {
    async createJob(req, ctx) {
      return run(ctx, req, "CreateJob", {}, async (signal, info) => {
        const input = convert.createJobInput(req);
        // Without a traceparent field, the caller's traceparent header (an idempotent replay ignores either).
        if (!input.traceparent) input.traceparent = traceparentHeader(ctx.requestHeader);
        const r = await queue.createJob(input, { signal });
        info.created = r.created;
        info.jobId = r.job.id;
        return create(CreateJobResponseSchema, { job: convert.jobMessage(r.job), tasks: r.tasks.map(convert.taskMessage) });
      });
    },

    async claimTasks(req, ctx) {
      // A long poll (wait_seconds) extends the call's timeout by its wait, so requestTimeoutMs
      // never cuts a wait short, and tells the queue the deadline so an empty answer beats it.
      const timeoutMs = callTimeoutMs(requestTimeoutMs, req.waitSeconds);
      const deadline = Date.now() + Math.min(timeoutMs, ctx.timeoutMs() ?? Infinity);
      return run(
        ctx,
        req,
        "ClaimTasks",
        { workerId: req.workerId },
        async (signal) => {
          const tasks = await queue.claimTasks(convert.claimTasksInput(req), { signal, deadline });
          return create(ClaimTasksResponseSchema, { tasks: tasks.map(convert.taskMessage) });
        },
        timeoutMs,
      );
    },

    async renewLease(req, ctx) {
      return run(ctx, req, "RenewLease", { taskId: req.taskId, workerId: req.workerId }, async (signal, info) => {
        const task = await queue.renewLease(convert.renewLeaseInput(req), { signal });
        info.jobId = task.jobId;
        return create(RenewLeaseResponseSchema, { task: convert.taskMessage(task) });
      });
    },

    async completeTask(req, ctx) {
      return run(ctx, req, "CompleteTask", { taskId: req.taskId, workerId: req.workerId }, async (signal, info) => {
        const task = await queue.completeTask(convert.completeTaskInput(req), { signal });
        info.jobId = task.jobId;
        return create(CompleteTaskResponseSchema, { task: convert.taskMessage(task) });
      });
    },

    async completeTasks(req, ctx) {
      const workers = new Set(req.results.map((r) => r.workerId));
      return run(ctx, req, "CompleteTasks", { workerId: workers.size === 1 ? [...workers][0] : undefined }, async (signal) => {
        const inputs = convert.completeTasksInput(req);
        const outcomes = await queue.completeTasks(inputs, { signal });
        return convert.completeTasksResponse(inputs, outcomes);
      });
    },

    async failTask(req, ctx) {
      return run(ctx, req, "FailTask", { taskId: req.taskId, workerId: req.workerId }, async (signal, info) => {
        const task = await queue.failTask(convert.failTaskInput(req), { signal });
        info.jobId = task.jobId;
        return create(FailTaskResponseSchema, { task: convert.taskMessage(task) });
      });
    },

    async getJob(req, ctx) {
      return run(ctx, req, "GetJob", { jobId: req.jobId }, async (signal) => {
        const status = await queue.getJobStatus(req.jobId, { signal });
        return convert.getJobResponse(status);
      });
    },

    async listCompletedResults(req, ctx) {
      return run(ctx, req, "ListCompletedResults", { jobId: req.jobId }, async (signal) => {
        const page = await queue.listCompletedResults(convert.listCompletedResultsInput(req), { signal });
        return convert.listCompletedResultsResponse(page);
      });
    },

    async cancelJob(req, ctx) {
      return run(ctx, req, "CancelJob", { jobId: req.jobId }, async (signal) => {
        const job = await queue.cancelJob(convert.cancelJobInput(req), { signal });
        return create(CancelJobResponseSchema, { job: convert.jobMessage(job) });
      });
    },

    async putWorkload(req, ctx) {
      return run(ctx, req, "PutWorkload", {}, async (signal) => {
        const workload = await queue.putWorkload(convert.putWorkloadInput(req), { signal });
        return create(PutWorkloadResponseSchema, { workload: convert.workloadMessage(workload) });
      });
    },

    async listWorkloads(req, ctx) {
      return run(ctx, req, "ListWorkloads", {}, async (signal) => {
        const workloads = await queue.listWorkloads({ signal });
        return create(ListWorkloadsResponseSchema, { workloads: workloads.map(convert.workloadMessage) });
      });
    },

    async reportProgress(req, ctx) {
      return run(ctx, req, "ReportProgress", { taskId: req.taskId, workerId: req.workerId }, async (signal, info) => {
        const task = await queue.reportProgress(convert.reportProgressInput(req), { signal });
        info.jobId = task.jobId;
        return create(ReportProgressResponseSchema, { task: convert.taskMessage(task) });
      });
    },

    async retryJob(req, ctx) {
      return run(ctx, req, "RetryJob", { jobId: req.jobId }, async (signal) => {
        return convert.retryJobResponse(await queue.retryJob(convert.retryJobInput(req), { signal }));
      });
    },

    async listJobs(req, ctx) {
      return run(ctx, req, "ListJobs", {}, async (signal) => {
        return convert.listJobsResponse(await queue.listJobs(convert.listJobsInput(req), { signal }));
      });
    },

    async listTasks(req, ctx) {
      return run(ctx, req, "ListTasks", { jobId: req.jobId }, async (signal) => {
        return convert.listTasksResponse(await queue.listTasks(convert.listTasksInput(req), { signal }));
      });
    },

    async getTask(req, ctx) {
      return run(ctx, req, "GetTask", { taskId: req.taskId }, async (signal, info) => {
        const detail = await queue.getTask(convert.getTaskInput(req), { signal });
        info.jobId = detail.task.jobId;
        return convert.getTaskResponse(detail);
      });
    },

    // A stream lives as long as the job runs (or the client stays), so it gets no request
    // timeout; each database read inside has its own. The request log line comes at its end.
    async *watchJob(req, ctx) {
      const info = infoOf(ctx);
      info.operation = "WatchJob";
      info.jobId = req.jobId;
      try {
        authorize(ctx, req, "WatchJob", info);
        for await (const update of queue.watchJob(req.jobId, { signal: ctx.signal, ...convert.watchOptions(req) })) yield convert.watchJobResponse(update);
        info.code = "ok";
      } catch (err) {
        throw rejection(err, err, info);
      }
    },
  };
}
