// What workers do with tasks: claims, leases, results, failures and progress, and a task's
// attempts as ListTasks and GetTask show them; the maintenance passes' results.

import type { QueueError } from "../errors.js";
import type { JsonObject, Labels, Task, TaskStatus, Usage } from "./jobs.js";
import type { Waiting } from "./workloads.js";

export interface ClaimTasksInput {
  workerId: string;
  workloads: string[];
  /** default 1, at most MAX_CLAIM_BATCH */
  maxTasks?: number;
  /** default: each workload's lease_seconds */
  leaseSeconds?: number;
  /** long poll: park up to this many seconds when nothing is claimable */
  waitSeconds?: number;
  /** the worker's labels: only tasks whose required labels they match are leased */
  labels?: Labels;
}

/** Identifies one lease: the task, who holds it, and which attempt (the fencing token). */
export interface LeaseRef {
  taskId: string;
  workerId: string;
  attempt: number;
}

export interface RenewLeaseInput extends LeaseRef {
  leaseSeconds?: number;
}

export interface CompleteTaskInput extends LeaseRef {
  resultUri: string;
  resultSha256: string;
  metrics?: JsonObject;
  /** What the attempt used; recorded once with the accepted result. */
  usage?: Usage;
}

/** One result of a batch completion: the task, or why this one was refused (the rest still count). */
export type CompleteOutcome = { task: Task; error?: undefined } | { task?: undefined; error: QueueError };

/** A result report that also claimed the worker's next tasks (`next`: empty when nothing was claimable). */
/**
 * A claim's answer as the store gives it: the tasks leased and, when it leased nothing because a
 * rate limit had no token, how long until the next one is due (a long poll waits that long rather
 * than the poll interval).
 */
export interface ClaimOutcome {
  tasks: Task[];
  retryAfterMs?: number;
}

export interface CompletedAndClaimed {
  task: Task;
  next: Task[];
}

/** A batch of result reports that also claimed the worker's next tasks. */
export interface BatchCompletedAndClaimed {
  outcomes: CompleteOutcome[];
  next: Task[];
}

export interface FailTaskInput extends LeaseRef {
  errorCode: string;
  errorMessage?: string;
  /** default true */
  retryable?: boolean;
  /** overrides the computed backoff when the task is retried */
  retryAfterSeconds?: number;
  /** What the attempt used before it failed; recorded once with the accepted failure. */
  usage?: Usage;
}

export interface ExpireLeasesResult {
  /** leases returned to pending (attempts left) */
  requeued: number;
  /** tasks failed with lease_expired (no attempts left) */
  failed: number;
}

export interface ReportProgressInput extends LeaseRef {
  /** 0..1 */
  progress: number;
  message?: string;
  partialResultUri?: string;
  leaseSeconds?: number;
}

/** Housekeeping done by one maintenance pass (besides lease expiry). */
export interface MaintenanceResult {
  /** tasks failed with error_code "expired" (workload max_pending_seconds) */
  expiredPending: number;
  /** finished jobs deleted by retention, with their tasks */
  deletedJobs: number;
  /** partitions of the event log created ahead (set when the pass checked them) */
  createdEventPartitions?: number;
  /** partitions of the event log dropped past the retention (set when the pass checked them) */
  droppedEventPartitions?: number;
  /** final jobs of accounts counted into account_usage by the usage rollup (set when it ran) */
  rolledUpJobs?: number;
}

export interface ListTasksInput {
  jobId: string;
  /** only tasks of this status; absent: any */
  status?: TaskStatus;
  /** default 100, at most 1000 */
  pageSize?: number;
  pageToken?: string;
}

export type AttemptOutcome = "running" | "completed" | "failed" | "lease_expired" | "cancelled";

/** The last progress report of one attempt. */
export interface AttemptProgress {
  progress: number;
  message: string | null;
  partialResultUri: string | null;
  reportedAt: Date;
}

/** One lease of a task, from its claim to its end, as the event log tells it. */
export interface TaskAttempt {
  attempt: number;
  workerId: string | null;
  leasedAt: Date;
  /** null while the attempt runs */
  endedAt: Date | null;
  outcome: AttemptOutcome;
  errorCode: string | null;
  errorMessage: string | null;
  /** failed / lease_expired: the task went back to pending for another attempt */
  retried: boolean;
  lastProgress: AttemptProgress | null;
  /** What the attempt reported it used; undefined when nothing. */
  usage?: Usage;
}

/** A task with the history of its attempts, oldest first. */
export interface TaskDetail {
  task: Task;
  attempts: TaskAttempt[];
  /** GetTask: why a pending task is not running; absent otherwise. */
  waiting?: Waiting;
}

export interface ListTasksResult {
  tasks: TaskDetail[];
  nextPageToken: string;
}
