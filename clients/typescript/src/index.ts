// @leasehold/client: a Client for submitters and operators, a Worker for task handlers, typed
// errors the same on every transport, and the generated messages of the contract they speak.
export { Client, FINAL_JOB_STATUSES } from "./client.js";
export type { CreateJobOptions, ScheduleOptions, TaskSpecInit, WaitOptions, WorkloadOptions } from "./client.js";
export { Worker, type Handler, type WorkerOptions, type WorkerStats } from "./worker.js";
export type { Logger } from "./worker-lease.js";
export { Task, TaskError, RetryableError, TaskCancelledError, type Result } from "./task.js";
export { usageNumbers, type Usage } from "./usage.js";
export type { ConnectionOptions, TransportName } from "./options.js";
export {
  LeaseholdError,
  InvalidArgumentError,
  NotFoundError,
  AbortedError,
  AlreadyExistsError,
  FailedPreconditionError,
  UnauthenticatedError,
  PermissionDeniedError,
  UnavailableError,
  DeadlineExceededError,
  InternalError,
  ResourceExhaustedError,
  WorkerConfigError,
  type ErrorCode,
  type FieldViolation,
} from "./errors.js";
export {
  AttemptOutcome,
  CatchUpPolicy,
  FailurePolicy,
  JobEventKind,
  JobStatus,
  OverlapPolicy,
  QueueService,
  TaskStatus,
  WaitingReason,
} from "./gen/leasehold/queue/v1/queue_pb.js";
export type {
  Account,
  Billing,
  CreateJobResponse,
  GetAccountUsageResponse,
  GetJobResponse,
  GetTaskResponse,
  Job,
  JobEvent,
  JobFailure,
  ResultManifest,
  RetryJobResponse,
  Schedule,
  Settlement,
  Task as TaskMessage,
  TaskAttempt,
  TaskCounts,
  TaskDetail,
  WatchJobResponse,
  Workload,
  WorkloadUsage,
} from "./gen/leasehold/queue/v1/queue_pb.js";
