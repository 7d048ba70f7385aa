// The rules of accounts and of a job's billing context, checked before anything reaches the
// database: a ValidationError naming the field, and nothing written.

import type { Billing, PutAccountInput } from "./types.js";
import { PermissionDeniedError } from "./errors.js";
import { LIMITS, fail, all, isInteger, optionalInt, optionalText } from "./fields.js";

/** Account names follow the workload names' pattern. */
export const ACCOUNT_NAME = /^[a-z][a-z0-9_-]{0,62}$/;

/** The bound a max_pending_tasks may take (the column is an int). */
const MAX_PENDING_TASKS = 2_147_483_647;

export function requireAccountName(field: string, v: unknown): string {
  if (v === undefined || v === null || v === "") fail(field, "is required");
  if (typeof v !== "string" || !ACCOUNT_NAME.test(v)) fail(field, `must match ${ACCOUNT_NAME.source}`);
  return v;
}

/** PutAccount's input with its defaults: no quota (0) and priority 0, so a PUT states the whole account. */
export function validatePutAccount(input: PutAccountInput): Required<PutAccountInput> {
  if (input === null || typeof input !== "object") fail("request", "must be an object");
  const [name, maxPendingTasks, priority] = all(
    () => requireAccountName("name", input.name),
    () => optionalInt("max_pending_tasks", input.maxPendingTasks, 0, MAX_PENDING_TASKS) ?? 0,
    () => optionalInt("priority", input.priority, LIMITS.priority.min, LIMITS.priority.max) ?? 0,
  );
  return { name, maxPendingTasks, priority };
}

/**
 * A CreateJob's billing context: undefined when none was given, else reserved_units an integer
 * from 0 (0 when unset) and billing_key a text like an idempotency key (null when empty).
 */
export function validateBilling(field: string, v: unknown): Billing | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "object" || Array.isArray(v)) fail(field, "must be an object");
  const b = v as { reservedUnits?: unknown; billingKey?: unknown };
  const [reservedUnits, billingKey] = all(
    () => {
      const r = b.reservedUnits;
      if (r === undefined || r === null) return 0;
      if (!isInteger(r) || r < 0 || r > Number.MAX_SAFE_INTEGER)
        fail(`${field}.reserved_units`, `must be an integer from 0 to ${Number.MAX_SAFE_INTEGER}`);
      return r;
    },
    () => {
      const key = optionalText(`${field}.billing_key`, b.billingKey, LIMITS.idempotencyKeyLength);
      return key === undefined ? null : requireTrimmedKey(`${field}.billing_key`, key);
    },
  );
  return { reservedUnits, billingKey };
}

/**
 * A key of the money path (a billing key, a settlement key) as given: refused when blank or when it
 * begins or ends with whitespace, rather than trimmed, since the key is what makes a retried call
 * the same one ("order-1" and "order-1 " would reserve twice), and a key of spaces is a client's bug.
 */
export function requireTrimmedKey(field: string, key: string): string {
  if (key.trim() === "") fail(field, "must not be blank");
  if (key.trim() !== key) fail(field, "must not begin or end with whitespace");
  return key;
}

/**
 * The account a CreateJob is for: the request's, else the caller's bound one (CallOptions.account).
 * A bound caller naming another account is PERMISSION_DENIED (before validation, so nothing is
 * told about that account).
 */
export function jobAccount(requested: string | undefined, bound: string | undefined): string | undefined {
  const named = requested === undefined || requested === null || requested === "" ? undefined : requested;
  if (bound !== undefined && named !== undefined && named !== bound) {
    throw new PermissionDeniedError(`account: this token creates jobs of account ${JSON.stringify(bound)} only`);
  }
  return named ?? bound;
}

/**
 * A bound caller's concurrency key is its account's: the account itself (the default when the
 * request names none) or one under it, `<account>/…`. Another key, another account's name above
 * all, would take that key's fair share and its per-key cap: PERMISSION_DENIED naming the field,
 * before anything is written.
 */
export function requireOwnConcurrencyKey(key: string, bound: string): void {
  if (key === bound || key.startsWith(`${bound}/`)) return;
  throw new PermissionDeniedError(
    `concurrency_key: this token's jobs take their account's keys only: ${JSON.stringify(bound)} (the default) or "${bound}/…"`,
  );
}
