// The coordinator process: configuration → database → queue → maintenance loop →
// API server, and the same in reverse on SIGTERM/SIGINT.
//
// Without DATABASE_URL it runs on an embedded PostgreSQL under .data/ (created
// on first start, reused afterwards), migrates it and registers two demo
// workloads. With DATABASE_URL it applies no migrations and refuses to start
// when the schema is behind the code.
import type pg from "pg";
import type { Logger } from "pino";
import { Authenticator } from "./api/auth.js";
import { limitHeapGrowth } from "./heap.js";
import { createApiServer, type ApiServer } from "./api/server.js";
import { ConfigError, loadConfig, type Config } from "./config/index.js";
import { createLogger } from "./logger.js";
import { LongPollingQueue } from "./queue/long-poll.js";
import { HorizonWatch } from "./queue/horizon-watch.js";
import { Maintainer } from "./queue/maintenance.js";
import { SchedulerLoop } from "./queue/scheduler.js";
import type { QueueService } from "./queue/service.js";
import { onShutdownSignal } from "./signals.js";
import { EmbeddedStartError, startEmbeddedMode, type EmbeddedMode } from "./store/postgres/schema/embedded-mode.js";
import { horizonSource } from "./store/postgres/background/horizon.js";
import { pendingMigrations } from "./store/postgres/schema/migrate.js";
import { checkReadiness, readOnlyReason, type Readiness } from "./store/postgres/schema/readiness.js";
import { TaskListener } from "./store/postgres/state/listener.js";
import { createPool, PostgresQueue } from "./store/postgres/store.js";
import { Metrics } from "./telemetry/metrics.js";
import { startTracing, type Tracing } from "./telemetry/tracing.js";

