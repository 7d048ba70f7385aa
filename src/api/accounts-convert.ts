// Messages ↔ domain objects of the money path's RPCs (accounts, usage, billing, settlement).
// int64 fields arrive as bigint; the domain keeps numbers, so a value past Number.MAX_SAFE_INTEGER
// is refused here, naming its field, before the queue sees it.

import { create } from "@bufbuild/protobuf";
import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import {
  AccountSchema,
  type Account as PbAccount,
  type GetAccountUsageRequest,
  type GetAccountUsageResponse,
  type ListSettlementsRequest,
  type PutAccountRequest,
  type SettleJobRequest,
  WorkloadUsageSchema,
} from "../../gen/leasehold/queue/v1/queue_pb.js";
import type {
  Account,
  AccountUsage,
  AccountUsageInput,
  ListSettlementsInput,
  PutAccountInput,
  SettleJobInput,
  Usage,
} from "../queue/accounts.js";
import { ValidationError } from "../queue/errors.js";

/** Usage counters as the message's map<string, int64>. */
export function usageMessage(u: Usage | undefined): { [key: string]: bigint } {
  const m: { [key: string]: bigint } = {};
  if (u) for (const [k, v] of Object.entries(u)) m[k] = BigInt(v);
  return m;
}

/** An int64 field as a number; beyond what a number holds exactly is INVALID_ARGUMENT naming it. */
export function int64Number(field: string, v: bigint): number {
  if (v > BigInt(Number.MAX_SAFE_INTEGER) || v < BigInt(Number.MIN_SAFE_INTEGER))
    throw new ValidationError(field, `must be within ±${Number.MAX_SAFE_INTEGER}`);
  return Number(v);
}

/** A map<string, int64> of usage counters; undefined when empty. Their rules are checked by the queue. */
export function usageInput(field: string, m: { [key: string]: bigint }): Usage | undefined {
  const keys = Object.keys(m);
  if (keys.length === 0) return undefined;
  const u: Usage = {};
  for (const k of keys) u[k] = int64Number(`${field}.${k}`, m[k]);
  return u;
}

export function putAccountInput(r: PutAccountRequest): PutAccountInput {
  return { name: r.name, maxPendingTasks: r.maxPendingTasks, priority: r.priority };
}

export function accountMessage(a: Account): PbAccount {
  return create(AccountSchema, {
    name: a.name,
    maxPendingTasks: a.maxPendingTasks,
    priority: a.priority,
    pendingTasks: a.pendingTasks,
    createdAt: timestampFromDate(a.createdAt),
    updatedAt: timestampFromDate(a.updatedAt),
  });
}

export function accountUsageInput(r: GetAccountUsageRequest): AccountUsageInput {
  return {
    account: r.account,
    from: r.from ? timestampDate(r.from) : undefined,
    to: r.to ? timestampDate(r.to) : undefined,
  };
}

export function accountUsageMessage(u: AccountUsage): Omit<GetAccountUsageResponse, "$typeName"> {
  return {
    account: u.account,
    workloads: u.workloads.map((w) =>
      create(WorkloadUsageSchema, {
        workload: w.workload,
        jobs: BigInt(w.jobs),
        tasksCompleted: BigInt(w.tasksCompleted),
        tasksFailed: BigInt(w.tasksFailed),
        leaseSeconds: w.leaseSeconds,
        usage: usageMessage(w.usage),
      }),
    ),
  };
}

export function listSettlementsInput(r: ListSettlementsRequest): ListSettlementsInput {
  return {
    account: r.account === "" ? undefined : r.account,
    pageSize: r.pageSize,
    pageToken: r.pageToken === "" ? undefined : r.pageToken,
  };
}

export function settleJobInput(r: SettleJobRequest): SettleJobInput {
  return { jobId: r.jobId, settlementKey: r.settlementKey, settledUnits: int64Number("settled_units", r.settledUnits) };
}
