// npm run bench:flow: what flow control costs a claim. Not a test. In one run, rounds of:
//
// 1. Throughput, claim → complete through a coordinator over REST (16 workers chaining their next
//    claim onto each result report, as the Python client does), max_tasks 1 and 10, for
//    (a) a workload with no caps, limits or labels; (k) the same over 100 keys (fair share, no
//    cap); (b) max_leased 1000, never reached; (c) max_leased_per_key 1000 over 100 keys, never
//    reached, also as a ratio to (k); (d) max_leased 8, reached (workers
//    long-poll, 2 s, when nothing is claimable), with the live leases sampled every ~20 ms; and,
//    with --baseline REF, (a) on that commit's coordinator (db8e0c2 is the last commit before flow
//    control) on a database of its own on the same server, in the same rounds.
// 2. Claim latency at depth: two workloads of --tasks pending tasks each, one uncapped (no keys),
//    one keyed (--keys keys) with max_leased_per_key --key-cap; single-task claims (claim, then a
//    separate result report, so the time is the claim's), 16 workers, --claims claims a round;
//    p50/p99, WAL bytes and CPU per task. The tasks are enqueued by CreateJob through the store
//    (one job per key, by COPY from 1,000 tasks a job, one INSERT below that), not measured.
//
// Prints the per-round figures on stderr, then Markdown tables for docs/performance.md and one
// JSON line. Rates and ratios are medians over rounds (a ratio is taken within each round first).
//
//   --runs N (3)  --seconds S (5, after 1 s of warm-up)  --workers W (16)  --part 1|2 (both)
//   --tasks N (1000000)  --keys K (1000)  --key-cap N (2)  --claims N (5000)  --baseline REF
//   --quick  one round of 3 s windows, 100,000 tasks, 2,000 claims (checks the script, not a figure)
//
// CPU is read from /proc for the coordinator and the embedded PostgreSQL's backends (bench/cpu.ts);
// WAL from pg_current_wal_insert_lsn, over the whole server (only this benchmark's databases).

import { execFileSync } from "node:child_process";
import os from "node:os";
import { performance } from "node:perf_hooks";
import { parseArgs } from "node:util";
import { createPool, PostgresQueue } from "../src/store/postgres/store.js";
import { cpuNow, cpuPer, type CpuPerItem } from "./cpu.js";
import { baselineDatabase, dropDatabase, prepareBaseline, type Baseline } from "./flow-baseline.js";
import { chainedWorkers, leaseSampler, median, SHA, sleep, timedClaims, topUp, walBytes, type Target } from "./flow-load.js";
import { fmt, restClient, startCoordinator, startDatabase, summary } from "./harness.js";
import { parseCoalescing } from "../src/config/index.js";

const { values: args } = parseArgs({
  options: {
    runs: { type: "string" },
    seconds: { type: "string" },
    workers: { type: "string" },
    part: { type: "string" },
    tasks: { type: "string" },
    keys: { type: "string" },
    "key-cap": { type: "string" },
    claims: { type: "string" },
    baseline: { type: "string" },
    quick: { type: "boolean", default: false },
  },
});
const num = (v: string | undefined, quick: number, full: number) => (v !== undefined ? Number(v) : args.quick ? quick : full);
const RUNS = num(args.runs, 1, 3);
const SECONDS = num(args.seconds, 3, 5);
const WORKERS = num(args.workers, 16, 16);
const TASKS = num(args.tasks, 100_000, 1_000_000);
const KEYS = num(args.keys, 1000, 1000);
const KEY_CAP = num(args["key-cap"], 2, 2);
const CLAIMS = num(args.claims, 2000, 5000);
const PARTS = args.part ? [Number(args.part)] : [1, 2];
const WARMUP_MS = 1000;
const BATCHES = [1, 10];

// ---------- part 1: throughput ----------

interface Variant {
  id: string;
  label: string;
  settings: Record<string, number>;
  keys: number;
  waitSeconds: number;
}

