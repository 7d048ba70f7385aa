// Input validation and normalisation, before anything reaches the database.
// Every rule a client can break is checked here and reported as a
// ValidationError naming the field, so bad input never becomes a 5xx.

import { ValidationError, type FieldViolation } from "./errors.js";
import type {
  CancelJobInput,
  ClaimTasksInput,
  CompleteTaskInput,
  CreateJobInput,
  FailTaskInput,
  FailurePolicy,
  FinalizerSpec,
  JsonObject,
  JsonValue,
  LeaseRef,
  PutWorkloadInput,
  RenewLeaseInput,
  ReportProgressInput,
  RetryJobInput,
  TaskSpec,
} from "./types.js";
import { FAILURE_POLICIES, type Labels } from "./types.js";
import {
  labelsJson,
  mergeLabels,
  validateConcurrencyKey,
  validateFlowSettings,
  validateLabels,
  type FlowSettings,
} from "./flow-control.js";
import { DEFAULT_MAX_RUN_AT_AHEAD_DAYS, validateFinalizer, validateRunAt } from "./delay-validation.js";

/**
 * The one table of field bounds: the proto's comments name them (LIMITS.<name>) rather than
 * repeat the numbers; the README's "Limits" lists them for readers. MAX_TASKS_PER_JOB is
 * configurable and passed in.
 */
export const LIMITS = {
  uriLength: 2048,
  workerIdLength: 128,
  idempotencyKeyLength: 256,
  reasonLength: 1000,
  errorMessageLength: 2000,
  jsonBytes: 64 * 1024,
  parametersSchemaBytes: 64 * 1024,
  maxClaimBatch: 100,
  leaseSeconds: { min: 1, max: 86_400 },
  waitSeconds: { min: 0, max: 30 },
  maxAttempts: { min: 1, max: 100 },
  /** RetryJob gives a fresh budget on top of the attempts used, so attempts may pass maxAttempts.max, up to this. */
  attempt: { max: 10_000 },
  priority: { min: -1_000_000, max: 1_000_000 },
  chunkIndexMax: 2_147_483_647,
  retryAfterSeconds: { min: 0, max: 86_400 },
  pageSize: { default: 100, max: 1000 },
  /** A schedule's cron expression, and the missed ticks CATCH_UP_POLICY_ALL may fire. */
  cronLength: 256,
  maxCatchUp: { min: 1, max: 1000 },
  maxPendingSeconds: { min: 1, max: 30 * 86_400 },
  /** Failed tasks a job tolerates (max_failed_tasks); 0: none. */
  maxFailedTasks: { min: 0, max: 1_000_000 },
  progressMessageLength: 1000,
  /** Field violations (and parameters-schema violations) listed per request; the rest are only counted. */
  violations: 20,
} as const;

const WORKLOAD_NAME = /^[a-z][a-z0-9_-]{0,62}$/;
const SHA256 = /^[0-9a-f]{64}$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const WORKER_ID = /^[\x21-\x7e]+$/; // printable ASCII, no spaces
const ERROR_CODE = /^[a-z0-9_.-]{1,64}$/;
const TRACEPARENT = /^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/;
// C0 controls and DEL except tab and newline; PostgreSQL rejects NUL outright.
// eslint-disable-next-line no-control-regex
const CONTROL_CHARS = /[\x00-\x08\x0b-\x1f\x7f]/g;

function fail(field: string, message: string): never {
  throw new ValidationError(field, message);
}

/** One ValidationError for several violations: each listed (up to LIMITS.violations), the first leading the message. */
export function violationsError(violations: readonly FieldViolation[]): ValidationError {
  const [first, ...rest] = violations;
  if (rest.length === 0) return new ValidationError(first.field, first.description);
  const shown = violations.slice(0, LIMITS.violations);
  const more = violations.length - shown.length;
  const detail =
    [first.description, ...shown.slice(1).map((v) => `${v.field}: ${v.description}`)].join("; ") + (more > 0 ? `; and ${more} more` : "");
  return new ValidationError(first.field, detail, shown);
}

