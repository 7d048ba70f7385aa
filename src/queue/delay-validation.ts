// The rules of CreateJob's "later" and "after": run_at (a delayed job or task) and the finalizer
// (a job enqueued when the job ends), each broken rule a ValidationError naming its field.

import { ValidationError } from "./errors.js";
import type { FinalizerSpec } from "./types.js";
import { requireJsonObject, requireWorkloadName } from "./fields.js";

/** How far ahead run_at may lie when the coordinator is not told (MAX_RUN_AT_AHEAD_DAYS). */
export const DEFAULT_MAX_RUN_AT_AHEAD_DAYS = 365;

const DAY_MS = 86_400_000;

function fail(field: string, message: string): never {
  throw new ValidationError(field, message);
}

/**
 * A run_at as an ISO string, or undefined when absent. A time in the past is kept as given (the
 * insert takes the later of it and the database's now(), so it means now), and the string, not
 * the clamped time, is what an idempotent retry is compared by.
 */
export function validateRunAt(field: string, v: unknown, maxAheadDays: number): string | undefined {
  if (v === undefined || v === null) return undefined;
  if (!(v instanceof Date) || Number.isNaN(v.getTime())) fail(field, "must be a timestamp (RFC 3339 in JSON)");
  if (v.getTime() > Date.now() + maxAheadDays * DAY_MS) fail(field, `must be at most ${maxAheadDays} days ahead`);
  return v.toISOString();
}

/** A finalizer, or undefined when absent; its workload's existence is checked against the database by CreateJob. */
export function validateFinalizer(field: string, v: unknown): FinalizerSpec | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "object" || Array.isArray(v)) fail(field, "must be an object");
  const f = v as { workload?: unknown; parameters?: unknown; runOnFailure?: unknown };
  const workload = requireWorkloadName(`${field}.workload`, f.workload);
  const parameters = f.parameters === undefined || f.parameters === null ? {} : requireJsonObject(`${field}.parameters`, f.parameters);
  if (f.runOnFailure !== undefined && typeof f.runOnFailure !== "boolean") fail(`${field}.run_on_failure`, "must be a boolean");
  return { workload, parameters, runOnFailure: f.runOnFailure === true };
}
