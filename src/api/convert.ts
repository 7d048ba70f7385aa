// Domain objects (src/queue/types.ts) ↔ generated leasehold.queue.v1 messages.
// The only place that knows both shapes. Proto3 scalars cannot be null, so
// nullable domain strings become "" and nullable times/structs stay unset;
// in requests, "" and 0 mean "not given" wherever the proto has no presence.

import { create, type JsonObject as PbJsonObject } from "@bufbuild/protobuf";
import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import {
  AttemptOutcome,
  CompleteTasksResponseSchema,
  GetTaskResponseSchema,
  ListTasksResponseSchema,
  TaskAttemptSchema,
  GetJobResponseSchema,
  FailurePolicy,
  JobEventKind,
  JobEventSchema,
  FinalizerSchema,
  JobSchema,
  BillingSchema,
  JobStatus,
  ListJobsResponseSchema,
  RetryJobResponseSchema,
  WatchJobResponseSchema,
  ListCompletedResultsResponseSchema,
  ResultManifestSchema,
  TaskStatus,
  WaitingReason,
  WorkloadSchema,
  type CancelJobRequest,
  type ClaimTasksRequest,
  type CompleteTaskRequest,
  type CompleteTasksRequest,
  type CompleteTasksResponse,
  type CreateJobRequest,
  type FailTaskRequest,
  type GetJobResponse,
  type GetTaskRequest,
  type GetTaskResponse,
  type ListTasksRequest,
  type ListTasksResponse,
  type TaskAttempt as PbTaskAttempt,
  type WatchJobRequest,
  type Job as PbJob,
  type ListCompletedResultsRequest,
  type ListCompletedResultsResponse,
  type ListJobsRequest,
  type ListJobsResponse,
  type PutWorkloadRequest,
  type RenewLeaseRequest,
  type ReportProgressRequest,
  type RetryJobRequest,
  type RetryJobResponse,
  type WatchJobResponse,
  type ResultManifest as PbResultManifest,
  SettlementSchema,
  type Task as PbTask,
  type Workload as PbWorkload,
} from "../../gen/leasehold/queue/v1/queue_pb.js";
import { int64Number, usageInput, usageMessage } from "./accounts-convert.js";
import { ValidationError } from "../queue/errors.js";
import { mapError } from "./errors.js";
import type {
  CancelJobInput,
  ClaimTasksInput,
  CompleteOutcome,
  CompleteTaskInput,
  CreateJobInput,
  FailTaskInput,
  FailurePolicy as DomainFailurePolicy,
  Job,
  JobStatus as DomainJobStatus,
  JobStatusResult,
  JsonObject,
  ListCompletedResultsInput,
  ListCompletedResultsResult,
  ListJobsInput,
  ListJobsResult,
  ListTasksInput,
  ListTasksResult,
  JobUpdate,
  TaskAttempt,
  TaskDetail,
  WatchOptions,
  AttemptOutcome as DomainAttemptOutcome,
  PutWorkloadInput,
  RenewLeaseInput,
  ReportProgressInput,
  RetryJobInput,
  RetryJobResult,
  ResultManifest,
  Task,
  TaskSpec,
  TaskStatus as DomainTaskStatus,
  Workload,
  WaitingReason as WaitingReasonName,
} from "../queue/types.js";

// ---- small helpers ----

function ts(d: Date | null | undefined): Timestamp | undefined {
  return d ? timestamp(d) : undefined;
}

/**
 * Timestamps made recently, by milliseconds: the tasks of one answer mostly share theirs (one
 * job's creation, one statement's now()), so most of an answer's Timestamps are one object each
 * (~0.2 µs, a BigInt and an object apiece otherwise). The messages only read them.
 */
const recentTimestamps = new Map<number, Timestamp>();
const MAX_RECENT = 512;

/** timestampFromDate without create()'s walk of the descriptor. */
function timestamp(d: Date): Timestamp {
  const ms = d.getTime();
  let t = recentTimestamps.get(ms);
  if (t === undefined) {
    if (recentTimestamps.size >= MAX_RECENT) recentTimestamps.clear();
    const seconds = Math.floor(ms / 1000);
    t = { $typeName: "google.protobuf.Timestamp", seconds: BigInt(seconds), nanos: (ms - seconds * 1000) * 1_000_000 };
    recentTimestamps.set(ms, t);
  }
  return t;
}

