// The jobs' RPCs of the QueueService (CreateJob, GetJob, ListJobs, CancelJob, RetryJob,
// ListCompletedResults, WatchJob): each handler with its request's decoding and its answer's
// encoding.

import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import {
  CancelJobResponseSchema,
  CreateJobResponseSchema,
  GetJobResponseSchema,
  JobEventKind,
  JobEventSchema,
  JobStatus,
  JobView,
  ListCompletedResultsResponseSchema,
  ListJobsResponseSchema,
  ResultManifestSchema,
  RetryJobResponseSchema,
  TaskStatus,
  WatchJobResponseSchema,
  type CancelJobRequest,
  type CreateJobResponse,
  type GetJobResponse,
  type ListCompletedResultsRequest,
  type ListCompletedResultsResponse,
  type ListJobsRequest,
  type ListJobsResponse,
  type QueueService as QueueServiceDesc,
  type ResultManifest as PbResultManifest,
  type RetryJobRequest,
  type RetryJobResponse,
  type WatchJobRequest,
  type WatchJobResponse,
} from "../../../gen/leasehold/queue/v1/queue_pb.js";
import { ValidationError } from "../../queue/errors.js";
import type { ParkingCalls } from "../../queue/long-poll.js";
import type { ApiQueue } from "../../queue/service.js";
import type {
  CancelJobInput,
  CreateJobResult,
  JobStatus as DomainJobStatus,
  JobStatusResult,
  JobUpdate,
  ListCompletedResultsInput,
  ListCompletedResultsResult,
  ListJobsInput,
  ListJobsResult,
  ResultManifest,
  RetryJobInput,
  RetryJobResult,
  TaskStatus as DomainTaskStatus,
  WatchOptions,
} from "../../queue/types.js";
import { traceparentHeader } from "../../telemetry/tracing.js";
import { earlyAnswerKey } from "../early-answer.js";
import { requestInfoKey } from "../request-info.js";
import { call, scope } from "./call-options.js";
import { createJobInput, jobMessage, JOB_STATUS, opt, struct, TASK_STATUS, taskMessage, ts } from "./messages.js";

type JobsImpl = Pick<
  ServiceImpl<typeof QueueServiceDesc>,
  "createJob" | "getJob" | "listJobs" | "cancelJob" | "retryJob" | "listCompletedResults" | "watchJob"
>;

/** `parking`: where watches go (they end at shutdown); the queue itself without one. */
export function jobsService(queue: ApiQueue, parking: ParkingCalls): JobsImpl {
  return {
    async createJob(req, ctx) {
      const withTasks = answersTasks(req.view);
      const input = createJobInput(req);
      // Without a traceparent field, the caller's traceparent header (an idempotent replay ignores either).
      if (!input.traceparent) input.traceparent = traceparentHeader(ctx.requestHeader);
      const opts = call(ctx);
      if (!withTasks) opts.withoutTasks = true;
      // A big job's answer is known before its insert ends: the transport may encode it meanwhile
      // (the job alone is too small to be worth it).
      const early = withTasks ? ctx.values.get(earlyAnswerKey) : undefined;
      let prepared: { result: CreateJobResult; message: CreateJobResponse } | undefined;
      if (early) {
        opts.prepared = (result) => {
          prepared = { result, message: createJobResponse(result) };
          early(prepared.message);
        };
      }
      const r = await queue.createJob(input, opts);
      const info = ctx.values.get(requestInfoKey);
      if (info) info.created = r.created;
      return prepared?.result === r ? prepared.message : createJobResponse(r, withTasks);
    },

    async getJob(req, ctx) {
      return getJobResponse(await queue.getJobStatus(req.jobId, call(ctx)));
    },

    async listCompletedResults(req, ctx) {
      return listCompletedResultsResponse(await queue.listCompletedResults(listCompletedResultsInput(req), call(ctx)));
    },

    async cancelJob(req, ctx) {
      const job = await queue.cancelJob(cancelJobInput(req), call(ctx));
      return create(CancelJobResponseSchema, { job: jobMessage(job) });
    },

    async retryJob(req, ctx) {
      return retryJobResponse(await queue.retryJob(retryJobInput(req), call(ctx)));
    },

    async listJobs(req, ctx) {
      return listJobsResponse(await queue.listJobs(listJobsInput(req), call(ctx)));
    },

    // A stream lives as long as the job runs (or the client stays), so the interceptors give it no
    // request deadline; each database read inside has its own.
    async *watchJob(req, ctx) {
      for await (const update of parking.watchJob(req.jobId, { signal: ctx.signal, ...scope(ctx), ...watchOptions(req) }))
        yield watchJobResponse(update);
    },
  };
}

// ---- requests → domain inputs ----

export function listCompletedResultsInput(r: ListCompletedResultsRequest): ListCompletedResultsInput {
  return { jobId: r.jobId, pageSize: r.pageSize === 0 ? undefined : r.pageSize, pageToken: opt(r.pageToken) };
}

export function cancelJobInput(r: CancelJobRequest): CancelJobInput {
  return { jobId: r.jobId, reason: opt(r.reason) };
}

export function retryJobInput(r: RetryJobRequest): RetryJobInput {
  return { jobId: r.jobId, maxAttempts: r.maxAttempts };
}

