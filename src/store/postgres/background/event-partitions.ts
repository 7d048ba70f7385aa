// The event log's partitions (task_events, range-partitioned on created_at; see
// migrations/1764570000000_event_partitions.sql): created ahead of time so an insert always finds
// its partition, and dropped whole once older than the retention. Run by StoreMaintenance
// (store-maintenance.ts) at most every checkIntervalMs; the loop with its start and stop is
// queue/maintenance.ts's Maintainer. Every coordinator runs it; a session advisory lock lets one
// pass work at a time, and the others skip theirs.

import type pg from "pg";
import { transaction, withClient } from "../sql/db.js";
import { defineQuery, type NoParams } from "../sql/query.js";

export interface EventPartitionsConfig {
  /** Length of each new partition, in hours. Existing partitions keep theirs: a change applies from the next one. */
  intervalHours?: number;
  /** Partitions kept created ahead of now (at least one). */
  ahead?: number;
  /** Partitions wholly older than this many days are dropped; undefined: kept forever. */
  retentionDays?: number;
  /**
   * Longest wait of a DDL statement for its lock. Dropping a partition takes an ACCESS EXCLUSIVE
   * lock on task_events, which queues every insert of an event (every claim and completion) behind
   * it while it waits; a drop that cannot get it this fast is tried again on the next pass.
   */
  lockTimeoutMs?: number;
  /** Least time between two passes (the maintenance loop runs every second; this work is daily). */
  checkIntervalMs?: number;
}

export const EVENT_PARTITIONS_DEFAULTS = { intervalHours: 24, ahead: 3, lockTimeoutMs: 200, checkIntervalMs: 60_000 } as const;

export interface EventPartitionsResult {
  created: number;
  dropped: number;
  /** Rows of the default partition moved into a partition created for them. */
  movedFromDefault: number;
  /** Rows of the default partition older than the retention, deleted. */
  deletedFromDefault: number;
  /** The partition boundary a watermark was recorded at (undefined: none new). */
  watermark?: Date;
}

export const EVENTS_TABLE = "task_events";
export const WATERMARKS_TABLE = "task_event_watermarks";
export const DEFAULT_PARTITION = "task_events_default";

/** One key for every coordinator's partition pass (pg_try_advisory_lock). */
const PARTITION_LOCK_KEY = 0x1ea5e_0e7;
const TRY_PARTITION_LOCK = defineQuery<{ key: number }, { locked: boolean }>(null, `SELECT pg_try_advisory_lock($1) AS locked`, (p) => [
  p.key,
]);
const PARTITION_UNLOCK = defineQuery<{ key: number }>(null, `SELECT pg_advisory_unlock($1)`, (p) => [p.key]);

/*
 * The partitions with their bounds in microseconds since the epoch (exact, unlike a Date), read
 * back from the catalog: the bound text is in this session's TimeZone and DateStyle, so casting it
 * back in the same statement is exact. A partition from MINVALUE has no lower bound; the default
 * partition neither.
 */
export const LIST_EVENT_PARTITIONS = defineQuery<
  NoParams,
  { name: string; is_default: boolean; lower_us: string | null; upper_us: string | null; now_us: string }
>(
  null,
  `
WITH parts AS (
  SELECT c.relname AS name, pg_get_expr(c.relpartbound, c.oid) AS bound
  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
  WHERE i.inhparent = '${EVENTS_TABLE}'::regclass
), bounds AS (
  SELECT name, bound = 'DEFAULT' AS is_default,
    (extract(epoch FROM (regexp_match(bound, 'FROM \\(''([^'']+)''\\)'))[1]::timestamptz) * 1000000)::bigint AS lower_us,
    (extract(epoch FROM (regexp_match(bound, 'TO \\(''([^'']+)''\\)'))[1]::timestamptz) * 1000000)::bigint AS upper_us
  FROM parts
)
SELECT name, is_default, lower_us::text, upper_us::text, (extract(epoch FROM now()) * 1000000)::bigint::text AS now_us
FROM bounds
ORDER BY upper_us NULLS FIRST`,
);

/*
 * The oldest transaction start in this database (this statement's own included), and whether some
 * session's is hidden from us (another role's, without pg_read_all_stats): then no watermark.
 */
