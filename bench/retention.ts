// npm run bench:retention: retention of the event log by dropping whole partitions against the
// batched delete it replaces, and what partitions cost the watch reads. Not a test.
//
// Two databases of one embedded PostgreSQL: "plain", migrated to the migration before the
// partitions (task_events one table, as it was), and "parted", migrated to the latest with daily
// partitions for the last RETENTION_BENCH_DAYS_BACK days (as a deployment has after that many days).
// Each round loads both with the same events: RETENTION_BENCH_EVENTS (1,000,000) old ones, of 1,000
// jobs, written 8-9 days ago, and 100,000 recent ones that stay. Then:
//   - plain: the events of those jobs deleted as retention used to, 20 jobs per statement (its
//     DELETE ... WHERE job_id = ANY), then a VACUUM of the table, as autovacuum would do after it;
//   - parted: one pass of the partition maintenance with RETENTION_DAYS 7 (drops the old days).
// For each: wall time, WAL bytes (pg_current_wal_insert_lsn before and after), table size before and
// after (and after the VACUUM for plain). Rounds alternate which side goes first.
// Then the watch reads on each (a resumed stream's JOB_EVENTS_AFTER, a live stream's JOB_EVENTS_SINCE,
// the watch hub's poll of 100 streams; on the partitioned side after a maintenance pass, so with the
// watermark at today's boundary that lets the live reads skip the older partitions): backend CPU
// per statement (/proc, Linux), medians. Run as the coordinator runs them: through its pool
// (createPool: plan_cache_mode=force_generic_plan), under the names the store gives them, with the
// floor from the watermarks (event-floors.ts). The one-table side runs the statements as they were
// before the partitions, also under those names; its live read also unnamed, as it was sent then.
//
//   RETENTION_BENCH_ROUNDS (2)   RETENTION_BENCH_EVENTS (1000000)   RETENTION_BENCH_DAYS_BACK (10)
//   RETENTION_BENCH_DATABASE_URL: a server of your own (a container: PostgreSQL 15, 17) instead of
//   the embedded one; its backends' CPU is read from this host's /proc (the same kernel).