function struct(o: JsonObject | null | undefined): PbJsonObject | undefined {
  return o ?? undefined;
}

function domainJson(o: PbJsonObject | undefined): JsonObject | undefined {
  return o as JsonObject | undefined;
}

/** "" (the proto3 default) → undefined. */
function opt(s: string): string | undefined {
  return s === "" ? undefined : s;
}

const TASK_STATUS: Record<DomainTaskStatus, TaskStatus> = {
  pending: TaskStatus.PENDING,
  leased: TaskStatus.LEASED,
  completed: TaskStatus.COMPLETED,
  failed: TaskStatus.FAILED,
  cancelled: TaskStatus.CANCELLED,
};

const JOB_STATUS: Record<DomainJobStatus, JobStatus> = {
  pending: JobStatus.PENDING,
  running: JobStatus.RUNNING,
  completed: JobStatus.COMPLETED,
  failed: JobStatus.FAILED,
  cancelled: JobStatus.CANCELLED,
  scheduled: JobStatus.SCHEDULED,
};

const ATTEMPT_OUTCOME: Record<DomainAttemptOutcome, AttemptOutcome> = {
  running: AttemptOutcome.RUNNING,
  completed: AttemptOutcome.COMPLETED,
  failed: AttemptOutcome.FAILED,
  lease_expired: AttemptOutcome.LEASE_EXPIRED,
  cancelled: AttemptOutcome.CANCELLED,
};

const FAILURE_POLICY: Record<DomainFailurePolicy, FailurePolicy> = {
  fail_fast: FailurePolicy.FAIL_FAST,
  continue: FailurePolicy.CONTINUE,
};

/** UNSPECIFIED (0) is absent; an unknown number is passed on for validation to refuse. */
function failurePolicyInput(p: FailurePolicy): DomainFailurePolicy | undefined {
  if (p === FailurePolicy.UNSPECIFIED) return undefined;
  return (Object.entries(FAILURE_POLICY).find(([, v]) => v === p)?.[0] ?? String(p)) as DomainFailurePolicy;
}

const JOB_EVENT_KIND = {
  task_status: JobEventKind.TASK_STATUS,
  task_progress: JobEventKind.TASK_PROGRESS,
  job_status: JobEventKind.JOB_STATUS,
  job_settled: JobEventKind.SETTLED,
} as const;

// ---- requests → domain inputs ----

export function createJobInput(r: CreateJobRequest): CreateJobInput {
  return {
    workload: r.workload,
    inputUri: opt(r.inputUri),
    inputSha256: opt(r.inputSha256),
    parameters: domainJson(r.parameters),
    priority: r.priority,
    maxAttempts: r.maxAttempts,
    idempotencyKey: opt(r.idempotencyKey),
    traceparent: opt(r.traceparent),
    // The request's own TaskSpec messages, not a copy of each (10,000 in a big job): they have the
    // domain's fields, and validation reads the proto3 default "" of an unset workload as unset.
    tasks: taskSpecs(r.tasks),
    failurePolicy: failurePolicyInput(r.failurePolicy),
    maxFailedTasks: r.maxFailedTasks,
    concurrencyKey: opt(r.concurrencyKey),
    requiredLabels: r.requiredLabels,
    runAt: r.runAt ? timestampDate(r.runAt) : undefined,
    finalizer: r.finalizer
      ? { workload: r.finalizer.workload, parameters: domainJson(r.finalizer.parameters), runOnFailure: r.finalizer.runOnFailure }
      : undefined,
    account: opt(r.account),
    billing: r.billing
      ? { reservedUnits: int64Number("billing.reserved_units", r.billing.reservedUnits), billingKey: opt(r.billing.billingKey) }
      : undefined,
  };
}

/** The TaskSpec messages as they are, but for a run_at (a Timestamp message), which becomes a Date on a copy of its task. */
function taskSpecs(specs: CreateJobRequest["tasks"]): TaskSpec[] {
  if (!specs.some((t) => t.runAt !== undefined)) return specs as unknown as TaskSpec[];
  return specs.map((t) => (t.runAt === undefined ? t : { ...t, runAt: timestampDate(t.runAt) })) as unknown as TaskSpec[];
}

export function claimTasksInput(r: ClaimTasksRequest): ClaimTasksInput {
  return {
    workerId: r.workerId,
    workloads: r.workloads,
    maxTasks: r.maxTasks,
    leaseSeconds: r.leaseSeconds,
    // Long-poll hook: passed through as is; the queue decides how to wait.
    waitSeconds: r.waitSeconds,
    labels: r.labels,
  };
}

