// The unary seam's types: what both ways of serving a unary call (index.ts, the direct paths;
// router.ts, connect-es' router) implement, and what rest-routes.ts and server.ts call.

import type { DescMethod, JsonObject } from "@bufbuild/protobuf";
import type { NodeRequest, NodeResponse } from "../node-http.js";
import type { RequestInfo } from "../request-info.js";

/** A REST call of a unary RPC: the request JSON assembled from the path, the query or the body. */
export interface RestUnaryCall {
  rpc: DescMethod;
  json: JsonObject;
  /** The REST request's headers as the in-process call sees them (rest-routes.ts drops its own framing). */
  header: Headers;
  /** The URL the call names (HandlerContext.url). */
  url: string;
  info: RequestInfo;
}

/** How unary calls are served: by the direct paths, or all by connect-es' router. */
export interface UnarySeam {
  /** Serves a gRPC or Connect request when it is a plain unary call; undefined: the router's to serve. */
  serveRpc(req: NodeRequest, res: NodeResponse, pathname: string, info: RequestInfo): Promise<void> | undefined;
  /** Serves a REST call of a unary RPC, answering its REST status and body (or REST error). */
  serveRest(res: NodeResponse, call: RestUnaryCall): Promise<void>;
}

/** One protocol's plain unary calls, served without the router. */
export interface UnaryPath {
  /** The unary RPC this request calls, when this path serves it as it is; undefined: leave it to the router. */
  match(req: NodeRequest, pathname: string): DescMethod | undefined;
  serve(req: NodeRequest, res: NodeResponse, method: DescMethod, info: RequestInfo): Promise<void>;
}