/** JOB_STATUS_UNSPECIFIED (0) means any status; an unknown number is passed on for validation to refuse. */
export function listJobsInput(r: ListJobsRequest): ListJobsInput {
  const status =
    r.status === JobStatus.UNSPECIFIED ? undefined : (Object.entries(JOB_STATUS).find(([, v]) => v === r.status)?.[0] ?? String(r.status));
  return {
    status: status as ListJobsInput["status"],
    workload: opt(r.workload),
    pageSize: r.pageSize,
    pageToken: opt(r.pageToken),
    scheduleName: opt(r.scheduleName),
    account: opt(r.account),
  };
}

/** after_event_id 0 (unset): a fresh stream with a snapshot. */
export function watchOptions(r: WatchJobRequest): Pick<WatchOptions, "afterEventId"> {
  return r.afterEventId === 0n ? {} : { afterEventId: r.afterEventId.toString() };
}

// ---- domain results → messages ----

function createJobResponse(r: CreateJobResult, withTasks = true): CreateJobResponse {
  return create(CreateJobResponseSchema, { job: jobMessage(r.job), tasks: withTasks ? r.tasks.map(taskMessage) : [] });
}

/**
 * CreateJob's view: whether the answer holds the job's tasks (UNSPECIFIED: the full view, as
 * before the field existed). An unknown number (binary and JSON requests may carry one) is refused.
 */
export function answersTasks(view: JobView): boolean {
  if (view === JobView.BASIC) return false;
  if (view === JobView.FULL || view === JobView.UNSPECIFIED) return true;
  throw new ValidationError("view", `must be JOB_VIEW_BASIC or JOB_VIEW_FULL (or unset), not ${view}`);
}

export function getJobResponse(s: JobStatusResult): GetJobResponse {
  return create(GetJobResponseSchema, {
    job: jobMessage(s.job),
    taskCounts: {
      pending: s.taskCounts.pending ?? 0,
      leased: s.taskCounts.leased ?? 0,
      completed: s.taskCounts.completed ?? 0,
      failed: s.taskCounts.failed ?? 0,
      cancelled: s.taskCounts.cancelled ?? 0,
      waiting: s.taskCounts.waiting ?? 0,
    },
    totalTasks: s.totalTasks,
    progress: s.progress,
    failure: s.failure
      ? {
          taskId: s.failure.taskId,
          chunkIndex: s.failure.chunkIndex,
          errorCode: s.failure.errorCode ?? "",
          errorMessage: s.failure.errorMessage ?? "",
          attempt: s.failure.attempt,
          workerId: s.failure.workerId ?? "",
          failedAt: ts(s.failure.failedAt),
        }
      : undefined,
  });
}

export function resultManifestMessage(r: ResultManifest): PbResultManifest {
  return create(ResultManifestSchema, {
    chunkIndex: r.chunkIndex,
    taskId: r.taskId,
    resultUri: r.resultUri,
    resultSha256: r.resultSha256,
    metrics: struct(r.metrics),
    completedAt: ts(r.completedAt),
  });
}

export function listCompletedResultsResponse(r: ListCompletedResultsResult): ListCompletedResultsResponse {
  return create(ListCompletedResultsResponseSchema, { results: r.results.map(resultManifestMessage), nextPageToken: r.nextPageToken });
}

export function retryJobResponse(r: RetryJobResult): RetryJobResponse {
  return create(RetryJobResponseSchema, { job: jobMessage(r.job), retriedTasks: r.retriedTasks });
}

export function listJobsResponse(r: ListJobsResult): ListJobsResponse {
  return create(ListJobsResponseSchema, { jobs: r.jobs.map(jobMessage), nextPageToken: r.nextPageToken });
}

const JOB_EVENT_KIND = {
  task_status: JobEventKind.TASK_STATUS,
  task_progress: JobEventKind.TASK_PROGRESS,
  job_status: JobEventKind.JOB_STATUS,
  job_settled: JobEventKind.SETTLED,
} as const;

export function watchJobResponse(u: JobUpdate): WatchJobResponse {
  if (u.snapshot) return create(WatchJobResponseSchema, { update: { case: "snapshot", value: getJobResponse(u.snapshot) } });
  const e = u.event;
  const job = e.kind === "job_status";
  return create(WatchJobResponseSchema, {
    update: {
      case: "event",
      value: create(JobEventSchema, {
        id: BigInt(e.id),
        jobId: e.jobId,
        kind: JOB_EVENT_KIND[e.kind],
        taskId: e.taskId ?? "",
        chunkIndex: e.chunkIndex ?? 0,
        taskStatus: job || !e.status ? TaskStatus.UNSPECIFIED : TASK_STATUS[e.status as DomainTaskStatus],
        previousTaskStatus: job || !e.previousStatus ? TaskStatus.UNSPECIFIED : TASK_STATUS[e.previousStatus as DomainTaskStatus],
        jobStatus: job && e.status ? JOB_STATUS[e.status as DomainJobStatus] : JobStatus.UNSPECIFIED,
        previousJobStatus: job && e.previousStatus ? JOB_STATUS[e.previousStatus as DomainJobStatus] : JobStatus.UNSPECIFIED,
        attempt: e.attempt ?? 0,
        workerId: e.workerId ?? "",
        progress: e.progress ?? 0,
        message: e.message ?? "",
        partialResultUri: e.partialResultUri ?? "",
        errorCode: e.errorCode ?? "",
        errorMessage: e.errorMessage ?? "",
        createdAt: ts(e.createdAt),
        settlementKey: e.settlementKey ?? "",
        settledUnits: BigInt(e.settledUnits ?? 0),
      }),
    },
  });
}
