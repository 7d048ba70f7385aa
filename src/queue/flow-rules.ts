// Flow control's rules: caps, rate limits, concurrency keys and labels, checked before anything
// reaches the database (each broken rule a ValidationError naming its field), and the sentence
// each waiting reason is told with. How the claim enforces them: docs/flow-control-claim.md.

import { ValidationError } from "./errors.js";
import type { Labels, ListWorkloadKeysInput, PutKeyLimitInput, WaitingReason } from "./types.js";

export const FLOW_LIMITS = {
  /** max_leased, max_leased_per_key and a key's cap */
  cap: { min: 1, max: 1_000_000 },
  leasesPerSecond: { max: 1_000_000 },
  burst: { min: 1, max: 1_000_000 },
  labels: 16,
  concurrencyKeyBytes: 128,
  /** ListWorkloadKeys' limit */
  keysListed: { default: 100, max: 1000 },
} as const;

const LABEL = /^[a-z0-9._/-]{1,63}$/;

function fail(field: string, message: string): never {
  throw new ValidationError(field, message);
}

function optionalCap(field: string, v: unknown): number | null {
  if (v === undefined || v === null) return null;
  if (typeof v !== "number" || !Number.isInteger(v)) fail(field, "must be an integer");
  if (v < FLOW_LIMITS.cap.min || v > FLOW_LIMITS.cap.max) fail(field, `must be between ${FLOW_LIMITS.cap.min} and ${FLOW_LIMITS.cap.max}`);
  return v;
}

/** Labels as given (a map of name to value): null when there are none, else the same pairs with their keys in order. */
export function validateLabels(field: string, v: unknown): Labels | null {
  if (v === undefined || v === null) return null;
  if (typeof v !== "object" || Array.isArray(v)) fail(field, "must be a map of label names to values");
  const entries = Object.entries(v as Record<string, unknown>);
  if (entries.length === 0) return null;
  if (entries.length > FLOW_LIMITS.labels) fail(field, `must hold at most ${FLOW_LIMITS.labels} labels`);
  const out: Labels = {};
  for (const [k, value] of entries.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
    if (!LABEL.test(k)) fail(field, `label name ${JSON.stringify(k)} must match ^[a-z0-9._/-]{1,63}$`);
    if (typeof value !== "string" || !LABEL.test(value))
      fail(`${field}[${k}]`, `label value ${JSON.stringify(value)} must match ^[a-z0-9._/-]{1,63}$`);
    out[k] = value;
  }
  return out;
}

/** A job's labels with a task's own on top; null when neither has any. */
export function mergeLabels(job: Labels | null, own: Labels | null, field: string): Labels | null {
  if (!own) return job;
  if (!job) return own;
  const merged = validateLabels(field, { ...job, ...own });
  return merged;
}

/** The JSON text of labels as the database compares them (jsonb): "{}" for none. */
export function labelsJson(labels: Labels | null): string {
  return labels ? JSON.stringify(labels) : "{}";
}

/** "" when absent; at most 128 bytes of UTF-8, no NUL. */
export function validateConcurrencyKey(field: string, v: unknown): string {
  if (v === undefined || v === null || v === "") return "";
  if (typeof v !== "string") fail(field, "must be a string");
  if (Buffer.byteLength(v, "utf8") > FLOW_LIMITS.concurrencyKeyBytes)
    fail(field, `must be at most ${FLOW_LIMITS.concurrencyKeyBytes} bytes`);
  if (v.includes("\u0000")) fail(field, "must not contain NUL characters");
  if (/[\ud800-\udfff]/.test(v.replace(/[\ud800-\udbff][\udc00-\udfff]/g, ""))) fail(field, "must be valid UTF-8");
  return v;
}

export interface FlowSettings {
  maxLeased: number | null;
  maxLeasedPerKey: number | null;
  maxLeasesPerSecond: number | null;
  leasesBurst: number | null;
}