/**
 * Runs independent checks and reports every one that fails, not only the first: a client fixing
 * its request learns all that is wrong in one round trip.
 */
function all<T extends readonly unknown[]>(...checks: { [K in keyof T]: () => T[K] }): T {
  const results: unknown[] = [];
  const violations: FieldViolation[] = [];
  for (const check of checks) {
    try {
      results.push(check());
    } catch (err) {
      if (!(err instanceof ValidationError)) throw err;
      violations.push(...err.violations);
      results.push(undefined);
    }
  }
  if (violations.length > 0) throw violationsError(violations);
  return results as unknown as T;
}

/** Absent: what proto3 sends for an unset string or number (no presence), or JSON null/omitted. */
function isMissing(v: unknown): boolean {
  return v === undefined || v === null || v === "" || v === 0;
}

function isInteger(v: unknown): v is number {
  return typeof v === "number" && Number.isInteger(v);
}

export function requireInt(field: string, v: unknown, min: number, max: number): number {
  if (!isInteger(v)) fail(field, "must be an integer");
  if (v < min || v > max) fail(field, `must be between ${min} and ${max}`);
  return v;
}

export function optionalInt(field: string, v: unknown, min: number, max: number): number | undefined {
  return v === undefined || v === null ? undefined : requireInt(field, v, min, max);
}

/** A string without NUL (PostgreSQL text cannot hold it), within a length bound. */
export function requireText(field: string, v: unknown, maxLength: number, opts: { allowEmpty?: boolean } = {}): string {
  if (!opts.allowEmpty && (v === undefined || v === null || v === "")) fail(field, "is required");
  if (typeof v !== "string") fail(field, "must be a string");
  if (!opts.allowEmpty && v.length === 0) fail(field, "must not be empty");
  if (v.length > maxLength) fail(field, `must be at most ${maxLength} characters`);
  if (v.includes("\u0000")) fail(field, "must not contain NUL characters");
  if (/[\ud800-\udfff]/.test(v.replace(/[\ud800-\udbff][\udc00-\udfff]/g, ""))) fail(field, "must be valid UTF-8");
  return v;
}

function optionalText(field: string, v: unknown, maxLength: number): string | undefined {
  return v === undefined || v === null || v === "" ? undefined : requireText(field, v, maxLength);
}

export function requireUuid(field: string, v: unknown): string {
  if (v === undefined || v === null || v === "") fail(field, "is required");
  if (typeof v !== "string" || !UUID.test(v)) fail(field, "must be a UUID");
  return v.toLowerCase();
}

export function requireWorkloadName(field: string, v: unknown): string {
  if (v === undefined || v === null || v === "") fail(field, "is required");
  if (typeof v !== "string" || !WORKLOAD_NAME.test(v)) fail(field, "must match ^[a-z][a-z0-9_-]{0,62}$");
  return v;
}

export function requireSha256(field: string, v: unknown): string {
  if (v === undefined || v === null || v === "") fail(field, "is required");
  if (typeof v !== "string" || !SHA256.test(v.toLowerCase())) fail(field, "must be 64 hexadecimal characters (sha256)");
  return v.toLowerCase();
}

function requireUri(field: string, v: unknown): string {
  const uri = requireText(field, v, LIMITS.uriLength);
  if (/\s/.test(uri)) fail(field, "must not contain whitespace");
  return uri;
}

/** A UTF-16 surrogate without its pair: not a Unicode scalar value, so not UTF-8, and jsonb refuses its escape. */
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

function checkJsonString(field: string, s: string): void {
  if (s.includes("\u0000")) fail(field, "must not contain NUL characters");
  if (LONE_SURROGATE.test(s)) fail(field, "must be valid UTF-8 (no unpaired surrogates)");
}

