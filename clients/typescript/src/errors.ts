// Errors of the client: one class per coordinator error code, the same on every transport. The
// Connect and gRPC protocols carry the code, the message and rich details (google.rpc.RequestInfo,
// BadRequest, ErrorInfo) alike, so everything here is read from connect-es' ConnectError.
import { Code, ConnectError } from "@connectrpc/connect";
import { BadRequestSchema, ErrorInfoSchema, RequestInfoSchema } from "./gen/google/rpc/error_details_pb.js";

/** One bad field of a refused request: `field` is its path (`tasks[2].input_sha256`). */
export interface FieldViolation {
  readonly field: string;
  readonly description: string;
}

/** The code of an error in snake case, as the coordinator's REST answers and the Python client name it. */
export type ErrorCode =
  | "cancelled"
  | "unknown"
  | "invalid_argument"
  | "deadline_exceeded"
  | "not_found"
  | "already_exists"
  | "permission_denied"
  | "resource_exhausted"
  | "failed_precondition"
  | "aborted"
  | "out_of_range"
  | "unimplemented"
  | "internal"
  | "unavailable"
  | "data_loss"
  | "unauthenticated";

const CODE_NAMES: Record<Code, ErrorCode> = {
  [Code.Canceled]: "cancelled",
  [Code.Unknown]: "unknown",
  [Code.InvalidArgument]: "invalid_argument",
  [Code.DeadlineExceeded]: "deadline_exceeded",
  [Code.NotFound]: "not_found",
  [Code.AlreadyExists]: "already_exists",
  [Code.PermissionDenied]: "permission_denied",
  [Code.ResourceExhausted]: "resource_exhausted",
  [Code.FailedPrecondition]: "failed_precondition",
  [Code.Aborted]: "aborted",
  [Code.OutOfRange]: "out_of_range",
  [Code.Unimplemented]: "unimplemented",
  [Code.Internal]: "internal",
  [Code.Unavailable]: "unavailable",
  [Code.DataLoss]: "data_loss",
  [Code.Unauthenticated]: "unauthenticated",
};

/** What a {@link LeaseholdError} is built from. */
export interface LeaseholdErrorInit {
  code?: ErrorCode;
  requestId?: string;
  violations?: readonly FieldViolation[];
  reason?: string;
  metadata?: Readonly<Record<string, string>>;
  cause?: unknown;
}

/**
 * A call to the coordinator failed. Catch a subclass for one code (`NotFoundError`), or this class
 * and read `code`.
 *
 * @example
 * try {
 *   await client.createJob("render", [{ chunkIndex: 0, inputUri: "s3://in/0", inputSha256: "…" }]);
 * } catch (e) {
 *   if (e instanceof InvalidArgumentError) for (const v of e.violations) console.log(v.field, v.description);
 *   else if (e instanceof LeaseholdError && e.reason === "WORKLOAD_NOT_FOUND") console.log(e.metadata.known_workloads);
 *   else throw e;
 * }
 */
export class LeaseholdError extends Error {
  /** The code in snake case (`"not_found"`, `"aborted"`, ...). */
  readonly code: ErrorCode;
  /** The coordinator's request id of the call (matches its log line); undefined when it never answered. */
  readonly requestId: string | undefined;
  /** Every bad field of an `invalid_argument` error (its google.rpc.BadRequest detail); empty otherwise. */
  readonly violations: readonly FieldViolation[];
  /** The machine-readable cause from a google.rpc.ErrorInfo detail (`"WORKLOAD_NOT_FOUND"`); `""` without one. */
  readonly reason: string;
  /** That detail's metadata (`{ workload: "rendr", known_workloads: "render,thumbs" }`). */
  readonly metadata: Readonly<Record<string, string>>;

  constructor(message: string, init: LeaseholdErrorInit = {}) {
    super(message, init.cause === undefined ? undefined : { cause: init.cause });
    this.name = new.target.name;
    this.code = init.code ?? "unknown";
    this.requestId = init.requestId;
    this.violations = init.violations ?? [];
    this.reason = init.reason ?? "";
    this.metadata = init.metadata ?? {};
  }

