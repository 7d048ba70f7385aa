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
// - Connect unary: a non-200 answer's JSON body.
// A Connect stream's end message is left as connect-es writes it, and so is a REST call's answer
// (rest-errors.ts maps it).

import type { DescMethod } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  createAsyncIterable,
  type UniversalHandler,
  type UniversalServerRequest,
  type UniversalServerResponse,
} from "@connectrpc/connect/protocol";
import { codeToHttpStatus, errorFromJsonBytes, errorToJsonBytes } from "@connectrpc/connect/protocol-connect";
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

/** A gRPC-Web body whose first frame is the trailer: its status, rewritten when it is the decoder's. */
async function grpcWebBody(
  req: UniversalServerRequest,
  method: DescMethod,
  body: AsyncIterable<Uint8Array>,
): Promise<AsyncIterable<Uint8Array>> {
  const it = body[Symbol.asyncIterator]();
  const first = await it.next();
  const rest: AsyncIterable<Uint8Array> = { [Symbol.asyncIterator]: () => it };
  if (first.done) return rest;
  const frame = first.value;
  const found = frame[0] === trailerFlag && frame.length >= 5 ? decoderError(findTrailerError(trailerParse(frame.subarray(5)))) : undefined;
  let head = frame;
  if (found) {
    const trailer = new Headers();
    setTrailerStatus(trailer, refusal(req, method, found));
    const data = trailerSerialize(trailer);
    head = new Uint8Array(5 + data.length);
    head[0] = trailerFlag;
    new DataView(head.buffer).setUint32(1, data.length);
    head.set(data, 5);
  }
  return (async function* () {
    yield head;
    yield* rest;
  })();
}

async function rewrite(req: UniversalServerRequest, method: DescMethod, res: UniversalServerResponse): Promise<UniversalServerResponse> {
  // A REST call reaches the router as Connect JSON in process, and rest-errors.ts maps its errors
  // (naming the field from the request's JSON, which only it still holds).
  if (req.contextValues?.get(requestInfoKey)?.protocol === "rest") return res;
  const type = req.header.get("content-type") ?? "";
  if (type.startsWith("application/grpc-web")) {
    return res.body === undefined || !(Symbol.asyncIterator in res.body)
      ? res
      : { ...res, body: await grpcWebBody(req, method, res.body as AsyncIterable<Uint8Array>) };
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
