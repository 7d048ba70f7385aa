// Settlement: ListSettlements (final billable jobs not yet settled) and SettleJob (recorded once).

import type { ListSettlementsInput, ListSettlementsResult, SettleJobInput } from "../../queue/accounts.js";
import type { CallOptions, Job } from "../../queue/types.js";
import type { StoreContext } from "./context.js";

const notYet = (what: string) => Promise.reject(new Error(`${what} is not implemented yet`));

export function listSettlements(_ctx: StoreContext, _input: ListSettlementsInput, _opts: CallOptions): Promise<ListSettlementsResult> {
  return notYet("ListSettlements");
}

export function settleJob(_ctx: StoreContext, _input: SettleJobInput, _opts: CallOptions): Promise<Job> {
  return notYet("SettleJob");
}
