// npm run bench:coalesce: coalescing on against off, in the same run on the same database.
// Two coordinator processes (COALESCE=true and COALESCE=false, PG_POOL_MAX 8 each, as bench:peers
// runs one) take turns: each round measures both, in alternating order, on the same kinds of load:
//   - single-task workers chained through claim_next (one call per task, REST), the Python
//     Worker's default and what bench:peers compares with graphile-worker;
//   - single-task workers with two calls per task (claim, then report);
//   - workers claiming 10 and reporting with CompleteTasks (batched; coalescing must not cost them);
//   - submitters of one-task jobs (POST /jobs), as bench:peers runs them beside `addJob`;
//   - pickup: a job committed (by the store, in this process) → the parked REST long poll holds it,
//     40 samples a round, as bench:peers measures it.
// Reports tasks (or jobs) per second, CPU per item of the coordinator and of PostgreSQL's
// backends, the median over the rounds, and the mean batch size per kind from the "on"
// coordinator's metrics. Not a test.
//
//   --runs N (3)   --seconds S (5)   --workers W (16)
//   --switch NAME (COALESCE)   the boolean setting the two coordinators differ in: NAME=true against
//                              NAME=false, everything else at its default (CLAIM_HINTS: the claim
//                              hints' cost when no snapshot is held, long-transactions.md)
//   --switch NAME=A,B          any setting: "on" runs NAME=A, "off" NAME=B (COALESCE_IN_FLIGHT=2,1)

import { createHash } from "node:crypto";
import { performance } from "node:perf_hooks";
import { cpuNow, cpuPer, type CpuPerItem } from "./cpu.js";
import { fmt, restClient, startCoordinator, startDatabase, summary, type Coordinator } from "./harness.js";
import { createPool, PostgresQueue } from "../src/store/postgres/store.js";

const arg = (name: string, fallback: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? Number(process.argv[i + 1]) : fallback;
};
const RUNS = arg("runs", 3);
const SECONDS = arg("seconds", 5);
const WORKERS = arg("workers", 16);
const switchAt = process.argv.indexOf("--switch");
const [SWITCH, ON_VALUE, OFF_VALUE] = parseSwitch(switchAt >= 0 ? process.argv[switchAt + 1] : "COALESCE");

/** NAME (a boolean: true against false) or NAME=A,B. */
function parseSwitch(arg: string): [string, string, string] {
  // Split at the first "=" only: a value may hold one (NAME=a=1,a=2).
  const at = arg.indexOf("=");
  if (at < 0) return [arg, "true", "false"];
  const [a, b] = arg.slice(at + 1).split(",");
  if (b === undefined) throw new Error(`--switch ${arg}: give two values, NAME=A,B`);
  return [arg.slice(0, at), a, b];
}
const SHA = createHash("sha256").update("coalesce").digest("hex");
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

type Rest = ReturnType<typeof restClient>;
type RestTask = { id: string; attempt: number; chunk_index: number };
interface Shape {
  name: string;
  maxTasks: number;
  chained: boolean;
  /** submitters of one-task jobs rather than workers */
  submit?: boolean;
}
const SHAPES: Shape[] = [
  { name: "single-task, claim_next (one call per task)", maxTasks: 1, chained: true },
  { name: "single-task, claim then report (two calls)", maxTasks: 1, chained: false },
  { name: "claim 10 + CompleteTasks with claim_next", maxTasks: 10, chained: true },
  { name: "one-task jobs, POST /jobs (jobs/s)", maxTasks: 1, chained: false, submit: true },
];

/** WORKERS REST workers on one workload for SECONDS after a 1 s warm-up: tasks/s and CPU per task. */
async function measure(rest: Rest, coordinator: Coordinator, workload: string, shape: Shape) {
  let done = 0;
  let running = true;
  const loops = Array.from({ length: WORKERS }, async (_, id) => {
    if (shape.submit) {
      for (let i = 0; running; i++) {
        const r = await rest("POST", "/jobs", {
          workload,
          tasks: [{ chunk_index: 0, input_uri: `s3://one/${id}/${i}`, input_sha256: SHA }],
        });
        if (r.status !== 201) throw new Error(`POST /jobs answered ${r.status}`);
        done++;
      }
      return;
    }
    const worker_id = `co-${id}`;
    const claim_next = shape.chained ? { workloads: [workload], max_tasks: shape.maxTasks } : undefined;
    let got: RestTask[] = [];
    while (running) {
      if (got.length === 0) {
        const claim = await rest("POST", "/tasks/claim", { worker_id, workloads: [workload], max_tasks: shape.maxTasks });
        if (claim.status !== 200) throw new Error(`claim answered ${claim.status}: the backlog ran out`);
        got = (claim.json as { tasks: RestTask[] }).tasks;
      }
      const results = got.map((t) => ({
        task_id: t.id,
        worker_id,
        attempt: t.attempt,
        result_uri: `s3://o/${t.chunk_index}`,
        result_sha256: SHA,
      }));
      const r =
        got.length === 1
          ? await rest("POST", `/tasks/${got[0].id}/result`, { ...results[0], task_id: undefined, claim_next })
          : await rest("POST", "/tasks/results", { results, claim_next });
      if (r.status !== 200) throw new Error(`result answered ${r.status}`);
      done += got.length;
      got = shape.chained ? (r.json as { next_tasks: RestTask[] }).next_tasks : [];
    }
  });
  await sleep(1000);
  const c0 = done;
  const cpu0 = cpuNow(coordinator);
  const t0 = performance.now();
  await sleep(SECONDS * 1000);
  const n = done - c0;
  const cpu = cpuPer(cpu0, cpuNow(coordinator), Math.max(1, n));
  const rate = n / ((performance.now() - t0) / 1000);
  running = false;
  await Promise.all(loops);
  return { rate, cpu };
}