/** Database created on the embedded cluster. */
const EMBEDDED_DATABASE = "leasehold";
/** Registered in embedded mode when absent; existing settings are kept. */
const DEMO_WORKLOADS = [
  { name: "scimesh", maxAttempts: 3, leaseSeconds: 300 },
  { name: "video", maxAttempts: 5, leaseSeconds: 120 },
];
const READINESS_TIMEOUT_MS = 1500;
const POOL_END_TIMEOUT_MS = 5000;
/** Longest the last spans may take to reach the OTLP collector at shutdown. */
const TRACING_SHUTDOWN_TIMEOUT_MS = 5000;

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

  private embedded?: EmbeddedMode;
  private pool?: pg.Pool;
  private listener?: TaskListener;
  private maintainer?: Maintainer;
  private horizon?: HorizonWatch;
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
    if (config.otelExporterOtlpEndpoint !== undefined) this.tracing = await startTracing();
    const databaseUrl = config.databaseUrl ?? (await this.startEmbedded());
    this.checkpoint();

    // A connection the server drops (restart, failover) is a log line, never an exit: createPool
    // listens on every client, idle or checked out. In embedded mode a terminal Ctrl-C also
    // reaches Postgres, so expect it while stopping.
    const connectionLost = (state: string) => (err: Error & { code?: string }) => {
      const fields = { error: err.message, code: err.code };
      if (this.stopRequested) logger.debug(fields, `${state} database connection closed`);
      else logger.warn(fields, `${state} database connection failed`);
    };
    const pool = createPool({
      connectionString: databaseUrl,
      max: config.pgPoolMax,
      statementTimeoutMs: config.pgStatementTimeoutMs,
      connectTimeoutMs: config.pgConnectTimeoutMs,
      onClientError: connectionLost("busy"),
      preparedStatements: config.pgPreparedStatements,
    });
    this.pool = pool;
    pool.on("error", connectionLost("idle"));
    if (!embedded) await requireCurrentSchema(pool, databaseUrl);
    if (!embedded) await warnIfReadOnly(pool, logger);
    this.checkpoint();

    const metrics = new Metrics({ logger, pool });
    // Long-poll claims and WatchJob streams wake on a NOTIFY on the one LISTEN session (a direct
    // connection, LISTEN_DATABASE_URL, when DATABASE_URL is a transaction pooler), with the poll
    // interval as the floor.
    this.listener = new TaskListener(config.listenDatabaseUrl ?? databaseUrl, logger, { connectTimeoutMs: config.pgConnectTimeoutMs });
    const store = new PostgresQueue(pool, {
      observer: metrics.observer,
      defaultLeaseSeconds: config.defaultLeaseSeconds,
      defaultMaxAttempts: config.defaultMaxAttempts,
      maxTasksPerJob: config.maxTasksPerJob,
      maxRunAtAheadDays: config.maxRunAtAheadDays,
      retentionDays: config.retentionDays,
      eventPartitions: { intervalHours: config.eventPartitionHours, ahead: config.eventPartitionsAhead },
      coalescing: config.coalescing,
      watchPollIntervalMs: config.pollIntervalMs,
      jobWakes: this.listener,
      taskWakes: this.listener,
      claimHints: config.claimHints,
      flowClaimHints: config.flowClaimHints,
    });
    // Read from the store at scrape time: task counts and the settlement backlog; and what /readyz answers.
    metrics.attach({ stats: store, settlements: store, readiness: () => this.readiness() });
    if (embedded) await registerDemoWorkloads(store, logger);
    this.checkpoint();

    await this.listener.start();
    const longPoll = new LongPollingQueue(store, this.listener, { pollIntervalMs: config.pollIntervalMs });
    this.shutdownHooks.push({ name: "parked long polls", run: () => longPoll.close() });
    this.shutdownHooks.push({ name: "due-time timer", run: () => store.stopTimers() });
    this.checkpoint();

    this.maintainer = new Maintainer(store, logger, { intervalMs: config.reaperIntervalMs });
    this.maintainer.start();
    const scheduler = new SchedulerLoop(store, logger, { onPassFailed: () => metrics.schedulerPassFailed() });
    scheduler.start();
    this.shutdownHooks.push({ name: "scheduler", run: () => scheduler.stop() });
    const horizon = (this.horizon = new HorizonWatch(horizonSource(pool), logger, metrics, { warnAfterMs: config.horizonWarnAfterMs }));
    horizon.start();
    this.shutdownHooks.push({ name: "horizon watch", run: () => horizon.stop() });
    this.server = createApiServer({
      queue: store,
      longPoll,
      metrics,
      logger,
      maxBodyBytes: config.maxBodyBytes,
      requestTimeoutMs: config.requestTimeoutMs,
      logSlowMs: config.logSlowMs,
      directUnary: config.directUnary,
      readiness: () => this.readiness(),
      auth: config.authTokens.length > 0 ? new Authenticator(config.authTokens) : undefined,
      tls: config.tls,
    });
    const port = await this.server.listen(config.port, config.host);
    const scheme = config.tls ? "https" : "http";
    const url = `${scheme}://${config.host.includes(":") ? `[${config.host}]` : config.host}:${port}`;
    const database = redactUrl(databaseUrl);
    const where = embedded ? `embedded PostgreSQL, data in ${this.embedded?.dataDir}` : "DATABASE_URL";
    process.stderr.write(`leasehold listening on ${url} (database ${database}; ${where}); console at ${url}/ui/\n`);
    logger.info(
      {
        url,
        console: `${url}/ui/`,
        database,
        mode: embedded ? "embedded" : "production",
        tokens: config.authTokens.length,
        tls: config.tls !== undefined,
      },
      "listening",
    );
    if (config.authTokens.length === 0) {
      logger.warn(
        { host: config.host },
        "no AUTH_TOKENS_FILE: the API is open to anyone who can reach the port (see docs/authentication.md#without-tokens)",
      );
    }
  }

  /** Starts (initialising on first use) the embedded cluster, creates and migrates the database; returns its URL. */
  private async startEmbedded(): Promise<string> {
    const { config, logger } = this;
    try {
      this.embedded = await startEmbeddedMode({
        dataDir: config.embeddedDataDir,
        port: config.embeddedPort,
        database: EMBEDDED_DATABASE,
        logger,
        isStopping: () => this.stopRequested,
      });
    } catch (err) {
      if (this.stopRequested) throw new StopRequested("stop requested during startup");
      if (err instanceof EmbeddedStartError) throw new StartupError(err.message);
      throw err;
    }
    return this.embedded.url;
  }

  private async readiness(): Promise<Readiness> {
    if (this.stopRequested) return { ready: false, detail: "shutting down" };
    if (!this.pool) return { ready: false, detail: "starting" };
    const readiness = await checkReadiness(this.pool, READINESS_TIMEOUT_MS);
    // Still ready (every coordinator sees the same database), but /readyz names the holder.
    const note = readiness.ready ? this.horizon?.note() : undefined;
    return note ? { ...readiness, detail: note } : readiness;
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
    if (this.maintainer) await step("maintenance", () => this.maintainer?.stop());
    if (this.listener) await step("LISTEN connection", () => this.listener?.stop());
    const pool = this.pool;
    if (pool) await step("database pool", () => withTimeout(pool.end(), POOL_END_TIMEOUT_MS, "pool.end()"));
    const embedded = this.embedded;
    if (embedded) await step("embedded PostgreSQL", () => embedded.stop());
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
      `database schema is behind the code: ${pending.length} migration(s) pending (first: ${pending[0]}); ` + "run `npm run migrate -- up`",
    );
  }
}

/**
 * A coordinator started against a standby by mistake keeps running (during a switchover the
 * same URL reaches a writable primary again within seconds) but stays unready: /readyz says why,
 * and so does this line at start.
 */
async function warnIfReadOnly(pool: pg.Pool, logger: Logger): Promise<void> {
  const reason = await readOnlyReason(pool).catch(() => undefined);
  if (!reason) return;
  logger.error({ detail: reason }, "database is read-only: not ready until it accepts writes");
  process.stderr.write(`leasehold: not ready: ${reason}\n`);
}

async function registerDemoWorkloads(queue: QueueService, logger: Logger): Promise<void> {
  const existing = new Set((await queue.listWorkloads()).map((w) => w.name));
  for (const workload of DEMO_WORKLOADS) {
    if (existing.has(workload.name)) continue;
    await queue.putWorkload(workload);
    logger.info({ workload: workload.name }, "registered demo workload");
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

async function run(): Promise<number> {
  limitHeapGrowth();
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
