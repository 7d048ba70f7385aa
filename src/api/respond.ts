// Plain JSON answers of the HTTP surface outside the RPC protocols: REST bodies and errors, the
// operational routes, the 404 of an unknown path.

import { Http2ServerResponse } from "node:http2";
import { endResponse } from "./body.js";
import { HttpError, recordFailure, restErrorBody } from "./errors.js";
import type { RequestInfo } from "./request-info.js";
import type { NodeResponse } from "./node-http.js";

export function sendJson(res: NodeResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  if (res.headersSent) {
    res.end();
    return;
  }
  for (const [k, v] of Object.entries(headers)) {
    // Connection-specific headers are HTTP/1.1 only; HTTP/2 forbids them.
    if (k === "connection" && res instanceof Http2ServerResponse) continue;
    res.setHeader(k, v);
  }
  res.setHeader("content-type", "application/json");
  res.setHeader("content-length", Buffer.byteLength(text));
  res.statusCode = status;
  endResponse(res, text);
}

export function writeError(res: NodeResponse, err: unknown, info: RequestInfo): void {
  const m = recordFailure(info, err);
  sendJson(res, m.httpStatus, restErrorBody(m, info.requestId), err instanceof HttpError ? err.headers : {});
}