/** Job committed → a parked long poll holds its task, ms, `samples` times (bench:peers' pickup). */
async function pickup(rest: Rest, store: PostgresQueue, workload: string, samples = 40): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < samples; i++) {
    const parked = rest("POST", "/tasks/claim", { worker_id: "pickup", workloads: [workload], wait_seconds: 10 }).then((r) => ({
      at: performance.now(),
      ok: r.status === 200,
    }));
    await sleep(20);
    await store.createJob({ workload, tasks: [{ chunkIndex: 0, inputUri: "s3://p", inputSha256: SHA }] });
    const committed = performance.now();
    const got = await parked;
    if (got.ok) out.push(Math.max(0, got.at - committed));
  }
  return out;
}

/** Mean calls per coalesced statement, by kind, from the coordinator's /metrics. */
async function batchSizes(url: string): Promise<Record<string, number>> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const sums: Record<string, number> = {};
  const counts: Record<string, number> = {};
  for (const m of text.matchAll(/^leasehold_coalesced_batch_size_(sum|count)\{kind="([a-z_]+)"\} ([0-9.e+]+)$/gm)) {
    (m[1] === "sum" ? sums : counts)[m[2]] = Number(m[3]);
  }
  return Object.fromEntries(Object.keys(counts).map((k) => [k, sums[k] / counts[k]]));
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function main() {
  const db = await startDatabase();
  const on = await startCoordinator(db.url, { [SWITCH]: ON_VALUE, PG_POOL_MAX: "8" });
  const off = await startCoordinator(db.url, { [SWITCH]: OFF_VALUE, PG_POOL_MAX: "8" });
  const pool = createPool({ connectionString: db.url, max: 2, statementTimeoutMs: 600_000, connectTimeoutMs: 10_000 });
  const store = new PostgresQueue(pool, { defaultLeaseSeconds: 300, defaultMaxAttempts: 3, maxTasksPerJob: 10_000, coalescing: false });
  const arms = [
    { name: "on", c: on, rest: restClient(on.url) },
    { name: "off", c: off, rest: restClient(off.url) },
  ];
  const results = new Map<string, { rate: number[]; cpu: CpuPerItem[] }>();
  const pickups = new Map<string, number[]>();
  try {
    let w = 0;
    for (let round = 0; round < RUNS; round++) {
      for (const shape of SHAPES) {
        const order = round % 2 === 0 ? arms : [...arms].reverse();
        for (const arm of order) {
          const workload = `co_${++w}`;
          await store.putWorkload({ name: workload, leaseSeconds: 300, maxAttempts: 3 });
          const backlog = shape.submit ? 0 : Math.ceil((SECONDS + 2) * (shape.maxTasks > 1 ? 8000 : 3000));
          for (let made = 0; made < backlog; made += 10_000) {
            const n = Math.min(10_000, backlog - made);
            await store.createJob({
              workload,
              tasks: Array.from({ length: n }, (_, i) => ({ chunkIndex: i, inputUri: `s3://in/${i}`, inputSha256: SHA })),
            });
          }
          const m = await measure(arm.rest, arm.c, workload, shape);
          const key = `${shape.name} | ${arm.name}`;
          const r = results.get(key) ?? { rate: [], cpu: [] };
          r.rate.push(m.rate);
          r.cpu.push(m.cpu);
          results.set(key, r);
          console.error(`[round ${round + 1}] ${key}: ${fmt(m.rate)} tasks/s`);
        }
      }
      for (const arm of round % 2 === 0 ? arms : [...arms].reverse()) {
        const workload = `co_${++w}`;
        await store.putWorkload({ name: workload, leaseSeconds: 300, maxAttempts: 3 });
        const samples = await pickup(arm.rest, store, workload);
        pickups.set(arm.name, [...(pickups.get(arm.name) ?? []), ...samples]);
        console.error(`[round ${round + 1}] pickup | ${arm.name}: p50 ${fmt(summary(samples).p50, 2)} ms`);
      }
    }
    console.log(
      `\n${SWITCH} on (${ON_VALUE}) vs off (${OFF_VALUE}), ${WORKERS} REST workers, ${RUNS} rounds of ${SECONDS} s, medians (CPU ms per task or job)`,
    );
    console.log(`| load | ${SWITCH} | per s | on/off | coordinator | PostgreSQL |`);
    console.log("|---|---|---|---|---|---|");
    for (const shape of SHAPES) {
      const off = results.get(`${shape.name} | off`)!;
      for (const arm of arms.map((a) => a.name)) {
        const r = results.get(`${shape.name} | ${arm}`)!;
        const ratio = arm === "off" ? "" : `${(median(r.rate) / median(off.rate)).toFixed(2)}×`;
        console.log(
          `| ${shape.name} | ${arm} | ${fmt(median(r.rate))} | ${ratio} | ${median(r.cpu.map((c) => c.coordinator)).toFixed(3)} | ${median(r.cpu.map((c) => c.postgres)).toFixed(3)} |`,
        );
      }
    }
    for (const arm of arms) {
      const p = summary(pickups.get(arm.name) ?? []);
      console.log(
        `| pickup, job committed → parked long poll (ms, p50 / p95 of ${p.n}) | ${arm.name} | ${fmt(p.p50, 2)} / ${fmt(p.p95, 2)} | | | |`,
      );
    }
    console.log("\nmean calls per coalesced statement (whole run):", JSON.stringify(await batchSizes(on.url)));
  } finally {
    for (const arm of arms) await arm.c.stop();
    await pool.end();
    await db.stop();
  }
}

// Exits when done: once the report is printed and everything is stopped, nothing is left to wait
// for (a run with pickup samples was seen to linger on an open handle after it).
main().then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
