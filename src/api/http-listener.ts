// The coordinator's one port: HTTP/1.1 and cleartext HTTP/2 (h2c with prior knowledge, as
// grpcio speaks it), or TLS with ALPN; and draining at shutdown.
//
// Node's http2 server falls back to HTTP/1.1 only over TLS, so without TLS a plain TCP server
// peeks at each connection's first bytes and hands it to an http2 server (connection preface
// "PRI * HTTP/2.0") or to an http server. With TLS the port is an http2 secure server with
// allowHTTP1: ALPN picks HTTP/2 or HTTP/1.1. Every path ends in the same request handler.
import { randomUUID } from "node:crypto";
import http from "node:http";
import http2 from "node:http2";
import net from "node:net";
import type tls from "node:tls";
import { REQUEST_ID_HEADER } from "./errors.js";
import type { NodeRequest, NodeResponse } from "./node-http.js";

export interface HttpListener {
  /** Binds; resolves the bound port (useful with port 0). */
  listen(port: number, host: string): Promise<number>;
  /** Stops accepting, lets in-flight requests finish up to timeoutMs, then destroys the remaining sockets. */
  close(timeoutMs: number): Promise<void>;
}

const H2_PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
/** A connection that sends nothing this long after connecting is dropped. */
const FIRST_BYTES_TIMEOUT_MS = 30_000;

export function createHttpListener(
  handler: (req: NodeRequest, res: NodeResponse) => void,
  opts: { tls?: { cert: Buffer | string; key: Buffer | string } } = {},
): HttpListener {
  let closing = false;
  /** HTTP/1.1 requests in flight per socket, so close() can drop idle keep-alive sockets at once. */
  const inFlight = new Map<net.Socket, number>();
  /** Sockets carrying HTTP/2: never "idle" by the HTTP/1.1 count; their sessions drain by GOAWAY. */
  const http2Sockets = new WeakSet<net.Socket>();
  const isHttp2 = (socket: net.Socket) => http2Sockets.has(socket) || (socket as tls.TLSSocket).alpnProtocol === "h2";

  const onRequest = (req: NodeRequest, res: NodeResponse) => {
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
    handler(req, res);
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
      {
        cert: opts.tls.cert,
        key: opts.tls.key,
        allowHTTP1: true,
        ALPNProtocols: ["h2", "http/1.1"],
        handshakeTimeout: FIRST_BYTES_TIMEOUT_MS,
      },
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
