// npm run bench:sql-ab: the store's hot paths as two versions of the code see them, A (a baseline
// checkout) and B (this one), each on its own database of one PostgreSQL server, in alternating
// runs in one process. Reports per task what does not depend on how busy the shared machine is:
// the CPU time of the database backends that ran the statements (/proc/<pid>/stat, Linux only)
// and the WAL bytes written; the rates are printed too but move with the machine's load. Not a test.
//
//   AB_BASE (required)   a checkout of the baseline with node_modules, e.g.
//                        git archive <ref> | tar -x -C /tmp/base && ln -s "$PWD/node_modules" /tmp/base/
//   AB_MODES             comma list of single,batch,insert,one (default: all four), singlechain, batchchain (chained through claim_next), bare
//   AB_PAIRS (3)         alternating pairs per mode   AB_SECONDS (4) length of a loop run
//   AB_WORKLOAD          the workload's settings (JSON, PutWorkload's fields); AB_WORKLOAD_A: A's, when they differ
//   AB_KEYS (0)          the loops' tasks as 40-task jobs of that many concurrency keys in turn (0: one job, no key);
//                        AB_KEYS_A: A's; AB_PRIORITIES (1): key k's jobs have priority k mod N
//   AB_WORKERS (16)      connections of the loops   AB_WAL_STATS   also WAL bytes per task by kind (pg_walinspect)
//   AB_ADMIN_SQL         SQL run once on the server first (databases ab_a, ab_b)
//   AB_B                 another checkout for B (default: this one)   AB_SETUP_A, AB_SETUP_B  SQL run on that side's database after its migrations
//   AB_PERF=DIR          perf record (dwarf call graphs) of the backends during each measured run, into DIR

import { spawn, type ChildProcess } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, chmodSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import pg from "pg";
import { fmt, freePort } from "./harness.js";
import { startEmbeddedPostgres } from "../src/store/postgres/schema/embedded.js";

const BASE = process.env.AB_BASE;
const MODES = (process.env.AB_MODES ?? "single,batch,insert,one").split(",");
const PAIRS = Number(process.env.AB_PAIRS ?? 3);
const SECONDS = Number(process.env.AB_SECONDS ?? 4);
const WORKERS = Number(process.env.AB_WORKERS ?? 16);
// AB_WORKLOAD: the measured workload's settings as PutWorkload takes them (JSON), e.g. '{"maxLeased":1000}' for a cap never reached.
const WORKLOAD = JSON.parse(process.env.AB_WORKLOAD ?? "{}") as Record<string, unknown>;
// AB_WORKLOAD_A: A's settings instead (with AB_BASE=. : one checkout, two kinds of workload).
const WORKLOAD_A = JSON.parse(process.env.AB_WORKLOAD_A ?? process.env.AB_WORKLOAD ?? "{}") as Record<string, unknown>;
const SHA = createHash("sha256").update("ab").digest("hex");
const KEYS = Number(process.env.AB_KEYS ?? 0);
const KEYS_A = Number(process.env.AB_KEYS_A ?? KEYS);
const PRIORITIES = Number(process.env.AB_PRIORITIES ?? 1);

interface Side {
  name: string;
  url: string;
  pool: pg.Pool;
  // The store of that checkout (its own queries and migrations).
  store: any; // eslint-disable-line @typescript-eslint/no-explicit-any
}

interface Sample {
  rate: number;
  cpuUs: number;
  wal: number;
  ms?: number;
  // CPU of this process (the store and pg, as a coordinator runs them) per task.
  clientUs?: number;
}

async function loadSide(name: string, root: string, url: string): Promise<Side> {
  const { migrate } = await import(path.join(root, "src/store/postgres/schema/migrate.ts"));
  const { createPool, PostgresQueue } = await import(path.join(root, "src/store/postgres/store.ts"));
  await migrate(url, "up");
  const pool = createPool({ connectionString: url, max: WORKERS + 2, statementTimeoutMs: 60_000, connectTimeoutMs: 10_000 });
  const store = new PostgresQueue(pool, { defaultLeaseSeconds: 300, defaultMaxAttempts: 3, maxTasksPerJob: 10_000 });
  return { name, url, pool, store };
}

/** CPU seconds (user + system) of the client backends connected to the side's database. */
async function backendCpu(side: Side): Promise<number> {
  const { rows } = await side.pool.query(
    "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend'",
  );
  let ticks = 0;
  for (const r of rows) {
    try {
      const f = readFileSync(`/proc/${r.pid}/stat`, "utf8");
      const rest = f.slice(f.lastIndexOf(")") + 2).split(" ");
      ticks += Number(rest[11]) + Number(rest[12]); // utime, stime (fields 14, 15)
    } catch {
      // a backend that ended meanwhile
    }
  }
  return ticks / 100;
}

