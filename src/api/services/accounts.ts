// The money path's RPCs of the QueueService (PutAccount, GetAccount, ListAccounts,
// GetAccountUsage, ListSettlements, SettleJob, ListAdjustments, SettleAdjustment): each handler with
// its request's decoding and its answer's encoding. Their int64 fields are read through messages.ts'
// int64Number.

import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import {
  AccountSchema,
  GetAccountResponseSchema,
  GetAccountUsageResponseSchema,
  ListAccountsResponseSchema,
  ListAdjustmentsResponseSchema,
  ListSettlementsResponseSchema,
  SettleAdjustmentResponseSchema,
  UsageAdjustmentSchema,
  type UsageAdjustment as PbUsageAdjustment,
  PutAccountResponseSchema,
  SettleJobResponseSchema,
  WorkloadUsageSchema,
  type Account as PbAccount,
  type GetAccountUsageRequest,
  type GetAccountUsageResponse,
  type ListSettlementsRequest,
  type PutAccountRequest,
  type QueueService as QueueServiceDesc,
  type SettleJobRequest,
} from "../../../gen/leasehold/queue/v1/queue_pb.js";
import type {
  Account,
  AccountUsage,
  AccountUsageInput,
  ListSettlementsInput,
  PutAccountInput,
  SettleJobInput,
  UsageAdjustment,
} from "../../queue/types.js";
import type { ApiQueue } from "../../queue/service.js";
import { call } from "./call-options.js";
import { int64Number, jobMessage, settlementMessage, usageMessage } from "./messages.js";

type AccountsImpl = Pick<
  ServiceImpl<typeof QueueServiceDesc>,
  | "putAccount"
  | "getAccount"
  | "listAccounts"
  | "getAccountUsage"
  | "listSettlements"
  | "settleJob"
  | "listAdjustments"
  | "settleAdjustment"
>;

export function accountsService(queue: ApiQueue): AccountsImpl {
  return {
    async putAccount(req, ctx) {
      const account = await queue.putAccount(putAccountInput(req), call(ctx));
      return create(PutAccountResponseSchema, { account: accountMessage(account) });
    },

    async getAccount(req, ctx) {
      const account = await queue.getAccount(req.name, call(ctx));
      return create(GetAccountResponseSchema, { account: accountMessage(account) });
    },

    async listAccounts(_req, ctx) {
      const accounts = await queue.listAccounts(call(ctx));
      return create(ListAccountsResponseSchema, { accounts: accounts.map(accountMessage) });
    },

    async getAccountUsage(req, ctx) {
      const usage = await queue.getAccountUsage(accountUsageInput(req), call(ctx));
      return create(GetAccountUsageResponseSchema, accountUsageMessage(usage));
    },

    async listSettlements(req, ctx) {
      const r = await queue.listSettlements(listSettlementsInput(req), call(ctx));
      return create(ListSettlementsResponseSchema, { jobs: r.jobs.map(jobMessage), nextPageToken: r.nextPageToken });
    },

    async settleJob(req, ctx) {
      const job = await queue.settleJob(settleJobInput(req), call(ctx));
      return create(SettleJobResponseSchema, { job: jobMessage(job) });
    },

    async listAdjustments(req, ctx) {
      const r = await queue.listAdjustments(
        { account: req.account || undefined, pageSize: req.pageSize, pageToken: req.pageToken || undefined },
        call(ctx),
      );
      return create(ListAdjustmentsResponseSchema, { adjustments: r.adjustments.map(adjustmentMessage), nextPageToken: r.nextPageToken });
    },

    async settleAdjustment(req, ctx) {
      const adjustment = await queue.settleAdjustment(
        {
          adjustmentId: req.adjustmentId,
          settlementKey: req.settlementKey,
          settledUnits: optionalInt64("settled_units", req.settledUnits),
        },
        call(ctx),
      );
      return create(SettleAdjustmentResponseSchema, { adjustment: adjustmentMessage(adjustment) });
    },
  };
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
  return { jobId: r.jobId, settlementKey: r.settlementKey, settledUnits: optionalInt64("settled_units", r.settledUnits) };
}

/** An int64 field with presence: undefined when unset (the queue refuses a required one). */
function optionalInt64(field: string, v: bigint | undefined): number | undefined {
  return v === undefined ? undefined : int64Number(field, v);
}

export function adjustmentMessage(a: UsageAdjustment): PbUsageAdjustment {
  return create(UsageAdjustmentSchema, {
    id: a.id,
    jobId: a.jobId,
    taskId: a.taskId,
    attempt: a.attempt,
    account: a.account ?? "",
    workload: a.workload,
    usage: usageMessage(a.usage),
    createdAt: timestampFromDate(a.createdAt),
    settlement: a.settlement ? settlementMessage(a.settlement) : undefined,
  });
}
