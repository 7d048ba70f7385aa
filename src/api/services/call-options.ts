// What every handler of the QueueService hands the queue from its request's HandlerContext.

import type { HandlerContext } from "@connectrpc/connect";
import type { CallOptions } from "../../queue/types.js";
import { deadlineKey, principalKey } from "../interceptors.js";

/**
 * What a queue call gets from its request: the signal (aborted at the deadline), the deadline, and
 * the account of a bound token (the queue then sees only that account's jobs).
 */
export function call(ctx: HandlerContext): CallOptions {
  return { signal: ctx.signal, deadline: ctx.values.get(deadlineKey), ...scope(ctx) };
}

/** The one place a bound token's account becomes CallOptions.account; nothing for other tokens or an open API. */
export function scope(ctx: HandlerContext): Pick<CallOptions, "account"> {
  const account = ctx.values.get(principalKey)?.account;
  return account === undefined ? {} : { account };
}