async function lsn(side: Side): Promise<string> {
  return (await side.pool.query("SELECT pg_current_wal_insert_lsn()::text AS l")).rows[0].l as string;
}

async function measure(side: Side, body: () => Promise<number>): Promise<Sample> {
  // Every connection of the pool open first, so the CPU of all of them is counted.
  const cs = await Promise.all(Array.from({ length: WORKERS }, () => side.pool.connect()));
  for (const c of cs) c.release();
  // AB_PERF=DIR: a perf profile (call graphs) of the backends for the measured part only.
  let perf: ChildProcess | undefined;
  if (process.env.AB_PERF) {
    const { rows } = await side.pool.query(
      "SELECT string_agg(pid::text, ',') AS pids FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend'",
    );
    const out = path.join(process.env.AB_PERF, `${side.name}-${seq}.data`);
    perf = spawn("perf", ["record", "-F", "500", "--call-graph", "dwarf,16384", "-o", out, "-p", rows[0].pids], { stdio: "ignore" });
    await new Promise((r) => setTimeout(r, 500));
  }
  const c0 = await backendCpu(side);
  const w0 = await lsn(side);
  const u0 = process.cpuUsage();
  const t0 = performance.now();
  const n = await body();
  const ms = performance.now() - t0;
  const u1 = process.cpuUsage(u0);
  const w1 = await lsn(side);
  const c1 = await backendCpu(side);
  if (perf) {
    perf.kill("SIGINT");
    await new Promise((r) => perf!.once("exit", r));
  }
  const wal = Number((await side.pool.query("SELECT pg_wal_lsn_diff($1, $2) AS d", [w1, w0])).rows[0].d);
  if (process.env.AB_WAL_STATS) {
    // Where the WAL went (pg_walinspect): bytes per task by resource manager, records and full-page images.
    await side.pool.query("CREATE EXTENSION IF NOT EXISTS pg_walinspect");
    const { rows } = await side.pool.query(
      `SELECT "resource_manager/record_type" AS rm, record_size::float8 / $3 AS rec, fpi_size::float8 / $3 AS fpi, count::float8 / $3 AS n
       FROM pg_get_wal_stats($1::pg_lsn, $2::pg_lsn, false) WHERE count > 0 ORDER BY combined_size DESC`,
      [w0, w1, n],
    );
    console.error(`  ${side.name}: ${rows.map((r) => `${r.rm} ${fmt(r.rec)}+${fmt(r.fpi)} fpi (${fmt(r.n, 1)} rec)`).join(", ")}`);
  }
  return { rate: n / (ms / 1000), cpuUs: ((c1 - c0) * 1e6) / n, wal: wal / n, ms, clientUs: (u1.user + u1.system) / n };
}

let seq = 0;
async function fill(side: Side, tasks: number): Promise<string> {
  const workload = `ab_${seq++}`;
  await side.store.putWorkload({ name: workload, leaseSeconds: 300, ...(side.name === "A" ? WORKLOAD_A : WORKLOAD) });
  const keys = side.name === "A" ? KEYS_A : KEYS;
  // Keyed: 40-task jobs, key j mod KEYS, priority (key mod PRIORITIES), as bench:horizon --keyed makes them.
  for (let j = 0; keys > 0 && j * 40 < tasks; j++) {
    const k = j % keys;
    await side.store.createJob({
      workload,
      concurrencyKey: `k${k}`,
      priority: k % PRIORITIES,
      tasks: Array.from({ length: 40 }, (_, i) => ({ chunkIndex: i, inputUri: `s3://in/${i}`, inputSha256: SHA })),
    });
  }
  for (let done = keys > 0 ? tasks : 0; done < tasks; done += 10_000) {
    const n = Math.min(10_000, tasks - done);
    await side.store.createJob({
      workload,
      tasks: Array.from({ length: n }, (_, k) => ({ chunkIndex: k, inputUri: `s3://in/${k}`, inputSha256: SHA })),
    });
  }
  await side.pool.query("VACUUM ANALYZE tasks, jobs");
  await side.pool.query("CHECKPOINT");
  return workload;
}