import { chmodSync, mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import pg from "pg";
import { fmt, freePort } from "./harness.js";
import { startEmbeddedPostgres } from "../src/store/postgres/schema/embedded.js";
import { expectedMigrations, migrate } from "../src/store/postgres/schema/migrate.js";
import { createPool } from "../src/store/postgres/sql/db.js";
import { EventFloors } from "../src/store/postgres/state/event-floors.js";
import { EventPartitions } from "../src/store/postgres/background/event-partitions.js";
import { WATCHED_JOBS_WITH_EVENTS } from "../src/store/postgres/state/watch-hub.js";
import { JOB_EVENTS_AFTER, JOB_EVENTS_SINCE } from "../src/store/postgres/operations/watch.js";

const ROUNDS = Number(process.env.RETENTION_BENCH_ROUNDS ?? 2);
const EVENTS = Number(process.env.RETENTION_BENCH_EVENTS ?? 1_000_000);
const DAYS_BACK = Number(process.env.RETENTION_BENCH_DAYS_BACK ?? 10);
const EXTERNAL = process.env.RETENTION_BENCH_DATABASE_URL;
const OLD_JOBS = 1000;
const RECENT = 100_000;
const BATCH_JOBS = 20; // RETENTION_DEFAULTS.batchJobs

const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const mb = (bytes: number) => `${fmt(bytes / 1024 / 1024, 1)} MB`;

async function lsn(c: pg.Client): Promise<string> {
  return (await c.query("SELECT pg_current_wal_insert_lsn()::text AS l")).rows[0].l as string;
}
async function walSince(c: pg.Client, from: string): Promise<number> {
  return Number((await c.query("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1) AS d", [from])).rows[0].d);
}
async function size(c: pg.Client): Promise<number> {
  // The table with its indexes: the partitions' sizes for the partitioned one.
  const { rows } = await c.query(`
    SELECT CASE WHEN (SELECT relkind FROM pg_class WHERE oid = 'task_events'::regclass) = 'p'
      THEN (SELECT sum(pg_total_relation_size(relid)) FROM pg_partition_tree('task_events'))
      ELSE pg_total_relation_size('task_events') END::bigint AS b`);
  return Number(rows[0].b);
}

/** The old events (of OLD_JOBS jobs, 8-9 days ago) and the recent ones; returns the old jobs' ids. */
async function load(c: pg.Client): Promise<string[]> {
  const { rows } = await c.query(`SELECT array_agg(gen_random_uuid()) AS ids FROM generate_series(1, $1)`, [OLD_JOBS]);
  const jobs = rows[0].ids as string[];
  // Spread over two days, in write order, so a job's events sit together as they would.
  await c.query(
    `INSERT INTO task_events (job_id, task_id, chunk_index, kind, status, previous_status, attempt, worker_id, created_at)
     SELECT ($1::uuid[])[1 + (g - 1) * $3 / $2], gen_random_uuid(), g % 1000, 'task_status', 'completed', 'leased', 1, 'bench-worker',
            now() - interval '9 days' + (g::float8 / $2) * interval '1 day'
     FROM generate_series(1, $2) g`,
    [jobs, EVENTS, OLD_JOBS],
  );
  await c.query(
    `INSERT INTO task_events (job_id, task_id, chunk_index, kind, status, previous_status, attempt, worker_id)
     SELECT gen_random_uuid(), gen_random_uuid(), g % 1000, 'task_status', 'completed', 'leased', 1, 'bench-worker'
     FROM generate_series(1, $1) g`,
    [RECENT],
  );
  await c.query("VACUUM ANALYZE task_events");
  await c.query("CHECKPOINT");
  return jobs;
}

interface Result {
  ms: number;
  wal: number;
  before: number;
  after: number;
  vacuumMs?: number;
  vacuumWal?: number;
  afterVacuum?: number;
  left: number;
}

async function batchedDelete(c: pg.Client, jobs: string[]): Promise<Result> {
  const before = await size(c);
  const w0 = await lsn(c);
  const t0 = performance.now();
  for (let i = 0; i < jobs.length; i += BATCH_JOBS)
    await c.query(`DELETE FROM task_events WHERE job_id = ANY ($1::uuid[])`, [jobs.slice(i, i + BATCH_JOBS)]);
  const ms = performance.now() - t0;
  const wal = await walSince(c, w0);
  const after = await size(c);
  const w1 = await lsn(c);
  const t1 = performance.now();
  await c.query("VACUUM task_events");
  const vacuumMs = performance.now() - t1;
  const vacuumWal = await walSince(c, w1);
  const afterVacuum = await size(c);
  const left = Number((await c.query("SELECT count(*) AS n FROM task_events")).rows[0].n);
  return { ms, wal, before, after, vacuumMs, vacuumWal, afterVacuum, left };
}

async function partitionDrop(c: pg.Client, url: string): Promise<Result> {
  const pool = new pg.Pool({ connectionString: url, max: 1 });
  try {
    const before = await size(c);
    const w0 = await lsn(c);
    const t0 = performance.now();
    const r = await new EventPartitions(pool, { retentionDays: 7 }).runOnce(undefined, true);
    const ms = performance.now() - t0;
    const wal = await walSince(c, w0);
    if (r.dropped < 2) throw new Error(`expected the two old days dropped, got ${r.dropped}`);
    const left = Number((await c.query("SELECT count(*) AS n FROM task_events")).rows[0].n);
    return { ms, wal, before, after: await size(c), left };
  } finally {
    await pool.end();
  }
}

async function maintenancePass(url: string): Promise<void> {
  const pool = new pg.Pool({ connectionString: url, max: 1 });
  try {
    await new EventPartitions(pool, {}).runOnce(undefined, true);
  } finally {
    await pool.end();
  }
}

/** Daily partitions for the last DAYS_BACK days instead of the one the migration made of the table as it was. */
async function pastPartitions(c: pg.Client): Promise<void> {
  const { rows } = await c.query(`SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = 'task_events'::regclass AND pg_get_expr(c.relpartbound, c.oid) LIKE '%MINVALUE%'`);
  for (const r of rows) await c.query(`DROP TABLE ${c.escapeIdentifier(r.relname)}`);
  // The partitions left start tomorrow (UTC): today's and DAYS_BACK days before it.
  for (let d = 0; d <= DAYS_BACK; d++) {
    await c.query(`DO $$ DECLARE lo timestamptz := date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - ${d} * interval '1 day';
      BEGIN EXECUTE format('CREATE TABLE IF NOT EXISTS %I PARTITION OF task_events FOR VALUES FROM (%L) TO (%L) WITH (autovacuum_vacuum_insert_scale_factor = 0.05, autovacuum_vacuum_insert_threshold = 10000)',
        'task_events_' || to_char(lo AT TIME ZONE 'UTC', 'YYYYMMDD_HH24MI'), lo, lo + interval '1 day'); END $$`);
  }
}

/**
 * The host's pid of a backend: itself for a local server; for one in a container (another pid
 * namespace on this kernel), the process whose innermost pid it is (NSpid) and whose title names
 * the database.
 */
function hostPid(pid: number, database: string): number {
  if (!EXTERNAL) return pid;
  for (const d of readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const ns = /NSpid:\s+(.*)/
        .exec(readFileSync(`/proc/${d}/status`, "utf8"))?.[1]
        .trim()
        .split(/\s+/);
      if (ns && ns.length > 1 && Number(ns.at(-1)) === pid && readFileSync(`/proc/${d}/cmdline`, "utf8").includes(` ${database} `))
        return Number(d);
    } catch {
      // gone meanwhile
    }
  }
  throw new Error(`no process on this host is backend ${pid} of ${database}`);
}

