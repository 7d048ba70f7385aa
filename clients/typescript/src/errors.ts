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
 * and read `code`: a subclass's `code` is always its own (`DeadlineExceededError` is
 * `"deadline_exceeded"`, wherever it was made); this class itself carries the codes without one
 * (`"unimplemented"`, `"cancelled"`, `"unknown"`, ...).
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
  /** The code in snake case (`"not_found"`, `"aborted"`, ...): the Connect code of the class, or the one given to this class. */
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
    // A subclass's code is its own, whatever `init` says: `code` and the class never disagree.
    this.code = classCode(new.target) ?? init.code ?? "unknown";
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
export class InvalidArgumentError extends LeaseholdError {
  declare readonly code: "invalid_argument";
}
/** The job, task, workload or schedule does not exist (an unknown workload: `reason` `WORKLOAD_NOT_FOUND`). */
export class NotFoundError extends LeaseholdError {
  declare readonly code: "not_found";
}
/** A stale, foreign or expired lease, or a cancelled or finished task. */
export class AbortedError extends LeaseholdError {
  declare readonly code: "aborted";
}
/** A conflicting result manifest, idempotency key or schedule. */
export class AlreadyExistsError extends LeaseholdError {
  declare readonly code: "already_exists";
}
/** The call is not allowed in the object's state (e.g. retrying a job that has not failed). */
export class FailedPreconditionError extends LeaseholdError {
  declare readonly code: "failed_precondition";
}
/** No token, or a token the coordinator does not know. */
export class UnauthenticatedError extends LeaseholdError {
  declare readonly code: "unauthenticated";
}
/** The token's role may not make this call (or act as this worker id). */
export class PermissionDeniedError extends LeaseholdError {
  declare readonly code: "permission_denied";
}
/**
 * The coordinator (or its database) cannot be reached now; worth retrying. Without a `requestId` the
 * coordinator never answered: the connection was refused or lost, or TLS could not be spoken with it
 * (the message says which).
 */
export class UnavailableError extends LeaseholdError {
  declare readonly code: "unavailable";
}
/**
 * A quota is used up (an account's max_pending_tasks; the message names the numbers). Not an
 * UnavailableError: trying again at once is refused again until the quota frees up.
 */
export class ResourceExhaustedError extends LeaseholdError {
  declare readonly code: "resource_exhausted";
}
/** The call's deadline passed (`timeoutMs` of the client, or of a `wait`/`watch`). */
export class DeadlineExceededError extends LeaseholdError {
  declare readonly code: "deadline_exceeded";
}
/** The coordinator failed; its log line carries the request id. */
export class InternalError extends LeaseholdError {
  declare readonly code: "internal";
}

type ErrorClass = new (message: string, init?: LeaseholdErrorInit) => LeaseholdError;

