// Accounts and the money path, as the queue sees them: an account's settings, a job's billing
// context and settlement, usage counters, and the calls that read and settle them. The rules of
// the money path end to end are in docs/money-path.md.

import type { CallOptions, Job, Usage } from "./types.js";

// The types a Job carries live in types.ts (which imports nothing from here); re-exported for
// the money path's readers.
export type { Billing, Settlement, Usage } from "./types.js";

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
  settledUnits: number;
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

/** The money path's calls, part of what the API calls (service.ts). */
export interface AccountsApi {
  putAccount(input: PutAccountInput, opts?: CallOptions): Promise<Account>;
  /** NotFoundError for an unknown account. */
  getAccount(name: string, opts?: CallOptions): Promise<Account>;
  listAccounts(opts?: CallOptions): Promise<Account[]>;
  getAccountUsage(input: AccountUsageInput, opts?: CallOptions): Promise<AccountUsage>;
  listSettlements(input: ListSettlementsInput, opts?: CallOptions): Promise<ListSettlementsResult>;
  settleJob(input: SettleJobInput, opts?: CallOptions): Promise<Job>;
}