/** CPU ticks (user + system, 10 ms each) of one backend so far. */
function backendTicks(pid: number): number {
  const f = readFileSync(`/proc/${pid}/stat`, "utf8");
  const rest = f.slice(f.lastIndexOf(")") + 2).split(" ");
  return Number(rest[11]) + Number(rest[12]);
}

/**
 * Backend CPU per call of fn (µs), over ~ms milliseconds of calls: the database's own work, which
 * does not move with how busy the shared machine is as a wall-clock time does.
 */
async function timed(c: pg.ClientBase, ms: number, fn: () => Promise<unknown>): Promise<number> {
  const { rows } = await c.query("SELECT pg_backend_pid() AS p, current_database() AS d");
  const pid = hostPid(rows[0].p as number, rows[0].d as string);
  for (let i = 0; i < 10; i++) await fn(); // past the custom plans, as a coordinator's prepared statements are
  let n = 0;
  const ticks0 = backendTicks(pid);
  const t0 = performance.now();
  while (n < 50 || performance.now() - t0 < ms) {
    await fn();
    n++;
  }
  return ((backendTicks(pid) - ticks0) * 10_000) / n;
}

// The two live watch reads as they were before the partitions (no watermark bound): the plain side's.
const JOB_EVENTS_SINCE_BEFORE = `
SELECT pg_current_snapshot()::text AS snapshot,
  coalesce((
    SELECT json_agg(e ORDER BY e.id) FROM task_events e
    WHERE e.job_id = $1 AND e.xid >= pg_snapshot_xmin($2::pg_snapshot) AND NOT pg_visible_in_snapshot(e.xid, $2::pg_snapshot)
  ), '[]'::json) AS events`;
const WATCHED_JOBS_WITH_EVENTS_BEFORE = `
SELECT w.i::int AS i
FROM unnest($1::uuid[], $2::text[]) WITH ORDINALITY AS w(job_id, since, i)
WHERE EXISTS (
  SELECT 1 FROM task_events e
  WHERE e.job_id = w.job_id AND e.xid >= pg_snapshot_xmin(w.since::pg_snapshot) AND NOT pg_visible_in_snapshot(e.xid, w.since::pg_snapshot)
)`;

