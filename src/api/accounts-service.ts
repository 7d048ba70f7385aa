// The money path's RPCs (accounts, usage, settlement) of the QueueService implementation: thin as
// the rest of service.ts, decode (accounts-convert.ts) → call the queue → encode.

import { create } from "@bufbuild/protobuf";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import {
  GetAccountResponseSchema,
  GetAccountUsageResponseSchema,
  ListAccountsResponseSchema,
  ListSettlementsResponseSchema,
  PutAccountResponseSchema,
  SettleJobResponseSchema,
  type QueueService as QueueServiceDesc,
} from "../../gen/leasehold/queue/v1/queue_pb.js";
import type { ApiQueue } from "../queue/service.js";
import type { CallOptions } from "../queue/types.js";
import * as accountsConvert from "./accounts-convert.js";
import * as convert from "./convert.js";

type AccountsImpl = Pick<
  ServiceImpl<typeof QueueServiceDesc>,
  "putAccount" | "getAccount" | "listAccounts" | "getAccountUsage" | "listSettlements" | "settleJob"
>;

export function accountsServiceImpl(queue: ApiQueue, call: (ctx: HandlerContext) => CallOptions): AccountsImpl {
  return {
    async putAccount(req, ctx) {
      const account = await queue.putAccount(accountsConvert.putAccountInput(req), call(ctx));
      return create(PutAccountResponseSchema, { account: accountsConvert.accountMessage(account) });
    },

    async getAccount(req, ctx) {
      const account = await queue.getAccount(req.name, call(ctx));
      return create(GetAccountResponseSchema, { account: accountsConvert.accountMessage(account) });
    },

    async listAccounts(_req, ctx) {
      const accounts = await queue.listAccounts(call(ctx));
      return create(ListAccountsResponseSchema, { accounts: accounts.map(accountsConvert.accountMessage) });
    },

    async getAccountUsage(req, ctx) {
      const usage = await queue.getAccountUsage(accountsConvert.accountUsageInput(req), call(ctx));
      return create(GetAccountUsageResponseSchema, accountsConvert.accountUsageMessage(usage));
    },

    async listSettlements(req, ctx) {
      const r = await queue.listSettlements(accountsConvert.listSettlementsInput(req), call(ctx));
      return create(ListSettlementsResponseSchema, { jobs: r.jobs.map(convert.jobMessage), nextPageToken: r.nextPageToken });
    },

    async settleJob(req, ctx) {
      const job = await queue.settleJob(accountsConvert.settleJobInput(req), call(ctx));
      return create(SettleJobResponseSchema, { job: convert.jobMessage(job) });
    },
  };
}
