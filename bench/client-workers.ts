// npm run bench:workers: the client workers side by side on one coordinator, with a no-op handler.
// Each arm is a child process holding one worker (so every client is measured the same way, its
// CPU read from /proc/<pid>/stat), run for a window on a backlog created beforehand:
//   - ts single / ts batched: the TypeScript client's Worker (clients/typescript, built into a
//     git-ignored copy under test-artifacts/) with one task per claim and a result per call
//     chained through claim_next, and with prefetch + CompleteTasks batches;
//   - py single / py batched: the Python client's Worker (.venv, made as the tests make it), same modes;
//   - py-aio single / py-aio batched: its leasehold.aio.AsyncWorker with an `async def` handler, same modes;
//   - loadgen single: the benchmark's own gRPC loop (harness.ts grpcClient), CompleteTask with claim_next.
// The arms take turns in each round (order rotating by round); reports tasks/s and the client's CPU
// per task, medians over the rounds. A benchmark, not a test: on a busy machine the figures are noise.
//
//   --runs N (3)   --seconds S (5)   --concurrency C (32)   --transport grpc|json (grpc)
//   --arms A,B     only the arms whose name starts with one of these (`py` runs the four Python ones)
//   BENCH_CHILD_NODE_ARGS   node options for the TypeScript and load-generator children (e.g.
//                           `--cpu-prof --cpu-prof-dir=DIR` to profile each worker process)

import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import { createHash } from "node:crypto";
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import path from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath, pathToFileURL } from "node:url";
import { fmt, grpcClient, startCoordinator, startDatabase } from "./harness.js";
import { createPool, PostgresQueue } from "../src/store/postgres/store.js";
import { ensurePythonEnv } from "../test/support/python-env.js";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const arg = (name: string, fallback: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : fallback;
};
const RUNS = Number(arg("runs", "3"));
const CHILD_NODE_ARGS = process.env.BENCH_CHILD_NODE_ARGS?.split(" ").filter(Boolean) ?? [];
const SECONDS = Number(arg("seconds", "5"));
const CONCURRENCY = Number(arg("concurrency", "32"));
const TRANSPORT = arg("transport", "grpc");
/** --arms a,b: only the arms whose name starts with one of these (e.g. `py` for the Python ones). */
const ARMS = arg("arms", "").split(",").filter(Boolean);
const SHA = createHash("sha256").update("noop").digest("hex");
const TICK_MS = 10; // USER_HZ is 100 on Linux
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// ---------- the child processes: each runs one worker and prints its completed count every 100 ms ----------

/** The TypeScript client's Worker, from the built copy named by BENCH_TS_CLIENT (its dist/index.js). */
async function childTs(url: string, workload: string, batched: boolean): Promise<void> {
  type Worker = {
    stats: { completed: number };
    handle(w: string, h: () => { uri: string; sha256: string }): void;
    run(): Promise<void>;
    stop(): void;
  };
  const mod = (await import(pathToFileURL(process.env.BENCH_TS_CLIENT!).href)) as {
    Worker: new (url: string, o: Record<string, unknown>) => Worker;
  };
  const worker = new mod.Worker(url, {
    workloads: [workload],
    concurrency: CONCURRENCY,
    transport: TRANSPORT === "json" ? "connect-json" : "grpc",
    waitSeconds: 1,
    prefetch: batched,
    batchResults: batched,
    claimWithResults: true,
    logger: { info: () => {}, warn: () => {}, error: () => {}, debug: () => {} },
  });
  worker.handle(workload, () => ({ uri: "mem://out", sha256: SHA }));
  const timer = setInterval(() => console.log(worker.stats.completed), 100);
  await worker.run();
  clearInterval(timer);
}

/** The benchmark's own loop: CONCURRENCY gRPC loops of CompleteTask chained through claim_next. */
async function childLoadgen(url: string, workload: string): Promise<void> {
  const client = grpcClient(url);
  let done = 0;
  let running = true;
  process.once("SIGTERM", () => (running = false));
  const timer = setInterval(() => console.log(done), 100);
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async (_, id) => {
      const workerId = `loadgen-${id}`;
      let tasks = (await client.claim({ workerId, workloads: [workload], maxTasks: 1 })).tasks;
      while (running && tasks.length > 0) {
        const t = tasks[0];
        const r = await client.complete({
          taskId: t.id,
          workerId,
          attempt: t.attempt,
          resultUri: "mem://out",
          resultSha256: SHA,
          claimNext: { workloads: [workload], maxTasks: 1 },
        });
        done++;
        tasks = r.nextTasks;
      }
    }),
  );
  clearInterval(timer);
  client.close();
}