interface Reads {
  after: number;
  since: number;
  hub: number;
  /** The one-table side's live read unnamed, as the coordinator sent it before the partitions. */
  sinceUnnamed?: number;
}

async function watchReads(url: string, before: boolean): Promise<Reads> {
  // The coordinator's pool (plan_cache_mode=force_generic_plan, enable_seqscan=off), one connection.
  const pool = createPool({ connectionString: url, max: 1, statementTimeoutMs: 60_000, connectTimeoutMs: 10_000 });
  const c = await pool.connect();
  try {
    // A recent job's events, as a resumed stream and a live stream read them, and the hub's probe of 100 streams.
    const { rows } = await c.query(
      `SELECT job_id, min(id)::text AS id FROM task_events WHERE created_at > now() - interval '1 hour' GROUP BY job_id LIMIT 100`,
    );
    const snap = (await c.query(`SELECT pg_current_snapshot()::text AS s`)).rows[0].s as string;
    const jobs = rows.map((r) => r.job_id as string);
    const snaps = jobs.map(() => snap);
    const floors = new EventFloors();
    let i = 0;
    const after = await timed(c, 3000, () => JOB_EVENTS_AFTER.run(c, { jobId: jobs[i++ % jobs.length], afterEventId: "0" }));
    if (before) {
      const since = await timed(c, 3000, () =>
        c.query({ name: JOB_EVENTS_SINCE.name, text: JOB_EVENTS_SINCE_BEFORE, values: [jobs[i++ % jobs.length], snap] }),
      );
      const sinceUnnamed = await timed(c, 3000, () => c.query({ text: JOB_EVENTS_SINCE_BEFORE, values: [jobs[i++ % jobs.length], snap] }));
      const hub = await timed(c, 3000, () =>
        c.query({ name: WATCHED_JOBS_WITH_EVENTS.name, text: WATCHED_JOBS_WITH_EVENTS_BEFORE, values: [jobs, snaps] }),
      );
      return { after, since, hub, sinceUnnamed };
    }
    // As watch.ts and watch-hub.ts run them: the cached watermarks (read again at most once a minute), then the statement.
    const since = await timed(c, 3000, async () => {
      await floors.refresh(c);
      return JOB_EVENTS_SINCE.one(c, { jobId: jobs[i++ % jobs.length], since: snap, floor: floors.floor(snap) });
    });
    const hub = await timed(c, 3000, async () => {
      await floors.refresh(c);
      return WATCHED_JOBS_WITH_EVENTS.run(c, { jobIds: jobs, snapshots: snaps, floor: floors.lowest(snaps) });
    });
    return { after, since, hub };
  } finally {
    c.release();
    await pool.end();
  }
}

