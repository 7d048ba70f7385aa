// Accounts and the money path, as the queue sees them: an account's settings, a job's billing
// context and settlement, usage counters, and the calls that read and settle them. The rules of
// the money path end to end are in docs/money-path.md.

import type { CallOptions, Job } from "./types.js";

/** Usage counters: name → amount (integers ≥ 0, within Number.MAX_SAFE_INTEGER). */
export type Usage = Record<string, number>;

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

/** The caller's billing context of a job, as given to CreateJob. */
export interface Billing {
  reservedUnits: number;
  /** null when none */
  billingKey: string | null;
}

export interface Settlement {
  settlementKey: string;
  settledUnits: number;
  settledAt: Date;
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
