import type { MaintenanceQueue } from "./maintenance.js";
import type { PutScheduleInput, PutScheduleResult, Schedule } from "./types.js";
import type {
  Account,
  AccountUsage,
  AccountUsageInput,
  ListAdjustmentsInput,
  ListAdjustmentsResult,
  ListSettlementsInput,
  ListSettlementsResult,
  SettleAdjustmentInput,
  UsageAdjustment,
  PutAccountInput,
  SettleJobInput,
  BatchCompletedAndClaimed,
  CallOptions,
  CancelJobInput,
  ClaimTasksInput,
  CompletedAndClaimed,
  CompleteOutcome,
  CompleteTaskInput,
  CreateJobInput,
  CreateJobResult,
  FailTaskInput,
  Job,
  JobStatusResult,
  ListCompletedResultsInput,
  ListCompletedResultsResult,
  ListJobsInput,
  ListJobsResult,
  ListTasksInput,
  ListTasksResult,
  JobUpdate,
  TaskDetail,
  WatchOptions,
  ReportProgressInput,
  RetryJobInput,
  RetryJobResult,
  WorkloadTaskStats,
  PutWorkloadInput,
  RenewLeaseInput,
  Task,
  Workload,
  PutKeyLimitInput,
  KeyLimit,
  ListWorkloadKeysInput,
  ListWorkloadKeysResult,
  CancelWorkflowInput,
  CancelWorkflowResult,
  CreateWorkflowInput,
  CreateWorkflowResult,
  ListWorkflowsInput,
  ListWorkflowsResult,
  RetryWorkflowInput,
  RetryWorkflowResult,
  Workflow,
  WorkflowUpdate,
} from "./types.js";

/** The money path's calls, part of what the API calls (ApiQueue). */
export interface AccountsApi {
  putAccount(input: PutAccountInput, opts?: CallOptions): Promise<Account>;
  /** NotFoundError for an unknown account. */
  getAccount(name: string, opts?: CallOptions): Promise<Account>;
  listAccounts(opts?: CallOptions): Promise<Account[]>;
  getAccountUsage(input: AccountUsageInput, opts?: CallOptions): Promise<AccountUsage>;
  listSettlements(input: ListSettlementsInput, opts?: CallOptions): Promise<ListSettlementsResult>;
  settleJob(input: SettleJobInput, opts?: CallOptions): Promise<Job>;
  listAdjustments(input: ListAdjustmentsInput, opts?: CallOptions): Promise<ListAdjustmentsResult>;
  settleAdjustment(input: SettleAdjustmentInput, opts?: CallOptions): Promise<UsageAdjustment>;
}

/** Workflows: jobs created together with the edges between them (a job's own parents are CreateJob's after). */
export interface WorkflowsApi {
  createWorkflow(input: CreateWorkflowInput, opts?: CallOptions): Promise<CreateWorkflowResult>;
  /** NotFoundError for an unknown workflow, or another account's. */
  getWorkflow(workflowId: string, opts?: CallOptions): Promise<Workflow>;
  listWorkflows(input: ListWorkflowsInput, opts?: CallOptions): Promise<ListWorkflowsResult>;
  /**
   * The workflow's snapshot, then each node's status change as it commits, in commit order, ending
   * after the change that leaves no node unfinished (at once when none is). As watchJob for the rest.
   */
  watchWorkflow(workflowId: string, opts?: WatchOptions): AsyncIterable<WorkflowUpdate>;
  cancelWorkflow(input: CancelWorkflowInput, opts?: CallOptions): Promise<CancelWorkflowResult>;
  retryWorkflow(input: RetryWorkflowInput, opts?: CallOptions): Promise<RetryWorkflowResult>;
}

/**
 * What the API calls: the queue operation behind every RPC, the one surface every transport
 * reaches. Implementations validate their input (throwing ValidationError before touching the
 * database) and throw only the typed errors of ./errors.ts.
 */
