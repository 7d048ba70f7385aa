// What holds this database's MVCC horizon back, and the queue tables' dead row versions: the
// horizon watch's samples (src/queue/horizon-watch.ts). Read-only catalog and statistics views;
// nothing here ends, cancels or otherwise touches the sessions it lists.
import type pg from "pg";
import type { HorizonHolder, HorizonHolderKind, HorizonSample } from "../../../queue/horizon-watch.js";
import type { CallOptions } from "../../../queue/types.js";
import { withClient } from "../sql/db.js";
import { defineQuery, type NoParams } from "../sql/query.js";

/**
 * The queue's tables whose rows change on the hot paths (claims, results, leases, flow control,
 * due times): where dead versions pile up while the horizon is held. A fixed list, so the metric's
 * `table` label stays bounded.
 */
export const HOT_TABLES = [
  "tasks",
  "jobs",
  "workloads",
  "flow_keys",
  "workload_rate_buckets",
  "workload_slot_waits",
  "due_wakeups",
] as const;

interface HolderRow {
  kind: HorizonHolderKind;
  pid: number | null;
  name: string | null;
  state: string | null;
  backend_type: string | null;
  usename: string | null;
  xid_age: number;
  xmin: string;
  age_seconds: number | null;
  query: string | null;
}

/**
 * The one holding with the oldest xmin, from the three places PostgreSQL keeps one:
 * - sessions (pg_stat_activity): a snapshot (backend_xmin) or an assigned transaction id
 *   (backend_xid). For the queue's tables only sessions of this database count, and walsenders
 *   (no database: hot_standby_feedback of a replica without a slot holds every database back).
 *   Autovacuum workers are left out: other vacuums ignore their snapshots. This session too.
 *   Its age is the transaction's (xact_start): a REPEATABLE READ snapshot lives as long as that.
 * - replication slots' xmin (a physical slot of a replica with hot_standby_feedback): every
 *   database. catalog_xmin is not listed: it holds back only the system catalogs.
 * - prepared transactions (PREPARE TRANSACTION without COMMIT PREPARED): every database.
 * Oldest by age(xmin), transactions begun since; ties (a quiet database) by start time.
 */
const OLDEST_HOLDER = defineQuery<NoParams, HolderRow>(
  null,
  `WITH holders AS (
     SELECT 'session'::text AS kind, a.pid, a.application_name AS name, a.state, a.backend_type,
            a.usename::text AS usename,
            greatest(age(a.backend_xmin), age(a.backend_xid)) AS xid_age,
            coalesce(a.backend_xid, a.backend_xmin)::text AS xmin,
            a.xact_start AS since, left(a.query, 200) AS query
       FROM pg_stat_activity a
      WHERE (a.backend_xmin IS NOT NULL OR a.backend_xid IS NOT NULL)
        AND a.pid <> pg_backend_pid()
        AND a.backend_type <> 'autovacuum worker'
        AND (a.datname = current_database() OR a.datid IS NULL)
     UNION ALL
     SELECT 'replication_slot', s.active_pid, s.slot_name::text, CASE WHEN s.active THEN 'active' ELSE 'inactive' END,
            s.slot_type, NULL, age(s.xmin), s.xmin::text, NULL, NULL
       FROM pg_replication_slots s
      WHERE s.xmin IS NOT NULL
     UNION ALL
     SELECT 'prepared_transaction', NULL, p.gid, 'prepared', NULL, p.owner::text, age(p.transaction),
            p.transaction::text, p.prepared, NULL
       FROM pg_prepared_xacts p
   )
   SELECT kind, CASE WHEN kind = 'replication_slot' THEN NULL ELSE pid END AS pid, name, state, backend_type, usename,
          xid_age, xmin,
          CASE WHEN since IS NULL THEN NULL ELSE extract(epoch FROM clock_timestamp() - since)::float8 END AS age_seconds,
          query
     FROM holders
    ORDER BY xid_age DESC, since ASC NULLS LAST
    LIMIT 1`,
);

/** pg_stat_user_tables of the hot tables in this schema (the statistics collector's counts). */
const DEAD_TUPLES = defineQuery<{ tables: readonly string[] }, { table: string; dead: string; live: string }>(
  null,
  `SELECT relname::text AS table, n_dead_tup::text AS dead, n_live_tup::text AS live
     FROM pg_stat_user_tables
    WHERE schemaname = current_schema() AND relname = ANY($1::text[])
    ORDER BY relname`,
  (p) => [p.tables],
);

function toHolder(r: HolderRow): HorizonHolder {
  return {
    kind: r.kind,
    pid: r.pid,
    name: r.name ?? "",
    state: r.state ?? "",
    backendType: r.backend_type ?? "",
    user: r.usename,
    xidAge: Number(r.xid_age),
    xmin: r.xmin,
    ageSeconds: r.age_seconds === null ? null : Number(r.age_seconds),
    query: r.query ?? "",
  };
}

/** One sample: the oldest holding and the hot tables' dead versions, on one pooled connection under opts.signal. */
export async function sampleHorizon(pool: pg.Pool, opts: CallOptions = {}): Promise<HorizonSample> {
  return withClient(pool, opts.signal, async (c) => {
    const holder = await OLDEST_HOLDER.maybe(c);
    const tables = await DEAD_TUPLES.run(c, { tables: HOT_TABLES });
    return {
      holder: holder ? toHolder(holder) : undefined,
      tables: tables.map((t) => ({ table: t.table, dead: Number(t.dead), live: Number(t.live) })),
    };
  });
}

/** The watch's source over a pool. */
export function horizonSource(pool: pg.Pool): { sampleHorizon(opts?: CallOptions): Promise<HorizonSample> } {
  return { sampleHorizon: (opts) => sampleHorizon(pool, opts) };
}
