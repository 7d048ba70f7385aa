// The coordinator's one port: HTTP/1.1 and cleartext HTTP/2 (h2c with prior
// knowledge, as grpcio speaks it). Node's http2 server falls back to HTTP/1.1
// only over TLS, so a plain TCP server peeks at each connection's first bytes
// and hands it to an http2 server (connection preface "PRI * HTTP/2.0") or to
// an http server. Both run the same request handler:
//   GET /healthz, GET /readyz, GET /metrics (with options.metrics) → REST routes (rest.ts) → Connect router
//   (gRPC, gRPC-Web, Connect; everything else is a 404 in the REST error shape).
// Every response carries X-Request-Id; every request ends in one log line.
// With TLS (options.tls) the port is an http2 secure server with allowHTTP1:
// ALPN picks HTTP/2 or HTTP/1.1, and the same request handler serves both.

import { randomUUID } from "node:crypto";
import http from "node:http";
import http2 from "node:http2";
import net from "node:net";
import type tls from "node:tls";
import { performance } from "node:perf_hooks";
import { Code, createContextValues } from "@connectrpc/connect";
import { codeToString } from "@connectrpc/connect/protocol-connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import type { Logger } from "pino";
import { QueueService as QueueServiceDesc } from "../../gen/leasehold/queue/v1/queue_pb.js";
import type { QueueService } from "../queue/service.js";
import type { ApiMetrics } from "../telemetry/metrics.js";
import type { Authenticator } from "./auth.js";
import { refuseBeforeConnect } from "./connect-precheck.js";
import { HttpError, REQUEST_ID_HEADER } from "./errors.js";
import { handleRest, isRestPath, writeError, writeJson, type NodeRequest, type NodeResponse } from "./rest.js";
import { createQueueServiceImpl, requestInfoKey, type RequestInfo } from "./service.js";

export interface ApiServerOptions {
  queue: QueueService;
  logger: Logger;
  maxBodyBytes: number;
  requestTimeoutMs: number;
  readiness: () => Promise<{ ready: boolean; detail?: string }>;
  /** Bearer tokens; undefined: the API is open. /healthz and /readyz are always open. */
  auth?: Authenticator;
  /** PEM certificate chain and key: serve HTTPS (HTTP/2 and HTTP/1.1 by ALPN) instead of cleartext. */
  tls?: { cert: Buffer | string; key: Buffer | string };
  /**
   * Prometheus metrics: served on GET /metrics (with auth: to a valid token of any role) and
   * told every RPC's duration. Undefined: /metrics is a 404.
   */
  metrics?: ApiMetrics;
}

export interface ApiServer {
  /** Binds; resolves the bound port (useful with port 0). */
  listen(port: number, host: string): Promise<number>;
  /** Stops accepting, lets in-flight requests finish up to timeoutMs, then destroys the remaining sockets. */
  close(timeoutMs: number): Promise<void>;
}

const H2_PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
/** A connection that sends nothing this long after connecting is dropped. */
const FIRST_BYTES_TIMEOUT_MS = 30_000;
const SANE_REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/** The incoming X-Request-Id when it is sane, else a new UUID. */
export function requestIdFor(header: string | string[] | undefined): string {
  const value = Array.isArray(header) ? header[0] : header;
  return value !== undefined && SANE_REQUEST_ID.test(value) ? value : randomUUID();
}

function protocolOf(req: NodeRequest): string {
  const ct = String(req.headers["content-type"] ?? "");
  if (ct.startsWith("application/grpc-web")) return "grpc-web";
  if (ct.startsWith("application/grpc")) return "grpc";
  return "connect";
}

