// The one place that decides what a failure looks like to a client: typed queue
// errors (src/queue/errors.ts) → Connect Code → HTTP status. The HTTP status
// comes from connect-es's own Code → status table, so REST and the Connect
// protocol always agree. Anything unexpected is INTERNAL with a generic
// message: database text and stacks stay in the server log. Errors carry the
// standard rich details: google.rpc.RequestInfo (the request id) always,
// google.rpc.BadRequest (every field violation) for invalid input, and
// google.rpc.ErrorInfo (reason WORKLOAD_NOT_FOUND) for a workload nobody
// registered, wherever the request named it; REST bodies carry the same
// violations as a list, and the reason.

import type { DescMessage } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { codeToHttpStatus, codeToString } from "@connectrpc/connect/protocol-connect";
import { BadRequestSchema, ErrorInfoSchema, RequestInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import {
  DeadlineExceededError,
  FailedPreconditionError,
  IdempotencyConflictError,
  LeaseConflictError,
  NotFoundError,
  PermissionDeniedError,
  QueueError,
  QuotaExceededError,
  ResultConflictError,
  SettlementConflictError,
  UnauthenticatedError,
  UnavailableError,
  ValidationError,
  type FieldViolation,
} from "../queue/errors.js";
import type { RequestInfo } from "./request-info.js";

export const REQUEST_ID_HEADER = "x-request-id";
export const INTERNAL_MESSAGE = "internal error";

export interface MappedError {
  code: Code;
  /** HTTP status of a REST (and Connect unary) answer. */
  httpStatus: number;
  /** Connect code name as on the wire, e.g. "invalid_argument". */
  codeName: string;
  /** Safe to show to a client. */
  message: string;
  /** True when the error was not one we expected: log it with its cause. */
  internal: boolean;
  /** Invalid input: every broken rule, by field (google.rpc.BadRequest). */
  violations?: readonly FieldViolation[];
  /** An unknown workload: the name asked for, the field that named it, and (when looked up) the registered ones (google.rpc.ErrorInfo). */
  unknownWorkload?: UnknownWorkload;
}

/** google.rpc.ErrorInfo of an unknown workload: reason and domain, as the proto documents them. */
export const WORKLOAD_NOT_FOUND = { reason: "WORKLOAD_NOT_FOUND", domain: "leasehold" } as const;

export interface UnknownWorkload {
  workload: string;
  field: string;
  /** the first of the registered workloads (queue/errors.ts KNOWN_WORKLOADS_SHOWN) */
  known?: readonly string[];
  /** how many are registered, when more than `known` lists */
  knownTotal?: number;
}

/**
 * The ErrorInfo metadata of an unknown workload: workload, field, and known_workloads
 * (comma-separated, the first ones) when looked up, with known_workloads_total when there are more.
 */
export function unknownWorkloadMetadata(u: UnknownWorkload): Record<string, string> {
  const metadata: Record<string, string> = { workload: u.workload, field: u.field };
  if (u.known) metadata.known_workloads = u.known.join(",");
  if (u.knownTotal !== undefined && u.known && u.knownTotal > u.known.length) metadata.known_workloads_total = String(u.knownTotal);
  return metadata;
}

/** Transport-level failures raised by the REST layer (bad JSON, unknown route…). */
export class HttpError extends Error {
  constructor(
    readonly code: Code,
    message: string,
    readonly httpStatus: number = codeToHttpStatus(code),
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
    this.name = "HttpError";
  }
}

function codeOfQueueError(err: QueueError): Code | undefined {
  if (err instanceof ValidationError) return Code.InvalidArgument;
  if (err instanceof NotFoundError) return Code.NotFound;
  if (err instanceof LeaseConflictError) return Code.Aborted;
  if (err instanceof ResultConflictError || err instanceof IdempotencyConflictError || err instanceof SettlementConflictError)
    return Code.AlreadyExists;
  if (err instanceof QuotaExceededError) return Code.ResourceExhausted;
  if (err instanceof UnavailableError) return Code.Unavailable;
  if (err instanceof DeadlineExceededError) return Code.DeadlineExceeded;
  if (err instanceof UnauthenticatedError) return Code.Unauthenticated;
  if (err instanceof PermissionDeniedError) return Code.PermissionDenied;
  if (err instanceof FailedPreconditionError) return Code.FailedPrecondition;
  return undefined;
}

function mapped(code: Code, message: string, internal = false, httpStatus = codeToHttpStatus(code)): MappedError {
  return { code, httpStatus, codeName: codeToString(code), message, internal };
}

/** Maps any thrown value to what the client may see. */
export function mapError(err: unknown): MappedError {
  if (err instanceof HttpError) return mapped(err.code, err.message, false, err.httpStatus);
  if (err instanceof QueueError) {
    const code = codeOfQueueError(err);
    if (code === undefined) return mapped(Code.Internal, INTERNAL_MESSAGE, true);
    const m = mapped(code, err.message);
    if (err instanceof ValidationError) m.violations = err.violations;
    // Every unknown workload, whichever field named it (a job's, a task's, a finalizer's, a
    // template's, a claim's): one reason, so a client tells it apart from an unknown job or task.
    if (err instanceof NotFoundError && err.entity === "workload") {
      m.unknownWorkload = {
        workload: err.id,
        field: err.field,
        ...(err.known ? { known: err.known } : {}),
        ...(err.knownTotal !== undefined && err.known && err.knownTotal > err.known.length ? { knownTotal: err.knownTotal } : {}),
      };
    }
    return m;
  }
  if (err instanceof ConnectError) {
    // Ours (from toConnectError): the cause is the original error.
    if (err.cause instanceof QueueError || err.cause instanceof HttpError) return mapError(err.cause);
    // Raised by connect-es itself (bad request framing, limits, deadline): its messages are safe,
    // except for internal/unknown ones, which may wrap anything.
    if (err.code === Code.Internal || err.code === Code.Unknown) return mapped(Code.Internal, INTERNAL_MESSAGE, true);
    return mapped(err.code, err.rawMessage);
  }
  return mapped(Code.Internal, INTERNAL_MESSAGE, true);
}

/**
 * Records a failed request on its RequestInfo (the log line's code, and the error itself when it
 * was unexpected) and returns what the client may see. The first failure recorded wins: an RPC's
 * own outcome is not overwritten by the transport that reports it.
 */
export function recordFailure(info: RequestInfo, err: unknown): MappedError {
  const m = mapError(err);
  info.code ??= m.codeName;
  info.errorType ??= err instanceof Error ? err.name : "Error";
  if (m.internal) info.error ??= err;
  return m;
}

/**
 * The ConnectError a handler throws: code and safe message from mapError; the
 * request id as error metadata (gRPC sends it as a trailer, Connect as a header)
 * and as a google.rpc.RequestInfo detail, not in the message (clients print the
 * message, and would print the id again); field violations as a
 * google.rpc.BadRequest detail; the original error kept as `cause`.
 */
export function toConnectError(err: unknown, requestId: string): ConnectError {
  const m = mapError(err);
  const details: ConstructorParameters<typeof ConnectError>[3] = [];
  if (m.violations && m.violations.length > 0) {
    details.push({
      desc: BadRequestSchema,
      value: { fieldViolations: m.violations.map((v) => ({ field: v.field, description: v.description })) },
    });
  }
  if (m.unknownWorkload) {
    details.push({
      desc: ErrorInfoSchema,
      value: { ...WORKLOAD_NOT_FOUND, metadata: unknownWorkloadMetadata(m.unknownWorkload) },
    });
  }
  details.push({ desc: RequestInfoSchema, value: { requestId } });
  return new ConnectError(m.message, m.code, { [REQUEST_ID_HEADER]: requestId }, details, err);
}

/**
 * A request message that cannot be decoded (a wrong wire type or a truncated field in binary, a
 * value of the wrong type in JSON): a client mistake, so INVALID_ARGUMENT with a BadRequest
 * naming the field where the decoder names one (else the message) and what failed, the same on
 * gRPC, Connect binary and Connect JSON. The decoder's error stays as the cause, for the log.
 */
export function undecodable(schema: DescMessage, format: "binary" | "JSON", err: unknown): ValidationError {
  const typeName = schema.typeName;
  const text = err instanceof Error ? err.message : String(err);
  const field = /cannot decode field [\w.]+\.(\w+) from/.exec(text)?.[1] ?? enumField(schema, text) ?? typeName;
  const detail = text.startsWith("cannot decode") ? text : `cannot decode ${typeName} from ${format}: ${text}`;
  const v = new ValidationError(field, detail);
  v.cause = err;
  return v;
}

/**
 * protobuf-es names only the enum of a JSON enum value it cannot decode ("cannot decode enum
 * leasehold.queue.v1.JobView from JSON: …"): the message's one top-level field of that enum, when
 * it has exactly one, is the field to name.
 */
function enumField(schema: DescMessage, text: string): string | undefined {
  const name = /^cannot decode enum ([\w.]+) from JSON/.exec(text)?.[1];
  if (name === undefined) return undefined;
  const fields = schema.fields.filter(
    (f) => (f.fieldKind === "enum" || (f.fieldKind === "list" && f.listKind === "enum")) && f.enum?.typeName === name,
  );
  return fields.length === 1 ? fields[0].name : undefined;
}

export interface RestErrorBody {
  error: {
    code: string;
    message: string;
    request_id: string;
    violations?: { field: string; description: string }[];
    /** google.rpc.ErrorInfo's reason, e.g. WORKLOAD_NOT_FOUND */
    reason?: string;
    known_workloads?: string[];
    /** how many workloads are registered, when more than known_workloads lists */
    known_workloads_total?: number;
  };
}

/** Body of a REST error answer; `violations` only for invalid input, `reason` and `known_workloads` only for an unknown workload. */
export function restErrorBody(m: MappedError, requestId: string): RestErrorBody {
  const body: RestErrorBody = { error: { code: m.codeName, message: m.message, request_id: requestId } };
  if (m.violations && m.violations.length > 0)
    body.error.violations = m.violations.map((v) => ({ field: v.field, description: v.description }));
  if (m.unknownWorkload) {
    body.error.reason = WORKLOAD_NOT_FOUND.reason;
    if (m.unknownWorkload.known) body.error.known_workloads = [...m.unknownWorkload.known];
    if (m.unknownWorkload.knownTotal !== undefined) body.error.known_workloads_total = m.unknownWorkload.knownTotal;
  }
  return body;
}
