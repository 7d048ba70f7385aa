// The Node request and response types every handler of the port serves (http or http2, as
// connect-node serves them), and the server's JSON options: shared by the REST routes, the direct
// unary paths and the ops routes, so none of them imports another for a type.

import type { JsonReadOptions, JsonWriteOptions } from "@bufbuild/protobuf";
import type { connectNodeAdapter } from "@connectrpc/connect-node";
import type { JsonWriteOptions as CompiledWriterOptions } from "./direct/json-writer.js";

/** The server's JSON options: the contract's one JSON shape (proto field names, implicit fields always present). */
export type JsonOptions = Partial<JsonReadOptions & JsonWriteOptions> & CompiledWriterOptions;

type NodeHandlerFn = ReturnType<typeof connectNodeAdapter>;
/** The request and response types connect-node serves (http or http2). */
export type NodeRequest = Parameters<NodeHandlerFn>[0];
export type NodeResponse = Parameters<NodeHandlerFn>[1];
