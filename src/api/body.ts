// Request bodies over HTTP/1.1 and HTTP/2: read whole under a byte limit, and refused
// without cutting the client off mid-upload.
import { Code } from "@connectrpc/connect";
import { HttpError } from "./errors.js";
import type { NodeRequest, NodeResponse } from "./node-http.js";

/**
 * How much of a refused body is still read (and discarded) after the answer, and for how long.
 * Clients such as Python's urllib and requests write the whole body before they read a byte of
 * the answer; closing the connection with their upload unread makes the kernel reset it, and they
 * see "Broken pipe" instead of the 413. Reading the rest, up to these bounds (nginx's lingering
 * close does the same), lets the answer reach them. Past either bound the connection is dropped.
 */
const LINGER_MAX_BYTES = 256 * 1024 * 1024;
const LINGER_MAX_MS = 10_000;

export function bodyTooLarge(maxBytes: number): HttpError {
  return new HttpError(Code.ResourceExhausted, `request body exceeds ${maxBytes} bytes`, 413);
}

/** The declared Content-Length, when there is a valid one. */
export function declaredLength(req: NodeRequest): number | undefined {
  const value = req.headers["content-length"];
  if (value === undefined || !/^\d+$/.test(value)) return undefined;
  return Number(value);
}

/**
 * Discards the rest of a body the server has refused, so the client can finish sending and read
 * the answer, then lets the connection carry on; a body past the bounds gets its connection dropped.
 * HTTP/2 needs none of this: a refused stream is reset on its own, the connection stays.
 */
export function lingerOnBody(req: NodeRequest): void {
  if (req.httpVersionMajor !== 1 || req.complete || draining.has(req)) return;
  const socket = req.socket;
  let drained = 0;
  const drop = () => socket.destroy();
  const timer = setTimeout(drop, LINGER_MAX_MS);
  timer.unref();
  draining.set(
    req,
    new Promise<void>((resolve) => {
      req.once("end", resolve);
      req.once("close", () => {
        clearTimeout(timer);
        resolve();
      });
    }),
  );
  req.on("data", (chunk: Buffer) => {
    drained += chunk.length;
    if (drained > LINGER_MAX_BYTES) drop();
  });
  req.resume();
}

/** Requests whose refused body is being read to its end, by request. */
const draining = new WeakMap<NodeRequest, Promise<void>>();

/**
 * Ends a response, but only once the request's refused body has been read: Node closes a
 * `Connection: close` exchange (urllib sends that header) as soon as the response ends, and a
 * close with the upload unread is a reset. The answer's bytes go out at once either way.
 */
export function endResponse(res: NodeResponse, data: string): void {
  const drained = draining.get(res.req);
  if (drained === undefined) {
    res.end(data);
    return;
  }
  res.write(data);
  void drained.then(() => res.end());
}

/**
 * Reads the whole body, refusing more than maxBytes without buffering past the limit. Listens for
 * events rather than iterating: leaving a `for await` early destroys the request, and with it an
 * HTTP/1.1 connection whose body is still arriving.
 */
export function readBody(req: NodeRequest, maxBytes: number): Promise<Buffer> {
  const declared = declaredLength(req);
  if (declared !== undefined && declared > maxBytes) {
    lingerOnBody(req);
    return Promise.reject(bodyTooLarge(maxBytes));
  }
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let total = 0;
    const cleanup = () => {
      req.off("data", onData);
      req.off("end", onEnd);
      req.off("error", onFail);
      req.off("close", onClose);
    };
    const onData = (chunk: Buffer) => {
      total += chunk.length;
      if (total <= maxBytes) {
        chunks.push(chunk);
        return;
      }
      cleanup();
      chunks.length = 0;
      lingerOnBody(req);
      reject(bodyTooLarge(maxBytes));
    };
    const onEnd = () => {
      cleanup();
      resolve(Buffer.concat(chunks, total));
    };
    const onFail = (err: Error) => {
      cleanup();
      reject(err);
    };
    // The client went away before the end of its body: nobody is left to answer.
    const onClose = () => onFail(new HttpError(Code.InvalidArgument, "the request body ended early"));
    req.on("data", onData);
    req.once("end", onEnd);
    req.once("error", onFail);
    req.once("close", onClose);
  });
}
