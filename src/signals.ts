// SIGINT/SIGTERM for the coordinator: the first starts a graceful shutdown, a late second one
// exits at once.
import os from "node:os";
import type { Logger } from "pino";

export const SHUTDOWN_SIGNALS = ["SIGINT", "SIGTERM"] as const;

/**
 * Signals this close to the first one are the same request: one Ctrl-C reaches
 * npm and the coordinator, and npm forwards it once more.
 */
export const SIGNAL_COALESCE_MS = 2000;

/**
 * The first SIGINT/SIGTERM calls shutdown; signals within SIGNAL_COALESCE_MS of it are the same
 * request; a later one exits at once.
 */
export function onShutdownSignal(logger: Logger, shutdown: (signal: NodeJS.Signals) => void): void {
  let firstAt: number | undefined;
  const handler = (signal: NodeJS.Signals) => {
    const now = Date.now();
    if (firstAt === undefined) {
      firstAt = now;
      logger.info({ signal }, "shutting down gracefully (a second signal exits at once)");
      shutdown(signal);
    } else if (now - firstAt < SIGNAL_COALESCE_MS) {
      logger.debug({ signal }, "signal arrived together with the first one; still shutting down gracefully");
    } else {
      logger.warn({ signal }, "second signal: exiting without finishing the shutdown");
      process.exit(128 + (os.constants.signals[signal] ?? 0));
    }
  };
  for (const signal of SHUTDOWN_SIGNALS) process.on(signal, handler);
}
