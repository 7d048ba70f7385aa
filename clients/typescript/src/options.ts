// The connection options every entry point shares, and the interceptor that adds the token.
import type { Interceptor } from "@connectrpc/connect";

/**
 * How calls travel: `"connect"` (Connect protocol, binary; the default), `"connect-json"` (Connect,
 * JSON bodies), `"grpc"` (Node only) or `"grpc-web"` (browsers; also works in Node).
 */
export type TransportName = "connect" | "connect-json" | "grpc" | "grpc-web";

/** Options of {@link Client} and {@link Worker} for reaching the coordinator. */
export interface ConnectionOptions {
  /** A bearer token (`leasehold token new`); without one, calls carry no Authorization header. */
  token?: string;
  /** The protocol; default `"connect"`. */
  transport?: TransportName;
  /**
   * PEM certificate(s) of the authority that signed the coordinator's TLS certificate, for an
   * `https://` URL whose certificate the system does not trust (Node only: a browser uses its own store).
   */
  ca?: string | Uint8Array;
  /** Milliseconds a unary call may take before it fails with `DeadlineExceededError`; default 10,000. */
  timeoutMs?: number;
}

export const TRANSPORTS: readonly TransportName[] = ["connect", "connect-json", "grpc", "grpc-web"];

/** The interceptor that sends `Authorization: Bearer <token>` on every call. */
export function tokenInterceptor(token: string | undefined): Interceptor[] {
  if (!token) return [];
  return [
    (next) => (req) => {
      req.header.set("authorization", `Bearer ${token}`);
      return next(req);
    },
  ];
}

export function checkTransportName(name: string): TransportName {
  if (!(TRANSPORTS as readonly string[]).includes(name)) {
    throw new TypeError(`transport must be one of ${TRANSPORTS.join(", ")}, not ${JSON.stringify(name)}`);
  }
  return name as TransportName;
}

/**
 * The coordinator's base URL as calls use it: `http://` or `https://`, no query, fragment or
 * credentials, without a trailing slash. A path is kept: Connect puts it before every call's
 * `/leasehold.queue.v1.QueueService/<Method>`, for a proxy that serves the coordinator under a
 * prefix (and strips it); the coordinator itself serves the calls at its root.
 */
export function checkBaseUrl(url: string): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new TypeError(`url: not a URL: ${JSON.stringify(url)} (the coordinator's, e.g. http://127.0.0.1:8080)`);
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:") {
    throw new TypeError(`url: http:// or https://, not ${parsed.protocol}// (${url})`);
  }
  if (parsed.search || parsed.hash || url.includes("?") || url.includes("#")) {
    throw new TypeError(`url: no query or fragment (${url}): calls go to <url>/leasehold.queue.v1.QueueService/<Method>`);
  }
  if (parsed.username || parsed.password) throw new TypeError("url: no credentials in the URL; pass `token`");
  return `${parsed.origin}${parsed.pathname.replace(/\/+$/, "")}`;
}
