// Requests for the Connect router that are refused before connect-es sees them, so that the
// answer is one a plain HTTP client can read: a JSON error body that says what to send instead,
// and, for an over-limit body, an answer the client gets to read at all (see body.ts).
import { Code } from "@connectrpc/connect";
import { codeToString } from "@connectrpc/connect/protocol-connect";
import { bodyTooLarge, declaredLength, endResponse, lingerOnBody } from "./body.js";
import type { NodeRequest, NodeResponse } from "./node-http.js";
import type { RequestInfo } from "./request-info.js";

/** Media types of the Connect protocol (unary and streaming), with or without parameters. */
const CONNECT_CONTENT_TYPES = ["application/json", "application/proto", "application/connect+json", "application/connect+proto"];

function mediaType(req: NodeRequest): string {
  return String(req.headers["content-type"] ?? "")
    .split(";")[0]
    .trim()
    .toLowerCase();
}

function writeConnectError(res: NodeResponse, httpStatus: number, code: Code, message: string): void {
  const text = JSON.stringify({ code: codeToString(code), message });
  res.statusCode = httpStatus;
  res.setHeader("content-type", "application/json");
  res.setHeader("content-length", Buffer.byteLength(text));
  endResponse(res, text);
}

/**
 * Answers (and returns true for) a request the Connect router would refuse in a form a plain
 * HTTP client cannot use: a Connect POST with a content type outside the protocol (connect-es
 * answers 415 with an empty body; urllib posts form-encoded by default), and an HTTP/1.1 body
 * whose declared length is over the limit (connect-es would stop reading and close on the
 * upload). The protocol's own error shapes are kept: Connect JSON `{code, message}`, gRPC-Web
 * status headers.
 */
export function refuseBeforeConnect(req: NodeRequest, res: NodeResponse, info: RequestInfo, maxBodyBytes: number): boolean {
  const type = mediaType(req);
  const isGrpc = type.startsWith("application/grpc");
  if (!isGrpc && req.method === "POST" && !CONNECT_CONTENT_TYPES.includes(type)) {
    info.code = codeToString(Code.InvalidArgument);
    writeConnectError(
      res,
      415,
      Code.InvalidArgument,
      `content-type ${JSON.stringify(type || "(none)")} is not accepted here; send application/json (Connect JSON) or application/proto (Connect binary), or use gRPC / gRPC-Web`,
    );
    return true;
  }
  const declared = declaredLength(req);
  if (req.httpVersionMajor !== 1 || declared === undefined || declared <= maxBodyBytes) return false;
  const err = bodyTooLarge(maxBodyBytes);
  info.code = codeToString(err.code);
  lingerOnBody(req);
  if (isGrpc) {
    // gRPC-Web over HTTP/1.1: a trailers-only answer, the status in the headers.
    res.statusCode = 200;
    res.setHeader("content-type", type);
    res.setHeader("grpc-status", String(err.code));
    res.setHeader("grpc-message", encodeURIComponent(err.message));
    res.setHeader("content-length", 0);
    endResponse(res, "");
    return true;
  }
  writeConnectError(res, 413, err.code, err.message);
  return true;
}