function checkJsonStrings(field: string, v: JsonValue, depth: number): void {
  if (depth > 32) fail(field, "is nested too deeply (at most 32 levels)");
  if (typeof v === "string") {
    checkJsonString(field, v);
  } else if (Array.isArray(v)) {
    for (const item of v) checkJsonStrings(field, item, depth + 1);
  } else if (v !== null && typeof v === "object") {
    for (const [k, item] of Object.entries(v)) {
      checkJsonString(field, k);
      checkJsonStrings(field, item, depth + 1);
    }
  } else if (typeof v === "number" && !Number.isFinite(v)) {
    fail(field, "must contain only finite numbers");
  }
}

/** A JSON object that jsonb accepts (no NUL anywhere) within a size bound. */
export function requireJsonObject(field: string, v: unknown, maxBytes: number = LIMITS.jsonBytes): JsonObject {
  if (v === null || typeof v !== "object" || Array.isArray(v)) fail(field, "must be a JSON object");
  checkJsonStrings(field, v as JsonValue, 0);
  if (Buffer.byteLength(JSON.stringify(v)) > maxBytes) fail(field, `must be at most ${maxBytes} bytes as JSON`);
  return v as JsonObject;
}

function optionalJsonObject(field: string, v: unknown): JsonObject | undefined {
  return v === undefined || v === null ? undefined : requireJsonObject(field, v);
}

export function requireWorkerId(field: string, v: unknown): string {
  const id = requireText(field, v, LIMITS.workerIdLength);
  if (!WORKER_ID.test(id)) fail(field, "must be printable ASCII without spaces");
  return id;
}

/** Cut to the documented length with control characters removed (tab and newline kept). */
export function cleanErrorMessage(v: unknown): string | null {
  if (v === undefined || v === null || v === "") return null;
  if (typeof v !== "string") fail("error_message", "must be a string");
  return v.replace(CONTROL_CHARS, "").slice(0, LIMITS.errorMessageLength);
}

/** A failure policy, or undefined when absent (the caller's default then applies). */
function optionalFailurePolicy(field: string, v: unknown): FailurePolicy | undefined {
  if (v === undefined || v === null || v === "") return undefined;
  if (typeof v !== "string" || !(FAILURE_POLICIES as readonly string[]).includes(v)) {
    fail(field, `must be one of ${FAILURE_POLICIES.join(", ")}`);
  }
  return v as FailurePolicy;
}

export interface NormalizedTaskSpec {
  chunkIndex: number;
  inputUri: string;
  inputSha256: string;
  parameters: JsonObject;
  workload: string;
  /** the job's merged with the task's own */
  requiredLabels: Labels | null;
  /** its own run_at (ISO), when given */
  runAt?: string;
}

export interface NormalizedCreateJob {
  workload: string;
  inputUri: string;
  inputSha256: string | null;
  parameters: JsonObject;
  priority: number;
  maxAttempts: number | undefined;
  idempotencyKey: string | null;
  traceparent: string | null;
  tasks: NormalizedTaskSpec[];
  /** undefined: the workload's. */
  failurePolicy: FailurePolicy | undefined;
  maxFailedTasks: number | undefined;
  concurrencyKey: string;
  requiredLabels: Labels | null;
  /** ISO, when given (absent, not null, so a request without it keeps its idempotency fingerprint) */
  runAt?: string;
  finalizer?: FinalizerSpec;
}