const BASELINE: Variant = { id: "baseline", label: "baseline", settings: {}, keys: 0, waitSeconds: 0 };
const WARM: Variant = { id: "warm", label: "warm-up", settings: {}, keys: 0, waitSeconds: 0 };
const VARIANTS: Variant[] = [
  { id: "a", label: "(a) no caps, limits or labels", settings: {}, keys: 0, waitSeconds: 0 },
  // (c) without its cap: the same 100 keys' fair-share order, so (c) / (k) is what the cap alone costs.
  { id: "k", label: "(k) no caps, 100 keys", settings: {}, keys: 100, waitSeconds: 0 },
  { id: "b", label: "(b) max_leased 1000 (never reached)", settings: { max_leased: 1000 }, keys: 0, waitSeconds: 0 },
  {
    id: "c",
    label: "(c) max_leased_per_key 1000, 100 keys (never reached)",
    settings: { max_leased_per_key: 1000 },
    keys: 100,
    waitSeconds: 0,
  },
  { id: "d", label: "(d) max_leased 8 (reached)", settings: { max_leased: 8 }, keys: 0, waitSeconds: 2 },
];

interface Throughput {
  rate: number;
  /** 503 answers in the window (retried) */
  unavailable: number;
  leased: { mean: number; max: number; n: number };
  cpu: CpuPerItem;
}

/** Per max_tasks, per variant id. */
type Round1 = Record<number, Record<string, Throughput>>;

/** Tasks a window may need: the fastest rate seen so far (or a generous floor) over warm-up, window and slack. */
const best: Record<number, number> = args.quick ? { 1: 1000, 10: 3000 } : { 1: 4000, 10: 15_000 };
const backlog = (maxTasks: number) => Math.ceil(best[maxTasks] * (SECONDS + WARMUP_MS / 1000 + 2) * 1.5);

async function throughputWindow(t: Target, v: Variant, maxTasks: number): Promise<Throughput> {
  const workload = `flow_${v.id}_${maxTasks}`;
  await topUp(t, workload, backlog(maxTasks), v.keys);
  // Every variant starts from fresh statistics and a vacuumed table, as bench:sql's fills do.
  await t.pool.query("VACUUM ANALYZE tasks");
  const load = chainedWorkers(t, workload, maxTasks, WORKERS, v.waitSeconds);
  const stop = load.start();
  await sleep(WARMUP_MS);
  const c0 = load.count();
  const u0 = t.unavailable;
  const cpu0 = cpuNow(t.coordinator);
  const t0 = performance.now();
  const stopSampler = leaseSampler(t, workload);
  await sleep(SECONDS * 1000);
  const c1 = load.count();
  const u1 = t.unavailable;
  const cpu1 = cpuNow(t.coordinator);
  const elapsed = (performance.now() - t0) / 1000;
  const leased = await stopSampler();
  await stop();
  const rate = (c1 - c0) / elapsed;
  if (v.waitSeconds === 0) best[maxTasks] = Math.max(best[maxTasks], rate);
  return { rate, unavailable: u1 - u0, leased, cpu: cpuPer(cpu0, cpu1, Math.max(1, c1 - c0)) };
}

async function part1(current: Target, base: Target | undefined, round: number): Promise<Round1> {
  const out: Round1 = {};
  const plan: Array<[Target, Variant]> = [
    ...(base ? [[base, BASELINE] as [Target, Variant]] : []),
    ...VARIANTS.map((v) => [current, v] as [Target, Variant]),
  ];
  // Alternate the order from round to round, so drift on a shared machine falls on all alike.
  if (round % 2 === 0) plan.reverse();
  for (const maxTasks of BATCHES) {
    out[maxTasks] = {};
    for (const [t, v] of plan) {
      const r = await throughputWindow(t, v, maxTasks);
      out[maxTasks][v.id] = r;
      console.error(
        `[round ${round}] max_tasks ${maxTasks} ${v.id} (${t.name}): ${fmt(r.rate)} tasks/s, leased mean ${fmt(r.leased.mean, 1)} max ${r.leased.max}, ${r.unavailable} × 503, CPU/task coordinator ${fmt(r.cpu.coordinator, 3)} ms, PostgreSQL ${fmt(r.cpu.postgres, 3)} ms`,
      );
    }
  }
  return out;
}

