// Transports in a browser (and any runtime with fetch): Connect (binary or JSON) and gRPC-Web.
// gRPC needs HTTP/2 trailers that fetch cannot read; a CA belongs to the browser's trust store.
import type { Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcWebTransport } from "@connectrpc/connect-web";
import { checkTransportName, tokenInterceptor, type ConnectionOptions } from "./options.js";

/** A transport and how to close its connections. */
export interface OpenTransport {
  transport: Transport;
  close(): void;
}

export function openTransport(baseUrl: string, options: ConnectionOptions): OpenTransport {
  const name = checkTransportName(options.transport ?? "connect");
  if (name === "grpc") throw new TypeError('transport "grpc" needs Node; in a browser use "grpc-web" or "connect"');
  if (options.ca !== undefined) throw new TypeError("ca: a browser trusts the certificates of its own store");
  const interceptors = tokenInterceptor(options.token);
  const transport =
    name === "grpc-web"
      ? createGrpcWebTransport({ baseUrl, interceptors })
      : createConnectTransport({ baseUrl, interceptors, useBinaryFormat: name === "connect" });
  return { transport, close: () => {} };
}

/** Whether signals (SIGTERM, SIGINT) can be listened to here. */
export const SIGNALS = false;

/** A name for default worker ids where there is no host name to read. */
export function hostname(): string {
  return "browser";
}
