// The domain's jobs and tasks: what a job and a task are, CreateJob's input and answer, a job's
// status, results, events and listings, and the options every call takes. Plain objects only: no
// pg rows and no generated proto types cross this boundary (src/queue/types.ts says where each
// family of types lives).

export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };

export type JsonObject = { [key: string]: JsonValue };

/**
 * scheduled: pending with its run_at still ahead; waiting: pending with parents not final yet (both
 * stored as pending). In the proto's order (JobStatus = index + 1).
 */
export const JOB_STATUSES = ["pending", "running", "completed", "failed", "cancelled", "scheduled", "waiting"] as const;

export type JobStatus = (typeof JOB_STATUSES)[number];

/** waiting: its job waits for its parents (not claimable). In the proto's order (TaskStatus = index + 1). */
export const TASK_STATUSES = ["pending", "leased", "completed", "failed", "cancelled", "waiting"] as const;

export type TaskStatus = (typeof TASK_STATUSES)[number];

/**
 * What a job does when its tasks fail for good. It tolerates up to `maxFailedTasks` failed tasks
 * and completes with them once every task is final; the failure past that fails it at once and
 * cancels its unfinished tasks (fail_fast), or lets the others run and fails the job once all are
 * final (continue).
 */
export const FAILURE_POLICIES = ["fail_fast", "continue"] as const;

export type FailurePolicy = (typeof FAILURE_POLICIES)[number];

/** Labels as a map of name to value: a worker's, or what a task requires of one. */
export type Labels = Record<string, string>;

export interface Job {
  id: string;
  workload: string;
  inputUri: string;
  inputSha256: string | null;
  parameters: JsonObject;
  status: JobStatus;
  priority: number;
  idempotencyKey: string | null;
  traceparent: string | null;
  cancelReason: string | null;
  createdAt: Date;
  updatedAt: Date;
  completedAt: Date | null;
  /** Resolved when the job was created: its own, else its workload's. */
  failurePolicy: FailurePolicy;
  maxFailedTasks: number;
  /** "" when none */
  concurrencyKey: string;
  /** null when none */
  requiredLabels: Labels | null;
  /** The schedule that created the job, and the tick it was created for; null when none. */
  scheduleName: string | null;
  scheduleFireAt: Date | null;
  /** The earliest due time of its tasks, when that lay ahead at creation; null: due at once. */
  runAt: Date | null;
  /** null when none */
  finalizer: FinalizerSpec | null;
  /** The finalizer job enqueued at its end; null until then, or when none ran. */
  finalizerJobId: string | null;
  /** On a finalizer job: the job that enqueued it. */
  parentJobId: string | null;
  /** The job's account; null when none. */
  account?: string | null;
  /** The caller's billing context; null when none. */
  billing?: Billing | null;
  /** Usage summed over every accepted report of its tasks' attempts. */
  usage?: Usage;
  /** Its settlement, once recorded; null until then. */
  settlement?: Settlement | null;
  /** null for a job without parents */
  dependencyPolicy?: DependencyPolicy | null;
  /** Its parents with their statuses (GetJob, CreateJob); undefined where not read (ListJobs). */
  parents?: JobParent[];
  /** Parents not final yet: waiting while above 0. */
  waitingParents?: number;
  /** The workflow it is a node of, and the node's name; null otherwise. */
  workflowId?: string | null;
  workflowNode?: string | null;
}

/** When a job with parents may run: every parent final and the required ones completed, or every parent final. */
export const DEPENDENCY_POLICIES = ["all_completed", "all_final"] as const;

export type DependencyPolicy = (typeof DEPENDENCY_POLICIES)[number];

/** A parent as CreateJob names it. */
export interface Dependency {
  jobId: string;
  /** all_completed runs whatever this parent's end */
  optional?: boolean;
}