export function validateCreateJob(
  input: CreateJobInput,
  maxTasksPerJob: number,
  maxRunAtAheadDays: number = DEFAULT_MAX_RUN_AT_AHEAD_DAYS,
): NormalizedCreateJob {
  if (input === null || typeof input !== "object") fail("request", "must be an object");
  const workload = requireWorkloadName("workload", input.workload);
  const parameters = optionalJsonObject("parameters", input.parameters) ?? {};
  const priority = optionalInt("priority", input.priority, LIMITS.priority.min, LIMITS.priority.max) ?? 0;
  const maxAttempts = optionalInt("max_attempts", input.maxAttempts, LIMITS.maxAttempts.min, LIMITS.maxAttempts.max);
  const idempotencyKey = optionalText("idempotency_key", input.idempotencyKey, LIMITS.idempotencyKeyLength) ?? null;
  const [failurePolicy, maxFailedTasks] = all(
    () => optionalFailurePolicy("failure_policy", input.failurePolicy),
    () => optionalInt("max_failed_tasks", input.maxFailedTasks, LIMITS.maxFailedTasks.min, LIMITS.maxFailedTasks.max),
  );
  let traceparent: string | null = null;
  if (input.traceparent) {
    if (typeof input.traceparent !== "string" || !TRACEPARENT.test(input.traceparent)) {
      fail("traceparent", "must be a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>)");
    }
    traceparent = input.traceparent;
  }
  const [concurrencyKey, requiredLabels] = all(
    () => validateConcurrencyKey("concurrency_key", input.concurrencyKey),
    () => validateLabels("required_labels", input.requiredLabels),
  );
  const [runAt, finalizer] = all(
    () => validateRunAt("run_at", input.runAt, maxRunAtAheadDays),
    () => validateFinalizer("finalizer", input.finalizer),
  );
  const specs = input.tasks ?? [];
  if (!Array.isArray(specs)) fail("tasks", "must be a list");
  if (specs.length > maxTasksPerJob) fail("tasks", `must hold at most ${maxTasksPerJob} tasks`);

  const hasJobInput = input.inputUri !== undefined && input.inputUri !== null && input.inputUri !== "";
  const inputUri = hasJobInput ? requireUri("input_uri", input.inputUri) : "";
  const inputSha256 =
    input.inputSha256 === undefined || input.inputSha256 === null || input.inputSha256 === ""
      ? null
      : requireSha256("input_sha256", input.inputSha256);

  let tasks: NormalizedTaskSpec[];
  if (specs.length === 0) {
    // A job without a task list is one chunk: its own input, which is then required.
    if (!hasJobInput) fail("input_uri", "is required when tasks is empty");
    if (inputSha256 === null) fail("input_sha256", "is required when tasks is empty");
    tasks = [{ chunkIndex: 0, inputUri, inputSha256, parameters, workload, requiredLabels }];
  } else {
    const seen = new Set<number>();
    // Every task is checked, so a job whose chunks all lack input_sha256 hears about each of them.
    const violations: FieldViolation[] = [];
    tasks = specs.map((spec, i) => {
      const plain = plainTask(spec, workload, parameters, seen, requiredLabels);
      if (plain !== undefined) return plain;
      const at = `tasks[${i}]`;
      try {
        if (spec === null || typeof spec !== "object") fail(at, "must be an object");
        const [chunkIndex, specUri, specSha256, own, specWorkload, specLabels, specRunAt] = all(
          () => {
            const chunk = requireInt(`${at}.chunk_index`, spec.chunkIndex, 0, LIMITS.chunkIndexMax);
            if (seen.has(chunk)) fail(`${at}.chunk_index`, `duplicates chunk_index ${chunk}`);
            seen.add(chunk);
            return chunk;
          },
          () => requireUri(`${at}.input_uri`, spec.inputUri),
          () => requireSha256(`${at}.input_sha256`, spec.inputSha256),
          () => optionalJsonObject(`${at}.parameters`, spec.parameters),
          () => (spec.workload ? requireWorkloadName(`${at}.workload`, spec.workload) : workload),
          () => mergeLabels(requiredLabels, validateLabels(`${at}.required_labels`, spec.requiredLabels), `${at}.required_labels`),
          () => validateRunAt(`${at}.run_at`, spec.runAt, maxRunAtAheadDays),
        );
        return {
          ...(specRunAt === undefined ? {} : { runAt: specRunAt }),
          chunkIndex,
          inputUri: specUri,
          inputSha256: specSha256,
          // A task inherits the job's parameters; its own keys win.
          parameters: own ? { ...parameters, ...own } : parameters,
          workload: specWorkload,
          requiredLabels: specLabels,
        };
      } catch (err) {
        if (!(err instanceof ValidationError)) throw err;
        violations.push(...err.violations);
        return undefined as unknown as NormalizedTaskSpec;
      }
    });
    if (violations.length > 0) throw violationsError(violations);
  }
  return {
    workload,
    inputUri,
    inputSha256,
    parameters,
    priority,
    maxAttempts,
    idempotencyKey,
    traceparent,
    tasks,
    failurePolicy,
    maxFailedTasks,
    concurrencyKey,
    requiredLabels,
    ...(runAt === undefined ? {} : { runAt }),
    ...(finalizer === undefined ? {} : { finalizer }),
  };
}