// ---------- part 2: claim latency at depth ----------

interface Depth {
  /** 503 answers in the window (retried; a claim's time includes its retries) */
  unavailable: number;
  p50: number;
  p99: number;
  n: number;
  walPerTask: number;
  cpu: CpuPerItem;
}

const DEEP = { uncapped: "deep_uncapped", capped: "deep_capped" } as const;

/** Both deep workloads, filled through the store's CreateJob: one job per key (the same job sizes for the uncapped one). */
async function fillDeep(current: Target, store: PostgresQueue): Promise<{ seconds: number }> {
  const put = async (name: string, body: object) => {
    const r = await current.rest("PUT", `/workloads/${name}`, { lease_seconds: 300, ...body });
    if (r.status !== 200) throw new Error(`PUT /workloads/${name} answered ${r.status}: ${JSON.stringify(r.json)}`);
  };
  await put(DEEP.uncapped, {});
  await put(DEEP.capped, { max_leased_per_key: KEY_CAP });
  const perKey = Math.ceil(TASKS / KEYS);
  const tasks = Array.from({ length: perKey }, (_, i) => ({ chunkIndex: i, inputUri: `s3://deep/${i}`, inputSha256: SHA }));
  const t0 = performance.now();
  for (const [workload, keyed] of [
    [DEEP.uncapped, false],
    [DEEP.capped, true],
  ] as const) {
    let next = 0;
    // Four CreateJobs at a time.
    await Promise.all(
      Array.from({ length: 4 }, async () => {
        for (let k = next++; k < KEYS; k = next++) {
          await store.createJob({ workload, tasks, ...(keyed ? { concurrencyKey: `k${k}` } : {}) });
        }
      }),
    );
    console.error(`filled ${workload}: ${fmt(KEYS * perKey)} tasks, ${fmt((performance.now() - t0) / 1000)} s so far`);
  }
  const seconds = (performance.now() - t0) / 1000;
  await current.pool.query("VACUUM ANALYZE tasks, jobs, task_events");
  await current.pool.query("CHECKPOINT");
  return { seconds };
}

/**
 * One window of timed claims. A CHECKPOINT first, so every window pays the full-page images of
 * the first change to each page it touches alike (whether a checkpoint fell inside a window would
 * otherwise decide its WAL).
 */
async function depthWindow(t: Target, workload: string, claims: number): Promise<Depth> {
  await t.pool.query("CHECKPOINT");
  const w0 = await walBytes(t.pool);
  const u0 = t.unavailable;
  const cpu0 = cpuNow(t.coordinator);
  const ms = await timedClaims(t, workload, WORKERS, claims);
  const cpu1 = cpuNow(t.coordinator);
  const w1 = await walBytes(t.pool);
  const s = summary(ms);
  return {
    unavailable: t.unavailable - u0,
    p50: s.p50,
    p99: s.p99,
    n: s.n,
    walPerTask: (w1 - w0) / ms.length,
    cpu: cpuPer(cpu0, cpu1, ms.length),
  };
}

type Round2 = Record<keyof typeof DEEP, Depth>;

