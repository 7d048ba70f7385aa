// @leasehold/client: a Client for submitters and operators, a Worker for task handlers, typed
// errors the same on every transport, and the generated messages of the contract they speak.
export { Client, FINAL_JOB_STATUSES } from "./client.js";
export type { CreateJobOptions, ScheduleOptions, TaskSpecInit, WaitOptions, WorkloadOptions } from "./client.js";
export type { DependencyInit, NodeDependencyInit, WorkflowNodeInit, WorkflowOptions } from "./workflows.js";
export { toJson, type CancelledWorkflow, type CreatedJob, type JobSnapshot, type RetriedJob, type RetriedWorkflow } from "./answers.js";
export { Worker, type Handler, type WorkerEvents, type WorkerListener, type WorkerOptions, type WorkerStats } from "./worker.js";
export type { Logger } from "./worker-lease.js";
export { TaskError, RetryableError, TaskCancelledError, type Result, type TaskContext } from "./task.js";
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
  DependencyPolicy,
  FailurePolicy,
  JobEventKind,
  JobStatus,
  JobView,
  OverlapPolicy,
  QueueService,
  TaskStatus,
  WaitingReason,
} from "./gen/leasehold/queue/v1/queue_pb.js";
export type {
  Account,
  Billing,
  Dependency,
  GetAccountUsageResponse,
  GetTaskResponse,
  Job,
  JobEvent,
  JobFailure,
  JobParent,
  NodeDependency,
  ResultManifest,
  Schedule,
  Settlement,
  Task,
  TaskAttempt,
  TaskCounts,
  TaskDetail,
  UsageAdjustment,
  WatchJobResponse,
  WatchWorkflowResponse,
  Workflow,
  WorkflowEvent,
  WorkflowNode,
  WorkflowNodeCounts,
  Workload,
  WorkloadUsage,
} from "./gen/leasehold/queue/v1/queue_pb.js";
/** @deprecated The generated task message is `Task` now (the handler's view of a leased task is `TaskContext`). */
export type { Task as TaskMessage } from "./gen/leasehold/queue/v1/queue_pb.js";
