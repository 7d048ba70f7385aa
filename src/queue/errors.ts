// Typed queue errors. Transports map these to Connect codes / HTTP status in
// exactly one place (src/api/errors.ts); nothing else decides a status code.
// Messages are safe to show to clients: they never carry database text.

export abstract class QueueError extends Error {
  abstract readonly kind: string;
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** One broken rule of a request: the field (a path such as `tasks[2].input_sha256`) and what it must be. */
export interface FieldViolation {
  field: string;
  description: string;
}

/**
 * The request is malformed or breaks a limit; `field` names the offending field. `violations`
 * lists every broken rule found (at least this one): transports send them as google.rpc.BadRequest.
 */
export class ValidationError extends QueueError {
  readonly kind = "validation";
  readonly violations: readonly FieldViolation[];
  constructor(
    readonly field: string,
    readonly detail: string,
    violations?: readonly FieldViolation[],
  ) {
    super(`${field}: ${detail}`);
    this.violations = violations && violations.length > 0 ? violations : [{ field, description: detail }];
  }
}

/**
 * Registered workloads an unknown workload's error carries (its message, REST's known_workloads,
 * gRPC's ErrorInfo); the rest are counted. Bounded because the error travels in gRPC's trailers,
 * where grpcio refuses more than 8 KiB of metadata (RESOURCE_EXHAUSTED in place of NOT_FOUND): a
 * few hundred registered workloads listed in full passed it.
 */
export const KNOWN_WORKLOADS_SHOWN = 20;

/**
 * An unknown job, task, workload, schedule or account; `field` names the request field that referred to it. For a
 * workload, `known` (when given) lists the registered ones, so a misspelt name is told apart from a
 * workload nobody registered yet; transports send them as a detail too.
 */
export class NotFoundError extends QueueError {
  readonly kind = "not_found";
  constructor(
    readonly entity: "job" | "task" | "workload" | "schedule" | "account" | "adjustment" | "workflow",
    readonly id: string,
    readonly field: string = `${entity}_id`,
    known?: readonly string[],
  ) {
    super(`${field}: ${entity} ${JSON.stringify(id)} not found${entity === "workload" ? workloadHint(known) : ""}`);
    if (known !== undefined) {
      this.known = known.slice(0, KNOWN_WORKLOADS_SHOWN);
      this.knownTotal = known.length;
    }
  }
  /** The first KNOWN_WORKLOADS_SHOWN registered workloads (in name order), when looked up. */
  readonly known?: readonly string[];
  /** How many are registered in all. */
  readonly knownTotal?: number;
}

function workloadHint(known: readonly string[] | undefined): string {
  if (known === undefined) return " (register it with PutWorkload first)";
  if (known.length === 0) return " (no workload is registered: register it with PutWorkload first)";
  const shown = known.slice(0, KNOWN_WORKLOADS_SHOWN).join(", ");
  const more = known.length > KNOWN_WORKLOADS_SHOWN ? ` and ${known.length - KNOWN_WORKLOADS_SHOWN} more` : "";
  return ` (registered workloads: ${shown}${more}; register it with PutWorkload first)`;
}

/** attempt_ahead: an attempt the task has not reached (never leased at it), as opposed to a stale one. */
export type LeaseConflictReason =
  "not_leaseholder" | "stale_attempt" | "attempt_ahead" | "lease_expired" | "task_cancelled" | "task_finished";

/** A stale, foreign or expired lease, or a task that is cancelled or already finished. */
export class LeaseConflictError extends QueueError {
  readonly kind = "lease_conflict";
  constructor(
    readonly reason: LeaseConflictReason,
    message: string,
  ) {
    super(message);
  }
}

/** The task is already completed with a different result manifest. */
export class ResultConflictError extends QueueError {
  readonly kind = "result_conflict";
}

/** The idempotency key was used before for a different request. */
export class IdempotencyConflictError extends QueueError {
  readonly kind = "idempotency_conflict";
}

/** The database is down or the pool has no connection to give in time. */
export class UnavailableError extends QueueError {
  readonly kind = "unavailable";
}

/** The request's deadline passed (or it was cancelled) before the database answered. */
export class DeadlineExceededError extends QueueError {
  readonly kind = "deadline_exceeded";
}

/** No bearer token, or one that matches no configured token. */
export class UnauthenticatedError extends QueueError {
  readonly kind = "unauthenticated";
}

/** A known token whose role may not make this call, or a worker_id outside the token's prefix. */
export class PermissionDeniedError extends QueueError {
  readonly kind = "permission_denied";
}

/** The request is valid but the job is not in a state that allows it (e.g. retrying a running job). */
export class FailedPreconditionError extends QueueError {
  readonly kind = "failed_precondition";
}

/** A quota would be exceeded (an account's max_pending_tasks); nothing was written. */
export class QuotaExceededError extends QueueError {
  readonly kind = "quota_exceeded";
}

/** The job was already settled with another key or amount; the message names what was recorded. */
export class SettlementConflictError extends QueueError {
  readonly kind = "settlement_conflict";
}
