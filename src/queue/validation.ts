// Input validation and normalisation of the writing RPCs (CreateJob, claims, results, failures,
// renewals, progress, cancel and retry), before anything reaches the database: each broken rule a
// ValidationError naming the field, so bad input never becomes a 5xx. The other families' rules
// are beside it: fields.ts (the field checks and LIMITS), list-validation.ts, delay-validation.ts,
// flow-rules.ts, account-validation.ts, settlement-validation.ts, usage.ts, schedule-rules.ts.

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
  LeaseRef,
  PutWorkloadInput,
  RenewLeaseInput,
  ReportProgressInput,
  RetryJobInput,
  TaskSpec,
} from "./types.js";
import { FAILURE_POLICIES, type Labels } from "./types.js";
import { labelsJson, mergeLabels, validateConcurrencyKey, validateFlowSettings, validateLabels, type FlowSettings } from "./flow-rules.js";
import type { Usage } from "./types.js";
import { optionalUsage } from "./usage.js";
import { DEFAULT_MAX_RUN_AT_AHEAD_DAYS, validateFinalizer, validateRunAt } from "./delay-validation.js";
import type { Billing } from "./types.js";
import { requireAccountName, validateBilling } from "./account-validation.js";
import { optionalDependencyPolicy, validateAfter, type NormalizedDependency } from "./dependency-validation.js";
import type { DependencyPolicy } from "./types.js";

import {
  LIMITS,
  WORKLOAD_NAME,
  SHA256,
  ERROR_CODE,
  TRACEPARENT,
  CONTROL_CHARS,
  fail,
  violationsError,
  all,
  isMissing,
  isInteger,
  requireInt,
  optionalInt,
  requireText,
  optionalText,
  requireUuid,
  requireWorkloadName,
  requireSha256,
  requireUri,
  requireJsonObject,
  optionalJsonObject,
  requireWorkerId,
  cleanErrorMessage,
} from "./fields.js";

// The field checks, importable from here as before.
export {
  LIMITS,
  violationsError,
  requireInt,
  optionalInt,
  requireText,
  requireUuid,
  requireWorkloadName,
  requireSha256,
  requireJsonObject,
  requireWorkerId,
  cleanErrorMessage,
} from "./fields.js";

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
  /** the job's account, when it has one (absent, not null, like runAt: the fingerprint of a job without one is unchanged) */
  account?: string;
  /** its billing context, when given */
  billing?: Billing;
  /** its parents and their policy, when it has parents (absent otherwise, as account is) */
  after?: NormalizedDependency[];
  dependencyPolicy?: DependencyPolicy;
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
  const [runAt, finalizer, account, billing] = all(
    () => validateRunAt("run_at", input.runAt, maxRunAtAheadDays),
    () => validateFinalizer("finalizer", input.finalizer),
    () => (input.account ? requireAccountName("account", input.account) : undefined),
    () => validateBilling("billing", input.billing),
  );
  const [after, dependencyPolicy] = all(
    () => validateAfter("after", input.after),
    () => optionalDependencyPolicy("dependency_policy", input.dependencyPolicy),
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
    // A job of an account shares its workload fairly with the account's other jobs unless it names a key.
    concurrencyKey: concurrencyKey === "" && account !== undefined ? account : concurrencyKey,
    requiredLabels,
    ...(runAt === undefined ? {} : { runAt }),
    ...(finalizer === undefined ? {} : { finalizer }),
    ...(account === undefined ? {} : { account }),
    ...(billing === undefined ? {} : { billing }),
    // Absent unless given (or the job has parents), so a job without them keeps its idempotency fingerprint.
    ...(after === undefined ? {} : { after }),
    ...(after === undefined && dependencyPolicy === undefined ? {} : { dependencyPolicy: dependencyPolicy ?? "all_completed" }),
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
  const [ref, resultUri, resultSha256, metrics, usage] = all(
    () => validateLeaseRef(input),
    () => requireUri("result_uri", input.resultUri),
    () => requireSha256("result_sha256", input.resultSha256),
    () => optionalJsonObject("metrics", input.metrics),
    () => optionalUsage("usage", input.usage),
  );
  return { ...ref, resultUri, resultSha256, metrics, usage };
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
  usage: Usage | undefined;
}

export function validateFail(input: FailTaskInput): NormalizedFail {
  const [ref, errorCode, errorMessage, retryable, retryAfterSeconds, usage] = all(
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
    () => optionalUsage("usage", input.usage),
  );
  return { ...ref, errorCode, errorMessage, retryable, retryAfterSeconds, usage };
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
