// The coordinator's pino logger: JSON lines, ISO timestamps, and bearer tokens
// redacted wherever a log call would carry an Authorization header.
import { pino, type DestinationStream, type Logger } from "pino";
import { LOG_REDACT_PATHS } from "./api/auth.js";
import type { LogLevel } from "./config/index.js";

export function createLogger(level: LogLevel, destination?: DestinationStream): Logger {
  const options = {
    name: "leasehold",
    level,
    timestamp: isoTime,
    redact: { paths: LOG_REDACT_PATHS, censor: "[redacted]" },
  };
  return pino(options, destination ?? bufferedStdout());
}

/** How long a line may wait in the buffer before it is written anyway. */
export const LOG_FLUSH_MS = 100;

/**
 * Standard output through pino's own SonicBoom, written once 4 KiB of lines have gathered (or
 * LOG_FLUSH_MS after the first of them): each request writes a line, and a write of its own was
 * ~17% of a gRPC call's CPU (bench:api profile), against ~4% for the buffered writes.
 * The writes are synchronous, as Node's own writes to a pipe or a file are on Linux: an
 * asynchronous write still in flight when the process exits lands after the lines pino flushes
 * at exit, out of order. The buffer is written out at exit; a SIGKILL loses at most the last
 * LOG_FLUSH_MS of lines.
 */
let stdout: DestinationStream | undefined;

/** One buffer for the process's standard output, however many loggers write to it. */
function bufferedStdout(): DestinationStream {
  if (stdout) return stdout;
  const stream = pino.destination({ dest: 1, minLength: 4096, sync: true });
  const open = () => !(stream as { destroyed?: boolean }).destroyed;
  // An empty buffer makes this a write of nothing.
  setInterval(() => {
    if (open()) stream.flush();
  }, LOG_FLUSH_MS).unref();
  // pino registers its own flush at exit only for asynchronous destinations.
  process.once("exit", () => {
    if (open()) stream.flushSync();
  });
  stdout = stream;
  return stream;
}

let lastMs = Number.NaN;
let lastTime = "";

/**
 * pino.stdTimeFunctions.isoTime, made once per millisecond: every request writes a line, and
 * under load several lines share a millisecond. Formatting the date was ~3% of the API layer's
 * CPU per call in a profile (bench:api).
 */
export function isoTime(): string {
  const ms = Date.now();
  if (ms !== lastMs) {
    lastMs = ms;
    lastTime = `,"time":"${new Date(ms).toISOString()}"`;
  }
  return lastTime;
}