async function loop(side: Side, maxTasks: number, chained = false): Promise<Sample> {
  const workload = await fill(side, SECONDS * 5000 * Math.max(1, maxTasks / 4));
  return measure(side, async () => {
    const stopAt = performance.now() + SECONDS * 1000;
    const counts = await Promise.all(
      Array.from({ length: WORKERS }, async (_, i) => {
        const workerId = `ab-${i}`;
        let n = 0;
        // chained: each batch's report claims the next batch (completeTasksAndClaim), as a worker with claim_next does.
        let next: { id: string; attempt: number }[] = [];
        while (performance.now() < stopAt) {
          const got = next.length > 0 ? next : await side.store.claimTasks({ workloads: [workload], workerId, maxTasks });
          // Keyed (AB_KEYS), a claim may find every key it could take at its cap or in another's hands for a moment.
          if (got.length === 0 && (side.name === "A" ? KEYS_A : KEYS) > 0) {
            await new Promise((r) => setTimeout(r, 1));
            continue;
          }
          if (got.length === 0) throw new Error("backlog ran out");
          const results = got.map((t: { id: string; attempt: number }) => ({
            taskId: t.id,
            workerId,
            attempt: t.attempt,
            resultUri: "s3://out",
            resultSha256: SHA,
          }));
          if (chained && maxTasks === 1)
            next = (await side.store.completeTaskAndClaim(results[0], { workloads: [workload], workerId, maxTasks })).next;
          else if (chained) next = (await side.store.completeTasksAndClaim(results, { workloads: [workload], workerId, maxTasks })).next;
          else if (maxTasks === 1) await side.store.completeTask(results[0]);
          else await side.store.completeTasks(results);
          n += got.length;
        }
        return n;
      }),
    );
    return counts.reduce((a, b) => a + b, 0);
  });
}

// The bare loop of bench/sql.ts (a SKIP LOCKED claim and a DELETE on a two-index table): the floor
// under both sides, the same on each.
async function bare(side: Side): Promise<Sample> {
  await side.pool.query(`CREATE TABLE IF NOT EXISTS bare_jobs (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, queue text NOT NULL,
    payload jsonb NOT NULL DEFAULT '{}', run_at timestamptz NOT NULL DEFAULT now(), attempts int NOT NULL DEFAULT 0, locked_by text, locked_at timestamptz);
    CREATE INDEX IF NOT EXISTS bare_jobs_available ON bare_jobs (queue, run_at, id) WHERE locked_at IS NULL`);
  const queue = `q_${seq++}`;
  await side.pool.query(`INSERT INTO bare_jobs (queue) SELECT $1 FROM generate_series(1, $2)`, [queue, SECONDS * 8000]);
  await side.pool.query("VACUUM ANALYZE bare_jobs");
  await side.pool.query("CHECKPOINT");
  return measure(side, async () => {
    const stopAt = performance.now() + SECONDS * 1000;
    const counts = await Promise.all(
      Array.from({ length: WORKERS }, async (_, i) => {
        const c = await side.pool.connect();
        let n = 0;
        try {
          while (performance.now() < stopAt) {
            const { rows } = await c.query({
              name: "bare_claim",
              text: `UPDATE bare_jobs SET locked_by = $2, locked_at = now(), attempts = attempts + 1
                WHERE id = (SELECT id FROM bare_jobs WHERE queue = $1 AND locked_at IS NULL AND run_at <= now() ORDER BY run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)
                RETURNING id`,
              values: [queue, `w${i}`],
            });
            if (rows.length === 0) throw new Error("backlog ran out");
            await c.query({
              name: "bare_complete",
              text: `DELETE FROM bare_jobs WHERE id = $1 AND locked_by = $2`,
              values: [rows[0].id, `w${i}`],
            });
            n++;
          }
        } finally {
          c.release();
        }
        return n;
      }),
    );
    return counts.reduce((a, b) => a + b, 0);
  });
}

async function insert(side: Side): Promise<Sample> {
  const workload = `ab_${seq++}`;
  await side.store.putWorkload({ name: workload, leaseSeconds: 300, ...(side.name === "A" ? WORKLOAD_A : WORKLOAD) });
  const tasks = Array.from({ length: 10_000 }, (_, k) => ({ chunkIndex: k, inputUri: `s3://in/${k}`, inputSha256: SHA }));
  await side.store.createJob({ workload, tasks: tasks.slice(0, 10) }); // cache the workload, warm the plan
  await side.pool.query("CHECKPOINT");
  return measure(side, async () => {
    await side.store.createJob({ workload, tasks });
    return 10_000;
  });
}

