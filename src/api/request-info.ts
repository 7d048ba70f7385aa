// The facts of one request that outlive its handler: gathered by the interceptors (interceptors.ts),
// the REST layer and the dispatch (server.ts), read by the request log line (request-log.ts), the
// RPC span and metrics, and the REST layer's choice of status.
import { randomUUID } from "node:crypto";
import { createContextKey, type ContextValues } from "@connectrpc/connect";

export interface RequestInfo {
  requestId: string;
  /** "rest", "connect", "grpc", "grpc-web" or "http". */
  protocol?: string;
  /** RPC name, e.g. "ClaimTasks". */
  operation?: string;
  taskId?: string;
  jobId?: string;
  workerId?: string;
  /** A long poll's wait_seconds (a claim's, or a result's claim_next), in ms: not slowness. */
  waitMs?: number;
  /** Role of the caller's bearer token (unset when the API is open or the token was refused). */
  role?: string;
  /** Connect code name of the outcome ("ok", "aborted", …) when the handler ran. */
  code?: string;
  /** CreateJob: false for an idempotent replay (REST answers 200 instead of 201). */
  created?: boolean;
  /** Why the request was refused before its handler ran (a message that cannot be decoded): logged. */
  refusal?: string;
  /** A failure's error type (NotFoundError, ValidationError, …), for the RPC span. */
  errorType?: string;
  /** An unexpected error (mapped to INTERNAL): logged server side, never sent. */
  error?: unknown;
}

/** Carries the RequestInfo of the current request into the interceptors and handlers. */
export const requestInfoKey = createContextKey<RequestInfo | undefined>(undefined, { description: "leasehold request info" });

/** The protocol a request to the Connect router speaks, by its content type. */
export function protocolOf(contentType: string | null | undefined): string {
  const ct = contentType ?? "";
  if (ct.startsWith("application/grpc-web")) return "grpc-web";
  if (ct.startsWith("application/grpc")) return "grpc";
  return "connect";
}

/**
 * The RequestInfo of a call. The server always provides one; a router used on its own
 * (createRouterTransport in a test) gets one made up here.
 */
export function requestInfoOf(values: ContextValues, header: Headers): RequestInfo {
  let info = values.get(requestInfoKey);
  if (!info) {
    info = { requestId: header.get("x-request-id") ?? randomUUID() };
    values.set(requestInfoKey, info);
  }
  info.protocol ??= protocolOf(header.get("content-type"));
  return info;
}
