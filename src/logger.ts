// The coordinator's pino logger: JSON lines, ISO timestamps, and bearer tokens
// redacted wherever a log call would carry an Authorization header.
import { pino, type DestinationStream, type Logger } from "pino";
import { LOG_REDACT_PATHS } from "./api/auth.js";
import type { LogLevel } from "./config/index.js";

export function createLogger(level: LogLevel, destination?: DestinationStream): Logger {
  const options = {
    name: "leasehold",
    level,
    timestamp: pino.stdTimeFunctions.isoTime,
    redact: { paths: LOG_REDACT_PATHS, censor: "[redacted]" },
  };
  return destination ? pino(options, destination) : pino(options);
}
