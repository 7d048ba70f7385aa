// The Connect protocol's unary POST calls (application/json or application/proto) on node:http /
// node:http2 directly, with the interceptor chain and the one service implementation invoked as
// every direct path invokes them (invoke.ts). As with gRPC (grpc.ts), a request this path does
// not take as it is (GET, compression, a content type with parameters, another protocol version,
// a malformed connect-timeout-ms, a server stream) goes to connect-es' router, which serves the
// same chain and implementation. Answers are what connect-es answers: the message as JSON (the
// server's JSON options, written by json-writer.ts) or binary; an error as its JSON body with the
// HTTP status of its code, error metadata as headers.

import { fromBinary, fromJsonString, type DescMethod, type DescService } from "@bufbuild/protobuf";
import { codeToHttpStatus, codeToString, errorToJsonBytes, parseTimeout } from "@connectrpc/connect/protocol-connect";
import { readBody } from "../body.js";
import type { RequestInfo } from "../request-info.js";
import type { JsonOptions, NodeRequest, NodeResponse } from "../node-http.js";
import { writeBinary } from "./binary-writer.js";
import type { UnaryPath } from "./seam.js";
import { asConnectError, refusePrototypeKey, refuseUndecodable, webHeaders, type UnaryInvoker } from "./invoke.js";
import { PROTO_KEY, prototypeKeyInBinary, prototypeKeyInJson } from "../prototype-keys.js";
import { readJson } from "./json-reader.js";
import { writeJson } from "./json-writer.js";

export function createConnectUnary(opts: {
  service: DescService;
  invoke: UnaryInvoker;
  maxBodyBytes: number;
  jsonOptions: JsonOptions;
}): UnaryPath {
  const methods = new Map<string, DescMethod>();
  for (const m of opts.service.methods) if (m.methodKind === "unary") methods.set(`/${opts.service.typeName}/${m.name}`, m);
  const utf8 = new TextDecoder("utf-8", { fatal: true });

  function match(req: NodeRequest, pathname: string): DescMethod | undefined {
    if (req.method !== "POST") return undefined;
    const method = methods.get(pathname);
    if (method === undefined) return undefined;
    const h = req.headers;
    const type = h["content-type"];
    if (type !== "application/json" && type !== "application/proto") return undefined;
    const encoding = h["content-encoding"];
    if (encoding !== undefined && encoding !== "identity") return undefined;
    const version = h["connect-protocol-version"];
    if (version !== undefined && version !== "1") return undefined;
    const timeout = h["connect-timeout-ms"];
    if (timeout !== undefined && (typeof timeout !== "string" || parseTimeout(timeout, Number.MAX_SAFE_INTEGER).error !== undefined))
      return undefined;
    return method;
  }

  async function serve(req: NodeRequest, res: NodeResponse, method: DescMethod, info: RequestInfo): Promise<void> {
    info.protocol = "connect";
    const binary = req.headers["content-type"] === "application/proto";
    try {
      const bytes = await readBody(req, opts.maxBodyBytes);
      let input;
      if (binary) {
        try {
          input = fromBinary(method.input, bytes);
        } catch (err) {
          throw refuseUndecodable(info, method, "binary", err);
        }
        const protoKey = prototypeKeyInBinary(method.input, bytes);
        if (protoKey) throw refusePrototypeKey(info, method, protoKey);
      } else {
        let text = "";
        try {
          text = utf8.decode(bytes);
          input =
            plainJson(text, (json) => readJson(method.input, json, opts.jsonOptions)) ??
            fromJsonString(method.input, text, opts.jsonOptions);
        } catch (err) {
          throw refuseUndecodable(info, method, "JSON", err);
        }
        const protoKey = text.includes(PROTO_KEY) ? prototypeKeyInJson(JSON.parse(text)) : undefined;
        if (protoKey) throw refusePrototypeKey(info, method, protoKey);
      }
      const answer = await opts.invoke(res, method, input, {
        header: webHeaders(req),
        info,
        protocolName: "connect",
        url: `http://${req.headers[":authority"] ?? req.headers.host ?? "localhost"}${req.url}`,
      });
      const body = binary ? writeBinary(method.output, answer.message) : writeJson(method.output, answer.message, opts.jsonOptions);
      if (res.headersSent) return void res.end();
      answer.header.forEach((value, key) => res.setHeader(key, value));
      answer.trailer.forEach((value, key) => res.setHeader(`trailer-${key}`, value));
      res.statusCode = 200;
      res.setHeader("content-type", binary ? "application/proto" : "application/json");
      res.setHeader("content-length", typeof body === "string" ? Buffer.byteLength(body) : body.byteLength);
      res.end(body);
    } catch (err) {
      const error = asConnectError(err);
      info.code ??= codeToString(error.code);
      if (res.headersSent) return void res.end();
      error.metadata.forEach((value, key) => res.setHeader(key, value));
      const body = errorToJsonBytes(error, opts.jsonOptions);
      res.statusCode = codeToHttpStatus(error.code);
      res.setHeader("content-type", "application/json");
      res.setHeader("content-length", body.byteLength);
      res.end(body);
    }
  }

  return { match, serve };
}

/** The request as JSON when it parses; undefined: fromJsonString decides (and words the error). */
function plainJson<T>(text: string, read: (json: never) => T): T | undefined {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return undefined;
  }
  return read(json as never);
}
