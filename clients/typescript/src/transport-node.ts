// Transports in Node: Connect (binary or JSON) and gRPC over one HTTP/2 connection (h2c for
// http://, TLS with ALPN for https://), gRPC-Web over HTTP/1.1. The connection is held by a
// session manager the owner closes, so a finished program exits at once.
import type { Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { checkTransportName, tokenInterceptor, type ConnectionOptions } from "./options.js";

/** A transport and how to close its connections. */
export interface OpenTransport {
  transport: Transport;
  close(): void;
}

export function openTransport(baseUrl: string, options: ConnectionOptions): OpenTransport {
  const name = checkTransportName(options.transport ?? "connect");
  const interceptors = tokenInterceptor(options.token);
  const ca = typeof options.ca === "string" ? options.ca : options.ca ? Buffer.from(options.ca) : undefined;
  if (name === "grpc-web") {
    const transport = createGrpcWebTransport({ baseUrl, httpVersion: "1.1", interceptors, nodeOptions: ca ? { ca } : {} });
    return { transport, close: () => {} };
  }
  const sessionManager = new Http2SessionManager(baseUrl, {}, ca ? { ca } : {});
  const common = { baseUrl, interceptors, httpVersion: "2" as const, sessionManager };
  const transport =
    name === "grpc" ? createGrpcTransport(common) : createConnectTransport({ ...common, useBinaryFormat: name === "connect" });
  return { transport, close: () => sessionManager.abort() };
}

/** Whether signals (SIGTERM, SIGINT) can be listened to here. */
export const SIGNALS = true;

/** This machine's name, for default worker ids. */
export { hostname } from "node:os";
