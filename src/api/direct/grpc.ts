// The gRPC protocol's unary calls on node:http2 directly: one length-prefixed protobuf message
// in, one out, the status in trailers, with the interceptor chain and the one service
// implementation invoked as every direct path invokes them (invoke.ts). A request this path does
// not take as it is (gRPC-Web, JSON codec, compression, a malformed grpc-timeout, HTTP/1.1, a server stream, a
// path that is not an RPC) goes to connect-es' router, which serves the same chain and
// implementation.
//
// Why: connect-es serves a gRPC unary call through its streaming machinery (async iterables,
// envelope transforms, a handler context with three AbortControllers, DOMExceptions from its
// aborts at the end of each call). Measured with npm run bench:api (stub coordinator, 16
// concurrent claim → complete loops from connect-es' gRPC client over one HTTP/2 connection,
// the coordinator's own CPU per call, 2 shared cores): ~800–1,000 µs per call through
// connect-es, see docs/performance.md for the figures with this path.

import { fromBinary, type DescMethod, type DescService } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { codeToString } from "@connectrpc/connect/protocol-connect";
import { parseTimeout, setTrailerStatus } from "@connectrpc/connect/protocol-grpc";
import { readBody } from "../body.js";
import type { RequestInfo } from "../request-info.js";
import type { NodeRequest, NodeResponse } from "../node-http.js";
import { writeBinary } from "./binary-writer.js";
import type { UnaryPath } from "./seam.js";
import { asConnectError, refusePrototypeKey, refuseUndecodable, webHeaders, type UnaryInvoker } from "./invoke.js";
import { prototypeKeyInBinary } from "../prototype-keys.js";

export function createGrpcUnary(opts: { service: DescService; invoke: UnaryInvoker; maxBodyBytes: number }): UnaryPath {
  const methods = new Map<string, DescMethod>();
  for (const m of opts.service.methods) if (m.methodKind === "unary") methods.set(`/${opts.service.typeName}/${m.name}`, m);

  function match(req: NodeRequest, pathname: string): DescMethod | undefined {
    if (req.httpVersionMajor !== 2 || req.method !== "POST") return undefined;
    const method = methods.get(pathname);
    if (method === undefined) return undefined;
    const h = req.headers;
    const type = h["content-type"];
    if (type !== "application/grpc" && type !== "application/grpc+proto") return undefined;
    const encoding = h["grpc-encoding"];
    if (encoding !== undefined && encoding !== "identity") return undefined;
    const timeout = h["grpc-timeout"];
    if (timeout !== undefined && (typeof timeout !== "string" || parseTimeout(timeout, Number.MAX_SAFE_INTEGER).error !== undefined))
      return undefined;
    return method;
  }

  async function serve(req: NodeRequest, res: NodeResponse, method: DescMethod, info: RequestInfo): Promise<void> {
    info.protocol = "grpc";
    try {
      const bytes = unaryMessage(await readGrpcBody(req, opts.maxBodyBytes));
      let input;
      try {
        input = fromBinary(method.input, bytes);
      } catch (err) {
        throw refuseUndecodable(info, method, "binary", err);
      }
      const protoKey = prototypeKeyInBinary(method.input, bytes);
      if (protoKey) throw refusePrototypeKey(info, method, protoKey);
      const answer = await opts.invoke(res, method, input, {
        header: webHeaders(req),
        info,
        protocolName: "grpc",
        url: `http://${req.headers[":authority"] ?? "localhost"}${req.url}`,
      });
      // The message is written after room for its 5-byte prefix: one Buffer, no copy.
      const frame = writeBinary(method.output, answer.message, 5);
      frame[0] = 0;
      frame.writeUInt32BE(frame.length - 5, 1);
      const trailer = answer.trailer;
      trailer.set("grpc-status", "0");
      respond(res, answer.header, trailer, frame);
    } catch (err) {
      const error = asConnectError(err);
      // The chain has recorded its own outcome; a failure before it (body, framing, decoding) is recorded here.
      info.code ??= codeToString(error.code);
      const trailer = new Headers();
      setTrailerStatus(trailer, error);
      respond(res, new Headers(), trailer, undefined);
    }
  }

  return { match, serve };
}

function readGrpcBody(req: NodeRequest, maxBodyBytes: number): Promise<Buffer> {
  // The limit is on the message, as connect-es' readMaxBytes; the frame adds its 5-byte prefix.
  return readBody(req, maxBodyBytes + 5);
}

/** The one message of a unary request: exactly one uncompressed frame. */
function unaryMessage(body: Buffer): Uint8Array {
  if (body.length === 0) throw new ConnectError("protocol error: missing input message for unary method", Code.Unimplemented);
  if (body.length < 5) throw new ConnectError("protocol error: incomplete envelope", Code.InvalidArgument);
  if ((body[0] & 0b1) !== 0) throw new ConnectError("protocol error: received compressed message without grpc-encoding", Code.Internal);
  const length = body.readUInt32BE(1);
  if (body.length < 5 + length) throw new ConnectError("protocol error: incomplete envelope", Code.InvalidArgument);
  if (body.length > 5 + length) throw new ConnectError("protocol error: received extra input message for unary method", Code.Unimplemented);
  return body.subarray(5);
}

function respond(res: NodeResponse, header: Headers, trailer: Headers, frame: Buffer | undefined): void {
  if (res.headersSent) {
    res.end();
    return;
  }
  res.setHeader("content-type", "application/grpc+proto");
  header.forEach((value, key) => res.setHeader(key, value));
  // Headers first: the compatibility API would otherwise end the stream with the headers of a
  // response without a body, leaving no place for the trailers.
  res.writeHead(200);
  const trailers: Record<string, string> = {};
  trailer.forEach((value, key) => (trailers[key] = value));
  res.addTrailers(trailers);
  if (frame) res.end(frame);
  else res.end();
}
