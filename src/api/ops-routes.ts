// The operational routes beside the API: GET /healthz (the process answers), GET /readyz (the
// database answers and the schema is current) and GET /metrics (Prometheus).
import { Code } from "@connectrpc/connect";
import type { Logger } from "pino";
import type { ApiMetrics } from "../telemetry/metrics.js";
import type { Authenticator } from "./auth.js";
import { HttpError } from "./errors.js";
import { PermissionDeniedError } from "../queue/errors.js";
import type { Role } from "../config/index.js";
import type { NodeRequest, NodeResponse } from "./node-http.js";
import { sendJson } from "./respond.js";
import type { RequestInfo } from "./request-info.js";

export interface OpsRoutesOptions {
  logger: Logger;
  readiness: () => Promise<{ ready: boolean; detail?: string }>;
  /** With tokens configured, /metrics needs an admin or metrics token; /healthz and /readyz stay open. */
  auth?: Authenticator;
  /** Undefined: /metrics is a 404 (answered by the API's fallback). */
  metrics?: ApiMetrics;
}

/** The roles that may scrape /metrics when tokens are configured. */
export const METRICS_ROLES: readonly Role[] = ["admin", "metrics"];

export type OpsRoutes = (req: NodeRequest, res: NodeResponse, pathname: string, info: RequestInfo) => Promise<boolean>;

function allowGet(req: NodeRequest, pathname: string): void {
  if (req.method !== "GET" && req.method !== "HEAD") {
    throw new HttpError(Code.Unimplemented, `method ${req.method} is not allowed on ${pathname}`, 405, { allow: "GET, HEAD" });
  }
}

/** Serves pathname if it is an operational route (resolving true); errors are thrown as HttpError / queue errors. */
export function createOpsRoutes(opts: OpsRoutesOptions): OpsRoutes {
  return async (req, res, pathname, info) => {
    if (pathname === "/healthz" || pathname === "/readyz") {
      info.protocol = "http";
      info.operation = pathname.slice(1);
      allowGet(req, pathname);
      if (pathname === "/healthz") {
        sendJson(res, 200, { status: "ok" });
        return true;
      }
      let r: { ready: boolean; detail?: string };
      try {
        r = await opts.readiness();
      } catch (err) {
        opts.logger.warn({ err, request_id: info.requestId }, "readiness check failed");
        r = { ready: false, detail: "readiness check failed" };
      }
      // A ready answer may carry a note too (the MVCC horizon held back): still 200.
      const body = r.ready
        ? { status: "ready", ...(r.detail ? { detail: r.detail } : {}) }
        : { status: "not_ready", detail: r.detail ?? "" };
      sendJson(res, r.ready ? 200 : 503, body);
      return true;
    }
    if (pathname === "/metrics" && opts.metrics) {
      info.protocol = "http";
      info.operation = "metrics";
      allowGet(req, pathname);
      // With tokens configured, an admin or a metrics (scrape) token: the counts are every account's
      // and every workload's, which no other role may read (401 or 403 in the REST error shape).
      if (opts.auth) {
        const role = opts.auth.authenticate(req.headers.authorization).role;
        info.role = role;
        if (!METRICS_ROLES.includes(role))
          throw new PermissionDeniedError(`a ${role} token may not read /metrics (admin and metrics tokens may)`);
      }
      const text = await opts.metrics.render();
      res.statusCode = 200;
      res.setHeader("content-type", opts.metrics.contentType);
      res.setHeader("content-length", Buffer.byteLength(text));
      if (req.method === "HEAD") res.end();
      else res.end(text);
      return true;
    }
    return false;
  };
}