/** What sends a task's input_uri to the full checks: whitespace, NUL, or any surrogate (a paired one is valid, and allowed there). */
// eslint-disable-next-line no-control-regex
const URI_NOT_PLAIN = /[\s\u0000\ud800-\udfff]/;

/**
 * A task that passes every check of validateCreateJob's per-task rules, tested inline: no
 * closures, no field names, no strings made. Undefined for anything else (and `seen` untouched),
 * which the full checks then take, naming each violation. Each test here implies the full one
 * (it may refuse more: a task of its own parameters or an upper-case sha256 goes the long way).
 * For 10,000 tasks the full checks cost ~20 ms, mostly closures and field names made in advance.
 */
function plainTask(
  spec: TaskSpec,
  workload: string,
  parameters: JsonObject,
  seen: Set<number>,
  requiredLabels: Labels | null,
): NormalizedTaskSpec | undefined {
  if (spec === null || typeof spec !== "object") return undefined;
  if (spec.requiredLabels && Object.keys(spec.requiredLabels).length > 0) return undefined;
  if (spec.runAt !== undefined && spec.runAt !== null) return undefined;
  const chunk = spec.chunkIndex;
  if (!isInteger(chunk) || chunk < 0 || chunk > LIMITS.chunkIndexMax || seen.has(chunk)) return undefined;
  const uri = spec.inputUri;
  if (typeof uri !== "string" || uri.length === 0 || uri.length > LIMITS.uriLength || URI_NOT_PLAIN.test(uri)) return undefined;
  const sha = spec.inputSha256;
  if (typeof sha !== "string" || !SHA256.test(sha)) return undefined;
  if (spec.parameters !== undefined && spec.parameters !== null) return undefined;
  const own = spec.workload;
  if (own !== undefined && own !== null && own !== "" && (typeof own !== "string" || !WORKLOAD_NAME.test(own))) return undefined;
  seen.add(chunk);
  return { chunkIndex: chunk, inputUri: uri, inputSha256: sha, parameters, workload: own || workload, requiredLabels };
}

export interface NormalizedClaim {
  workerId: string;
  workloads: string[];
  maxTasks: number;
  leaseSeconds: number | undefined;
  waitSeconds: number;
  /** the worker's labels as jsonb text ("{}" for none) */
  labels: string;
}

export function validateClaim(input: ClaimTasksInput): NormalizedClaim {
  const workerId = requireWorkerId("worker_id", input.workerId);
  if (!Array.isArray(input.workloads) || input.workloads.length === 0) fail("workloads", "must name at least one workload");
  if (input.workloads.length > 64) fail("workloads", "must name at most 64 workloads");
  const workloads = [...new Set(input.workloads.map((w, i) => requireWorkloadName(`workloads[${i}]`, w)))];
  const maxTasks = optionalInt("max_tasks", input.maxTasks, 1, LIMITS.maxClaimBatch) ?? 1;
  const leaseSeconds = optionalInt("lease_seconds", input.leaseSeconds, LIMITS.leaseSeconds.min, LIMITS.leaseSeconds.max);
  const waitSeconds = optionalInt("wait_seconds", input.waitSeconds, LIMITS.waitSeconds.min, LIMITS.waitSeconds.max) ?? 0;
  const labels = labelsJson(validateLabels("labels", input.labels));
  return { workerId, workloads, maxTasks, leaseSeconds, waitSeconds, labels };
}

