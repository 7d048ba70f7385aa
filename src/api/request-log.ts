// One log line per request, whatever answered it: the RPC handlers, the REST layer, connect-es
// itself (bad framing, limits) or the operational routes.
import { performance } from "node:perf_hooks";
import type { Code } from "@connectrpc/connect";
import { codeToString } from "@connectrpc/connect/protocol-connect";
import type { Logger } from "pino";
import type { NodeRequest, NodeResponse } from "./node-http.js";
import type { RequestInfo } from "./request-info.js";

/** Writes the request's line when its response closes (finished or aborted). */
export function logWhenClosed(logger: Logger, req: NodeRequest, res: NodeResponse, info: RequestInfo, path: string): void {
  const start = performance.now();
  res.once("close", () => {
    let code = info.code;
    if (code === undefined) {
      // Answered by connect-es itself (bad framing, limits): trailers-only gRPC errors have the status in the headers.
      const grpcStatus = res.getHeader("grpc-status");
      if (grpcStatus !== undefined) code = Number(grpcStatus) === 0 ? "ok" : codeToString(Number(grpcStatus) as Code);
    }
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
      duration_ms: Math.round((performance.now() - start) * 1000) / 1000,
      aborted: res.writableFinished ? undefined : true,
    };
    if (info.error !== undefined) logger.error({ ...line, err: info.error }, "request failed");
    else logger.info(line, "request");
  });
}