async function oneTaskJobs(side: Side): Promise<Sample> {
  const workload = `ab_${seq++}`;
  await side.store.putWorkload({ name: workload, leaseSeconds: 300, ...(side.name === "A" ? WORKLOAD_A : WORKLOAD) });
  await side.store.createJob({ workload, tasks: [{ chunkIndex: 0, inputUri: "s3://in/0", inputSha256: SHA }] });
  await side.pool.query("CHECKPOINT");
  return measure(side, async () => {
    const stopAt = performance.now() + SECONDS * 1000;
    const counts = await Promise.all(
      Array.from({ length: WORKERS }, async () => {
        let n = 0;
        while (performance.now() < stopAt) {
          await side.store.createJob({ workload, tasks: [{ chunkIndex: 0, inputUri: "s3://in/0", inputSha256: SHA }] });
          n++;
        }
        return n;
      }),
    );
    return counts.reduce((a, b) => a + b, 0);
  });
}

async function main() {
  if (!BASE) throw new Error("AB_BASE: a baseline checkout (see the header of bench/sql-ab.ts)");
  const dir = mkdtempSync(path.join(os.tmpdir(), "leasehold-ab-"));
  chmodSync(dir, 0o755);
  const db = await startEmbeddedPostgres({ dataDir: path.join(dir, "db"), port: await freePort(), persistent: false });
  const admin = new pg.Client({ connectionString: db.url });
  await admin.connect();
  await admin.query("CREATE DATABASE ab_a");
  await admin.query("CREATE DATABASE ab_b");
  // AB_ADMIN_SQL: run once on the server before anything else, e.g. a per-database setting for one side
  // ("ALTER DATABASE ab_b SET wal_compression = lz4").
  if (process.env.AB_ADMIN_SQL) await admin.query(process.env.AB_ADMIN_SQL);
  await admin.end();
  const sides = [
    await loadSide("A", path.resolve(BASE), db.urlFor("ab_a")),
    await loadSide("B", path.resolve(process.env.AB_B ?? path.join(import.meta.dirname, "..")), db.urlFor("ab_b")),
  ];
  // AB_SETUP_A / AB_SETUP_B: SQL run on that side's database after its migrations (a candidate change as SQL, e.g. with AB_B=AB_BASE).
  if (process.env.AB_SETUP_A) await sides[0].pool.query(process.env.AB_SETUP_A);
  if (process.env.AB_SETUP_B) await sides[1].pool.query(process.env.AB_SETUP_B);
  const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  const runs: Record<string, (s: Side) => Promise<Sample>> = {
    single: (s) => loop(s, 1),
    batch: (s) => loop(s, 10),
    batchchain: (s) => loop(s, 10, true),
    singlechain: (s) => loop(s, 1, true),
    insert: (s) => insert(s),
    one: (s) => oneTaskJobs(s),
    bare: (s) => bare(s),
  };
  try {
    for (const mode of MODES) {
      const results: Record<string, Sample[]> = { A: [], B: [] };
      // Warm-up, not measured.
      for (const s of sides) await runs[mode](s);
      for (let i = 0; i < PAIRS; i++) {
        // Alternate which side goes first.
        for (const s of i % 2 === 0 ? sides : [...sides].reverse()) {
          const r = await runs[mode](s);
          results[s.name].push(r);
          console.error(
            `${mode} ${s.name}: ${fmt(r.rate)}/s, ${fmt(r.cpuUs)} µs backend CPU/task, ${fmt(r.clientUs ?? 0)} µs store CPU/task, ${fmt(r.wal)} WAL B/task${mode === "insert" ? `, ${fmt(r.ms!)} ms` : ""}`,
          );
        }
      }
      const line = (k: "rate" | "cpuUs" | "clientUs" | "wal" | "ms") =>
        `${k}: A ${fmt(med(results.A.map((r) => r[k]!)), k === "cpuUs" ? 1 : 0)}, B ${fmt(med(results.B.map((r) => r[k]!)), k === "cpuUs" ? 1 : 0)}, B/A ${fmt(
          med(results.B.map((r) => r[k]!)) / med(results.A.map((r) => r[k]!)),
          2,
        )}`;
      console.log(
        `${mode} (${PAIRS} pairs, medians) ${line("rate")}; ${line("cpuUs")}; ${line("clientUs")}; ${line("wal")}${mode === "insert" ? `; ${line("ms")}` : ""}`,
      );
    }
  } finally {
    for (const s of sides) await s.pool.end();
    await db.stop();
    rmSync(dir, { recursive: true, force: true });
  }
  process.exit(0);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