async function part2(current: Target, round: number): Promise<Round2> {
  const order: Array<keyof typeof DEEP> = round % 2 ? ["uncapped", "capped"] : ["capped", "uncapped"];
  const out = {} as Round2;
  for (const k of order) {
    const r = await depthWindow(current, DEEP[k], CLAIMS);
    out[k] = r;
    console.error(
      `[round ${round}] ${k}: claim p50 ${fmt(r.p50, 2)} ms, p99 ${fmt(r.p99, 2)} ms (n=${r.n}, ${r.unavailable} × 503), WAL ${fmt(r.walPerTask)} B/task, CPU/task PostgreSQL ${fmt(r.cpu.postgres * 1000)} µs, coordinator ${fmt(r.cpu.coordinator * 1000)} µs`,
    );
  }
  return out;
}

// ---------- main ----------

async function main() {
  const started = performance.now();
  const head = execFileSync("git", ["rev-parse", "--short", "HEAD"], { encoding: "utf8" }).trim();
  console.error(
    `leasehold bench:flow: parts ${PARTS.join(", ")}, ${RUNS} round(s), ${WORKERS} workers, ${SECONDS}s windows, ${fmt(TASKS)} deep tasks over ${KEYS} keys, ${os.cpus().length} cores, node ${process.version}`,
  );
  if (PARTS.includes(2) && CLAIMS * (RUNS + 1) > TASKS * 0.8)
    throw new Error(`--claims ${CLAIMS} × (runs + 1) would drain --tasks ${TASKS}`);
  // Compile the baseline before anything runs, so a bad ref fails at once.
  const baseline: Baseline | undefined = args.baseline && PARTS.includes(1) ? prepareBaseline(args.baseline) : undefined;
  const db = await startDatabase();
  const baseName = `leasehold_bench_${process.pid}_baseline`;
  const targets: Target[] = [];
  const target = async (name: string, url: string, script?: string) => {
    const coordinator = await startCoordinator(url, { PG_POOL_MAX: "8" }, script);
    const pool = createPool({ connectionString: url, max: 4, statementTimeoutMs: 600_000, connectTimeoutMs: 10_000 });
    const t: Target = { name, coordinator, rest: restClient(coordinator.url, WORKERS * 2), pool, unavailable: 0 };
    targets.push(t);
    return t;
  };
  const r1: Round1[] = [];
  const r2: Round2[] = [];
  let fill = { seconds: NaN };
  try {
    const current = await target("current", db.url);
    const base = baseline ? await target("baseline", await baselineDatabase(db.url, baseName, baseline), baseline.script) : undefined;
    if (PARTS.includes(1)) {
      const both = base ? [current, base] : [current];
      const workloads = [...both.map((t) => [t, WARM] as const), ...VARIANTS.map((v) => [current, v] as const)];
      if (base) workloads.push([base, BASELINE]);
      for (const [t, v] of workloads) {
        for (const maxTasks of BATCHES) {
          const r = await t.rest("PUT", `/workloads/flow_${v.id}_${maxTasks}`, { lease_seconds: 300, ...v.settings });
          if (r.status !== 200) throw new Error(`${t.name}: PUT workload answered ${r.status}: ${JSON.stringify(r.json)}`);
        }
      }
      // Warm-up, not measured: JIT, pools and HTTP sessions of both coordinators.
      for (const t of both) await throughputWindow(t, WARM, 1);
    }
    if (PARTS.includes(2)) {
      const store = new PostgresQueue(current.pool, {
        coalescing: parseCoalescing(process.env),
        defaultLeaseSeconds: 300,
        defaultMaxAttempts: 3,
        maxTasksPerJob: 10_000,
      });
      console.error(`filling ${fmt(TASKS)} pending tasks into each of two workloads…`);
      fill = await fillDeep(current, store);
      // Not measured: the first claims after a fresh fill set hint bits and pay first touches.
      for (const w of Object.values(DEEP)) await timedClaims(current, w, WORKERS, Math.max(500, Math.floor(CLAIMS / 5)));
    }
    for (let round = 1; round <= RUNS; round++) {
      if (PARTS.includes(1)) r1.push(await part1(current, base, round));
      if (PARTS.includes(2)) r2.push(await part2(current, round));
    }
  } finally {
    for (const t of targets) {
      await t.coordinator.stop();
      await t.pool.end();
    }
    if (baseline) await dropDatabase(db.url, baseName).catch(() => {});
    await db.stop();
  }
  const context = `${WORKERS} workers, ${RUNS} round(s), ${os.cpus().length} cores (${os.cpus()[0]?.model ?? "?"}), node ${process.version}, commit ${head}, ${new Date().toISOString().slice(0, 10)}`;
  const json: Record<string, unknown> = { bench: "flow", commit: head, runs: RUNS, workers: WORKERS, seconds: SECONDS, context };
  if (r1.length) json.throughput = printThroughput(r1, baseline, context);
  if (r2.length) json.depth = printDepth(r2, fill.seconds, context);
  console.log(JSON.stringify(json));
  console.error(`(total ${fmt((performance.now() - started) / 1000)} s)`);
  process.exit(0);
}

