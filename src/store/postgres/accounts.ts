// Accounts: PutAccount, GetAccount, ListAccounts, and GetAccountUsage's read of the rollup
// (account_usage).

import type { Account, AccountUsage, AccountUsageInput, PutAccountInput } from "../../queue/accounts.js";
import type { CallOptions } from "../../queue/types.js";
import type { StoreContext } from "./context.js";

const notYet = (what: string) => Promise.reject(new Error(`${what} is not implemented yet`));

export function putAccount(_ctx: StoreContext, _input: PutAccountInput, _opts: CallOptions): Promise<Account> {
  return notYet("PutAccount");
}

export function getAccount(_ctx: StoreContext, _name: string, _opts: CallOptions): Promise<Account> {
  return notYet("GetAccount");
}

export function listAccounts(_ctx: StoreContext, _opts: CallOptions): Promise<Account[]> {
  return notYet("ListAccounts");
}

export function getAccountUsage(_ctx: StoreContext, _input: AccountUsageInput, _opts: CallOptions): Promise<AccountUsage> {
  return notYet("GetAccountUsage");
}