export interface ApiQueue extends AccountsApi, WorkflowsApi {
  createJob(input: CreateJobInput, opts?: CallOptions): Promise<CreateJobResult>;
  /** Leases up to maxTasks tasks; an empty array when nothing is claimable. */
  claimTasks(input: ClaimTasksInput, opts?: CallOptions): Promise<Task[]>;
  renewLease(input: RenewLeaseInput, opts?: CallOptions): Promise<Task>;
  completeTask(input: CompleteTaskInput, opts?: CallOptions): Promise<Task>;
  /** Completes many leased tasks in one statement, each under the same lease and replay rules as completeTask. */
  completeTasks(inputs: CompleteTaskInput[], opts?: CallOptions): Promise<CompleteOutcome[]>;
  /**
   * completeTask, then claimTasks with `next` in the same call, so a worker needs one call per task
   * instead of two. Both inputs are checked, and next's workloads known, before anything is
   * written; a refused result claims nothing; a replayed one claims as an accepted one does.
   */
  completeTaskAndClaim(input: CompleteTaskInput, next: ClaimTasksInput, opts?: CallOptions): Promise<CompletedAndClaimed>;
  /** completeTasks, then claimTasks with `next`, whatever each result's outcome. */
  completeTasksAndClaim(inputs: CompleteTaskInput[], next: ClaimTasksInput, opts?: CallOptions): Promise<BatchCompletedAndClaimed>;
  failTask(input: FailTaskInput, opts?: CallOptions): Promise<Task>;
  getJobStatus(jobId: string, opts?: CallOptions): Promise<JobStatusResult>;
  listCompletedResults(input: ListCompletedResultsInput, opts?: CallOptions): Promise<ListCompletedResultsResult>;
  cancelJob(input: CancelJobInput, opts?: CallOptions): Promise<Job>;
  putWorkload(input: PutWorkloadInput, opts?: CallOptions): Promise<Workload>;
  listWorkloads(opts?: CallOptions): Promise<Workload[]>;
  /** Records a progress event and extends the lease, under the same checks as renewLease. */
  reportProgress(input: ReportProgressInput, opts?: CallOptions): Promise<Task>;
  retryJob(input: RetryJobInput, opts?: CallOptions): Promise<RetryJobResult>;
  listJobs(input: ListJobsInput, opts?: CallOptions): Promise<ListJobsResult>;
  /**
   * The job's snapshot, then every event as it commits, in commit order, ending after the event
   * that makes the job final (at once when it is final already). Ends early when opts.signal aborts.
   * With opts.afterEventId (a resumed stream): no snapshot; the job's events after that one, then live.
   */
  watchJob(jobId: string, opts?: WatchOptions): AsyncIterable<JobUpdate>;
  /** A job's tasks in chunk order (optionally of one status), one page at a time, each with its attempts. */
  listTasks(input: ListTasksInput, opts?: CallOptions): Promise<ListTasksResult>;
  /** One task with its attempts, and, while it is pending, why it waits. */
  getTask(taskId: string, opts?: CallOptions): Promise<TaskDetail>;
  /** One concurrency key's cap, in place of the workload's maxLeasedPerKey; NotFoundError for an unknown workload. */
  putKeyLimit(input: PutKeyLimitInput, opts?: CallOptions): Promise<KeyLimit>;
  /** Claims lease nothing of the workload until it is resumed; NotFoundError for an unknown workload. */
  pauseWorkload(name: string, opts?: CallOptions): Promise<Workload>;
  /** Undoes pauseWorkload and wakes the claims parked on the workload. */
  resumeWorkload(name: string, opts?: CallOptions): Promise<Workload>;
  /** A workload's concurrency keys with their counts and caps, busiest first; NotFoundError for an unknown workload. */
  listWorkloadKeys(input: ListWorkloadKeysInput, opts?: CallOptions): Promise<ListWorkloadKeysResult>;
  /** Creates or replaces a periodic schedule; its template is checked as CreateJob would check it. */
  putSchedule(input: PutScheduleInput, opts?: CallOptions): Promise<PutScheduleResult>;
  /** NotFoundError for an unknown schedule (as for delete, pause and resume). */
  getSchedule(name: string, opts?: CallOptions): Promise<Schedule>;
  listSchedules(opts?: CallOptions): Promise<Schedule[]>;
  deleteSchedule(name: string, opts?: CallOptions): Promise<Schedule>;
  pauseSchedule(name: string, opts?: CallOptions): Promise<Schedule>;
  resumeSchedule(name: string, opts?: CallOptions): Promise<Schedule>;
}

/** What metrics read when scraped. */
export interface TaskStatsSource {
  /**
   * Task counts by workload and status, for metrics. "unfinished" counts pending and leased tasks
   * through their partial indexes (cheap enough every few seconds); "all" also counts finished
   * ones, a full scan: call it rarely.
   */
  taskStats(scope: "unfinished" | "all", opts?: CallOptions): Promise<WorkloadTaskStats[]>;
}

/** Final billable jobs not yet settled, for metrics: how many, and how long the oldest has waited. */
export interface SettlementBacklog {
  waiting: number;
  /** Seconds since the oldest of them became final (its completed_at); 0 when none waits. */
  oldestSeconds: number;
}

/** What the settlement gauges read when scraped (the store; apart from TaskStatsSource so fakes need not). */
export interface SettlementStatsSource {
  settlementBacklog(opts?: CallOptions): Promise<SettlementBacklog>;
}

/**
 * The whole queue a store implements: what the API calls, what the maintenance loop calls
 * (maintenance.ts) and what metrics read. Wrappers take and give the part they change.
 */
export interface QueueService extends ApiQueue, MaintenanceQueue, TaskStatsSource {}

/**
 * What the store reports as it happens, for metrics (counted where the rows change, so batch
 * calls, replays and the reaper are counted exactly once each).
 */
export interface QueueObserver {
  /** pickupSeconds: for each task claimed from pending, how long it had been claimable. */
  tasksClaimed(count: number, pickupSeconds: readonly number[]): void;
  tasksCompleted(count: number): void;
  /** retryable: the task went back to pending (false: it failed for good). */
  taskFailed(retryable: boolean): void;
  /** Leases that expired: requeued ones and ones that failed for good. */
  leasesExpired(count: number): void;
  /** A claim of a flow-controlled workload leased nothing because of its cap (or a key's) or its rate limit. */
  claimRefused?(workload: string, by: "cap" | "rate"): void;
  /** A coalesced statement ran for `size` calls of one kind (claim, complete_and_claim, complete, complete_then_claim, renew, fail, create). */
  statementBatched?(kind: string, size: number): void;
  /** A schedule's ticks: fired (a job created) or skipped (overlap, catch_up, or a template CreateJob refused: failed). */
  scheduleTicks?(schedule: string, outcome: "fired" | "overlap" | "catch_up" | "failed", count: number): void;
}