// ---------- output ----------

function printThroughput(rounds: Round1[], baseline: Baseline | undefined, context: string) {
  const ids = [...(baseline ? ["baseline"] : []), ...VARIANTS.map((v) => v.id)];
  const labels: Record<string, string> = Object.fromEntries(VARIANTS.map((v) => [v.id, v.label]));
  if (baseline)
    labels.baseline = `the baseline commit (${baseline.sha.startsWith(baseline.ref) ? baseline.ref : `${baseline.ref}, ${baseline.sha.slice(0, 7)}`}), no caps`;
  const json: Record<string, unknown> = {};
  console.log(`\n### Flow control: claim → complete throughput\n`);
  console.log(`REST, chained result reports (claim_next), ${SECONDS} s windows after 1 s of warm-up; ${context}.`);
  console.log(`"vs (a)": the ratio to (a) in the same round, median over rounds (the bar: ≥ 0.90).\n`);
  console.log(
    `| workload | max_tasks 1: tasks/s | vs (a) | CPU ms/task coord. + PG | max_tasks 10: tasks/s | vs (a) | CPU ms/task coord. + PG | leased, mean (max), 1 / 10 |`,
  );
  console.log(`|---|---|---|---|---|---|---|---|`);
  for (const id of ids) {
    const cells: string[] = [];
    const leased: string[] = [];
    const j: Record<string, unknown> = {};
    for (const b of BATCHES) {
      const xs = rounds.map((r) => r[b][id]);
      const rate = median(xs.map((x) => x.rate));
      const ratio = median(rounds.map((r) => r[b][id].rate / r[b].a.rate));
      const coord = median(xs.map((x) => x.cpu.coordinator));
      const pgCpu = median(xs.map((x) => x.cpu.postgres));
      const mean = median(xs.map((x) => x.leased.mean));
      const max = Math.max(...xs.map((x) => x.leased.max));
      cells.push(fmt(rate), id === "a" ? "1" : fmt(ratio, 2), `${fmt(coord, 3)} + ${fmt(pgCpu, 3)}`);
      leased.push(`${fmt(mean, 1)} (${max})`);
      j[`max_tasks_${b}`] = {
        tasks_per_s: rate,
        vs_a: ratio,
        vs_a_per_round: rounds.map((r) => r[b][id].rate / r[b].a.rate),
        cpu_ms_per_task: { coordinator: coord, postgres: pgCpu },
        leased_mean: mean,
        leased_max: max,
        unavailable_503: xs.reduce((n, x) => n + x.unavailable, 0),
      };
    }
    console.log(`| ${labels[id]} | ${cells.join(" | ")} | ${leased.join(" / ")} |`);
    json[id] = j;
  }
  if (baseline) {
    // An uncapped workload keeps the claim cost it had at the baseline commit (before flow control, or before a change to it).
    const perRound = BATCHES.map((b) => rounds.map((r) => r[b].a.rate / r[b].baseline.rate));
    json.a_vs_baseline = Object.fromEntries(
      BATCHES.map((b, i) => [`max_tasks_${b}`, { median: median(perRound[i]), per_round: perRound[i] }]),
    );
    console.log(
      `\n(a) / baseline, same rounds: ${BATCHES.map((b, i) => `max_tasks ${b} **${fmt(median(perRound[i]), 2)}** (${perRound[i].map((x) => fmt(x, 2)).join(", ")})`).join("; ")}; the bar: ≥ 0.90.`,
    );
  }
  // A per-key cap never reached against the same keys uncapped: the cap's own cost, without the fair-share order's.
  const perKey = BATCHES.map((b) => rounds.map((r) => r[b].c.rate / r[b].k.rate));
  json.c_vs_k = Object.fromEntries(BATCHES.map((b, i) => [`max_tasks_${b}`, { median: median(perKey[i]), per_round: perKey[i] }]));
  console.log(
    `\n(c) / (k), same rounds: ${BATCHES.map((b, i) => `max_tasks ${b} **${fmt(median(perKey[i]), 2)}** (${perKey[i].map((x) => fmt(x, 2)).join(", ")})`).join("; ")}; the bar: ≥ 0.90.`,
  );
  const refused = ids.flatMap((id) => BATCHES.map((b) => rounds.reduce((n, r) => n + r[b][id].unavailable, 0))).reduce((a, b) => a + b, 0);
  if (refused) console.log(`\n${refused} calls answered 503 (retried after 20 ms); per workload in the JSON line.`);
  return json;
}

