// What a handler sees (a TaskContext) and what it gives back (a Result, or an error that says whether
// the coordinator should try the task again).
import type { JsonObject } from "@bufbuild/protobuf";
import type { JobParent, Task } from "./gen/leasehold/queue/v1/queue_pb.js";
import type { Usage } from "./usage.js";

/**
 * A handler's result: where the output is and its hex SHA-256, plus optional metrics and usage.
 * `usage` (see {@link Usage}) is what the attempt used; unlike metrics it is part of the report, so a
 * result sent again carries the same. A counter the coordinator would refuse fails the task (code
 * `invalid_usage`) with a message naming it.
 */
export interface Result {
  uri: string;
  sha256: string;
  metrics?: JsonObject;
  usage?: Usage;
}

/**
 * A failure the handler raises on purpose: permanent unless `retryable`, with this `code`
 * (default: the class name in snake case) and the message as given.
 */
export class TaskError extends Error {
  readonly code: string | undefined;
  readonly retryable: boolean;
  /** Seconds until the retry may run (retryable only); else the coordinator's backoff. */
  readonly retryAfterSeconds: number | undefined;
  /** What the failed attempt used before it failed (failed attempts use resources too); summed into the job's. */
  readonly usage: Usage | undefined;

  constructor(message: string, options: { code?: string; retryable?: boolean; retryAfterSeconds?: number; usage?: Usage } = {}) {
    super(message);
    this.name = new.target.name;
    this.code = options.code;
    this.retryable = options.retryable ?? false;
    this.retryAfterSeconds = options.retryAfterSeconds;
    this.usage = options.usage;
  }
}

/** A failure worth another attempt (a flaky dependency): `retryAfterSeconds` or the coordinator's backoff. */
export class RetryableError extends TaskError {
  constructor(message: string, options: { code?: string; retryAfterSeconds?: number; usage?: Usage } = {}) {
    super(message, { ...options, retryable: true });
  }
}

/** Thrown by `task.progress()` once the task was cancelled or its lease lost: the handler should stop. */
export class TaskCancelledError extends Error {
  constructor(reason: string) {
    super(reason);
    this.name = "TaskCancelledError";
  }
}

const MAX_MESSAGE = 2000;

function snake(name: string): string {
  return name
    .replace(/([a-z0-9])([A-Z])/g, "$1_$2")
    .replace(/([A-Z]+)([A-Z][a-z])/g, "$1_$2")
    .toLowerCase();
}

/**
 * The error_code a failure is reported with: a TaskError's own code, else the class name in snake
 * case (`TaskError` → `task_error`, `RetryableError` → `retryable_error`, `TypeError` → `type_error`).
 */
export function errorCodeOf(err: unknown): string {
  if (err instanceof TaskError && err.code) return err.code.slice(0, 100);
  if (err instanceof Error) return snake(err.constructor.name || err.name).slice(0, 100) || "error";
  return "error";
}

/** The error_message a failure is reported with: a TaskError's message as given, else `Name: message`. */
export function errorMessageOf(err: unknown): string {
  let text: string;
  if (err instanceof TaskError) text = err.message;
  else if (err instanceof Error) text = err.message ? `${err.name}: ${err.message}` : err.name;
  else text = String(err);
  return text.slice(0, MAX_MESSAGE);
}

/** Reports progress (and renews the lease); rejects with TaskCancelledError once the task is cancelled. */
export type ProgressFn = (fraction: number, message: string, partialResultUri: string) => Promise<void>;

/**
 * A leased task as its handler sees it: the task's fields, its cancellation, and progress reports.
 * (The generated `Task` message, as the coordinator sent it, is `message`.)
 */
export interface TaskContext {
  readonly id: string;
  readonly jobId: string;
  readonly chunkIndex: number;
  readonly workload: string;
  /** This attempt's number, from 1. */
  readonly attempt: number;
  readonly maxAttempts: number;
  readonly inputUri: string;
  readonly inputSha256: string;
  /** The job's parameters merged with the task's. */
  readonly parameters: JsonObject;
  readonly priority: number;
  readonly traceparent: string;
  readonly concurrencyKey: string;
  readonly requiredLabels: Readonly<Record<string, string>>;
  /**
   * Its job's parents (a job created with `after`, or a workflow's node), as they were when the job
   * was made pending: each one's `jobId`, `status`, `node` name and, for a parent of one task that
   * completed, its `result` manifest, so a stage after others reads its inputs without a call
   * (a parent of many tasks: `client.results(parent.jobId)`). Empty for a job without parents.
   */
  readonly parents: readonly JobParent[];
  /** The worker that holds the lease. */
  readonly workerId: string;
  /** When the lease ends unless renewed (heartbeats and progress renew it). */
  readonly leaseExpiresAt: Date | undefined;
  /** Aborted when the task is cancelled (its job cancelled or failed) or its lease lost; `reason` says which. */
  readonly signal: AbortSignal;
  /** Whether the task was cancelled or its lease lost. */
  readonly cancelled: boolean;
  /** The generated message as the coordinator sent it. */
  readonly message: Task;
  /** Reports progress (0..1) with a message; also renews the lease. Throws TaskCancelledError once cancelled. */
  progress(fraction: number, message?: string, partialResultUri?: string): Promise<void>;
  /** Throws TaskCancelledError when the task was cancelled or its lease lost. */
  throwIfCancelled(): void;
}

/** The worker's TaskContext of one lease (not exported from the package: handlers see the interface). */
export class LeasedTask implements TaskContext {
  readonly id: string;
  readonly jobId: string;
  readonly chunkIndex: number;
  readonly workload: string;
  readonly attempt: number;
  readonly maxAttempts: number;
  readonly inputUri: string;
  readonly inputSha256: string;
  readonly parameters: JsonObject;
  readonly priority: number;
  readonly traceparent: string;
  readonly concurrencyKey: string;
  readonly requiredLabels: Readonly<Record<string, string>>;
  readonly parents: readonly JobParent[];
  readonly workerId: string;
  leaseExpiresAt: Date | undefined;
  readonly signal: AbortSignal;
  readonly message: Task;
  readonly #report: ProgressFn;

  constructor(message: Task, workerId: string, signal: AbortSignal, report: ProgressFn) {
    this.message = message;
    this.id = message.id;
    this.jobId = message.jobId;
    this.chunkIndex = message.chunkIndex;
    this.workload = message.workload;
    this.attempt = message.attempt;
    this.maxAttempts = message.maxAttempts;
    this.inputUri = message.inputUri;
    this.inputSha256 = message.inputSha256;
    this.parameters = message.parameters ?? {};
    this.priority = message.priority;
    this.traceparent = message.traceparent;
    this.concurrencyKey = message.concurrencyKey;
    this.requiredLabels = { ...message.requiredLabels };
    this.parents = message.parents;
    this.workerId = workerId;
    this.leaseExpiresAt = message.leaseExpiresAt ? new Date(Number(message.leaseExpiresAt.seconds) * 1000) : undefined;
    this.signal = signal;
    this.#report = report;
  }

  get cancelled(): boolean {
    return this.signal.aborted;
  }

  progress(fraction: number, message = "", partialResultUri = ""): Promise<void> {
    return this.#report(fraction, message, partialResultUri);
  }

  throwIfCancelled(): void {
    if (this.signal.aborted) throw new TaskCancelledError(String(this.signal.reason?.message ?? this.signal.reason));
  }
}
