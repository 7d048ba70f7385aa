// The seam between the two ways a unary call is served. connect-es' router serves every RPC on
// every transport; the direct paths of this folder serve the common unary forms themselves, with
// codecs compiled per message type, because the router's per-call machinery was most of the API
// layer's own CPU (docs/performance.md, npm run bench:api):
//   gRPC     POST application/grpc(+proto) over HTTP/2, uncompressed          grpc.ts
//   Connect  POST application/json or application/proto, uncompressed         connect.ts
//   REST     every unary route (its JSON request assembled by rest-routes.ts) rest.ts
// Everything else stays with the router: WatchJob and REST's Server-Sent Events, gRPC-Web,
// compressed requests, Connect GET, the gRPC JSON codec. Both ways run the same interceptor chain
// around the same service implementation (invoke.ts).
//
// DIRECT_UNARY=false (src/config) picks the router for everything (router.ts), the library
// default to fall back to; the API test suites run both ways.

import type { DescService } from "@bufbuild/protobuf";
import type { Interceptor, ServiceImpl } from "@connectrpc/connect";
import type { JsonOptions } from "../node-http.js";
import { createConnectUnary } from "./connect.js";
import { createGrpcUnary } from "./grpc.js";
import { createUnaryInvoker } from "./invoke.js";
import { createRestUnary } from "./rest.js";
import type { UnarySeam } from "./seam.js";

export interface DirectUnaryOptions<S extends DescService> {
  service: S;
  /** The service implementation, the one the router serves. */
  impl: ServiceImpl<S>;
  /** The chain the router runs, outermost first. */
  interceptors: Interceptor[];
  maxBodyBytes: number;
  jsonOptions: JsonOptions;
}

export function createDirectUnary<S extends DescService>(opts: DirectUnaryOptions<S>): UnarySeam {
  const invoke = createUnaryInvoker(opts.service, opts.impl, opts.interceptors);
  const paths = [createGrpcUnary({ ...opts, invoke }), createConnectUnary({ ...opts, invoke })];
  return {
    serveRpc(req, res, pathname, info) {
      for (const path of paths) {
        const method = path.match(req, pathname);
        if (method) return path.serve(req, res, method, info);
      }
      return undefined;
    },
    serveRest: createRestUnary({ invoke, jsonOptions: opts.jsonOptions }),
  };
}