export function renewLeaseInput(r: RenewLeaseRequest): RenewLeaseInput {
  return { taskId: r.taskId, workerId: r.workerId, attempt: r.attempt, leaseSeconds: r.leaseSeconds };
}

/** `at`: where the result sits in its request ("results[2]." in a batch), for the fields it names. */
export function completeTaskInput(r: CompleteTaskRequest, at = ""): CompleteTaskInput {
  return {
    taskId: r.taskId,
    workerId: r.workerId,
    attempt: r.attempt,
    resultUri: r.resultUri,
    resultSha256: r.resultSha256,
    metrics: domainJson(r.metrics),
    usage: usageInput(`${at}usage`, r.usage),
  };
}

export function completeTasksInput(r: CompleteTasksRequest): CompleteTaskInput[] {
  const nested = r.results.findIndex((x) => x.claimNext !== undefined);
  if (nested >= 0) throw new ValidationError(`results[${nested}].claim_next`, "is not taken inside a batch; set the batch's claim_next");
  return r.results.map((x, i) => completeTaskInput(x, `results[${i}].`));
}

/** A result report's claim_next; an empty worker_id is the reporting worker's (the one all of a batch's results name). */
export function claimNextInput(r: ClaimTasksRequest, reporters: readonly { workerId: string }[]): ClaimTasksInput {
  const input = claimTasksInput(r);
  const first = reporters[0]?.workerId;
  if (!input.workerId && first && reporters.every((x) => x.workerId === first)) input.workerId = first;
  return input;
}

export function failTaskInput(r: FailTaskRequest): FailTaskInput {
  return {
    taskId: r.taskId,
    workerId: r.workerId,
    attempt: r.attempt,
    errorCode: r.errorCode,
    errorMessage: opt(r.errorMessage),
    retryable: r.retryable,
    retryAfterSeconds: r.retryAfterSeconds,
    usage: usageInput("usage", r.usage),
  };
}

export function listCompletedResultsInput(r: ListCompletedResultsRequest): ListCompletedResultsInput {
  return { jobId: r.jobId, pageSize: r.pageSize === 0 ? undefined : r.pageSize, pageToken: opt(r.pageToken) };
}

export function cancelJobInput(r: CancelJobRequest): CancelJobInput {
  return { jobId: r.jobId, reason: opt(r.reason) };
}

export function putWorkloadInput(r: PutWorkloadRequest): PutWorkloadInput {
  return {
    name: r.name,
    maxAttempts: r.maxAttempts,
    leaseSeconds: r.leaseSeconds,
    parametersSchema: domainJson(r.parametersSchema) ?? null,
    maxPendingSeconds: r.maxPendingSeconds,
    failurePolicy: failurePolicyInput(r.failurePolicy),
    maxFailedTasks: r.maxFailedTasks,
    maxLeased: r.maxLeased,
    maxLeasedPerKey: r.maxLeasedPerKey,
    maxLeasesPerSecond: r.maxLeasesPerSecond,
    leasesBurst: r.leasesBurst,
  };
}

