// Prometheus metrics on a registry of our own (never prom-client's global one),
// rendered by GET /metrics (src/api/server.ts):
//   - default Node.js process metrics (no prefix);
//   - counters and the pickup histogram, fed by the store through the
//     QueueObserver that main.ts passes to PostgresQueue (claims refused by a
//     flow-controlled workload's cap or rate limit among them);
//   - RPC durations, observed by the metrics interceptor (src/api/interceptors.ts) for every RPC over
//     every transport;
//   - task counts and pool gauges, read only when scraped (leased tasks per
//     workload: leasehold_tasks{status="leased"}): task counts come from
//     queue.taskStats(), cached (unfinished ~5 s, all 60 s: that one is a full
//     scan), so a scrape never costs more than those queries; a failing query
//     keeps the last values and logs a warning, it never fails the scrape;
//   - the settlement backlog (final billable jobs not yet settled, and the oldest one's wait), read
//     when scraped and cached 30 s; readiness (leasehold_ready: what /readyz would answer), read at
//     each scrape; scheduler passes that failed, counted by main.ts from the scheduler loop;
//   - the MVCC horizon and the hot tables' dead row versions, set by the horizon watch
//     (src/queue/horizon-watch.ts) at each of its samples, never queried at scrape time.

import type { Logger } from "pino";
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from "prom-client";
import type { HorizonReport, HorizonSink } from "../queue/horizon-watch.js";
import type { QueueObserver, SettlementBacklog, SettlementStatsSource, TaskStatsSource } from "../queue/service.js";
import type { TaskStatus, WorkloadTaskStats } from "../queue/types.js";

/** What the pool gauges read at scrape time (a pg.Pool has these three). */
export interface PoolCounts {
  readonly totalCount: number;
  readonly idleCount: number;
  readonly waitingCount: number;
}

/** What /readyz answers; leasehold_ready is 1 while it says ready. */
export type ReadinessSource = () => Promise<{ ready: boolean }>;

/** Scrape-time sources: the store (after it exists), the pool, the coordinator's readiness. */
interface Sources {
  stats?: TaskStatsSource;
  pool?: PoolCounts;
  settlements?: SettlementStatsSource;
  readiness?: ReadinessSource;
}

/** The part of the metrics the API server uses: render /metrics and time RPCs. */
export interface ApiMetrics {
  /** Content type of render(): Prometheus text format 0.0.4. */
  readonly contentType: string;
  render(): Promise<string>;
  /** method: RPC name ("ClaimTasks"); code: Connect code name ("ok", "not_found", …). */
  observeRpc(method: string, code: string, seconds: number): void;
}

export interface MetricsOptions {
  logger: Logger;
  /** Source of leasehold_tasks / leasehold_oldest_pending_seconds; also settable later with attach(). */
  stats?: TaskStatsSource;
  /** Source of leasehold_db_pool_connections; also settable later with attach(). */
  pool?: PoolCounts;
  /** Source of leasehold_settlements_waiting / leasehold_oldest_unsettled_seconds; also settable later with attach(). */
  settlements?: SettlementStatsSource;
  /** The coordinator's readiness (what /readyz answers), read at each scrape for leasehold_ready; also settable later with attach(). */
  readiness?: ReadinessSource;
  /** How long "unfinished" task stats are reused; default 5 s. */
  unfinishedTtlMs?: number;
  /** How long "all" task stats (a full scan) are reused; default 60 s. */
  allTtlMs?: number;
  /** How long the settlement backlog is reused; default 30 s. */
  settlementsTtlMs?: number;
  /** Longest a stats query may take before the scrape goes on with the last values; default 5 s. */
  statsTimeoutMs?: number;
}

/** 1 ms … 30 s: plain calls take milliseconds, long polls up to their wait. */
export const RPC_DURATION_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30];
/** 10 ms … 1 day: how long a task waited to be claimed. */
export const PICKUP_BUCKETS = [0.01, 0.05, 0.1, 0.5, 1, 5, 15, 30, 60, 300, 900, 3600, 4 * 3600, 24 * 3600];

/** From taskStats("unfinished"), refreshed often. */
const UNFINISHED_STATUSES: readonly TaskStatus[] = ["pending", "leased"];
/** From taskStats("all"), a full scan, refreshed rarely. */
const FINISHED_STATUSES: readonly TaskStatus[] = ["completed", "failed", "cancelled"];

/** A value read at scrape time, cached: refreshed at most once per ttl (failures included), concurrent scrapes share a query. */
class ScrapeCache<T> {
  /** undefined until the first successful read. */
  value: T | undefined;
  private attemptedAt = -Infinity;
  private inFlight: Promise<void> | undefined;

