// connect-es decodes a request's message before any interceptor runs, and answers one it cannot
// decode as its own error: INTERNAL "parse binary: …" for binary (its serialization.ts), and
// INVALID_ARGUMENT without details for JSON. The direct paths answer both as the client mistake
// they are (refuseUndecodable: INVALID_ARGUMENT, a BadRequest naming what failed, the request
// id). This wraps each of the router's handlers so that what the router serves (every call with
// DIRECT_UNARY=false, and compressed requests, gRPC-Web and streams always) answers the same.
// connect-es has no hook for it, so the wrapper reads the router's answer in the one place each
// protocol puts an error, and only when it is that error:
// - gRPC: the trailers (the handler has set them before it returns);
// - gRPC-Web: the first frame of the body, a trailer frame, already read by the handler;
// - Connect unary: a non-200 answer's JSON body;
// - a Connect stream (WatchJob): the first frame of the body, the end-stream message.
// A REST call's answer is left as it is (rest-errors.ts maps it).

import type { DescMethod } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  createAsyncIterable,
  type UniversalHandler,
  type UniversalServerRequest,
  type UniversalServerResponse,
} from "@connectrpc/connect/protocol";
import {
  codeToHttpStatus,
  endStreamFlag,
  endStreamFromJson,
  endStreamToJson,
  errorFromJsonBytes,
  errorToJsonBytes,
} from "@connectrpc/connect/protocol-connect";
import { findTrailerError, setTrailerStatus } from "@connectrpc/connect/protocol-grpc";
import { trailerFlag, trailerParse, trailerSerialize } from "@connectrpc/connect/protocol-grpc-web";
import { refuseUndecodable } from "./direct/invoke.js";
import { readAll } from "./direct/router.js";
import { requestInfoKey } from "./request-info.js";

const PARSE_BINARY = "parse binary: ";

/** The decoder's own error, as connect-es reported it, or undefined for any other answer. */
function decoderError(err: ConnectError | undefined): { format: "binary" | "JSON"; cause: Error } | undefined {
  if (!err || err.details.length > 0) return undefined;
  if (err.code === Code.Internal && err.rawMessage.startsWith(PARSE_BINARY))
    return { format: "binary", cause: new Error(err.rawMessage.slice(PARSE_BINARY.length)) };
  if (err.code === Code.InvalidArgument && err.rawMessage.startsWith("cannot decode "))
    return { format: "JSON", cause: new Error(err.rawMessage) };
  return undefined;
}

function refusal(req: UniversalServerRequest, method: DescMethod, found: { format: "binary" | "JSON"; cause: Error }): ConnectError {
  const info = req.contextValues?.get(requestInfoKey) ?? { requestId: "" };
  return refuseUndecodable(info, method, found.format, found.cause);
}

/** A frame: the flag byte, the length, the data. */
function frame(flag: number, data: Uint8Array): Uint8Array {
  const f = new Uint8Array(5 + data.length);
  f[0] = flag;
  new DataView(f.buffer).setUint32(1, data.length);
  f.set(data, 5);
  return f;
}

/**
 * A streamed body whose first frame `change` may replace (an error answered before any message is
 * the first frame and the last). Rewritten as it flows, so nothing here waits for a stream's first
 * message (a resumed watch on a quiet job may send none for a long time).
 */
function withFirstFrame(body: AsyncIterable<Uint8Array>, change: (first: Uint8Array) => Uint8Array | undefined): AsyncIterable<Uint8Array> {
  return (async function* () {
    let first = true;
    for await (const chunk of body) {
      yield first && chunk.length >= 5 ? (change(chunk) ?? chunk) : chunk;
      first = false;
    }
  })();
}

/** gRPC-Web: a trailer frame whose status is the decoder's error, rewritten. */
function grpcWebFrame(req: UniversalServerRequest, method: DescMethod, first: Uint8Array): Uint8Array | undefined {
  if (first[0] !== trailerFlag) return undefined;
  const found = decoderError(findTrailerError(trailerParse(first.subarray(5))));
  if (!found) return undefined;
  const trailer = new Headers();
  setTrailerStatus(trailer, refusal(req, method, found));
  return frame(trailerFlag, trailerSerialize(trailer));
}

/** A Connect stream: an end-stream message whose error is the decoder's, rewritten (its metadata kept). */
function connectStreamFrame(req: UniversalServerRequest, method: DescMethod, first: Uint8Array): Uint8Array | undefined {
  if (first[0] !== endStreamFlag) return undefined;
  let end: ReturnType<typeof endStreamFromJson>;
  try {
    end = endStreamFromJson(first.subarray(5));
  } catch {
    return undefined;
  }
  const found = decoderError(end.error);
  if (!found) return undefined;
  const json = endStreamToJson(end.metadata, refusal(req, method, found), {});
  return frame(endStreamFlag, new TextEncoder().encode(JSON.stringify(json)));
}

const isStream = (body: UniversalServerResponse["body"]): body is AsyncIterable<Uint8Array> =>
  body !== undefined && Symbol.asyncIterator in body;

async function rewrite(req: UniversalServerRequest, method: DescMethod, res: UniversalServerResponse): Promise<UniversalServerResponse> {
  // A REST call reaches the router as Connect JSON in process, and rest-errors.ts maps its errors
  // (naming the field from the request's JSON, which only it still holds).
  if (req.contextValues?.get(requestInfoKey)?.protocol === "rest") return res;
  const type = req.header.get("content-type") ?? "";
  if (type.startsWith("application/grpc-web")) {
    return isStream(res.body) ? { ...res, body: withFirstFrame(res.body, (f) => grpcWebFrame(req, method, f)) } : res;
  }
  if (type.startsWith("application/connect+")) {
    return isStream(res.body) && res.status === 200
      ? { ...res, body: withFirstFrame(res.body, (f) => connectStreamFrame(req, method, f)) }
      : res;
  }
  if (type.startsWith("application/grpc")) {
    const found = res.trailer ? decoderError(findTrailerError(res.trailer)) : undefined;
    if (found && res.trailer) setTrailerStatus(res.trailer, refusal(req, method, found));
    return res;
  }
  // Connect unary: an error answer is a small JSON body (compressed only when large); a stream's
  // answer is always 200.
  if (res.status === 200 || res.body === undefined || res.header?.has("content-encoding")) return res;
  const bytes = res.body instanceof Uint8Array ? res.body : await readAll(res.body as AsyncIterable<Uint8Array>);
  let err: ConnectError | undefined;
  try {
    err = errorFromJsonBytes(bytes, undefined, new ConnectError("", Code.Unknown));
  } catch {
    err = undefined;
  }
  const found = decoderError(err);
  if (!found) return { ...res, body: createAsyncIterable([bytes]) };
  const refused = refusal(req, method, found);
  const body = errorToJsonBytes(refused, {});
  res.header?.set("content-length", String(body.byteLength));
  return { ...res, status: codeToHttpStatus(refused.code), body: createAsyncIterable([body]) };
}

/** The router's handler, answering a message it cannot decode as the direct paths do. */
export function withUndecodableRefused(handler: UniversalHandler): UniversalHandler {
  const wrapped = async (req: UniversalServerRequest) => rewrite(req, handler.method, await handler(req));
  return Object.assign(wrapped, handler);
}
