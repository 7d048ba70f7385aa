// The API server: dispatch between the operational routes (ops-routes.ts), the console
// (ui-routes.ts), the REST routes (rest-routes.ts), the direct unary paths (direct/) and the Connect
// router (gRPC, gRPC-Web, Connect), on the one port the listener (http-listener.ts) serves. Every
// RPC, whichever way it comes, runs through the interceptors of interceptors.ts around the one
// service implementation (services/). Everything else is a 404 in the REST error shape. Every
// response carries X-Request-Id; every request ends in one log line (request-log.ts).

import { randomUUID } from "node:crypto";
import { Code, createContextValues } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { withUndecodableRefused } from "./router-undecodable.js";
import type { UniversalHandler } from "@connectrpc/connect/protocol";
import type { Logger } from "pino";
import { QueueService as QueueServiceDesc } from "../../gen/leasehold/queue/v1/queue_pb.js";
import type { ParkingCalls } from "../queue/long-poll.js";
import type { ApiQueue } from "../queue/service.js";
import type { ApiMetrics } from "../telemetry/metrics.js";
import type { Authenticator } from "./auth.js";
import { refuseBeforeConnect } from "./connect-precheck.js";
import { HttpError, REQUEST_ID_HEADER } from "./errors.js";
import { createHttpListener, type HttpListener } from "./http-listener.js";
import { createOpsRoutes } from "./ops-routes.js";
import { rpcInterceptors } from "./interceptors.js";
import { protocolOf, requestInfoKey, type RequestInfo } from "./request-info.js";
import { logWhenClosed } from "./request-log.js";
import type { NodeRequest, NodeResponse } from "./node-http.js";
import { writeError } from "./respond.js";
import { createRest, restRoutes } from "./rest-routes.js";
import { createRouterUnary } from "./direct/router.js";
import { createQueueServiceImpl } from "./services/index.js";
import { createDirectUnary } from "./direct/index.js";
import { serveUi } from "./ui-routes.js";

export interface ApiServerOptions {
  queue: ApiQueue;
  /** Long polls (queue/long-poll.ts): claims and watches go through it; absent, they go to `queue` and never park. */
  longPoll?: ParkingCalls;
  logger: Logger;
  maxBodyBytes: number;
  requestTimeoutMs: number;
  readiness: () => Promise<{ ready: boolean; detail?: string }>;
  /** Bearer tokens; undefined: the API is open. /healthz and /readyz are always open. */
  auth?: Authenticator;
  /** PEM certificate chain and key: serve HTTPS (HTTP/2 and HTTP/1.1 by ALPN) instead of cleartext. */
  tls?: { cert: Buffer | string; key: Buffer | string };
  /**
   * Prometheus metrics: served on GET /metrics (with auth: to an admin or a metrics token) and
   * told every RPC's duration. Undefined: /metrics is a 404.
   */
  metrics?: ApiMetrics;
  /**
   * true: plain unary gRPC, Connect and REST calls are served by the direct paths (direct/);
   * false: everything by connect-es' router. Required, so every server says which it runs: the
   * coordinator passes its config's DIRECT_UNARY, tests theirs (test/support/switches.ts).
   */
  directUnary: boolean;
  /** LOG_SLOW_MS: a call at least this long is logged at info even when it is a hot one (request-log.ts). */
  logSlowMs?: number;
}

export type ApiServer = HttpListener;

const SANE_REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/** The incoming X-Request-Id when it is sane, else a new UUID. */
export function requestIdFor(header: string | string[] | undefined): string {
  const value = Array.isArray(header) ? header[0] : header;
  return value !== undefined && SANE_REQUEST_ID.test(value) ? value : randomUUID();
}

/**
 * A path WHATWG URL parsing leaves as it is (no query, no dot segments, no escapes or characters it
 * would encode): the pathname without building a URL, as for every RPC and REST call (~2 µs each).
 */