export function reportProgressInput(r: ReportProgressRequest): ReportProgressInput {
  return {
    taskId: r.taskId,
    workerId: r.workerId,
    attempt: r.attempt,
    progress: r.progress,
    message: opt(r.message),
    partialResultUri: opt(r.partialResultUri),
    leaseSeconds: r.leaseSeconds,
  };
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

/** TASK_STATUS_UNSPECIFIED (0) means any status; an unknown number is passed on for validation to refuse. */
export function listTasksInput(r: ListTasksRequest): ListTasksInput {
  const status =
    r.status === TaskStatus.UNSPECIFIED
      ? undefined
      : (Object.entries(TASK_STATUS).find(([, v]) => v === r.status)?.[0] ?? String(r.status));
  return { jobId: r.jobId, status: status as ListTasksInput["status"], pageSize: r.pageSize, pageToken: opt(r.pageToken) };
}

export function getTaskInput(r: GetTaskRequest): string {
  return r.taskId;
}

/** after_event_id 0 (unset): a fresh stream with a snapshot. */
export function watchOptions(r: WatchJobRequest): Pick<WatchOptions, "afterEventId"> {
  return r.afterEventId === 0n ? {} : { afterEventId: r.afterEventId.toString() };
}

// ---- domain objects → messages ----

export function jobMessage(j: Job): PbJob {
  return create(JobSchema, {
    id: j.id,
    workload: j.workload,
    inputUri: j.inputUri,
    inputSha256: j.inputSha256 ?? "",
    parameters: struct(j.parameters),
    status: JOB_STATUS[j.status] ?? JobStatus.UNSPECIFIED,
    priority: j.priority,
    idempotencyKey: j.idempotencyKey ?? "",
    traceparent: j.traceparent ?? "",
    cancelReason: j.cancelReason ?? "",
    createdAt: ts(j.createdAt),
    updatedAt: ts(j.updatedAt),
    completedAt: ts(j.completedAt),
    failurePolicy: FAILURE_POLICY[j.failurePolicy] ?? FailurePolicy.UNSPECIFIED,
    maxFailedTasks: j.maxFailedTasks,
    concurrencyKey: j.concurrencyKey,
    requiredLabels: j.requiredLabels ?? {},
    scheduleName: j.scheduleName ?? "",
    scheduleFireTime: ts(j.scheduleFireAt),
    runAt: ts(j.runAt),
    finalizer: j.finalizer
      ? create(FinalizerSchema, {
          workload: j.finalizer.workload,
          parameters: struct(j.finalizer.parameters),
          runOnFailure: j.finalizer.runOnFailure,
        })
      : undefined,
    finalizerJobId: j.finalizerJobId ?? "",
    parentJobId: j.parentJobId ?? "",
    account: j.account ?? "",
    billing: j.billing
      ? create(BillingSchema, { reservedUnits: BigInt(j.billing.reservedUnits), billingKey: j.billing.billingKey ?? "" })
      : undefined,
    usage: usageMessage(j.usage),
    settlement: j.settlement
      ? create(SettlementSchema, {
          settlementKey: j.settlement.settlementKey,
          settledUnits: BigInt(j.settlement.settledUnits),
          settledAt: ts(j.settlement.settledAt),
        })
      : undefined,
  });
}

/**
 * A Task message as create(TaskSchema, {…}) makes it, built as a literal: create() walks the
 * descriptor per call (~5 µs a task), and a claim answers with tasks, a 10,000-task CreateJob
 * with 10,000 of them. test/api/json-writer.test.ts checks it against create().
 */
export function taskMessage(t: Task): PbTask {
  const m: PbTask = {
    $typeName: "leasehold.queue.v1.Task",
    id: t.id,
    jobId: t.jobId,
    chunkIndex: t.chunkIndex,
    workload: t.workload,
    inputUri: t.inputUri,
    inputSha256: t.inputSha256,
    status: TASK_STATUS[t.status] ?? TaskStatus.UNSPECIFIED,
    attempt: t.attempt,
    maxAttempts: t.maxAttempts,
    priority: t.priority,
    leaseOwner: t.leaseOwner ?? "",
    resultUri: t.resultUri ?? "",
    resultSha256: t.resultSha256 ?? "",
    errorCode: t.errorCode ?? "",
    errorMessage: t.errorMessage ?? "",
    version: t.version,
    traceparent: t.traceparent ?? "",
    concurrencyKey: t.concurrencyKey ?? "",
    requiredLabels: t.requiredLabels ?? {},
    usage: usageMessage(t.usage),
  };
  // Message fields are absent when unset, as create() leaves them.
  if (t.parameters) m.parameters = t.parameters as PbJsonObject;
  if (t.leaseExpiresAt) m.leaseExpiresAt = timestamp(t.leaseExpiresAt);
  if (t.metrics) m.metrics = t.metrics as PbJsonObject;
  if (t.createdAt) m.createdAt = timestamp(t.createdAt);
  if (t.startedAt) m.startedAt = timestamp(t.startedAt);
  if (t.completedAt) m.completedAt = timestamp(t.completedAt);
  return m;
}

export function workloadMessage(w: Workload): PbWorkload {
  return create(WorkloadSchema, {
    name: w.name,
    maxAttempts: w.maxAttempts,
    leaseSeconds: w.leaseSeconds,
    parametersSchema: struct(w.parametersSchema),
    maxPendingSeconds: w.maxPendingSeconds ?? 0,
    failurePolicy: FAILURE_POLICY[w.failurePolicy] ?? FailurePolicy.UNSPECIFIED,
    maxFailedTasks: w.maxFailedTasks,
    maxLeased: w.maxLeased ?? 0,
    maxLeasedPerKey: w.maxLeasedPerKey ?? 0,
    maxLeasesPerSecond: w.maxLeasesPerSecond ?? 0,
    leasesBurst: w.leasesBurst ?? 0,
    paused: w.paused,
    createdAt: ts(w.createdAt),
    updatedAt: ts(w.updatedAt),
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

export function getJobResponse(s: JobStatusResult): GetJobResponse {
  return create(GetJobResponseSchema, {
    job: jobMessage(s.job),
    taskCounts: {
      pending: s.taskCounts.pending ?? 0,
      leased: s.taskCounts.leased ?? 0,
      completed: s.taskCounts.completed ?? 0,
      failed: s.taskCounts.failed ?? 0,
      cancelled: s.taskCounts.cancelled ?? 0,
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

export function taskAttemptMessage(a: TaskAttempt): PbTaskAttempt {
  return create(TaskAttemptSchema, {
    attempt: a.attempt,
    workerId: a.workerId ?? "",
    leasedAt: ts(a.leasedAt),
    endedAt: ts(a.endedAt),
    outcome: ATTEMPT_OUTCOME[a.outcome] ?? AttemptOutcome.UNSPECIFIED,
    errorCode: a.errorCode ?? "",
    errorMessage: a.errorMessage ?? "",
    retried: a.retried,
    lastProgress: a.lastProgress
      ? {
          progress: a.lastProgress.progress,
          message: a.lastProgress.message ?? "",
          partialResultUri: a.lastProgress.partialResultUri ?? "",
          reportedAt: ts(a.lastProgress.reportedAt),
        }
      : undefined,
    usage: usageMessage(a.usage),
  });
}

const WAITING_REASON: Record<WaitingReasonName, WaitingReason> = {
  queued: WaitingReason.QUEUED,
  retry_backoff: WaitingReason.RETRY_BACKOFF,
  workload_paused: WaitingReason.WORKLOAD_PAUSED,
  workload_cap: WaitingReason.WORKLOAD_CAP,
  key_cap: WaitingReason.KEY_CAP,
  rate_limited: WaitingReason.RATE_LIMITED,
  labels_unmatched: WaitingReason.LABELS_UNMATCHED,
  no_workers: WaitingReason.NO_WORKERS,
};

export function getTaskResponse(d: TaskDetail): GetTaskResponse {
  return create(GetTaskResponseSchema, {
    task: taskMessage(d.task),
    attempts: d.attempts.map(taskAttemptMessage),
    waitingReason: d.waiting ? WAITING_REASON[d.waiting.reason] : WaitingReason.UNSPECIFIED,
    waitingDetail: d.waiting?.detail ?? "",
  });
}

export function listTasksResponse(r: ListTasksResult): ListTasksResponse {
  return create(ListTasksResponseSchema, {
    tasks: r.tasks.map((d) => ({ task: taskMessage(d.task), attempts: d.attempts.map(taskAttemptMessage) })),
    nextPageToken: r.nextPageToken,
  });
}

export function listCompletedResultsResponse(r: ListCompletedResultsResult): ListCompletedResultsResponse {
  return create(ListCompletedResultsResponseSchema, { results: r.results.map(resultManifestMessage), nextPageToken: r.nextPageToken });
}

/** Per-item outcomes of a batch: refused items carry the code and message errors.ts gives them. */
export function completeTasksResponse(inputs: CompleteTaskInput[], outcomes: CompleteOutcome[], next: Task[] = []): CompleteTasksResponse {
  return create(CompleteTasksResponseSchema, {
    nextTasks: next.map(taskMessage),
    outcomes: outcomes.map((o, i) => {
      if (o.task) return { taskId: o.task.id, task: taskMessage(o.task) };
      const m = mapError(o.error);
      return { taskId: inputs[i]?.taskId ?? "", error: { code: m.codeName, message: m.message } };
    }),
  });
}

export function retryJobResponse(r: RetryJobResult): RetryJobResponse {
  return create(RetryJobResponseSchema, { job: jobMessage(r.job), retriedTasks: r.retriedTasks });
}

export function listJobsResponse(r: ListJobsResult): ListJobsResponse {
  return create(ListJobsResponseSchema, { jobs: r.jobs.map(jobMessage), nextPageToken: r.nextPageToken });
}

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