// The Python child: the leasehold package's Worker, printing stats["completed"] every 100 ms.
const PYTHON_CHILD = `
import sys, threading, time
from leasehold import Result, Worker
url, workload, batched, concurrency, transport, sha = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4]), sys.argv[5], sys.argv[6]
worker = Worker(url, workloads=[workload], concurrency=concurrency, transport=transport, wait_seconds=1,
                prefetch=batched, batch_results=batched, claim_with_results=True)
@worker.handler(workload)
def noop(task):
    return Result(uri="mem://out", sha256=sha)
def report():
    while True:
        print(worker.stats["completed"], flush=True)
        time.sleep(0.1)
threading.Thread(target=report, daemon=True).start()
worker.run()
`;

// The asyncio Python child: leasehold.aio's AsyncWorker with an async def handler, printing the same count.
const PYTHON_AIO_CHILD = `
import asyncio, sys
from leasehold import Result
from leasehold.aio import AsyncWorker
url, workload, batched, concurrency, transport, sha = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4]), sys.argv[5], sys.argv[6]
worker = AsyncWorker(url, workloads=[workload], concurrency=concurrency, transport=transport, wait_seconds=1,
                     prefetch=batched, batch_results=batched, claim_with_results=True)
@worker.handler(workload)
async def noop(task):
    return Result(uri="mem://out", sha256=sha)
async def main():
    async def report():
        while True:
            print(worker.stats["completed"], flush=True)
            await asyncio.sleep(0.1)
    reporter = asyncio.create_task(report())
    await worker.run()
    reporter.cancel()
asyncio.run(main())
`;

// ---------- the parent ----------

interface Arm {
  name: string;
  start(url: string, workload: string): ChildProcess;
}

function procTicks(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return Number(f[11]) + Number(f[12]); // utime + stime
}

/** Builds the TypeScript client into a copy of its package (in git-ignored test-artifacts/, so its imports resolve in the root node_modules). */
function buildTsClient(): { index: string; dir: string } {
  mkdirSync(path.join(ROOT, "test-artifacts"), { recursive: true });
  const dir = mkdtempSync(path.join(ROOT, "test-artifacts", "bench-ts-client-"));
  for (const f of ["package.json", "tsconfig.json", "src"])
    cpSync(path.join(ROOT, "clients", "typescript", f), path.join(dir, f), { recursive: true });
  execFileSync(process.execPath, [path.join(ROOT, "node_modules", "typescript", "bin", "tsc"), "-p", "tsconfig.json"], {
    cwd: dir,
    stdio: "inherit",
  });
  return { index: path.join(dir, "dist", "index.js"), dir };
}

/** One window: the arm's child on a fresh backlog, 1 s warm-up after its first completion, then SECONDS measured. */
async function measure(arm: Arm, url: string, workload: string, backlog: number) {
  const child = arm.start(url, workload);
  let completed = 0;
  let exited = false;
  child.once("exit", () => (exited = true));
  createInterface({ input: child.stdout! }).on("line", (l) => (completed = Number(l) || completed));
  const give = Date.now() + 60_000;
  while (completed === 0) {
    if (exited || Date.now() > give) throw new Error(`${arm.name}: the worker completed nothing`);
    await sleep(50);
  }
  await sleep(1000);
  const n0 = completed;
  const c0 = procTicks(child.pid!);
  const t0 = performance.now();
  await sleep(SECONDS * 1000);
  const n = completed - n0;
  const cpuMs = (procTicks(child.pid!) - c0) * TICK_MS;
  const elapsed = (performance.now() - t0) / 1000;
  const ended = new Promise((r) => child.once("exit", r));
  child.kill("SIGTERM");
  const killer = setTimeout(() => child.kill("SIGKILL"), 15_000);
  if (!exited) await ended;
  clearTimeout(killer);
  if (completed >= backlog) console.error(`${arm.name}: the backlog ran out: raise it or shorten --seconds`);
  return { rate: n / elapsed, cpuPerTask: cpuMs / Math.max(1, n) };
}

