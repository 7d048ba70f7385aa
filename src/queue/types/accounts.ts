// Accounts and the money path's types: an account's settings, settlements to list and record,
// and an account's usage. The rules of the money path end to end are in docs/money-path.md; a
// job's own billing context, usage and settlement are in jobs.ts.

import type { Job, Settlement, Usage } from "./jobs.js";

export interface Account {
  name: string;
  /** 0: no limit */
  maxPendingTasks: number;
  /** The priority of the account's jobs that set none. */
  priority: number;
  /** Pending tasks of the account's jobs when read. */
  pendingTasks: number;
  createdAt: Date;
  updatedAt: Date;
}

export interface PutAccountInput {
  name: string;
  maxPendingTasks?: number;
  priority?: number;
}

export interface SettleJobInput {
  jobId: string;
  settlementKey: string;
  /** Required (undefined is refused: an amount is never assumed); 0 when nothing is charged. */
  settledUnits?: number;
}

/**
 * Usage accepted after its job was settled (a late result): billed apart from the job's closed
 * settlement, listed by ListAdjustments and settled once by SettleAdjustment.
 */
export interface UsageAdjustment {
  id: string;
  jobId: string;
  taskId: string;
  attempt: number;
  /** null for a job billable by its billing context alone */
  account: string | null;
  workload: string;
  usage: Usage;
  createdAt: Date;
  settlement: Settlement | null;
}

export interface ListAdjustmentsInput {
  account?: string;
  pageSize?: number;
  pageToken?: string;
}

export interface ListAdjustmentsResult {
  adjustments: UsageAdjustment[];
  nextPageToken: string;
}

export interface SettleAdjustmentInput {
  adjustmentId: string;
  settlementKey: string;
  /** Required, as SettleJobInput.settledUnits. */
  settledUnits?: number;
}

export interface ListSettlementsInput {
  account?: string;
  pageSize?: number;
  pageToken?: string;
}

export interface ListSettlementsResult {
  jobs: Job[];
  nextPageToken: string;
}

export interface AccountUsageInput {
  account: string;
  from?: Date;
  to?: Date;
}

export interface WorkloadUsage {
  workload: string;
  jobs: number;
  tasksCompleted: number;
  tasksFailed: number;
  leaseSeconds: number;
  usage: Usage;
}

export interface AccountUsage {
  account: string;
  workloads: WorkloadUsage[];
}