  constructor(
    /** What the log line names ("task stats", "the settlement backlog") and its scope field. */
    private readonly what: string,
    private readonly scope: string,
    private readonly ttlMs: number,
    private readonly timeoutMs: number,
    private readonly logger: Logger,
  ) {}

  refresh(read: ((signal: AbortSignal) => Promise<T>) | undefined): Promise<void> {
    if (!read || performance.now() - this.attemptedAt < this.ttlMs) return this.inFlight ?? Promise.resolve();
    this.attemptedAt = performance.now();
    this.inFlight ??= (async () => {
      try {
        this.value = await read(AbortSignal.timeout(this.timeoutMs));
      } catch (err) {
        this.logger.warn({ err, scope: this.scope }, `${this.what} for metrics failed; keeping the last values`);
      } finally {
        this.inFlight = undefined;
      }
    })();
    return this.inFlight;
  }
}

export class Metrics implements ApiMetrics, HorizonSink {
  readonly registry = new Registry();
  /** Pass as StoreOptions.observer: the store reports claims, completions, failures and expired leases. */
  readonly observer: QueueObserver;

  /** Read at scrape time; see attach(). */
  private readonly sources: Sources;
  private readonly rpcDuration: Histogram<"method" | "code">;
  private readonly schedulerPassFailures: Counter;
  /**
   * Gauges without labels read from a source that may come later (attach()): registered once it
   * does, since an unlabelled prom-client gauge always renders a value, and a made-up 0 would
   * read as "not ready" or "nothing waits".
   */
  private readonly late: { settlements: Gauge[]; readiness: Gauge[]; registered: Set<"settlements" | "readiness"> };
  private readonly horizon: {
    age: Gauge;
    xidAge: Gauge;
    holder: Gauge<"kind" | "pid" | "application_name" | "state">;
    deadTuples: Gauge<"table">;
  };

