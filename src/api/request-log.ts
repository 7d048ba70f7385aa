// One log line per request, whatever answered it: the RPC handlers, the REST layer, connect-es
// itself (bad framing, limits) or the operational routes. Its level says who needs it: at queue
// rates the workers' own calls (claims, heartbeats, results, progress) would be thousands of info
// lines a second, so their successes are debug; an operator's warn level still sees the server's
// failures, and info adds client mistakes, slow calls and every other call.
import { performance } from "node:perf_hooks";
import type { Code } from "@connectrpc/connect";
import { codeToString } from "@connectrpc/connect/protocol-connect";
import type { Level, Logger } from "pino";
import type { NodeRequest, NodeResponse } from "./node-http.js";
import type { RequestInfo } from "./request-info.js";

/** The calls a worker makes for every task: their successes are logged at debug. */
export const HOT_OPERATIONS: ReadonlySet<string> = new Set([
  "ClaimTasks",
  "RenewLease",
  "CompleteTask",
  "CompleteTasks",
  "FailTask",
  "ReportProgress",
]);

/** Probes and scrapes (orchestrators' health checks, Prometheus): their successes come every few seconds per instance, so at debug. */
const PROBES: ReadonlySet<string> = new Set(["healthz", "readyz", "metrics"]);

/** Outcomes that are the server's trouble, not the caller's: logged at warn. */
const SERVER_CODES: ReadonlySet<string> = new Set(["unavailable", "deadline_exceeded", "internal", "unknown", "data_loss"]);

/** Answers that are long by design (a stream): never counted as slow. */
const STREAMS: ReadonlySet<string> = new Set(["WatchJob"]);

/** LOG_SLOW_MS's default. */
export const DEFAULT_SLOW_MS = 500;

/**
 * The level of a request's line: error for an unexpected failure (mapped to INTERNAL), warn for
 * another failure of the server (a 5xx, an unavailable database, a deadline), info for a client's
 * mistake, a slow call (beyond what a long poll asked to wait) or a call that is not a hot one,
 * debug for a hot call or a probe that succeeded in time.
 */
export function requestLevel(info: RequestInfo, status: number, code: string | undefined, durationMs: number, slowMs: number): Level {
  if (info.error !== undefined) return "error";
  if (status >= 500 || (code !== undefined && SERVER_CODES.has(code))) return "warn";
  if (isSlow(info, durationMs, slowMs)) return "info";
  const ok = code === undefined ? status < 400 : code === "ok";
  if (!ok) return "info";
  return info.operation !== undefined && (HOT_OPERATIONS.has(info.operation) || PROBES.has(info.operation)) ? "debug" : "info";
}

function isSlow(info: RequestInfo, durationMs: number, slowMs: number): boolean {
  if (info.operation !== undefined && STREAMS.has(info.operation)) return false;
  return durationMs - (info.waitMs ?? 0) >= slowMs;
}

/** Writes the request's line when its response closes (finished or aborted). */
export function logWhenClosed(
  logger: Logger,
  req: NodeRequest,
  res: NodeResponse,
  info: RequestInfo,
  path: string,
  slowMs = DEFAULT_SLOW_MS,
): void {
  const start = performance.now();
  res.once("close", () => {
    let code = info.code;
    if (code === undefined) {
      // Answered by connect-es itself (bad framing, limits): trailers-only gRPC errors have the status in the headers.
      const grpcStatus = res.getHeader("grpc-status");
      if (grpcStatus !== undefined) code = Number(grpcStatus) === 0 ? "ok" : codeToString(Number(grpcStatus) as Code);
    }
    const durationMs = Math.round((performance.now() - start) * 1000) / 1000;
    const level = requestLevel(info, res.statusCode, code, durationMs, slowMs);
    // A line below the logger's level is never built (most of the hot calls' lines at info).
    if (!logger.isLevelEnabled(level)) return;
    const line = {
      request_id: info.requestId,
      protocol: info.protocol,
      method: req.method,
      path,
      operation: info.operation,
      task_id: info.taskId,
      job_id: info.jobId,
      worker_id: info.workerId,
      role: info.role,
      status: res.statusCode,
      code,
      duration_ms: durationMs,
      slow: isSlow(info, durationMs, slowMs) ? true : undefined,
      aborted: res.writableFinished ? undefined : true,
      refusal: info.refusal,
    };
    if (level === "error") logger.error({ ...line, err: info.error }, "request failed");
    else logger[level](line, line.slow ? "slow request" : "request");
  });
}