async function main() {
  const dir = mkdtempSync(path.join(os.tmpdir(), "leasehold-retention-"));
  chmodSync(dir, 0o755);
  const db = EXTERNAL
    ? {
        url: EXTERNAL,
        urlFor: (name: string) => Object.assign(new URL(EXTERNAL), { pathname: `/${name}` }).toString(),
        stop: async () => {},
      }
    : await startEmbeddedPostgres({ dataDir: path.join(dir, "db"), port: await freePort(), persistent: false });
  const before = expectedMigrations().length - 1;
  const results: Record<"plain" | "parted", Result[]> = { plain: [], parted: [] };
  const reads: Record<"plain" | "parted", { after: number[]; since: number[]; hub: number[]; sinceUnnamed: number[] }> = {
    plain: { after: [], since: [], hub: [], sinceUnnamed: [] },
    parted: { after: [], since: [], hub: [], sinceUnnamed: [] },
  };
  try {
    console.error(
      `loadavg ${os
        .loadavg()
        .map((l) => l.toFixed(1))
        .join(" ")} on ${os.cpus().length} cores`,
    );
    const probe = new pg.Client({ connectionString: db.url });
    await probe.connect();
    console.error(`PostgreSQL ${(await probe.query("SHOW server_version")).rows[0].server_version as string}`);
    await probe.end();
    for (let round = 0; round < ROUNDS; round++) {
      const order: ("plain" | "parted")[] = round % 2 === 0 ? ["plain", "parted"] : ["parted", "plain"];
      for (const side of order) {
        const name = `ret_${side}_${round}`;
        const admin = new pg.Client({ connectionString: db.url });
        await admin.connect();
        await admin.query(`CREATE DATABASE ${name}`);
        await admin.end();
        const url = db.urlFor(name);
        await migrate(url, "up", side === "plain" ? before : Infinity);
        const c = new pg.Client({ connectionString: url });
        await c.connect();
        try {
          if (side === "parted") await pastPartitions(c);
          const jobs = await load(c);
          // The maintenance pass a coordinator makes: partitions ahead, and the watermark the watch reads prune by.
          if (side === "parted") await maintenancePass(url);
          const w = await watchReads(url, side === "plain");
          reads[side].after.push(w.after);
          reads[side].since.push(w.since);
          reads[side].hub.push(w.hub);
          if (w.sinceUnnamed !== undefined) reads[side].sinceUnnamed.push(w.sinceUnnamed);
          const r = side === "plain" ? await batchedDelete(c, jobs) : await partitionDrop(c, url);
          results[side].push(r);
          console.error(
            `round ${round + 1} ${side}: ${fmt(r.ms)} ms, WAL ${fmt(r.wal / 1024)} kB, size ${mb(r.before)} -> ${mb(r.after)}` +
              (r.vacuumMs !== undefined
                ? `; VACUUM ${fmt(r.vacuumMs)} ms, WAL ${mb(r.vacuumWal!)}, size after ${mb(r.afterVacuum!)}`
                : "") +
              `; ${fmt(r.left)} events left; watch reads, backend CPU per statement: after ${fmt(w.after)} µs, since ${fmt(w.since)} µs` +
              (w.sinceUnnamed !== undefined ? ` (unnamed ${fmt(w.sinceUnnamed)} µs)` : "") +
              `, hub(100 streams) ${fmt(w.hub)} µs`,
          );
        } finally {
          await c.end();
        }
        const admin2 = new pg.Client({ connectionString: db.url });
        await admin2.connect();
        await admin2.query(`DROP DATABASE ${name} WITH (FORCE)`);
        await admin2.end();
      }
    }
    const m = (side: "plain" | "parted", k: keyof Result) => med(results[side].map((r) => r[k] as number));
    console.log(`retention of ${fmt(EVENTS)} events (${ROUNDS} rounds, medians; loadavg ${os.loadavg()[0].toFixed(1)} at the end)`);
    console.log(
      `  batched delete (${BATCH_JOBS} jobs/statement): ${fmt(m("plain", "ms"))} ms, WAL ${mb(m("plain", "wal"))}, size ${mb(m("plain", "before"))} -> ${mb(m("plain", "after"))}; ` +
        `then VACUUM ${fmt(m("plain", "vacuumMs"))} ms, WAL ${mb(m("plain", "vacuumWal"))}, size ${mb(m("plain", "afterVacuum"))}`,
    );
    console.log(
      `  partition drop (one maintenance pass): ${fmt(m("parted", "ms"))} ms, WAL ${fmt(m("parted", "wal") / 1024)} kB, size ${mb(m("parted", "before"))} -> ${mb(m("parted", "after"))}`,
    );
    for (const k of ["after", "since", "hub"] as const)
      console.log(
        `  watch read ${k}, backend CPU per statement: plain ${fmt(med(reads.plain[k]))} µs, partitioned (${DAYS_BACK + 5} partitions) ${fmt(med(reads.parted[k]))} µs, ratio ${fmt(med(reads.parted[k]) / med(reads.plain[k]), 2)}`,
      );
    console.log(
      `  (plain's live read unnamed, as the coordinator sent it before: ${fmt(med(reads.plain.sinceUnnamed))} µs; partitioned against it ${fmt(med(reads.parted.since) / med(reads.plain.sinceUnnamed), 2)})`,
    );
  } finally {
    await db.stop();
    rmSync(dir, { recursive: true, force: true });
  }
  process.exit(0);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