  constructor(opts: MetricsOptions) {
    const { registry } = this;
    const logger = opts.logger;
    const sources: Sources = { stats: opts.stats, pool: opts.pool, settlements: opts.settlements, readiness: opts.readiness };
    this.sources = sources;
    collectDefaultMetrics({ register: registry });

    const claims = new Counter({ name: "leasehold_claims_total", help: "Tasks leased by ClaimTasks.", registers: [registry] });
    const completions = new Counter({ name: "leasehold_completions_total", help: "Tasks completed.", registers: [registry] });
    const failures = new Counter({
      name: "leasehold_failures_total",
      help: 'Tasks reported failed by FailTask; retryable="true": the task went back to pending.',
      labelNames: ["retryable"] as const,
      registers: [registry],
    });
    failures.inc({ retryable: "true" }, 0);
    failures.inc({ retryable: "false" }, 0);
    const expirations = new Counter({
      name: "leasehold_lease_expirations_total",
      help: "Leases that expired (requeued or failed for good by the reaper).",
      registers: [registry],
    });
    const refused = new Counter({
      name: "leasehold_claims_refused_total",
      help: 'Empty claims of a flow-controlled workload, by what refused them: reason="cap" (its max_leased tasks are leased), reason="rate" (its rate limit had no token).',
      labelNames: ["workload", "reason"] as const,
      registers: [registry],
    });
    const scheduleFired = new Counter({
      name: "leasehold_schedule_ticks_fired_total",
      help: "Schedule ticks that created a job, by schedule.",
      labelNames: ["schedule"] as const,
      registers: [registry],
    });
    const scheduleSkipped = new Counter({
      name: "leasehold_schedule_ticks_skipped_total",
      help: 'Schedule ticks that created no job, by schedule and reason: "overlap" (the previous job was not final), "catch_up" (missed while no coordinator ran, not caught up), "failed" (CreateJob refused the template).',
      labelNames: ["schedule", "reason"] as const,
      registers: [registry],
    });
    this.schedulerPassFailures = new Counter({
      name: "leasehold_scheduler_pass_failures_total",
      help: "Passes of the scheduler loop that failed (the database refused or was away): no tick of any schedule fired in them.",
      registers: [registry],
    });
    const batchSize = new Histogram({
      name: "leasehold_coalesced_batch_size",
      help: 'Calls answered by one coalesced statement, by kind ("claim", "complete_and_claim", "complete", "complete_then_claim", "renew", "fail", "create"); 1: the lane was idle and the call ran at once.',
      labelNames: ["kind"] as const,
      buckets: [1, 2, 4, 8, 16, 32, 64, 128],
      registers: [registry],
    });
    const pickup = new Histogram({
      name: "leasehold_pickup_seconds",
      help: "How long a claimed task had been claimable before it was claimed.",
      buckets: PICKUP_BUCKETS,
      registers: [registry],
    });
    this.rpcDuration = new Histogram({
      name: "leasehold_rpc_duration_seconds",
      help: "Duration of RPCs (every transport, REST included) by RPC name and Connect code.",
      labelNames: ["method", "code"] as const,
      buckets: RPC_DURATION_BUCKETS,
      registers: [registry],
    });

    // One series at most for the holder (reset at every sample), and a fixed list of tables: the
    // labels stay bounded however many sessions come and go.
    this.horizon = {
      age: new Gauge({
        name: "leasehold_mvcc_horizon_held_seconds",
        help: "How long the oldest snapshot or transaction id on the database has held VACUUM's horizon back (0: nothing does). See docs/long-transactions.md.",
        registers: [registry],
      }),
      xidAge: new Gauge({
        name: "leasehold_mvcc_horizon_xid_age",
        help: "Transactions begun since the oldest snapshot or transaction id that holds the horizon back (age(xmin)).",
        registers: [registry],
      }),
      holder: new Gauge({
        name: "leasehold_mvcc_horizon_holder_seconds",
        help: 'The holding behind leasehold_mvcc_horizon_held_seconds, by kind ("session", "replication_slot", "prepared_transaction"), pid, application_name (a slot\'s name, a prepared transaction\'s gid) and state; one series at most.',
        labelNames: ["kind", "pid", "application_name", "state"] as const,
        registers: [registry],
      }),
      deadTuples: new Gauge({
        name: "leasehold_table_dead_tuples",
        help: "Dead row versions in the queue's hot tables (pg_stat_user_tables.n_dead_tup), as of the horizon watch's last sample.",
        labelNames: ["table"] as const,
        registers: [registry],
      }),
    };

    // The store calls these inside its own code paths: they must never throw.
    this.observer = {
      tasksClaimed(count, pickupSeconds) {
        if (count > 0) claims.inc(count);
        for (const s of pickupSeconds) if (Number.isFinite(s) && s >= 0) pickup.observe(s);
      },
      tasksCompleted(count) {
        if (count > 0) completions.inc(count);
      },
      taskFailed(retryable) {
        failures.inc({ retryable: retryable ? "true" : "false" });
      },
      leasesExpired(count) {
        if (count > 0) expirations.inc(count);
      },
      statementBatched(kind, size) {
        batchSize.observe({ kind }, size);
      },
      claimRefused(workload, by) {
        refused.inc({ workload, reason: by });
      },
      scheduleTicks(schedule, outcome, count) {
        if (count <= 0) return;
        if (outcome === "fired") scheduleFired.inc({ schedule }, count);
        else scheduleSkipped.inc({ schedule, reason: outcome }, count);
      },
    };

    // Registered before the task gauges: a scrape collects in registration order, so the pool is
    // read before the stats queries of the same scrape take (or wait for) connections.
    new Gauge({
      name: "leasehold_db_pool_connections",
      help: "PostgreSQL pool connections: total open, idle, and requests waiting for one.",
      labelNames: ["state"] as const,
      registers: [registry],
      collect() {
        const pool = sources.pool;
        if (!pool) return;
        this.set({ state: "total" }, pool.totalCount);
        this.set({ state: "idle" }, pool.idleCount);
        this.set({ state: "waiting" }, pool.waitingCount);
      },
    });

    const timeoutMs = opts.statsTimeoutMs ?? 5000;
    const unfinished = new ScrapeCache<WorkloadTaskStats[]>("task stats", "unfinished", opts.unfinishedTtlMs ?? 5000, timeoutMs, logger);
    const all = new ScrapeCache<WorkloadTaskStats[]>("task stats", "all", opts.allTtlMs ?? 60_000, timeoutMs, logger);
    const settlements = new ScrapeCache<SettlementBacklog>(
      "the settlement backlog",
      "settlements",
      opts.settlementsTtlMs ?? 30_000,
      timeoutMs,
      logger,
    );
    const readStats = (scope: "unfinished" | "all") => {
      const stats = sources.stats;
      return stats && ((signal: AbortSignal) => stats.taskStats(scope, { signal }));
    };

    new Gauge({
      name: "leasehold_tasks",
      help: "Tasks by workload and status (pending and leased refreshed every few seconds, finished statuses every minute).",
      labelNames: ["workload", "status"] as const,
      registers: [registry],
      async collect() {
        await Promise.all([unfinished.refresh(readStats("unfinished")), all.refresh(readStats("all"))]);
        this.reset();
        const workloads = knownWorkloads(unfinished.value, all.value);
        const set = (source: WorkloadTaskStats[] | undefined, statuses: readonly TaskStatus[]) => {
          if (!source) return; // never answered yet: no series rather than made-up zeros
          const byName = new Map(source.map((s) => [s.workload, s]));
          for (const workload of workloads) {
            const counts = byName.get(workload)?.counts;
            for (const status of statuses) this.set({ workload, status }, counts?.[status] ?? 0);
          }
        };
        set(unfinished.value, UNFINISHED_STATUSES);
        set(all.value, FINISHED_STATUSES);
      },
    });

    new Gauge({
      name: "leasehold_oldest_pending_seconds",
      help: "Age of the oldest claimable pending task per workload (0: none).",
      labelNames: ["workload"] as const,
      registers: [registry],
      async collect() {
        await unfinished.refresh(readStats("unfinished"));
        this.reset();
        if (!unfinished.value) return;
        const byName = new Map(unfinished.value.map((s) => [s.workload, s]));
        for (const workload of knownWorkloads(unfinished.value, all.value)) {
          this.set({ workload }, byName.get(workload)?.oldestPendingSeconds ?? 0);
        }
      },
    });

    // Billing: final billable jobs waiting for SettleJob. The same database answers every
    // coordinator, so aggregate these with max(), not sum().
    const readSettlements = () => {
      const source = sources.settlements;
      return source && ((signal: AbortSignal) => source.settlementBacklog({ signal }));
    };
    const waiting = new Gauge({
      name: "leasehold_settlements_waiting",
      help: "Final billable jobs (an account or a billing context) not yet settled (ListSettlements lists them), refreshed at most every 30 s.",
      registers: [],
      async collect() {
        await settlements.refresh(readSettlements());
        if (settlements.value) this.set(settlements.value.waiting);
      },
    });
    const oldestUnsettled = new Gauge({
      name: "leasehold_oldest_unsettled_seconds",
      help: "How long the oldest final billable job not yet settled has been final (0: none waits).",
      registers: [],
      async collect() {
        await settlements.refresh(readSettlements());
        if (settlements.value) this.set(settlements.value.oldestSeconds);
      },
    });

    // What /readyz would answer now (database answers, schema current, not shutting down): a
    // coordinator up but unready (its database away) still answers scrapes with 0.
    const ready = new Gauge({
      name: "leasehold_ready",
      help: "1 while the coordinator is ready (what GET /readyz answers: the database answers and the schema is current), 0 otherwise.",
      registers: [],
      async collect() {
        const readiness = sources.readiness;
        if (!readiness) return;
        let isReady = false;
        try {
          isReady = (await readiness()).ready;
        } catch (err) {
          logger.warn({ err }, "readiness for metrics failed");
        }
        this.set(isReady ? 1 : 0);
      },
    });
    this.late = { settlements: [waiting, oldestUnsettled], readiness: [ready], registered: new Set() };
    this.registerLate();
  }

