// The horizon watch every coordinator runs: it samples what holds PostgreSQL's MVCC horizon back
// (the oldest snapshot or transaction id that VACUUM must still respect) and the queue tables'
// dead row versions, so the person on call learns about a long transaction elsewhere on the
// database in minutes. While the horizon is held, every claimed and finished task leaves a dead
// version VACUUM cannot remove, and every claim walks further through them.
//
// It only reports: a metric per sample (through the sink), one warning line per holder once the
// horizon has been held longer than warnAfterMs (naming the session: pid, application_name,
// state, age, the first characters of its query), one line when that holder lets go, and a note
// for /readyz (readiness itself stays as it is: a pinned horizon is no reason to take a
// coordinator out of the balancer; every coordinator sees the same database). It never ends,
// cancels or throttles the session it names: the coordinator did not open it.
import { PassLoop } from "./pass-loop.js";
import type { CallOptions } from "./types.js";

/** What holds the horizon back, as the database lists it. */
export type HorizonHolderKind = "session" | "replication_slot" | "prepared_transaction";

export interface HorizonHolder {
  kind: HorizonHolderKind;
  /** The backend's pid; null for a replication slot or a prepared transaction. */
  pid: number | null;
  /** application_name of a session, the slot's name, or the prepared transaction's gid. */
  name: string;
  /** A session's state (`active`, `idle in transaction`, …); `active`/`inactive` for a slot; `prepared`. */
  state: string;
  /** pg_stat_activity's backend_type (`client backend`, `walsender`, …), or the slot's type. */
  backendType: string;
  /** The role that runs or owns it, when known. */
  user: string | null;
  /** Transactions begun since the snapshot or id it holds (age(xmin)). */
  xidAge: number;
  /** The held transaction id as text: with kind and pid or name, identifies one holding. */
  xmin: string;
  /**
   * Seconds since the holding began, by the database's clock: a session's xact_start, a prepared
   * transaction's prepare time. Null for a replication slot (the database does not record when
   * its xmin was set).
   */
  ageSeconds: number | null;
  /** The first characters of a session's current or last query ("" otherwise). */
  query: string;
}

export interface TableDeadTuples {
  table: string;
  dead: number;
  live: number;
}

export interface HorizonSample {
  /** The holder of the oldest xmin, or undefined when nothing but this sampler holds one. */
  holder?: HorizonHolder;
  /** The queue's hot tables, from the statistics collector (updated by PostgreSQL within a second or so). */
  tables: TableDeadTuples[];
}

/** What the watch samples: the store's horizon half. */
export interface HorizonSource {
  sampleHorizon(opts?: CallOptions): Promise<HorizonSample>;
}

/** One sample as the watch judged it. */
export interface HorizonReport extends HorizonSample {
  /** How long the horizon has been held by the holder (its ageSeconds, or since the watch first saw a slot's xmin); 0 without one. */
  heldSeconds: number;
  /** heldSeconds reached warnAfterMs. */
  overThreshold: boolean;
}

/** Where each report goes (the metrics). Must not throw. */
export interface HorizonSink {
  horizonSampled(report: HorizonReport): void;
}

export interface HorizonWatchLogger {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
}

export interface HorizonWatchConfig {
  /** How long the horizon may be held before the warning and the /readyz note. */
  warnAfterMs: number;
  /** Pause between samples; default a quarter of warnAfterMs, between 250 ms and 15 s. */
  intervalMs?: number;
  /** Deadline of each sample (stop() cuts it short too); default 5 s. */
  sampleDeadlineMs?: number;
  /** Called after every sample, failed or not (tests wait on it). */
  onSample?: (sample: { report?: HorizonReport; error?: unknown }) => void;
}

/** The operator's page, named in the warning and the /readyz note. */
export const HORIZON_DOC = "docs/long-transactions.md";
const QUERY_LOG_CHARS = 120;

export function defaultHorizonIntervalMs(warnAfterMs: number): number {
  return Math.min(15_000, Math.max(250, Math.floor(warnAfterMs / 4)));
}

export class HorizonWatch {
  private readonly intervalMs: number;
  private readonly deadlineMs: number;
  private readonly loop: PassLoop;
  /** When the watch first saw each holding without a start time of its own (a slot's xmin), by key. */
  private readonly firstSeen = new Map<string, number>();
  /** The holding last warned about, until it lets go. */
  private warned: { key: string; holder: HorizonHolder; heldSeconds: number } | undefined;
  private last: HorizonReport | undefined;

  constructor(
    private readonly source: HorizonSource,
    private readonly logger: HorizonWatchLogger,
    private readonly sink: HorizonSink | undefined,
    private readonly config: HorizonWatchConfig,
  ) {
    if (!(config.warnAfterMs > 0)) throw new RangeError(`horizon warnAfterMs must be positive, not ${config.warnAfterMs}`);
    this.intervalMs = config.intervalMs ?? defaultHorizonIntervalMs(config.warnAfterMs);
    if (!(this.intervalMs > 0)) throw new RangeError(`horizon intervalMs must be positive, not ${this.intervalMs}`);
    this.deadlineMs = config.sampleDeadlineMs ?? 5000;
    const intervalMs = this.intervalMs;
    this.loop = new PassLoop(
      async () => {
        await this.sample();
        return intervalMs;
      },
      { firstDelayMs: 0, retryMs: intervalMs, unref: true },
    );
  }