  override toString(): string {
    const rid = this.requestId ? ` (request id ${this.requestId})` : "";
    return `${this.code}: ${this.message}${rid}`;
  }
}

/** The request was refused as invalid; `violations` names each bad field. */
export class InvalidArgumentError extends LeaseholdError {}
/** The job, task, workload or schedule does not exist (an unknown workload: `reason` `WORKLOAD_NOT_FOUND`). */
export class NotFoundError extends LeaseholdError {}
/** A stale, foreign or expired lease, or a cancelled or finished task. */
export class AbortedError extends LeaseholdError {}
/** A conflicting result manifest, idempotency key or schedule. */
export class AlreadyExistsError extends LeaseholdError {}
/** The call is not allowed in the object's state (e.g. retrying a job that has not failed). */
export class FailedPreconditionError extends LeaseholdError {}
/** No token, or a token the coordinator does not know. */
export class UnauthenticatedError extends LeaseholdError {}
/** The token's role may not make this call (or act as this worker id). */
export class PermissionDeniedError extends LeaseholdError {}
/** The coordinator (or its database) cannot be reached now; worth retrying. */
export class UnavailableError extends LeaseholdError {}
/** A quota is used up (an account's max_pending_tasks; the message names the numbers); an UnavailableError, as before it had its own class. */
export class ResourceExhaustedError extends UnavailableError {}
/** The call's deadline passed. */
export class DeadlineExceededError extends LeaseholdError {}
/** The coordinator failed; its log line carries the request id. */
export class InternalError extends LeaseholdError {}

const CLASSES: Partial<Record<ErrorCode, new (message: string, init: LeaseholdErrorInit) => LeaseholdError>> = {
  invalid_argument: InvalidArgumentError,
  out_of_range: InvalidArgumentError,
  not_found: NotFoundError,
  aborted: AbortedError,
  already_exists: AlreadyExistsError,
  failed_precondition: FailedPreconditionError,
  unauthenticated: UnauthenticatedError,
  permission_denied: PermissionDeniedError,
  unavailable: UnavailableError,
  resource_exhausted: ResourceExhaustedError,
  deadline_exceeded: DeadlineExceededError,
  internal: InternalError,
};

/** The error of `code` (its subclass where there is one). */
export function errorFor(code: ErrorCode, message: string, init: Omit<LeaseholdErrorInit, "code"> = {}): LeaseholdError {
  const cls = CLASSES[code] ?? LeaseholdError;
  return new cls(message, { ...init, code });
}

/**
 * Any error thrown by a call of `method` as a LeaseholdError, its rich details read. A call the
 * caller did not abort that ends "cancelled" lost its connection (an HTTP/2 stream or session
 * reset by the network or a proxy): that is `unavailable`, as a refused connection is, on every
 * transport alike.
 */
export function toLeaseholdError(method: string, err: unknown, callerAborted = false): LeaseholdError {
  if (err instanceof LeaseholdError) return err;
  const ce = ConnectError.from(err);
  if (ce.code === Code.Canceled && !callerAborted) {
    return errorFor("unavailable", `${method}: connection lost: ${ce.rawMessage}`, { cause: err });
  }
  const violations: FieldViolation[] = [];
  for (const br of ce.findDetails(BadRequestSchema)) {
    for (const v of br.fieldViolations) violations.push({ field: v.field, description: v.description });
  }
  const info = ce.findDetails(ErrorInfoSchema)[0];
  const requestId = ce.findDetails(RequestInfoSchema)[0]?.requestId || ce.metadata.get("x-request-id") || undefined;
  return errorFor(CODE_NAMES[ce.code] ?? "unknown", `${method}: ${ce.rawMessage}`, {
    requestId,
    violations,
    reason: info?.reason ?? "",
    metadata: info ? { ...info.metadata } : {},
    cause: err,
  });
}

/** Thrown by `Worker.run()` at start: a workload without a handler, a token, worker id, labels or workload the coordinator refuses. */
export class WorkerConfigError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "WorkerConfigError";
  }
}
