// The settlement calls' rules: SettleJob's key and units, and ListSettlements' page size, account
// filter and page token (opaque to clients), each broken rule a ValidationError naming its field.

import type { ListAdjustmentsInput, ListSettlementsInput, SettleAdjustmentInput, SettleJobInput } from "./types.js";
import { PermissionDeniedError } from "./errors.js";
import { requireTrimmedKey } from "./account-validation.js";
import { all, fail, LIMITS, optionalInt, requireInt, requireText, requireUuid, requireWorkloadName, UUID } from "./fields.js";
import type { CallOptions } from "./types.js";

/** A settlement_key's length bound. */
export const SETTLEMENT_KEY_LENGTH = 200;

/** A settlement's key and units, as SettleJob and SettleAdjustment take them. */
export interface NormalizedSettlement {
  settlementKey: string;
  settledUnits: number;
}

/** The rules of a settlement's key and units, for `all` beside the id's. */
const settlementRules = (input: { settlementKey?: unknown; settledUnits?: unknown }) =>
  [
    () => requireTrimmedKey("settlement_key", requireText("settlement_key", input.settlementKey, SETTLEMENT_KEY_LENGTH)),
    // Required, 0 included: an amount left out used to settle at 0, for good.
    () => {
      if (input.settledUnits === undefined || input.settledUnits === null) fail("settled_units", "is required (0 when nothing is charged)");
      return requireInt("settled_units", input.settledUnits, 0, Number.MAX_SAFE_INTEGER);
    },
  ] as const;

export function validateSettleJob(input: SettleJobInput): NormalizedSettlement & { jobId: string } {
  const [key, units] = settlementRules(input);
  const [jobId, settlementKey, settledUnits] = all(() => requireUuid("job_id", input.jobId), key, units);
  return { jobId, settlementKey, settledUnits };
}

export function validateSettleAdjustment(input: SettleAdjustmentInput): NormalizedSettlement & { adjustmentId: string } {
  const [key, units] = settlementRules(input);
  const [adjustmentId, settlementKey, settledUnits] = all(() => requireUuid("adjustment_id", input.adjustmentId), key, units);
  return { adjustmentId, settlementKey, settledUnits };
}

/** ListSettlements pages oldest final first; the token is the last job's (completed_at, id), completed_at as the database wrote it (µs). */
export function encodeSettlementsPageToken(completedAt: string, id: string): string {
  return Buffer.from(`s:${completedAt}|${id}`).toString("base64url");
}

const SETTLEMENTS_TOKEN = /^s:(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z)\|([0-9a-f-]{36})$/;

export interface NormalizedListSettlements {
  /** The one account listed; null: every account (and the billable jobs without one). */
  account: string | null;
  pageSize: number;
  after: { completedAt: string; id: string } | null;
}

/**
 * A bound token lists its own account's settlements: naming another is PERMISSION_DENIED, naming
 * none means its own.
 */
export function validateListSettlements(input: ListSettlementsInput, opts: CallOptions = {}): NormalizedListSettlements {
  const [named, pageSize, after] = all(
    () => (input.account ? requireWorkloadName("account", input.account) : null),
    () => optionalInt("page_size", input.pageSize || undefined, 1, LIMITS.pageSize.max) ?? LIMITS.pageSize.default,
    () => {
      if (!input.pageToken) return null;
      const m = typeof input.pageToken === "string" ? SETTLEMENTS_TOKEN.exec(Buffer.from(input.pageToken, "base64url").toString()) : null;
      if (!m || !UUID.test(m[2]) || Number.isNaN(Date.parse(m[1]))) fail("page_token", "is not a token this server issued");
      return { completedAt: m[1], id: m[2].toLowerCase() };
    },
  );
  if (opts.account !== undefined && named !== null && named !== opts.account)
    throw new PermissionDeniedError(`account ${named}: this token is bound to another account`);
  return { account: opts.account ?? named, pageSize, after };
}

/** ListAdjustments pages oldest first; the token is the last adjustment's (created_at, id), created_at as the database wrote it (µs). */
export function encodeAdjustmentsPageToken(createdAt: string, id: string): string {
  return Buffer.from(`a:${createdAt}|${id}`).toString("base64url");
}

const ADJUSTMENTS_TOKEN = /^a:(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z)\|([0-9a-f-]{36})$/;

export interface NormalizedListAdjustments {
  /** The one account listed; null: every account (and the adjustments of jobs without one). */
  account: string | null;
  pageSize: number;
  after: { createdAt: string; id: string } | null;
}

/** ListAdjustments' page size, account filter and page token, as ListSettlements' (a bound token lists its own account's). */
export function validateListAdjustments(input: ListAdjustmentsInput, opts: CallOptions = {}): NormalizedListAdjustments {
  const [named, pageSize, after] = all(
    () => (input.account ? requireWorkloadName("account", input.account) : null),
    () => optionalInt("page_size", input.pageSize || undefined, 1, LIMITS.pageSize.max) ?? LIMITS.pageSize.default,
    () => {
      if (!input.pageToken) return null;
      const m = typeof input.pageToken === "string" ? ADJUSTMENTS_TOKEN.exec(Buffer.from(input.pageToken, "base64url").toString()) : null;
      if (!m || !UUID.test(m[2]) || Number.isNaN(Date.parse(m[1]))) fail("page_token", "is not a token this server issued");
      return { createdAt: m[1], id: m[2].toLowerCase() };
    },
  );
  if (opts.account !== undefined && named !== null && named !== opts.account)
    throw new PermissionDeniedError(`account ${named}: this token is bound to another account`);
  return { account: opts.account ?? named, pageSize, after };
}