/** validateClaim for the claim_next of a result report, its violations named under `claim_next.`. */
export function validateClaimNext(input: ClaimTasksInput): NormalizedClaim {
  try {
    return validateClaim(input);
  } catch (err) {
    if (!(err instanceof ValidationError)) throw err;
    throw violationsError(err.violations.map((v) => ({ field: `claim_next.${v.field}`, description: v.description })));
  }
}

export function validateLeaseRef(input: LeaseRef): LeaseRef {
  const [taskId, workerId, attempt] = all(
    () => requireUuid("task_id", input.taskId),
    () => requireWorkerId("worker_id", input.workerId),
    // proto3 cannot tell an unset attempt from 0, and 0 is never a lease's attempt: either way it is missing.
    () =>
      isMissing(input.attempt)
        ? fail("attempt", "is required (the attempt ClaimTasks returned, from 1)")
        : requireInt("attempt", input.attempt, 1, LIMITS.attempt.max),
  );
  return { taskId, workerId, attempt };
}

export function validateRenew(input: RenewLeaseInput): RenewLeaseInput {
  return {
    ...validateLeaseRef(input),
    leaseSeconds: optionalInt("lease_seconds", input.leaseSeconds, LIMITS.leaseSeconds.min, LIMITS.leaseSeconds.max),
  };
}

export function validateComplete(input: CompleteTaskInput): CompleteTaskInput {
  const [ref, resultUri, resultSha256, metrics] = all(
    () => validateLeaseRef(input),
    () => requireUri("result_uri", input.resultUri),
    () => requireSha256("result_sha256", input.resultSha256),
    () => optionalJsonObject("metrics", input.metrics),
  );
  return { ...ref, resultUri, resultSha256, metrics };
}

/** A CompleteTasks batch, checked whole before anything is written. */
export function validateBatch(inputs: CompleteTaskInput[]): CompleteTaskInput[] {
  if (!Array.isArray(inputs) || inputs.length === 0) throw new ValidationError("results", "must hold at least one result");
  if (inputs.length > LIMITS.maxClaimBatch) throw new ValidationError("results", `must hold at most ${LIMITS.maxClaimBatch} results`);
  // Every result is checked, and every violation named by its place in the batch.
  const violations: FieldViolation[] = [];
  const batch = inputs.map((input, i) => {
    try {
      return validateComplete(input);
    } catch (err) {
      if (!(err instanceof ValidationError)) throw err;
      violations.push(...err.violations.map((v) => ({ field: `results[${i}].${v.field}`, description: v.description })));
      return input;
    }
  });
  if (violations.length > 0) throw violationsError(violations);
  const ids = batch.map((b) => b.taskId);
  if (new Set(ids).size !== ids.length) throw new ValidationError("results", "names one task twice");
  return batch;
}

export interface NormalizedFail extends LeaseRef {
  errorCode: string;
  errorMessage: string | null;
  retryable: boolean;
  retryAfterSeconds: number | undefined;
}

export function validateFail(input: FailTaskInput): NormalizedFail {
  const [ref, errorCode, errorMessage, retryable, retryAfterSeconds] = all(
    () => validateLeaseRef(input),
    () => {
      if (isMissing(input.errorCode)) fail("error_code", "is required");
      if (typeof input.errorCode !== "string" || !ERROR_CODE.test(input.errorCode)) fail("error_code", "must match ^[a-z0-9_.-]{1,64}$");
      return input.errorCode;
    },
    () => cleanErrorMessage(input.errorMessage),
    () => {
      if (input.retryable !== undefined && typeof input.retryable !== "boolean") fail("retryable", "must be a boolean");
      return input.retryable ?? true;
    },
    () => optionalInt("retry_after_seconds", input.retryAfterSeconds, LIMITS.retryAfterSeconds.min, LIMITS.retryAfterSeconds.max),
  );
  return { ...ref, errorCode, errorMessage, retryable, retryAfterSeconds };
}

