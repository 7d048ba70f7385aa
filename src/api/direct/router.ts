// The unary seam (seam.ts) with everything served by connect-es' router: the library's
// own way, chosen by DIRECT_UNARY=false. gRPC and Connect requests are all left to the router;
// a REST call of a unary RPC goes to the router's handler for it, in process, as a Connect JSON
// call whose body is the request JSON already parsed (no second JSON.parse); the Connect JSON
// answer already has REST's shape (the server's JSON options), so its bytes are sent as they
// are, and an error answer is turned into the REST error body (rest-errors.ts).

import { Code, createContextValues } from "@connectrpc/connect";
import type { UniversalHandler } from "@connectrpc/connect/protocol";
import { HttpError, restErrorBody } from "../errors.js";
import type { NodeResponse } from "../node-http.js";
import { requestInfoKey } from "../request-info.js";
import { sendJson } from "../respond.js";
import { connectFailure, type ConnectErrorJson } from "../rest-errors.js";
import { successStatus } from "../rest-status.js";
import { withCallSignal } from "./invoke.js";
import type { RestUnaryCall, UnarySeam } from "./seam.js";

/** An empty claim's answer is `{"tasks":[]}`; any task makes it far longer: only a short answer is parsed to tell. */
const SHORT_ANSWER_BYTES = 64;

export function createRouterUnary(handlers: readonly UniversalHandler[]): UnarySeam {
  const byMethod = new Map(handlers.map((h) => [h.method, h]));

  async function serveRest(res: NodeResponse, call: RestUnaryCall): Promise<void> {
    const { rpc, json, info } = call;
    const handler = byMethod.get(rpc);
    if (!handler) throw new HttpError(Code.Unimplemented, `the router has no handler for ${rpc.name}`);
    const answer = await withCallSignal(res, false, (controller) =>
      handler({
        httpVersion: "1.1",
        method: "POST",
        url: call.url,
        header: call.header,
        body: json,
        signal: controller.signal,
        contextValues: createContextValues().set(requestInfoKey, info),
      }),
    );
    const body = await readAll(answer.body);
    if (answer.status !== 200) {
      const m = connectFailure(JSON.parse(Buffer.from(body).toString("utf8")) as ConnectErrorJson, rpc.input, json, info);
      sendJson(res, m.httpStatus, restErrorBody(m, info.requestId));
      return;
    }
    const status = successStatus(
      rpc,
      info,
      () =>
        body.length < SHORT_ANSWER_BYTES && (JSON.parse(Buffer.from(body).toString("utf8")) as { tasks?: unknown[] }).tasks?.length === 0,
    );
    if (status === 204) {
      res.statusCode = 204;
      res.end();
      return;
    }
    res.setHeader("content-type", "application/json");
    res.setHeader("content-length", body.byteLength);
    res.statusCode = status;
    res.end(body);
  }

  return { serveRpc: () => undefined, serveRest };
}

/** A router answer's body in one buffer (router-undecodable.ts reads error bodies with it too). */
export async function readAll(body: AsyncIterable<Uint8Array> | undefined): Promise<Uint8Array> {
  const chunks: Uint8Array[] = [];
  if (body) for await (const chunk of body) chunks.push(chunk);
  return chunks.length === 1 ? chunks[0] : Buffer.concat(chunks);
}