  start(): void {
    this.loop.start();
  }

  /** Stops sampling, cuts a sample in progress short and waits for it. */
  stop(): Promise<void> {
    return this.loop.stop();
  }

  /** The last sample's report, if any succeeded. */
  latest(): HorizonReport | undefined {
    return this.last;
  }

  /** For /readyz: one sentence naming the holder while the horizon is held past the threshold. */
  note(): string | undefined {
    const r = this.last;
    if (!r?.overThreshold || !r.holder) return undefined;
    return `MVCC horizon held back for ${Math.round(r.heldSeconds)} s by ${describe(r.holder)}: VACUUM cannot remove the queue's dead row versions while it lasts (see ${HORIZON_DOC})`;
  }

  private async sample(): Promise<void> {
    const signal = this.loop.signal(this.deadlineMs);
    let sample: HorizonSample;
    try {
      sample = await this.source.sampleHorizon({ signal });
    } catch (err) {
      if (!this.loop.isStopped) this.logger.warn({ err }, "horizon sample failed; retrying");
      this.config.onSample?.({ error: err });
      return;
    }
    const report = this.judge(sample);
    this.last = report;
    this.sink?.horizonSampled(report);
    this.config.onSample?.({ report });
  }

  private judge(sample: HorizonSample): HorizonReport {
    const now = Date.now();
    const holder = sample.holder;
    const key = holder ? holdingKey(holder) : undefined;
    let heldSeconds = 0;
    if (holder && key) {
      if (holder.ageSeconds !== null) heldSeconds = Math.max(0, holder.ageSeconds);
      else {
        const seen = this.firstSeen.get(key) ?? now;
        this.firstSeen.set(key, seen);
        heldSeconds = (now - seen) / 1000;
      }
    }
    // Forget the slots' first sightings that are no longer the holder (their xmin moved on).
    for (const k of this.firstSeen.keys()) if (k !== key) this.firstSeen.delete(k);
    const overThreshold = holder !== undefined && heldSeconds * 1000 >= this.config.warnAfterMs;

    if (this.warned && this.warned.key !== key) {
      const { holder: was, heldSeconds: held } = this.warned;
      this.logger.info(
        { ...logFields(was), held_seconds: Math.round(held) },
        `the MVCC horizon is no longer held back by ${describe(was)} (held for at least ${Math.round(held)} s)`,
      );
      this.warned = undefined;
    }
    if (overThreshold && holder && key) {
      if (!this.warned) {
        this.logger.warn(
          { ...logFields(holder), held_seconds: Math.round(heldSeconds), warn_after_ms: this.config.warnAfterMs, tables: sample.tables },
          `the MVCC horizon has been held back for ${Math.round(heldSeconds)} s by ${describe(holder)}: VACUUM cannot remove dead row versions ` +
            `while it lasts, so claims slow down as they pile up; find and end that transaction (see ${HORIZON_DOC})`,
        );
      }
      this.warned = { key, holder, heldSeconds };
    }
    return { ...sample, heldSeconds, overThreshold };
  }
}

function holdingKey(h: HorizonHolder): string {
  return `${h.kind}|${h.pid ?? ""}|${h.name}|${h.xmin}`;
}

/** "session pid 1234 (application_name "report", state "idle in transaction")" and the like. */
export function describe(h: HorizonHolder): string {
  switch (h.kind) {
    case "session":
      return `session pid ${h.pid} (application_name ${JSON.stringify(h.name)}, state ${JSON.stringify(h.state)}${h.user ? `, user ${JSON.stringify(h.user)}` : ""})`;
    case "replication_slot":
      return `replication slot ${JSON.stringify(h.name)} (${h.backendType}, ${h.state}, xmin ${h.xmin})`;
    case "prepared_transaction":
      return `prepared transaction ${JSON.stringify(h.name)}${h.user ? ` (owner ${JSON.stringify(h.user)})` : ""}`;
  }
}

function logFields(h: HorizonHolder): Record<string, unknown> {
  return {
    holder_kind: h.kind,
    pid: h.pid,
    application_name: h.kind === "session" ? h.name : undefined,
    slot_name: h.kind === "replication_slot" ? h.name : undefined,
    gid: h.kind === "prepared_transaction" ? h.name : undefined,
    state: h.state,
    backend_type: h.backendType,
    user: h.user,
    age_seconds: h.ageSeconds === null ? null : Math.round(h.ageSeconds),
    xid_age: h.xidAge,
    query: h.query.slice(0, QUERY_LOG_CHARS),
  };
}