/** Each code that has a class of its own, and that class; every other code is a plain LeaseholdError. */
const CLASSES: Partial<Record<ErrorCode, ErrorClass>> = {
  invalid_argument: InvalidArgumentError,
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

const CLASS_CODES = new Map<object, ErrorCode>(Object.entries(CLASSES).map(([code, cls]) => [cls, code as ErrorCode]));

/** The code of `cls` or of the nearest of its ancestors that has one (a user's subclass of NotFoundError is not_found). */
function classCode(cls: object): ErrorCode | undefined {
  for (let c: object | null = cls; c && c !== LeaseholdError; c = Object.getPrototypeOf(c) as object | null) {
    const code = CLASS_CODES.get(c);
    if (code) return code;
  }
  return undefined;
}

/** The error of `code` (its subclass where there is one). */
export function errorFor(code: ErrorCode, message: string, init: Omit<LeaseholdErrorInit, "code"> = {}): LeaseholdError {
  const cls = CLASSES[code] ?? LeaseholdError;
  return new cls(message, { ...init, code });
}

/** What a failed call's error is read with besides the call's name. */
export interface CallContext {
  /** The base URL the call went to, named in the errors of a server that is not the coordinator. */
  url?: string;
  /** Whether the caller aborted the call (its own signal): a "cancelled" end is then the caller's, not a lost connection. */
  callerAborted?: boolean;
}

/**
 * Any error thrown by a call of `method` as a LeaseholdError, its rich details read. A call the
 * caller did not abort that ends "cancelled" lost its connection (an HTTP/2 stream or session
 * reset by the network or a proxy): that is `unavailable`, as a refused connection is, on every
 * transport alike. A TLS handshake that fails (a cleartext port, an untrusted certificate) is
 * `unavailable` too, with a message that says so, rather than OpenSSL's text as `internal`; and a
 * server that has no such method (a 404: not the coordinator, or a path in the URL that no proxy
 * strips) says where the call went.
 */
export function toLeaseholdError(method: string, err: unknown, context: CallContext = {}): LeaseholdError {
  if (err instanceof LeaseholdError) return err;
  const ce = ConnectError.from(err);
  const tls = tlsFailure(ce, context.url);
  if (tls) return errorFor("unavailable", `${method}: ${tls}`, { cause: err });
  if (ce.code === Code.Canceled && !context.callerAborted) {
    return errorFor("unavailable", `${method}: connection lost: ${ce.rawMessage}`, { cause: err });
  }
  const violations: FieldViolation[] = [];
  for (const br of ce.findDetails(BadRequestSchema)) {
    for (const v of br.fieldViolations) violations.push({ field: v.field, description: v.description });
  }
  const info = ce.findDetails(ErrorInfoSchema)[0];
  const requestId = ce.findDetails(RequestInfoSchema)[0]?.requestId || ce.metadata.get("x-request-id") || undefined;
  const message = ce.code === Code.Unimplemented ? notServed(method, ce.rawMessage, context.url) : `${method}: ${ce.rawMessage}`;
  return errorFor(CODE_NAMES[ce.code] ?? "unknown", message, {
    requestId,
    violations,
    reason: info?.reason ?? "",
    metadata: info ? { ...info.metadata } : {},
    cause: err,
  });
}

/** The certificate checks that fail in this process (Node's codes for OpenSSL's verify results and its host name check). */
const TLS_VERIFY_CODES = new Set([
  "DEPTH_ZERO_SELF_SIGNED_CERT",
  "SELF_SIGNED_CERT_IN_CHAIN",
  "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
  "UNABLE_TO_GET_ISSUER_CERT",
  "UNABLE_TO_GET_ISSUER_CERT_LOCALLY",
  "CERT_HAS_EXPIRED",
  "CERT_NOT_YET_VALID",
  "CERT_UNTRUSTED",
  "CERT_REJECTED",
  "CERT_SIGNATURE_FAILURE",
  "ERR_TLS_CERT_ALTNAME_INVALID",
]);

/** Why TLS could not be spoken with the server, from the error's causes; undefined when that was not the failure. */
function tlsFailure(ce: ConnectError, url: string | undefined): string | undefined {
  const where = url ?? "the server";
  for (let cause: unknown = ce.cause; cause instanceof Error; cause = cause.cause) {
    const code = String((cause as Error & { code?: unknown }).code ?? "");
    if (code === "ERR_SSL_WRONG_VERSION_NUMBER" || /wrong version number/.test(cause.message)) {
      // OpenSSL read a cleartext answer (an HTTP/1.1 400) where a TLS record should be.
      return `${where} does not speak TLS (it answered in cleartext): use http:// for a cleartext coordinator, or serve TLS on it`;
    }
    if (TLS_VERIFY_CODES.has(code)) {
      return `TLS: ${where} has a certificate this process does not trust (${cause.message}): pass \`ca\` with the PEM certificate that signed it`;
    }
    if (code === "EPROTO" || code.startsWith("ERR_SSL_")) return `TLS with ${where} failed (${cause.message.trim()})`;
  }
  return undefined;
}

/**
 * A method the server does not serve (Connect's 404 arrives with an empty message): name where the
 * call went, and the URL's path, which Connect keeps as the prefix of every call's path.
 */
function notServed(method: string, raw: string, url: string | undefined): string {
  const answered = raw ? ` (${raw})` : "";
  const service = `leasehold.queue.v1.QueueService/${method}`;
  const which = `is it a Leasehold coordinator, of a release that has ${method}?`;
  if (!url) return `${method}: the server has no ${service}${answered}: ${which}`;
  const { pathname, origin } = new URL(url);
  const prefix = pathname.replace(/\/+$/, "");
  if (!prefix) return `${method}: ${url} has no ${service}${answered}: ${which}`;
  return (
    `${method}: ${url} has no ${prefix}/${service}${answered}: the URL's path ${prefix} is kept ` +
    `as the prefix of every call, for a proxy that serves the coordinator under it; without one, use ${origin}`
  );
}

/** Thrown by `Worker.run()` at start: a workload without a handler, a token, worker id, labels or workload the coordinator refuses. */
export class WorkerConfigError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "WorkerConfigError";
  }
}