export function validateCancel(input: CancelJobInput): { jobId: string; reason: string | null } {
  return {
    jobId: requireUuid("job_id", input.jobId),
    reason: optionalText("reason", input.reason, LIMITS.reasonLength) ?? null,
  };
}

export interface NormalizedWorkload {
  name: string;
  maxAttempts: number;
  leaseSeconds: number;
  parametersSchema: JsonObject | null;
  maxPendingSeconds: number | null;
  failurePolicy: FailurePolicy;
  maxFailedTasks: number;
  flow: FlowSettings;
}

export function validatePutWorkload(input: PutWorkloadInput, defaults: { maxAttempts: number; leaseSeconds: number }): NormalizedWorkload {
  // Every field is checked, so a request learns all that is wrong with it at once.
  const [name, maxAttempts, leaseSeconds, parametersSchema, maxPendingSeconds, failurePolicy, maxFailedTasks] = all(
    () => requireWorkloadName("name", input.name),
    () => optionalInt("max_attempts", input.maxAttempts, LIMITS.maxAttempts.min, LIMITS.maxAttempts.max) ?? defaults.maxAttempts,
    () => optionalInt("lease_seconds", input.leaseSeconds, LIMITS.leaseSeconds.min, LIMITS.leaseSeconds.max) ?? defaults.leaseSeconds,
    () => {
      const schema = input.parametersSchema;
      return schema === undefined || schema === null || Object.keys(schema).length === 0
        ? null
        : requireJsonObject("parameters_schema", schema, LIMITS.parametersSchemaBytes);
    },
    () =>
      optionalInt(
        "max_pending_seconds",
        input.maxPendingSeconds || undefined,
        LIMITS.maxPendingSeconds.min,
        LIMITS.maxPendingSeconds.max,
      ) ?? null,
    () => optionalFailurePolicy("failure_policy", input.failurePolicy) ?? "fail_fast",
    () => optionalInt("max_failed_tasks", input.maxFailedTasks, LIMITS.maxFailedTasks.min, LIMITS.maxFailedTasks.max) ?? 0,
  );
  const flow = validateFlowSettings(input);
  return { name, maxAttempts, leaseSeconds, parametersSchema, maxPendingSeconds, failurePolicy, maxFailedTasks, flow };
}

export function validateReportProgress(input: ReportProgressInput): Required<Pick<ReportProgressInput, "progress">> & ReportProgressInput {
  const ref = validateLeaseRef(input);
  const progress = input.progress;
  if (typeof progress !== "number" || !Number.isFinite(progress) || progress < 0 || progress > 1)
    fail("progress", "must be a number from 0 to 1");
  const message = input.message ? requireText("message", input.message, LIMITS.progressMessageLength) : undefined;
  return {
    ...ref,
    progress,
    message: message?.replace(CONTROL_CHARS, " "),
    partialResultUri: input.partialResultUri ? requireUri("partial_result_uri", input.partialResultUri) : undefined,
    leaseSeconds: optionalInt("lease_seconds", input.leaseSeconds, LIMITS.leaseSeconds.min, LIMITS.leaseSeconds.max),
  };
}

export function validateRetryJob(input: RetryJobInput): { jobId: string; maxAttempts: number | null } {
  return {
    jobId: requireUuid("job_id", input.jobId),
    maxAttempts: optionalInt("max_attempts", input.maxAttempts, LIMITS.maxAttempts.min, LIMITS.maxAttempts.max) ?? null,
  };
}