export function createApiServer(opts: ApiServerOptions): ApiServer {
  const { logger } = opts;
  const impl = createQueueServiceImpl({ queue: opts.queue, requestTimeoutMs: opts.requestTimeoutMs, auth: opts.auth, metrics: opts.metrics });
  const infos = new WeakMap<object, RequestInfo>();

  // Same rules as REST: a field this server does not know is an error, not silently dropped, and
  // a body that is not UTF-8 is refused (connect-es' default decoder would replace bad bytes with U+FFFD).
  // textDecoder is read by connect-es' JSON serialization though its option type does not list it.
  // Answers have the one JSON shape of the contract on every transport, the one REST uses: proto
  // field names, and every field present with its default (chunk 0 has a chunk_index, an empty
  // claim a "tasks": []), so a client can index into an answer without guarding each key.
  // Either spelling is still accepted on input.
  const jsonOptions = {
    ignoreUnknownFields: false,
    textDecoder: new TextDecoder("utf-8", { fatal: true }),
    useProtoFieldName: true,
    alwaysEmitImplicit: true,
  };
  const connectHandler = connectNodeAdapter({
    routes: (router) => router.service(QueueServiceDesc, impl),
    readMaxBytes: opts.maxBodyBytes,
    jsonOptions,
    contextValues: (req) => createContextValues().set(requestInfoKey, infos.get(req)),
    fallback: (req, res) => {
      const info = infos.get(req) ?? { requestId: requestIdFor(undefined) };
      info.protocol ??= "http";
      writeError(res, new HttpError(Code.NotFound, `no route for ${req.method} ${(req.url ?? "/").split("?")[0]}`, 404), info);
    },
  });

  let closing = false;
  /** HTTP/1.1 requests in flight per socket, so close() can drop idle keep-alive sockets at once. */
  const inFlight = new Map<net.Socket, number>();
  /** Sockets carrying HTTP/2: never "idle" by the HTTP/1.1 count; their sessions drain by GOAWAY. */
  const http2Sockets = new WeakSet<net.Socket>();
  const isHttp2 = (socket: net.Socket) => http2Sockets.has(socket) || (socket as tls.TLSSocket).alpnProtocol === "h2";

  function logRequest(req: NodeRequest, res: NodeResponse, info: RequestInfo, start: number, path: string): void {
    let code = info.code;
    if (code === undefined) {
      // Answered by connect-es itself (bad framing, limits): trailers-only gRPC errors have the status in the headers.
      const grpcStatus = res.getHeader("grpc-status");
      if (grpcStatus !== undefined) code = Number(grpcStatus) === 0 ? "ok" : codeToString(Number(grpcStatus) as Code);
    }
    const line = {
      request_id: info.requestId,
      protocol: info.protocol,
      method: req.method,
      path,
      operation: info.operation,
      task_id: info.taskId,
      job_id: info.jobId,
      worker_id: info.workerId,
      role: info.role,
      status: res.statusCode,
      code,
      duration_ms: Math.round((performance.now() - start) * 1000) / 1000,
      aborted: res.writableFinished ? undefined : true,
    };
    if (info.error !== undefined) logger.error({ ...line, err: info.error }, "request failed");
    else logger.info(line, "request");
  }

  async function handle(req: NodeRequest, res: NodeResponse): Promise<void> {
    const start = performance.now();
    const info: RequestInfo = { requestId: requestIdFor(req.headers[REQUEST_ID_HEADER]) };
    infos.set(req, info);
    res.setHeader(REQUEST_ID_HEADER, info.requestId);
    const rawUrl = req.url ?? "/";
    const path = rawUrl.split("?")[0];
    res.once("close", () => logRequest(req, res, info, start, path));

    const socket = req.socket as net.Socket;
    if (req.httpVersionMajor === 1) {
      inFlight.set(socket, (inFlight.get(socket) ?? 0) + 1);
      if (closing) res.setHeader("connection", "close");
      res.once("close", () => {
        const n = (inFlight.get(socket) ?? 1) - 1;
        inFlight.set(socket, n);
        if (closing && n === 0) socket.end();
      });
    }

    try {
      let url: URL;
      try {
        url = new URL(rawUrl, "http://localhost");
      } catch {
        throw new HttpError(Code.InvalidArgument, "malformed request URL");
      }
      if (url.pathname === "/healthz" || url.pathname === "/readyz") {
        info.protocol = "http";
        info.operation = url.pathname.slice(1);
        if (req.method !== "GET" && req.method !== "HEAD") {
          throw new HttpError(Code.Unimplemented, `method ${req.method} is not allowed on ${url.pathname}`, 405, { allow: "GET, HEAD" });
        }
        if (url.pathname === "/healthz") {
          writeJson(res, 200, { status: "ok" });
          return;
        }
        let r: { ready: boolean; detail?: string };
        try {
          r = await opts.readiness();
        } catch (err) {
          logger.warn({ err, request_id: info.requestId }, "readiness check failed");
          r = { ready: false, detail: "readiness check failed" };
        }
        writeJson(res, r.ready ? 200 : 503, r.ready ? { status: "ready" } : { status: "not_ready", detail: r.detail ?? "" });
        return;
      }
      if (url.pathname === "/metrics" && opts.metrics) {
        info.protocol = "http";
        info.operation = "metrics";
        if (req.method !== "GET" && req.method !== "HEAD") {
          throw new HttpError(Code.Unimplemented, `method ${req.method} is not allowed on ${url.pathname}`, 405, { allow: "GET, HEAD" });
        }
        // With tokens configured, any valid token may scrape (UnauthenticatedError: 401 in the REST error shape).
        if (opts.auth) info.role = opts.auth.authenticate(req.headers.authorization).role;
        const text = await opts.metrics.render();
        res.statusCode = 200;
        res.setHeader("content-type", opts.metrics.contentType);
        res.setHeader("content-length", Buffer.byteLength(text));
        if (req.method === "HEAD") res.end();
        else res.end(text);
        return;
      }
      if (isRestPath(url.pathname)) {
        await handleRest(req, res, url, info, { impl, maxBodyBytes: opts.maxBodyBytes });
        return;
      }
      info.protocol = protocolOf(req);
      if (refuseBeforeConnect(req, res, info, opts.maxBodyBytes)) return;
      connectHandler(req, res);
    } catch (err) {
      writeError(res, err, info);
    }
  }

  const onRequest = (req: NodeRequest, res: NodeResponse) => {
    handle(req, res).catch((err: unknown) => {
      logger.error({ err }, "request handler failed");
      if (!res.headersSent) res.statusCode = 500;
      res.end();
    });
  };

  const h1 = http.createServer(onRequest);
  const h2 = http2.createServer({}, onRequest);
  const sessions = new Set<http2.ServerHttp2Session>();
  const trackSessions = (server: http2.Http2Server | http2.Http2SecureServer) =>
    server.on("session", (session) => {
      sessions.add(session);
      session.once("close", () => sessions.delete(session));
      if (closing) session.close();
    });
  trackSessions(h2);
  // Errors on an individual connection are the client's business; never crash the process.
  h1.on("clientError", (_err, socket) => {
    if (!socket.writable) {
      socket.destroy();
      return;
    }
    const requestId = randomUUID();
    const body = JSON.stringify({ error: { code: "invalid_argument", message: "malformed HTTP request", request_id: requestId } });
    socket.end(
      `HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-type: application/json\r\n${REQUEST_ID_HEADER}: ${requestId}\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
  });
  h2.on("sessionError", () => {});

  /** Connections HTTP requests run on (TLS sockets with TLS), and every accepted TCP socket (the same set without TLS). */
  const sockets = new Set<net.Socket>();
  let rawSockets: Set<net.Socket>;

  function dispatch(socket: net.Socket): void {
    let buffered: Buffer = Buffer.alloc(0);
    const onError = () => socket.destroy();
    const onTimeout = () => socket.destroy();
    const onData = (chunk: Buffer) => {
      buffered = buffered.length === 0 ? chunk : Buffer.concat([buffered, chunk]);
      const n = Math.min(buffered.length, H2_PREFACE.length);
      const h2Prefix = buffered.subarray(0, n).equals(H2_PREFACE.subarray(0, n));
      if (h2Prefix && buffered.length < H2_PREFACE.length) return; // undecided: wait for more bytes
      socket.removeListener("data", onData);
      socket.removeListener("error", onError);
      socket.removeListener("timeout", onTimeout);
      socket.setTimeout(0);
      socket.pause();
      socket.unshift(buffered);
      if (h2Prefix) {
        http2Sockets.add(socket);
        h2.emit("connection", socket);
      } else {
        h1.emit("connection", socket);
        process.nextTick(() => socket.resume());
      }
    };
    socket.on("error", onError);
    socket.setTimeout(FIRST_BYTES_TIMEOUT_MS, onTimeout);
    socket.on("data", onData);
  }

  const track = (socket: net.Socket) => {
    sockets.add(socket);
    socket.once("close", () => {
      sockets.delete(socket);
      inFlight.delete(socket);
    });
  };
  let listener: net.Server;
  if (opts.tls) {
    // ALPN chooses the protocol; HTTP/1.1 requests on it come with the TLS socket as req.socket.
    const secure = http2.createSecureServer(
      { cert: opts.tls.cert, key: opts.tls.key, allowHTTP1: true, ALPNProtocols: ["h2", "http/1.1"], handshakeTimeout: FIRST_BYTES_TIMEOUT_MS },
      onRequest,
    );
    trackSessions(secure);
    secure.on("sessionError", () => {});
    // The raw TCP socket (closes with its TLS socket) counts for draining; the TLS socket is the one
    // HTTP/1.1 requests run on, so close() can tell an idle keep-alive connection from a busy one.
    const raw = new Set<net.Socket>();
    secure.on("connection", (socket: net.Socket) => {
      socket.setNoDelay(true);
      raw.add(socket);
      socket.once("close", () => raw.delete(socket));
      if (closing) socket.destroy();
    });
    secure.on("secureConnection", (socket: tls.TLSSocket) => track(socket));
    // Handshakes still in progress at close() are dropped with the rest after the timeout.
    rawSockets = raw;
    listener = secure;
  } else {
    // noDelay: a request/response protocol must not wait on Nagle's algorithm (the http server sets
    // it on its own sockets, but these sockets are accepted here and only handed over).
    listener = net.createServer({ noDelay: true }, (socket) => {
      track(socket);
      if (closing) {
        socket.destroy();
        return;
      }
      dispatch(socket);
    });
    rawSockets = sockets;
  }

  let closed: Promise<void> | undefined;

  return {
    listen(port: number, host: string): Promise<number> {
      return new Promise((resolve, reject) => {
        const onError = (err: Error) => reject(err);
        listener.once("error", onError);
        listener.listen(port, host, () => {
          listener.removeListener("error", onError);
          resolve((listener.address() as net.AddressInfo).port);
        });
      });
    },

    close(timeoutMs: number): Promise<void> {
      closed ??= (async () => {
        closing = true;
        const stopped = new Promise<void>((resolve) => listener.close(() => resolve()));
        // Idle HTTP/1.1 keep-alive sockets and sockets that never sent a request go now;
        // busy ones close after their response (connection: close); HTTP/2 sessions get GOAWAY
        // and close when their streams are done.
        for (const socket of sockets) {
          if (!inFlight.get(socket) && !isHttp2(socket)) socket.destroy();
        }
        for (const session of sessions) session.close();
        const drained = new Promise<void>((resolve) => {
          const check = () => (sockets.size === 0 && rawSockets.size === 0 ? resolve() : setTimeout(check, 20).unref());
          check();
        });
        let timer: NodeJS.Timeout | undefined;
        const timedOut = new Promise<void>((resolve) => {
          timer = setTimeout(resolve, timeoutMs);
          timer.unref();
        });
        await Promise.race([drained, timedOut]);
        clearTimeout(timer);
        for (const socket of sockets) socket.destroy();
        for (const socket of rawSockets) socket.destroy();
        for (const session of sessions) session.destroy();
        await stopped;
      })();
      return closed;
    },
  };
}
