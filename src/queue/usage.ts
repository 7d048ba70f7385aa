// Usage counters a worker reports with a result or a failure: their rules, how two reports of one
// attempt compare (a replay), and how counters add up. No pg, no protobuf.

import type { AccountUsageInput, Usage } from "./types.js";
import { ValidationError, type FieldViolation } from "./errors.js";
import { LIMITS, violationsError, WORKLOAD_NAME } from "./fields.js";

/** Account names follow the workload names' pattern. */
const ACCOUNT_NAME = WORKLOAD_NAME;

export const USAGE_KEY = /^[a-z][a-z0-9_.]{0,62}$/;

/**
 * Names an object already has (Object.prototype's, and `prototype`): a counter so named would read
 * or replace what every object inherits wherever usage is summed in JavaScript (`sum[k] ?? 0` of
 * "constructor" is a function), so it is refused, never dropped.
 */
const RESERVED_KEYS = new Set([...Object.getOwnPropertyNames(Object.prototype), "prototype"]);

/**
 * A report's usage, checked: undefined when absent or empty (a report without usage writes
 * nothing of it), else the counters as given. Each violation names `<field>.<key>`.
 */
export function optionalUsage(field: string, usage: unknown): Usage | undefined {
  if (usage === undefined || usage === null) return undefined;
  if (typeof usage !== "object" || Array.isArray(usage)) throw new ValidationError(field, "must be a map of counter names to integers");
  const entries = Object.entries(usage as Record<string, unknown>);
  if (entries.length === 0) return undefined;
  const violations: FieldViolation[] = [];
  if (entries.length > LIMITS.usageCounters)
    violations.push({ field, description: `must hold at most ${LIMITS.usageCounters} counters, not ${entries.length}` });
  for (const [key, value] of entries) {
    if (RESERVED_KEYS.has(key)) {
      violations.push({ field: `${field}.${key}`, description: `is a reserved name (${key} is every object's own), not a counter's` });
      continue;
    }
    if (!USAGE_KEY.test(key)) {
      violations.push({ field: `${field}.${key}`, description: `the counter's name must match ${USAGE_KEY.source}` });
      continue;
    }
    if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 0)
      violations.push({ field: `${field}.${key}`, description: `must be an integer from 0 to ${Number.MAX_SAFE_INTEGER}` });
  }
  if (violations.length > 0) throw violationsError(violations);
  return Object.fromEntries(entries) as Usage;
}

/** GetAccountUsage's input: a registered account's name, and [from, to) when both are given. */
export function validateAccountUsage(input: AccountUsageInput): { account: string; from: Date | null; to: Date | null } {
  if (typeof input.account !== "string" || !ACCOUNT_NAME.test(input.account))
    throw new ValidationError("account", `must match ${ACCOUNT_NAME.source}`);
  const from = input.from ?? null;
  const to = input.to ?? null;
  if (from && Number.isNaN(from.getTime())) throw new ValidationError("from", "must be a timestamp");
  if (to && Number.isNaN(to.getTime())) throw new ValidationError("to", "must be a timestamp");
  if (from && to && from.getTime() >= to.getTime()) throw new ValidationError("to", "must be after from");
  return { account: input.account, from, to };
}

/** Whether two reports' usage is the same: absent and empty are the same, key order does not matter. */
export function sameUsage(a: Usage | undefined | null, b: Usage | undefined | null): boolean {
  const x = Object.entries(a ?? {});
  const y = b ?? {};
  return x.length === Object.keys(y).length && x.every(([k, v]) => y[k] === v);
}

/** a + b, per counter. */
export function addUsage(a: Usage, b: Usage | undefined | null): Usage {
  const sum: Usage = { ...a };
  for (const [k, v] of Object.entries(b ?? {})) sum[k] = (sum[k] ?? 0) + v;
  return sum;
}