const PLAIN_PATH = /^(\/[A-Za-z0-9_~-][A-Za-z0-9._~-]*)+$/;
const NO_QUERY = new URLSearchParams();
type PlainUrl = Pick<URL, "pathname" | "searchParams">;

export function createApiServer(opts: ApiServerOptions): ApiServer {
  const { logger } = opts;
  const impl = createQueueServiceImpl(opts.queue, opts.longPoll);
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
    useProtoFieldName: true as const,
    alwaysEmitImplicit: true as const,
  };
  // The router's handlers (one per RPC) also serve REST, so every transport runs the one chain
  // (connectNodeAdapter calls routes before it returns).
  let handlers: readonly UniversalHandler[] = [];
  const interceptors = rpcInterceptors({ requestTimeoutMs: opts.requestTimeoutMs, auth: opts.auth, metrics: opts.metrics });
  const connectHandler = connectNodeAdapter({
    routes: (router) => {
      router.service(QueueServiceDesc, impl);
      // In place: the adapter maps its paths from this list once routes returns.
      router.handlers.forEach((h, i) => (router.handlers[i] = withUndecodableRefused(h)));
      handlers = router.handlers;
    },
    interceptors,
    readMaxBytes: opts.maxBodyBytes,
    jsonOptions,
    contextValues: (req) => createContextValues().set(requestInfoKey, infos.get(req)),
    fallback: (req, res) => {
      const info = infos.get(req) ?? { requestId: requestIdFor(undefined) };
      info.protocol ??= "http";
      writeError(res, new HttpError(Code.NotFound, `no route for ${req.method} ${(req.url ?? "/").split("?")[0]}`, 404), info);
    },
  });

  const unary = opts.directUnary
    ? createDirectUnary({ service: QueueServiceDesc, impl, interceptors, maxBodyBytes: opts.maxBodyBytes, jsonOptions })
    : createRouterUnary(handlers);
  const rest = createRest({ handlers, unary, routes: restRoutes(QueueServiceDesc), maxBodyBytes: opts.maxBodyBytes });
  const opsRoutes = createOpsRoutes({ logger, readiness: opts.readiness, auth: opts.auth, metrics: opts.metrics });

  async function handle(req: NodeRequest, res: NodeResponse): Promise<void> {
    const info: RequestInfo = { requestId: requestIdFor(req.headers[REQUEST_ID_HEADER]) };
    infos.set(req, info);
    res.setHeader(REQUEST_ID_HEADER, info.requestId);
    const rawUrl = req.url ?? "/";
    logWhenClosed(logger, req, res, info, rawUrl.split("?")[0], opts.logSlowMs);

    try {
      let url: URL | PlainUrl;
      if (PLAIN_PATH.test(rawUrl)) url = { pathname: rawUrl, searchParams: NO_QUERY };
      else {
        try {
          url = new URL(rawUrl, "http://localhost");
        } catch {
          throw new HttpError(Code.InvalidArgument, "malformed request URL");
        }
      }
      if (await opsRoutes(req, res, url.pathname, info)) return;
      if (await serveUi(req, res, url.pathname, info)) return;
      if (rest.isRestPath(url.pathname)) {
        await rest.handle(req, res, url, info);
        return;
      }
      info.protocol = protocolOf(req.headers["content-type"]);
      if (refuseBeforeConnect(req, res, info, opts.maxBodyBytes)) return;
      // Unary calls over gRPC and Connect in their plain form: the direct paths, unless switched off.
      const served = unary.serveRpc(req, res, url.pathname, info);
      if (served) return await served;
      connectHandler(req, res);
    } catch (err) {
      writeError(res, err, info);
    }
  }

  return createHttpListener(
    (req, res) => {
      handle(req, res).catch((err: unknown) => {
        logger.error({ err }, "request handler failed");
        if (!res.headersSent) res.statusCode = 500;
        res.end();
      });
    },
    { tls: opts.tls },
  );
}