/** A workload's caps and rate limit: a cap is at least 1; a rate needs a burst of at least 1, and a burst a rate. */
export function validateFlowSettings(input: {
  maxLeased?: unknown;
  maxLeasedPerKey?: unknown;
  maxLeasesPerSecond?: unknown;
  leasesBurst?: unknown;
}): FlowSettings {
  const maxLeased = optionalCap("max_leased", input.maxLeased);
  const maxLeasedPerKey = optionalCap("max_leased_per_key", input.maxLeasedPerKey);
  const rate = input.maxLeasesPerSecond;
  const burst = input.leasesBurst;
  let maxLeasesPerSecond: number | null = null;
  let leasesBurst: number | null = null;
  if (rate !== undefined && rate !== null) {
    if (typeof rate !== "number" || !Number.isFinite(rate) || rate <= 0 || rate > FLOW_LIMITS.leasesPerSecond.max)
      fail("max_leases_per_second", `must be a number above 0, at most ${FLOW_LIMITS.leasesPerSecond.max}`);
    maxLeasesPerSecond = rate;
    if (burst === undefined || burst === null) fail("leases_burst", "is required with max_leases_per_second (at least 1)");
  }
  if (burst !== undefined && burst !== null) {
    if (typeof burst !== "number" || !Number.isInteger(burst)) fail("leases_burst", "must be an integer");
    if (burst < FLOW_LIMITS.burst.min || burst > FLOW_LIMITS.burst.max)
      fail("leases_burst", `must be between ${FLOW_LIMITS.burst.min} and ${FLOW_LIMITS.burst.max}`);
    if (maxLeasesPerSecond === null) fail("max_leases_per_second", "is required with leases_burst");
    leasesBurst = burst;
  }
  return { maxLeased, maxLeasedPerKey, maxLeasesPerSecond, leasesBurst };
}

export function validatePutKeyLimit(input: PutKeyLimitInput, requireName: (field: string, v: unknown) => string): PutKeyLimitInput {
  const name = requireName("name", input.name);
  const key = validateConcurrencyKey("key", input.key);
  if (key === "") fail("key", "is required");
  if (input.clear === true) {
    if (input.maxLeased) fail("max_leased", "must be 0 (unset) with clear: a clear removes the key's own cap");
    return { name, key, maxLeased: 0, clear: true };
  }
  if (input.maxLeased === undefined || input.maxLeased === null || input.maxLeased === 0)
    fail("max_leased", `is required (at least ${FLOW_LIMITS.cap.min})`);
  const maxLeased = optionalCap("max_leased", input.maxLeased)!;
  return { name, key, maxLeased };
}

export function validateListWorkloadKeys(
  input: ListWorkloadKeysInput,
  requireName: (field: string, v: unknown) => string,
): { name: string; limit: number } {
  const name = requireName("name", input.name);
  const limit = input.limit || FLOW_LIMITS.keysListed.default;
  if (!Number.isInteger(limit) || limit < 1 || limit > FLOW_LIMITS.keysListed.max)
    fail("limit", `must be an integer from 1 to ${FLOW_LIMITS.keysListed.max} (0: ${FLOW_LIMITS.keysListed.default})`);
  return { name, limit };
}

/** What the store reads to tell why a pending task waits (WAITING_FACTS). */
export interface WaitingFacts {
  runAfter: Date;
  now: Date;
  paused: boolean;
  maxLeased: number | null;
  leased: number;
  concurrencyKey: string;
  keyCap: number | null;
  keyLeased: number;
  /** when the rate limit's next token is due; null without a limit or with a token now */
  nextTokenAt: Date | null;
  /** any worker claimed the workload in the last minute */
  workersSeen: boolean;
  requiredLabels: Labels | null;
  /** some worker claimed the workload in the last minute with labels that meet the task's */
  labelsSeen: boolean;
}

/** The first reason that holds, in the order of flow-control.md. */
export function waitingReason(f: WaitingFacts): { reason: WaitingReason; detail: string } {
  if (f.runAfter > f.now) return { reason: "retry_backoff", detail: `in retry backoff until ${f.runAfter.toISOString()}` };
  if (f.paused) return { reason: "workload_paused", detail: "the workload is paused (ResumeWorkload resumes it)" };
  if (f.maxLeased !== null && f.leased >= f.maxLeased)
    return { reason: "workload_cap", detail: `workload cap reached: ${f.leased} of ${f.maxLeased} leased` };
  if (f.keyCap !== null && f.keyLeased >= f.keyCap)
    return {
      reason: "key_cap",
      detail: `key cap reached: ${f.keyLeased} of ${f.keyCap} leased for concurrency key ${JSON.stringify(f.concurrencyKey)}`,
    };
  if (f.nextTokenAt !== null)
    return { reason: "rate_limited", detail: `rate limited: the next lease is due at ${f.nextTokenAt.toISOString()}` };
  if (!f.workersSeen) return { reason: "no_workers", detail: "no worker has asked for this workload in the last minute" };
  if (f.requiredLabels && !f.labelsSeen) {
    const needs = Object.entries(f.requiredLabels)
      .map(([k, v]) => `${k}=${v}`)
      .join(", ");
    return {
      reason: "labels_unmatched",
      detail: `needs labels ${needs}: no worker has claimed this workload with them in the last minute`,
    };
  }
  return { reason: "queued", detail: "claimable: waiting for a worker to claim it, behind the tasks before it" };
}
