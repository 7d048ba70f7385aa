// The tasks' RPCs of the QueueService, a worker's (ClaimTasks, RenewLease, ReportProgress,
// CompleteTask and CompleteTasks with their claim_next, FailTask) and the inspection of tasks
// (ListTasks, GetTask): each handler with its request's decoding and its answer's encoding.

import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import {
  AttemptOutcome,
  ClaimTasksResponseSchema,
  CompleteTaskResponseSchema,
  CompleteTasksResponseSchema,
  FailTaskResponseSchema,
  GetTaskResponseSchema,
  ListTasksResponseSchema,
  RenewLeaseResponseSchema,
  ReportProgressResponseSchema,
  TaskAttemptSchema,
  TaskStatus,
  WaitingReason,
  type ClaimTasksRequest,
  type CompleteTaskRequest,
  type CompleteTasksRequest,
  type CompleteTasksResponse,
  type FailTaskRequest,
  type GetTaskRequest,
  type GetTaskResponse,
  type ListTasksRequest,
  type ListTasksResponse,
  type QueueService as QueueServiceDesc,
  type RenewLeaseRequest,
  type ReportProgressRequest,
  type TaskAttempt as PbTaskAttempt,
} from "../../../gen/leasehold/queue/v1/queue_pb.js";
import { ValidationError } from "../../queue/errors.js";
import type { ParkingCalls } from "../../queue/long-poll.js";
import type { ApiQueue } from "../../queue/service.js";
import type {
  AttemptOutcome as DomainAttemptOutcome,
  ClaimTasksInput,
  CompleteOutcome,
  CompleteTaskInput,
  FailTaskInput,
  ListTasksInput,
  ListTasksResult,
  RenewLeaseInput,
  ReportProgressInput,
  Task,
  TaskAttempt,
  TaskDetail,
  WaitingReason as WaitingReasonName,
} from "../../queue/types.js";
import { mapError } from "../errors.js";
import { requestInfoKey } from "../request-info.js";
import { call } from "./call-options.js";
import { domainJson, opt, TASK_STATUS, taskMessage, ts, usageInput, usageMessage } from "./messages.js";

type TasksImpl = Pick<
  ServiceImpl<typeof QueueServiceDesc>,
  "claimTasks" | "renewLease" | "completeTask" | "completeTasks" | "failTask" | "reportProgress" | "listTasks" | "getTask"
>;

/** `parking`: where claims and claim_next reports go (the long poll); the queue itself without one. */
export function tasksService(queue: ApiQueue, parking: ParkingCalls): TasksImpl {
  return {
    async claimTasks(req, ctx) {
      const tasks = await parking.claimTasks(claimTasksInput(req), call(ctx));
      return create(ClaimTasksResponseSchema, { tasks: tasks.map(taskMessage) });
    },

    async renewLease(req, ctx) {
      const task = await queue.renewLease(renewLeaseInput(req), call(ctx));
      return create(RenewLeaseResponseSchema, { task: taskMessage(task) });
    },

    async completeTask(req, ctx) {
      const input = completeTaskInput(req);
      if (req.claimNext) {
        const r = await parking.completeTaskAndClaim(input, claimNextInput(req.claimNext, [input]), call(ctx));
        return create(CompleteTaskResponseSchema, { task: taskMessage(r.task), nextTasks: r.next.map(taskMessage) });
      }
      const task = await queue.completeTask(input, call(ctx));
      return create(CompleteTaskResponseSchema, { task: taskMessage(task) });
    },

    async completeTasks(req, ctx) {
      const inputs = completeTasksInput(req);
      if (req.claimNext) {
        const r = await parking.completeTasksAndClaim(inputs, claimNextInput(req.claimNext, inputs), call(ctx));
        return completeTasksResponse(inputs, r.outcomes, r.next);
      }
      return completeTasksResponse(inputs, await queue.completeTasks(inputs, call(ctx)));
    },

    async failTask(req, ctx) {
      const task = await queue.failTask(failTaskInput(req), call(ctx));
      return create(FailTaskResponseSchema, { task: taskMessage(task) });
    },

    async reportProgress(req, ctx) {
      const task = await queue.reportProgress(reportProgressInput(req), call(ctx));
      return create(ReportProgressResponseSchema, { task: taskMessage(task) });
    },

    async listTasks(req, ctx) {
      return listTasksResponse(await queue.listTasks(listTasksInput(req), call(ctx)));
    },

    async getTask(req, ctx) {
      const detail = await queue.getTask(getTaskInput(req), call(ctx));
      const info = ctx.values.get(requestInfoKey);
      if (info) info.jobId = detail.task.jobId;
      return getTaskResponse(detail);
    },
  };
}

// ---- requests → domain inputs ----

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

// ---- domain results → messages ----

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

const ATTEMPT_OUTCOME: Record<DomainAttemptOutcome, AttemptOutcome> = {
  running: AttemptOutcome.RUNNING,
  completed: AttemptOutcome.COMPLETED,
  failed: AttemptOutcome.FAILED,
  lease_expired: AttemptOutcome.LEASE_EXPIRED,
  cancelled: AttemptOutcome.CANCELLED,
};

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
  parents: WaitingReason.PARENTS,
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