  /** Sets the sources read at scrape time (the store exists only after the observer is handed to it). */
  attach(sources: Sources): void {
    if (sources.stats) this.sources.stats = sources.stats;
    if (sources.pool) this.sources.pool = sources.pool;
    if (sources.settlements) this.sources.settlements = sources.settlements;
    if (sources.readiness) this.sources.readiness = sources.readiness;
    this.registerLate();
  }

  /** Registers the late gauges whose source is there now (each once). */
  private registerLate(): void {
    for (const kind of ["settlements", "readiness"] as const) {
      if (!this.sources[kind] || this.late.registered.has(kind)) continue;
      this.late.registered.add(kind);
      for (const gauge of this.late[kind]) this.registry.registerMetric(gauge);
    }
  }

  /** The scheduler loop's pass failed (not one cut short by a stop). */
  schedulerPassFailed(): void {
    this.schedulerPassFailures.inc();
  }

  /** The horizon watch's sink: called at every sample. */
  horizonSampled(report: HorizonReport): void {
    const { age, xidAge, holder, deadTuples } = this.horizon;
    age.set(report.heldSeconds);
    xidAge.set(report.holder?.xidAge ?? 0);
    holder.reset();
    const h = report.holder;
    if (h)
      holder.set({ kind: h.kind, pid: h.pid === null ? "" : String(h.pid), application_name: h.name, state: h.state }, report.heldSeconds);
    for (const t of report.tables) deadTuples.set({ table: t.table }, t.dead);
  }

  get contentType(): string {
    return this.registry.contentType;
  }

  render(): Promise<string> {
    return this.registry.metrics();
  }

  observeRpc(method: string, code: string, seconds: number): void {
    this.rpcDuration.observe({ method, code }, seconds);
  }
}

function knownWorkloads(...sources: (WorkloadTaskStats[] | undefined)[]): string[] {
  const names = new Set<string>();
  for (const source of sources) for (const s of source ?? []) names.add(s.workload);
  return [...names].sort();
}
