// Workloads and their flow control: a workload's settings, its per-key caps and counts, and why a
// task waits.

import type { FailurePolicy, JsonObject, TaskCounts } from "./jobs.js";

export interface Workload {
  name: string;
  maxAttempts: number;
  leaseSeconds: number;
  parametersSchema: JsonObject | null;
  /** Claimable tasks unclaimed this long fail with error_code "expired"; null: never. */
  maxPendingSeconds: number | null;
  /** The failure policy of the workload's jobs unless a job sets its own. */
  failurePolicy: FailurePolicy;
  maxFailedTasks: number;
  /** Flow control (src/queue/flow-rules.ts): null where there is no cap or limit. */
  maxLeased: number | null;
  maxLeasedPerKey: number | null;
  maxLeasesPerSecond: number | null;
  leasesBurst: number | null;
  paused: boolean;
  createdAt: Date;
  updatedAt: Date;
}

export interface PutWorkloadInput {
  name: string;
  maxAttempts?: number;
  leaseSeconds?: number;
  parametersSchema?: JsonObject | null;
  /** absent or 0: never expire pending tasks */
  maxPendingSeconds?: number;
  /** absent: fail_fast */
  failurePolicy?: FailurePolicy;
  /** absent: 0 */
  maxFailedTasks?: number;
  /** absent: no cap; present, at least 1 */
  maxLeased?: number;
  maxLeasedPerKey?: number;
  /** absent: no rate limit; with leasesBurst */
  maxLeasesPerSecond?: number;
  leasesBurst?: number;
}

/** PutKeyLimit: one concurrency key's cap, in place of the workload's maxLeasedPerKey. */
export interface PutKeyLimitInput {
  name: string;
  key: string;
  /** 0 with clear. */
  maxLeased: number;
  /** Remove the key's own cap: it falls back to the workload's maxLeasedPerKey. */
  clear?: boolean;
}

export interface KeyLimit {
  name: string;
  key: string;
  /** The key's own cap; 0 once cleared. */
  maxLeased: number;
}

/** ListWorkloadKeys: a workload's concurrency keys; limit 0 or absent means 100. */
export interface ListWorkloadKeysInput {
  name: string;
  limit?: number;
}

/** One concurrency key of a workload, counted when asked. */
export interface WorkloadKeyCount {
  /** "" for the tasks of jobs without a key */
  key: string;
  pending: number;
  /** live leases, as the caps count them */
  leased: number;
  /** the key's own cap, else the workload's maxLeasedPerKey; 0: none */
  maxLeased: number;
  /** maxLeased is the key's own (PutKeyLimit) */
  ownLimit: boolean;
}

export interface ListWorkloadKeysResult {
  /** by leased, then pending (most first), then key */
  keys: WorkloadKeyCount[];
  /** more keys qualified than the limit */
  truncated: boolean;
}

export const WAITING_REASONS = [
  "queued",
  "retry_backoff",
  "workload_paused",
  "workload_cap",
  "key_cap",
  "rate_limited",
  "labels_unmatched",
  "no_workers",
  "parents",
] as const;

/** Why a pending (or waiting) task is not running (computed on read). */
export type WaitingReason = (typeof WAITING_REASONS)[number];

export interface Waiting {
  reason: WaitingReason;
  /** the reason as a sentence, with its numbers */
  detail: string;
}

/** Unfinished work of one workload, for metrics. */
export interface WorkloadTaskStats {
  workload: string;
  counts: TaskCounts;
  /** age of the oldest claimable pending task; 0 when none */
  oldestPendingSeconds: number;
}