function printDepth(rounds: Round2[], fillSeconds: number, context: string) {
  const json: Record<string, unknown> = {};
  console.log(`\n### Flow control: claim latency with ${fmt(TASKS)} pending tasks\n`);
  console.log(
    `Single-task claims over REST (the claim call alone; its result report is a separate call), ${fmt(CLAIMS)} claims a round after a CHECKPOINT; ${context}. Enqueued by CreateJob through the store, one job of ${fmt(Math.ceil(TASKS / KEYS))} tasks per key (${fmt((2 * TASKS) / fillSeconds)} tasks/s, not measured).\n`,
  );
  console.log(`| workload | claim p50 | claim p99 | WAL bytes/task | PostgreSQL CPU µs/task | coordinator CPU µs/task |`);
  console.log(`|---|---|---|---|---|---|`);
  const rows: Array<[keyof typeof DEEP, string]> = [
    ["uncapped", `uncapped, no keys, ${fmt(TASKS)} pending`],
    ["capped", `max_leased_per_key ${KEY_CAP}, ${fmt(KEYS)} keys, ${fmt(TASKS)} pending`],
  ];
  for (const [k, label] of rows) {
    const xs = rounds.map((r) => r[k]);
    const v = {
      p50_ms: median(xs.map((x) => x.p50)),
      p99_ms: median(xs.map((x) => x.p99)),
      wal_bytes_per_task: median(xs.map((x) => x.walPerTask)),
      postgres_cpu_us_per_task: median(xs.map((x) => x.cpu.postgres * 1000)),
      coordinator_cpu_us_per_task: median(xs.map((x) => x.cpu.coordinator * 1000)),
    };
    json[k] = v;
    console.log(
      `| ${label} | ${fmt(v.p50_ms, 2)} ms | ${fmt(v.p99_ms, 2)} ms | ${fmt(v.wal_bytes_per_task)} | ${fmt(v.postgres_cpu_us_per_task)} | ${fmt(v.coordinator_cpu_us_per_task)} |`,
    );
  }
  const perRound = rounds.map((r) => r.capped.p99 / r.uncapped.p99);
  json.p99_capped_vs_uncapped = median(perRound);
  json.p99_capped_vs_uncapped_per_round = perRound;
  console.log(
    `| p99 capped / uncapped (per round: ${perRound.map((x) => fmt(x, 2)).join(", ")}) | | **${fmt(median(perRound), 2)}×** (bar: ≤ 2×) | | | |`,
  );
  return json;
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