const OLDEST_TRANSACTION = defineQuery<NoParams, { oldest_us: string; hidden: boolean }>(
  null,
  `
SELECT (extract(epoch FROM least(now(), min(xact_start))) * 1000000)::bigint::text AS oldest_us,
       coalesce(bool_or(query = '<insufficient privilege>'), false) AS hidden
FROM pg_stat_activity WHERE datname = current_database()`,
);

// The xid horizon, read after the transactions above: every xid assigned so far is below it.
const XID_HORIZON = defineQuery<NoParams, { xmax: string }>(null, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text AS xmax`);

/** A bound in microseconds since the epoch as a timestamptz parameter's expression, exact. */
const atParam = (n: number) => `('epoch'::timestamptz + $${n}::bigint * interval '1 microsecond')`;

// A watermark: every event below the boundary $1 (µs) has an xid below $2. Answers a row if it is new.
const INSERT_WATERMARK = defineQuery<{ upperUs: string; xidBound: string }, { upper: Date }>(
  null,
  `INSERT INTO ${WATERMARKS_TABLE} (upper, xid_bound) VALUES (${atParam(1)}, $2::xid8) ON CONFLICT (upper) DO NOTHING RETURNING upper`,
  (p) => [p.upperUs, p.xidBound],
);

// The $1 newest watermarks are kept.
const PRUNE_WATERMARKS = defineQuery<{ keep: number }>(
  null,
  `DELETE FROM ${WATERMARKS_TABLE} WHERE upper < (SELECT min(upper) FROM (SELECT upper FROM ${WATERMARKS_TABLE} ORDER BY upper DESC LIMIT $1) k)`,
  (p) => [p.keep],
);

// Up to $2 rows of the default partition older than $1 (µs) deleted; answers how many.
const DELETE_OLD_DEFAULT_ROWS = defineQuery<{ cutoffUs: string; limit: number }, { deleted: number }>(
  null,
  `
WITH gone AS (
  DELETE FROM ${DEFAULT_PARTITION}
  WHERE ctid = ANY (ARRAY(SELECT ctid FROM ${DEFAULT_PARTITION} WHERE created_at < ${atParam(1)} LIMIT $2))
  RETURNING 1
)
SELECT count(*)::int AS deleted FROM gone`,
  (p) => [p.cutoffUs, p.limit],
);
const DEFAULT_DELETE_BATCH = 10_000;

// A boundary gets its watermark no sooner than this after it: a server clock stepped back by less
// cannot make a new transaction's events fall below it.
const WATERMARK_MARGIN_US = 5n * 60_000_000n;

// The newest watermarks are the ones the reads use (event-floors.ts); older ones only widen a read that has them.
const KEEP_WATERMARKS = 30;

// The parent's columns, in order, for moving rows out of the default partition by name.
const EVENT_COLUMNS = defineQuery<NoParams, { columns: string }>(
  null,
  `
SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) AS columns
FROM pg_attribute WHERE attrelid = '${EVENTS_TABLE}'::regclass AND attnum > 0 AND NOT attisdropped`,
);

// The storage settings every partition gets (see migrations/1764480000000_queue_storage.sql).
const PARTITION_STORAGE = `autovacuum_vacuum_insert_scale_factor = 0.05, autovacuum_vacuum_insert_threshold = 10000`;

/**
 * A bound as a constant expression, exact to the microsecond: in DDL (a partition's bounds take
 * no parameters) and in the statements that name a partition, which are composed per call anyway.
 */
const at = (us: bigint) => `('epoch'::timestamptz + ${us.toString()} * interval '1 microsecond')`;

const HOUR_US = 3_600_000_000n;
const DAY_US = 24n * HOUR_US;

interface Partition {
  name: string;
  isDefault: boolean;
  lowerUs: bigint | undefined;
  upperUs: bigint | undefined;
}

export class EventPartitions {
  readonly retentionDays: number | undefined;
  private readonly intervalUs: bigint;
  private readonly ahead: number;
  private readonly lockTimeoutMs: number;
  private readonly checkIntervalMs: number;
  private lastPassAt = -Infinity;

  constructor(
    private readonly pool: pg.Pool,
    config: EventPartitionsConfig = {},
  ) {
    const hours = config.intervalHours ?? EVENT_PARTITIONS_DEFAULTS.intervalHours;
    if (!Number.isInteger(hours) || hours < 1)
      throw new RangeError(`event partition intervalHours must be a positive integer, not ${hours}`);
    this.intervalUs = BigInt(hours) * HOUR_US;
    this.ahead = config.ahead ?? EVENT_PARTITIONS_DEFAULTS.ahead;
    if (!Number.isInteger(this.ahead) || this.ahead < 1)
      throw new RangeError(`event partitions ahead must be a positive integer, not ${this.ahead}`);
    this.retentionDays = config.retentionDays;
    this.lockTimeoutMs = config.lockTimeoutMs ?? EVENT_PARTITIONS_DEFAULTS.lockTimeoutMs;
    this.checkIntervalMs = config.checkIntervalMs ?? EVENT_PARTITIONS_DEFAULTS.checkIntervalMs;
  }

  /** Whether a pass is due (checkIntervalMs since the last one started). */
  get due(): boolean {
    return Date.now() - this.lastPassAt >= this.checkIntervalMs;
  }

  /** One pass if due (or forced): partitions created ahead, old ones dropped. */
  async runOnce(signal: AbortSignal | undefined, force = false): Promise<EventPartitionsResult> {
    const result: EventPartitionsResult = { created: 0, dropped: 0, movedFromDefault: 0, deletedFromDefault: 0 };
    if (!force && !this.due) return result;
    this.lastPassAt = Date.now();
    await withClient(this.pool, signal, async (c) => {
      const { locked } = await TRY_PARTITION_LOCK.one(c, { key: PARTITION_LOCK_KEY });
      if (!locked) return; // another coordinator's pass is at it
      try {
        await this.createAhead(c, result);
        await this.recordWatermark(c, result);
        if (this.retentionDays !== undefined) await this.dropOld(c, this.retentionDays, result);
      } finally {
        await PARTITION_UNLOCK.run(c, { key: PARTITION_LOCK_KEY });
      }
    });
    return result;
  }

  private async list(c: pg.PoolClient): Promise<{ partitions: Partition[]; nowUs: bigint }> {
    const rows = await LIST_EVENT_PARTITIONS.run(c);
    const big = (v: string | null) => (v === null ? undefined : BigInt(v));
    const partitions = rows.map((r) => ({ name: r.name, isDefault: r.is_default, lowerUs: big(r.lower_us), upperUs: big(r.upper_us) }));
    const nowUs = rows.length > 0 ? BigInt(rows[0].now_us) : BigInt(Date.now()) * 1000n;
    return { partitions, nowUs };
  }

  /*
   * Each new partition starts where the last one ends (so coordinators configured with different
   * intervals never overlap) and ends on the interval's grid (UTC, from the epoch: daily partitions
   * end at midnight UTC). A gap left by a loop that was down (its rows in the default partition)
   * becomes one partition up to the current interval, not one per missed interval.
   */
  private async createAhead(c: pg.PoolClient, result: EventPartitionsResult): Promise<void> {
    const { partitions, nowUs } = await this.list(c);
    const floor = (us: bigint) => us - (((us % this.intervalUs) + this.intervalUs) % this.intervalUs);
    const uppers = partitions.flatMap((p) => (p.upperUs === undefined ? [] : [p.upperUs]));
    let last: bigint = uppers.length > 0 ? uppers.reduce((m, u) => (u > m ? u : m)) : floor(nowUs);
    const target = nowUs + BigInt(this.ahead) * this.intervalUs;
    const hasDefault = partitions.some((p) => p.isDefault);
    while (last < target) {
      const upper: bigint = last < floor(nowUs) ? floor(nowUs) : floor(last) + this.intervalUs;
      result.movedFromDefault += await this.create(c, last, upper, hasDefault);
      result.created++;
      last = upper;
    }
  }

  /*
   * CREATE TABLE ... PARTITION OF would take an ACCESS EXCLUSIVE lock on task_events (every insert
   * of an event waits); ATTACH PARTITION takes SHARE UPDATE EXCLUSIVE, which inserts do not wait
   * for. It scans the default partition (held ACCESS EXCLUSIVE meanwhile) for rows of the new
   * range, so those are moved into the new table first, in the same transaction.
   */
  private async create(c: pg.PoolClient, lowerUs: bigint, upperUs: bigint, hasDefault: boolean): Promise<number> {
    const name = partitionName(lowerUs);
    const table = c.escapeIdentifier(name);
    return transaction(c, async () => {
      await c.query(`SET LOCAL lock_timeout = ${Math.max(1, Math.floor(this.lockTimeoutMs))}`);
      await c.query(`CREATE TABLE ${table} (LIKE ${EVENTS_TABLE} INCLUDING DEFAULTS) WITH (${PARTITION_STORAGE})`);
      let moved = 0;
      if (hasDefault) {
        const { columns } = await EVENT_COLUMNS.one(c);
        const r = await c.query(
          `WITH moved AS (DELETE FROM ${DEFAULT_PARTITION} WHERE created_at >= ${at(lowerUs)} AND created_at < ${at(upperUs)} RETURNING ${columns})
           INSERT INTO ${table} (${columns}) SELECT ${columns} FROM moved`,
        );
        moved = r.rowCount ?? 0;
      }
      await c.query(`ALTER TABLE ${EVENTS_TABLE} ATTACH PARTITION ${table} FOR VALUES FROM ${at(lowerUs)} TO ${at(upperUs)}`);
      return moved;
    });
  }

  /*
   * A watermark at the newest partition boundary that every running transaction started after (by
   * WATERMARK_MARGIN_US at least): no event can be written below it any more (an event's created_at is its transaction's start), and
   * every one written so far has an xid below the horizon read next.
   */
  private async recordWatermark(c: pg.PoolClient, result: EventPartitionsResult): Promise<void> {
    const { partitions } = await this.list(c);
    const transactions = await OLDEST_TRANSACTION.one(c);
    if (transactions.hidden) return;
    const oldest = BigInt(transactions.oldest_us) - WATERMARK_MARGIN_US;
    const boundaries = partitions.flatMap((p) => (p.upperUs !== undefined && p.upperUs <= oldest ? [p.upperUs] : []));
    if (boundaries.length === 0) return;
    const upper = boundaries.reduce((m, u) => (u > m ? u : m));
    const { xmax } = await XID_HORIZON.one(c);
    const inserted = await INSERT_WATERMARK.maybe(c, { upperUs: upper.toString(), xidBound: xmax });
    if (inserted) {
      result.watermark = new Date(Number(upper / 1000n));
      await PRUNE_WATERMARKS.run(c, { keep: KEEP_WATERMARKS });
    }
  }

  /*
   * Partitions whose every row is older than the retention: DROP TABLE, one per transaction, each
   * giving up after lockTimeoutMs (lock_not_available) rather than holding inserts up longer; the
   * next pass tries again. Rows of the default partition past the retention are deleted in
   * batches (normally there are none).
   */
  private async dropOld(c: pg.PoolClient, days: number, result: EventPartitionsResult): Promise<void> {
    const { partitions, nowUs } = await this.list(c);
    const cutoff = nowUs - BigInt(days) * DAY_US;
    for (const p of partitions) {
      if (p.isDefault || p.upperUs === undefined || p.upperUs > cutoff) continue;
      try {
        await transaction(c, async () => {
          await c.query(`SET LOCAL lock_timeout = ${Math.max(1, Math.floor(this.lockTimeoutMs))}`);
          await c.query(`DROP TABLE ${c.escapeIdentifier(p.name)}`);
        });
        result.dropped++;
      } catch (err) {
        if ((err as { code?: string }).code === "55P03") return; // lock_not_available: next pass
        throw err;
      }
    }
    if (partitions.some((p) => p.isDefault)) {
      for (;;) {
        const { deleted } = await DELETE_OLD_DEFAULT_ROWS.one(c, { cutoffUs: cutoff.toString(), limit: DEFAULT_DELETE_BATCH });
        result.deletedFromDefault += deleted;
        if (deleted < DEFAULT_DELETE_BATCH) break;
      }
    }
  }
}

/** task_events_YYYYMMDD_HHMI of the partition's lower bound (UTC). */
export function partitionName(lowerUs: bigint): string {
  const iso = new Date(Number(lowerUs / 1000n)).toISOString(); // 2026-12-02T00:00:00.000Z
  return `${EVENTS_TABLE}_${iso.slice(0, 4)}${iso.slice(5, 7)}${iso.slice(8, 10)}_${iso.slice(11, 13)}${iso.slice(14, 16)}`;
}