async function main() {
  const child = arg("child", "");
  if (child === "ts") return childTs(process.argv[2], process.argv[3], arg("batched", "0") === "1");
  if (child === "loadgen") return childLoadgen(process.argv[2], process.argv[3]);

  const python = ensurePythonEnv();
  const ts = buildTsClient();
  const self = fileURLToPath(import.meta.url);
  const nodeChild = (extra: string[]) => (url: string, workload: string) =>
    spawn(
      process.execPath,
      [
        ...CHILD_NODE_ARGS,
        "--import",
        "tsx",
        self,
        url,
        workload,
        ...extra,
        "--concurrency",
        String(CONCURRENCY),
        "--transport",
        TRANSPORT,
      ],
      {
        env: { ...process.env, BENCH_TS_CLIENT: ts.index },
        stdio: ["ignore", "pipe", "inherit"],
      },
    );
  const pyChild =
    (batched: boolean, code = PYTHON_CHILD) =>
    (url: string, workload: string) =>
      spawn(python, ["-c", code, url, workload, batched ? "1" : "0", String(CONCURRENCY), TRANSPORT, SHA], {
        stdio: ["ignore", "pipe", "inherit"],
      });
  const arms: Arm[] = [
    { name: "ts single", start: nodeChild(["--child", "ts", "--batched", "0"]) },
    { name: "ts batched", start: nodeChild(["--child", "ts", "--batched", "1"]) },
    { name: "py single", start: pyChild(false) },
    { name: "py batched", start: pyChild(true) },
    { name: "py-aio single", start: pyChild(false, PYTHON_AIO_CHILD) },
    { name: "py-aio batched", start: pyChild(true, PYTHON_AIO_CHILD) },
    { name: "loadgen single", start: nodeChild(["--child", "loadgen"]) },
  ];

  const chosen = ARMS.length ? arms.filter((a) => ARMS.some((p) => a.name.startsWith(p))) : arms;
  arms.splice(0, arms.length, ...chosen);
  const db = await startDatabase();
  const coordinator = await startCoordinator(db.url);
  const pool = createPool({ connectionString: db.url, max: 2, statementTimeoutMs: 600_000, connectTimeoutMs: 10_000 });
  const store = new PostgresQueue(pool, { defaultLeaseSeconds: 300, defaultMaxAttempts: 3, maxTasksPerJob: 10_000, coalescing: false });
  const results = new Map<string, { rate: number[]; cpu: number[] }>();
  try {
    let w = 0;
    for (let round = 0; round < RUNS; round++) {
      const order = arms.map((_, i) => arms[(i + round) % arms.length]);
      for (const arm of order) {
        const workload = `cw_${++w}`;
        await store.putWorkload({ name: workload, leaseSeconds: 300, maxAttempts: 3 });
        const backlog = Math.ceil((SECONDS + 3) * (arm.name.endsWith("batched") ? 6000 : 3000));
        for (let made = 0; made < backlog; made += 10_000) {
          const n = Math.min(10_000, backlog - made);
          await store.createJob({
            workload,
            tasks: Array.from({ length: n }, (_, i) => ({ chunkIndex: i, inputUri: `mem://in/${i}`, inputSha256: SHA })),
          });
        }
        const m = await measure(arm, coordinator.url, workload, backlog);
        const r = results.get(arm.name) ?? { rate: [], cpu: [] };
        r.rate.push(m.rate);
        r.cpu.push(m.cpuPerTask);
        results.set(arm.name, r);
        console.error(`[round ${round + 1}] ${arm.name}: ${fmt(m.rate)} tasks/s, ${m.cpuPerTask.toFixed(3)} client CPU ms per task`);
      }
    }
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
    console.log(`\nclient workers, no-op handler, ${CONCURRENCY} lanes, ${TRANSPORT}, ${RUNS} rounds of ${SECONDS} s, medians`);
    console.log("| worker | tasks/s | client CPU ms per task |");
    console.log("|---|---|---|");
    for (const arm of arms) {
      const r = results.get(arm.name)!;
      console.log(`| ${arm.name} | ${fmt(median(r.rate))} | ${median(r.cpu).toFixed(3)} |`);
    }
  } finally {
    await coordinator.stop();
    await pool.end();
    await db.stop();
    rmSync(ts.dir, { recursive: true, force: true });
  }
}

// Exits once done: a handle left open after the teardown (the run printed its table and removed its
// copy of the client) must not keep a finished benchmark waiting.
main().then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