/** A job's parent with its status (and, for one of a single completed task, its result). */
export interface JobParent {
  jobId: string;
  status: JobStatus;
  optional: boolean;
  /** its node name when both are nodes of one workflow */
  node: string | null;
  totalTasks: number;
  completedTasks: number;
  result: ResultManifest | null;
}

/** A job to enqueue when another job's last task reaches a final state. */
export interface FinalizerSpec {
  workload: string;
  parameters: JsonObject;
  /** also after a failed or cancelled job */
  runOnFailure: boolean;
}

export interface Task {
  id: string;
  jobId: string;
  chunkIndex: number;
  workload: string;
  inputUri: string;
  inputSha256: string;
  parameters: JsonObject;
  status: TaskStatus;
  attempt: number;
  maxAttempts: number;
  priority: number;
  leaseOwner: string | null;
  leaseExpiresAt: Date | null;
  resultUri: string | null;
  resultSha256: string | null;
  metrics: JsonObject | null;
  errorCode: string | null;
  errorMessage: string | null;
  createdAt: Date;
  startedAt: Date | null;
  completedAt: Date | null;
  runAfter: Date;
  version: number;
  traceparent: string | null;
  /** "" when none */
  concurrencyKey: string;
  /** the job's merged with the task's own; null when none */
  requiredLabels: Labels | null;
  /** Usage summed over the task's accepted reports; undefined when none. */
  usage?: Usage;
  /** Its job's parents as they were when the job was made pending; undefined for a job without parents (or still waiting). */
  parents?: JobParent[];
}

/** One chunk of a job as submitted; `workload` defaults to the job's. */
export interface TaskSpec {
  chunkIndex: number;
  inputUri: string;
  inputSha256: string;
  parameters?: JsonObject;
  workload?: string;
  requiredLabels?: Labels;
  /** Absent: the job's run_at. */
  runAt?: Date;
}

export interface CreateJobInput {
  /** A registered account; the bound token's when unset (CallOptions.account). */
  account?: string;
  billing?: { reservedUnits?: number; billingKey?: string };
  workload: string;
  inputUri?: string;
  inputSha256?: string;
  parameters?: JsonObject;
  priority?: number;
  maxAttempts?: number;
  idempotencyKey?: string;
  traceparent?: string;
  /** Empty or absent: one task, chunk 0, from the job's own input. */
  tasks?: TaskSpec[];
  /** Absent: the workload's. */
  failurePolicy?: FailurePolicy;
  /** Absent: the workload's; 0 tolerates no failure. */
  maxFailedTasks?: number;
  concurrencyKey?: string;
  requiredLabels?: Labels;
  /** When its tasks become claimable; absent or past: now. */
  runAt?: Date;
  finalizer?: { workload: string; parameters?: JsonObject; runOnFailure?: boolean };
  /** The jobs it runs after (at most LIMITS.maxParents). */
  after?: Dependency[];
  /** Absent: all_completed. */
  dependencyPolicy?: DependencyPolicy;
}

export interface CreateJobResult {
  job: Job;
  tasks: Task[];
  /** false when an identical request with the same idempotency key already created the job. */
  created: boolean;
}

export type TaskCounts = Record<TaskStatus, number>;

export interface JobStatusResult {
  job: Job;
  taskCounts: TaskCounts;
  totalTasks: number;
  /** completed / total, 0..1 */
  progress: number;
  /** Set only while the job is failed: the task failure that failed it. */
  failure?: JobFailure | null;
}

/** The task failure that failed a job (the earliest, should two tasks have failed at once). */
export interface JobFailure {
  taskId: string;
  chunkIndex: number;
  errorCode: string | null;
  errorMessage: string | null;
  /** the task's last attempt; 0 when it was never leased */
  attempt: number;
  workerId: string | null;
  failedAt: Date | null;
}

export interface ResultManifest {
  chunkIndex: number;
  taskId: string;
  resultUri: string;
  resultSha256: string;
  metrics: JsonObject | null;
  completedAt: Date;
}

