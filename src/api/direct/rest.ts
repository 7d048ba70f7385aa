// REST calls of unary RPCs on the direct path: the request JSON (assembled by rest.ts) decoded by
// the compiled reader (json-reader.ts), the chain and the implementation invoked (invoke.ts), the
// answer written by the compiled writer (json-writer.ts) in REST's status and shape.

import type { DescMessage, DescMethod, MessageShape } from "@bufbuild/protobuf";
import type { ClaimTasksResponse } from "../../../gen/leasehold/queue/v1/queue_pb.js";
import type { EarlyAnswer } from "../early-answer.js";
import { decodeError } from "../rest-errors.js";
import type { JsonOptions, NodeResponse } from "../node-http.js";
import { successStatus } from "../rest-status.js";
import type { RestUnaryCall } from "./seam.js";
import type { UnaryInvoker } from "./invoke.js";
import { readJson } from "./json-reader.js";
import { writeJsonChunks } from "./json-writer.js";

export function createRestUnary(opts: { invoke: UnaryInvoker; jsonOptions: JsonOptions }) {
  return async (res: NodeResponse, call: RestUnaryCall): Promise<void> => {
    const { rpc, info } = call;
    let input: MessageShape<DescMessage>;
    try {
      input = readJson(rpc.input, call.json, opts.jsonOptions);
    } catch (err) {
      throw decodeError(rpc.input, call.json, err as Error);
    }
    // Decoded: the parsed body (10,000 objects for a big CreateJob) need not live through the call.
    call.json = {};
    // An answer the implementation hands over early (a big CreateJob's, while PostgreSQL
    // copies its tasks) is encoded then, and sent if the call returns that very message.
    let early: { message: MessageShape<DescMessage>; body: string | Buffer[] } | undefined;
    const encodeEarly: EarlyAnswer = (message) => {
      early = { message, body: writeJsonChunks(rpc.output, message, opts.jsonOptions) };
    };
    const answer = await opts.invoke(res, rpc, input, {
      header: call.header,
      info,
      protocolName: "rest",
      url: call.url,
      early: encodeEarly,
    });
    writeAnswer(res, answer.message, rpc, info, opts.jsonOptions, early?.message === answer.message ? early.body : undefined);
  };
}

function writeAnswer(
  res: NodeResponse,
  message: MessageShape<DescMessage>,
  rpc: DescMethod,
  info: RestUnaryCall["info"],
  jsonOptions: JsonOptions,
  /** The message's JSON, when it was written already. */
  encoded?: string | Buffer[],
): void {
  const status = successStatus(rpc, info, () => (message as ClaimTasksResponse).tasks.length === 0);
  if (status === 204) {
    res.statusCode = 204;
    res.end();
    return;
  }
  const body = encoded ?? writeJsonChunks(rpc.output, message, jsonOptions);
  res.setHeader("content-type", "application/json");
  res.statusCode = status;
  if (typeof body === "string") {
    res.setHeader("content-length", Buffer.byteLength(body));
    res.end(body);
    return;
  }
  // A long answer (a 10,000-task CreateJob's is ~4.9 MB) comes as UTF-8 Buffers: written as they
  // are, no string of the whole answer is made (see json-writer.ts).
  let length = 0;
  for (const chunk of body) length += chunk.length;
  res.setHeader("content-length", length);
  for (const chunk of body) res.write(chunk);
  res.end();
}
