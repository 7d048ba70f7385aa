// The field checks every validation builds on: the table of field bounds (LIMITS), and one
// function per kind of field, each throwing a ValidationError that names the field. validation.ts
// (the writing RPCs) and delay-validation.ts (run_at, finalizer) both use them.

import { ValidationError, type FieldViolation } from "./errors.js";
import type { JsonObject, JsonValue } from "./types.js";

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
  /** Usage counters one report may carry (CompleteTask, each result of CompleteTasks, FailTask). */
  usageCounters: 32,
  /** Field violations (and parameters-schema violations) listed per request; the rest are only counted. */
  violations: 20,
  /** Jobs one CreateJob may wait for (after); a workflow node's edges are bounded by the workflow's nodes. */
  maxParents: 100,
  /** Nodes of one workflow (CreateWorkflow). */
  maxWorkflowNodes: 1000,
  /** A workflow's label. */
  workflowNameLength: 200,
} as const;

export const WORKLOAD_NAME = /^[a-z][a-z0-9_-]{0,62}$/;
export const SHA256 = /^[0-9a-f]{64}$/;
export const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
export const WORKER_ID = /^[\x21-\x7e]+$/; // printable ASCII, no spaces
export const ERROR_CODE = /^[a-z0-9_.-]{1,64}$/;
export const TRACEPARENT = /^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/;
// C0 controls and DEL except tab and newline; PostgreSQL rejects NUL outright.
// eslint-disable-next-line no-control-regex
export const CONTROL_CHARS = /[\x00-\x08\x0b-\x1f\x7f]/g;

export function fail(field: string, message: string): never {
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
export function all<T extends readonly unknown[]>(...checks: { [K in keyof T]: () => T[K] }): T {
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
export function isMissing(v: unknown): boolean {
  return v === undefined || v === null || v === "" || v === 0;
}

export function isInteger(v: unknown): v is number {
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

export function optionalText(field: string, v: unknown, maxLength: number): string | undefined {
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

export function requireUri(field: string, v: unknown): string {
  const uri = requireText(field, v, LIMITS.uriLength);
  if (/\s/.test(uri)) fail(field, "must not contain whitespace");
  return uri;
}

/** A UTF-16 surrogate without its pair: not a Unicode scalar value, so not UTF-8, and jsonb refuses its escape. */
export const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

export function checkJsonString(field: string, s: string): void {
  if (s.includes("\u0000")) fail(field, "must not contain NUL characters");
  if (LONE_SURROGATE.test(s)) fail(field, "must be valid UTF-8 (no unpaired surrogates)");
}

export function checkJsonStrings(field: string, v: JsonValue, depth: number): void {
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

export function optionalJsonObject(field: string, v: unknown): JsonObject | undefined {
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