export interface ListCompletedResultsInput {
  jobId: string;
  /** default 100, at most 1000 */
  pageSize?: number;
  /** opaque; empty or absent for the first page */
  pageToken?: string;
}

export interface ListCompletedResultsResult {
  results: ResultManifest[];
  /** empty when there is no further page */
  nextPageToken: string;
}

export interface CancelJobInput {
  jobId: string;
  reason?: string;
}

/** Per-call options: every database call runs under the request's deadline. */
export interface CallOptions {
  signal?: AbortSignal;
  /** The caller's deadline (epoch ms), when it has one: a long poll answers empty before it. */
  deadline?: number;
  /**
   * CreateJob of many tasks: given the result it will return once the job row is in, while the
   * database still inserts the tasks, so the caller can prepare its answer meanwhile. Not a
   * promise: the insert may yet fail (nothing may be sent from it); if it commits, the call
   * returns this very object. A callback that throws fails the call, and nothing is written.
   */
  prepared?: (result: CreateJobResult) => void;
  /**
   * CreateJob: the caller wants the job alone (the API's JOB_VIEW_BASIC): the result's tasks are
   * empty, and the store neither makes a new job's task rows for it nor reads a replayed job's.
   */
  withoutTasks?: boolean;
  /**
   * The account the caller's token is bound to: the call sees only that account's jobs (another's
   * is not found) and creates under it. Unset: every job (single-tenant mode).
   */
  account?: string;
}

export interface RetryJobInput {
  jobId: string;
  /** fresh attempts per retried task; default: the workload's max_attempts */
  maxAttempts?: number;
}

export interface RetryJobResult {
  job: Job;
  retriedTasks: number;
}

export interface ListJobsInput {
  status?: JobStatus;
  workload?: string;
  /** default 100, at most 1000 */
  pageSize?: number;
  pageToken?: string;
  /** Only jobs created by this schedule. */
  scheduleName?: string;
  /** Only this account's jobs. */
  account?: string;
}

export interface ListJobsResult {
  jobs: Job[];
  nextPageToken: string;
}

export type JobEventKind = "task_status" | "task_progress" | "job_status" | "job_settled";

/** One committed change of a job or of one of its tasks (the task_events table). */
export interface JobEvent {
  id: string;
  jobId: string;
  kind: JobEventKind;
  taskId: string | null;
  chunkIndex: number | null;
  /** task_status / task_progress: the task's status; job_status: the job's */
  status: string | null;
  previousStatus: string | null;
  attempt: number | null;
  workerId: string | null;
  progress: number | null;
  message: string | null;
  partialResultUri: string | null;
  errorCode: string | null;
  /** null in events written before the log recorded it */
  errorMessage: string | null;
  /** The event that ends an attempt (a completion or a failure): what the attempt's report said it used. */
  usage?: Usage;
  createdAt: Date;
  /** job_settled: the settlement's key and units */
  settlementKey?: string;
  settledUnits?: number;
}

/** WatchJob's options: a call's, plus where a resumed stream picks up. */
export interface WatchOptions extends CallOptions {
  /** Resume: skip the snapshot and send the events written after this event id (decimal). */
  afterEventId?: string;
}

/** What WatchJob streams: one snapshot first, then events. */
export type JobUpdate = { snapshot: JobStatusResult; event?: undefined } | { event: JobEvent; snapshot?: undefined };

/** Usage counters: name → amount (integers ≥ 0, within Number.MAX_SAFE_INTEGER). */
export type Usage = Record<string, number>;

/** The caller's billing context of a job, as given to CreateJob. */
export interface Billing {
  reservedUnits: number;
  /** null when none */
  billingKey: string | null;
}

export interface Settlement {
  settlementKey: string;
  settledUnits: number;
  settledAt: Date;
  /** The usage it covered (a job's usage when it was settled; an adjustment's own); empty for a settlement recorded before it was kept. */
  usage: Usage;
}
