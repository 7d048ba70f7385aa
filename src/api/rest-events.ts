// A REST call of a server-streaming RPC (WatchJob) as Server-Sent Events: the call goes to the
// router's own handler for the RPC, in process, as a Connect streaming call with the request
// JSON; each message of its answer becomes one `data:` line of the same JSON.

import type { DescMessage, JsonObject } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { pipe, transformSplitEnvelope, type UniversalServerResponse } from "@connectrpc/connect/protocol";
import { endStreamFlag } from "@connectrpc/connect/protocol-connect";
import { HttpError, recordFailure, restErrorBody, type MappedError } from "./errors.js";
import type { RequestInfo } from "./request-info.js";
import { sendJson } from "./respond.js";
import { connectFailure, type ConnectErrorJson } from "./rest-errors.js";
import type { NodeResponse } from "./node-http.js";

/** The router's own answer, read in process: bounded only as connect-es bounds what it writes. */
const STREAM_FRAME_MAX_BYTES = 0xffffffff;

/** SSE comment lines this often keep proxies from closing a quiet stream. */
const SSE_KEEPALIVE_MS = 15_000;

const utf8Text = new TextDecoder();

/**
 * How long a stream that may start quiet (a resumed WatchJob sends no snapshot) waits for its first
 * message before the status line goes out anyway: long enough that a refusal (unknown job, bad
 * input, a few milliseconds normally) is still a plain REST error with its status, short enough
 * that a proxy does not give up on a resumed stream whose next event is minutes away.
 */
const SSE_QUIET_START_MS = 1000;

/** The SSE `id:` of a stream message: a WatchJob event's id (the snapshot has none). */
function eventIdOf(data: string): string | undefined {
  if (!data.startsWith('{"event"')) return undefined;
  const id = (JSON.parse(data) as { event?: { id?: unknown } }).event?.id;
  return typeof id === "string" || typeof id === "number" ? String(id) : undefined;
}

/**
 * A server stream as Server-Sent Events: one `data:` line of JSON per message (the same JSON as
 * the RPC's), so `EventSource` and `curl -N` both work, preceded by an `id:` line where the
 * message has one (EventSource sends the last as Last-Event-ID when it reconnects). An error
 * before the first message is a plain REST error answer; after it, an `event: error` carrying the
 * REST error body ends the stream.
 */
export async function writeEventStream(
  res: NodeResponse,
  answering: Promise<UniversalServerResponse>,
  schema: DescMessage,
  json: JsonObject,
  info: RequestInfo,
): Promise<void> {
  // connect-es resolves a stream's answer with its first frame (so headers can still change
  // until then): the wait for the first message starts here.
  let frames: AsyncIterator<{ flags: number; data: Uint8Array }> | undefined;
  const open = async () => {
    const answer = await answering;
    if (answer.status !== 200 || !answer.body) throw new HttpError(Code.Internal, "internal error");
    return pipe(answer.body, transformSplitEnvelope(STREAM_FRAME_MAX_BYTES))[Symbol.asyncIterator]();
  };
  /** A frame's text, or the failure an end-of-stream frame carries (undefined: the stream ended well). */
  const read = async (): Promise<{ data?: string; failure?: MappedError; done: boolean }> => {
    frames ??= await open();
    const step = await frames.next();
    if (step.done) return { done: true };
    const text = utf8Text.decode(step.value.data);
    if ((step.value.flags & endStreamFlag) !== endStreamFlag) return { data: text, done: false };
    const end = JSON.parse(text) as { error?: ConnectErrorJson };
    if (!end.error) return { done: true };
    return { failure: connectFailure(end.error, schema, json, info), done: true };
  };
  // The first message (or error) decides the status line, unless a resumed stream stays quiet a while.
  const firstRead = read();
  let timer: NodeJS.Timeout | undefined;
  const resumed = json.after_event_id !== undefined || json.afterEventId !== undefined;
  const early = resumed
    ? await Promise.race([
        firstRead,
        new Promise<undefined>((resolve) => (timer = setTimeout(() => resolve(undefined), SSE_QUIET_START_MS))),
      ])
    : await firstRead;
  clearTimeout(timer);
  if (early?.failure) {
    sendJson(res, early.failure.httpStatus, restErrorBody(early.failure, info.requestId));
    return;
  }
  res.writeHead(200, { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache" });
  const send = (text: string) => void res.write(text);
  if (early === undefined) send(": waiting for the next event\n\n");
  const keepalive = setInterval(() => send(": keepalive\n\n"), SSE_KEEPALIVE_MS);
  try {
    for (let step = await firstRead; ; step = await read()) {
      if (step.data !== undefined) {
        const id = eventIdOf(step.data);
        send(`${id === undefined ? "" : `id: ${id}\n`}data: ${step.data}\n\n`);
      }
      if (step.failure) send(`event: error\ndata: ${JSON.stringify(restErrorBody(step.failure, info.requestId))}\n\n`);
      if (step.done) break;
    }
  } catch (err) {
    const m = recordFailure(info, err);
    send(`event: error\ndata: ${JSON.stringify(restErrorBody(m, info.requestId))}\n\n`);
  } finally {
    clearInterval(keepalive);
    res.end();
  }
}
