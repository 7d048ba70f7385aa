// npm run bench: throughput and latency of a real coordinator process against a real
// PostgreSQL (embedded unless DATABASE_URL), next to the raw SQL ceiling of the same
// statements driven directly with pg. Prints a table; not a test.
//
//   BENCH_WORKERS (16)   concurrent workers      BENCH_SECONDS (5)  length of each timed run
//   BENCH_BIG_ROWS (1000000)  rows for the deep-table claim run (0 skips it)

import { createHash } from "node:crypto";
import os from "node:os";
import { performance } from "node:perf_hooks";
import { createClient, type Client } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import pg from "pg";
import { QueueService } from "../gen/leasehold/queue/v1/queue_pb.js";
import { CLAIM_TASKS } from "../src/store/postgres/operations/claim.js";
import { COMPLETE_TASK, COMPLETE_TASKS } from "../src/store/postgres/operations/complete.js";
import { createPool, PostgresQueue } from "../src/store/postgres/store.js";
import { fmt, restClient, startCoordinator, startDatabase, summary } from "./harness.js";
import { parseCoalescing } from "../src/config/index.js";

const WORKERS = Number(process.env.BENCH_WORKERS ?? 16);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const BIG_ROWS = Number(process.env.BENCH_BIG_ROWS ?? 1_000_000);
const POOL_MAX = Number(process.env.PG_POOL_MAX ?? 8);
const SHA = createHash("sha256").update("bench").digest("hex");

type Rest = ReturnType<typeof restClient>;
type Rpc = Client<typeof QueueService>;

interface RunResult {
  tasksPerSecond: number;
  claimLatencyMs: ReturnType<typeof summary>;
}

function tasks(n: number) {
  return Array.from({ length: n }, (_, i) => ({ chunk_index: i, input_uri: `s3://bench/${i}`, input_sha256: SHA }));
}

/** Fills a workload directly through the store (not what is being measured). */
async function fill(queue: PostgresQueue, workload: string, count: number) {
  await queue.putWorkload({ name: workload, leaseSeconds: 300, maxAttempts: 3 });
  for (let done = 0; done < count; done += 10_000) {
    const n = Math.min(10_000, count - done);
    await queue.createJob({
      workload,
      tasks: tasks(n).map((t) => ({ chunkIndex: t.chunk_index, inputUri: t.input_uri, inputSha256: t.input_sha256 })),
    });
  }
}

/** W workers doing claim → complete for SECONDS; counts completed tasks. */
async function timed(worker: (id: number, claimMs: number[], stopAt: number) => Promise<number>, seconds: number): Promise<RunResult> {
  const claimMs: number[] = [];
  const start = performance.now();
  const stopAt = start + seconds * 1000;
  const counts = await Promise.all(Array.from({ length: WORKERS }, (_, i) => worker(i, claimMs, stopAt)));
  const elapsed = (performance.now() - start) / 1000;
  return { tasksPerSecond: counts.reduce((a, b) => a + b, 0) / elapsed, claimLatencyMs: summary(claimMs) };
}

function connectRun(rpc: Rpc, workload: string, maxTasks: number, seconds = SECONDS) {
  return timed(async (id, claimMs, stopAt) => {
    let done = 0;
    const workerId = `bench-${id}`;
    while (performance.now() < stopAt) {
      const t0 = performance.now();
      const { tasks: got } = await rpc.claimTasks({ workerId, workloads: [workload], maxTasks });
      claimMs.push(performance.now() - t0);
      if (got.length === 0) break;
      if (got.length === 1) {
        const t = got[0];
        await rpc.completeTask({ taskId: t.id, workerId, attempt: t.attempt, resultUri: `s3://out/${t.chunkIndex}`, resultSha256: SHA });
      } else {
        await rpc.completeTasks({
          results: got.map((t) => ({
            taskId: t.id,
            workerId,
            attempt: t.attempt,
            resultUri: `s3://out/${t.chunkIndex}`,
            resultSha256: SHA,
          })),
        });
      }
      done += got.length;
    }
    return done;
  }, seconds);
}

function restRun(rest: Rest, workload: string, maxTasks: number, seconds = SECONDS) {
  return timed(async (id, claimMs, stopAt) => {
    let done = 0;
    const worker_id = `bench-${id}`;
    while (performance.now() < stopAt) {
      const t0 = performance.now();
      const claim = await rest("POST", "/tasks/claim", { worker_id, workloads: [workload], max_tasks: maxTasks });
      claimMs.push(performance.now() - t0);
      if (claim.status === 204) break;
      const got = (claim.json as { tasks: Array<{ id: string; attempt: number; chunk_index: number }> }).tasks;
      if (got.length === 1) {
        const t = got[0];
        await rest("POST", `/tasks/${t.id}/result`, {
          worker_id,
          attempt: t.attempt,
          result_uri: `s3://out/${t.chunk_index}`,
          result_sha256: SHA,
        });
      } else {
        await rest("POST", "/tasks/results", {
          results: got.map((t) => ({
            task_id: t.id,
            worker_id,
            attempt: t.attempt,
            result_uri: `s3://out/${t.chunk_index}`,
            result_sha256: SHA,
          })),
        });
      }
      done += got.length;
    }
    return done;
  }, seconds);
}

/** The same statements the store runs, driven straight from pg at the same concurrency. */
function rawSqlRun(pool: pg.Pool, workload: string, maxTasks: number, seconds = SECONDS) {
  return timed(async (id, claimMs, stopAt) => {
    let done = 0;
    const workerId = `raw-${id}`;
    while (performance.now() < stopAt) {
      const t0 = performance.now();
      const { rows } = await pool.query({ name: "claim", text: CLAIM_TASKS, values: [[workload], maxTasks, workerId, null, "{}"] });
      claimMs.push(performance.now() - t0);
      if (rows.length === 0) break;
      if (rows.length === 1) {
        await pool.query({
          name: "complete",
          text: COMPLETE_TASK,
          values: [rows[0].id, workerId, rows[0].attempt, "s3://out/raw", SHA, null],
        });
      } else {
        const batch = rows.map((r) => ({
          task_id: r.id,
          worker_id: workerId,
          attempt: r.attempt,
          result_uri: "s3://out/raw",
          result_sha256: SHA,
          metrics: null,
        }));
        await pool.query({ name: "complete_many", text: COMPLETE_TASKS, values: [JSON.stringify(batch), rows.map((r) => r.id)] });
      }
      done += rows.length;
    }
    return done;
  }, seconds);
}

async function main() {
  const started = performance.now();
  console.error(
    `leasehold bench: ${WORKERS} workers, ${SECONDS}s per run, pool ${POOL_MAX}, ${os.cpus().length} cores, node ${process.version}`,
  );
  const db = await startDatabase();
  const coordinator = await startCoordinator(db.url, { PG_POOL_MAX: String(POOL_MAX) });
  const storePool = createPool({ connectionString: db.url, max: 4, statementTimeoutMs: 600_000, connectTimeoutMs: 10_000 });
  const store = new PostgresQueue(storePool, {
    coalescing: parseCoalescing(process.env),
    defaultLeaseSeconds: 300,
    defaultMaxAttempts: 3,
    maxTasksPerJob: 10_000,
  });
  const rest = restClient(coordinator.url, WORKERS * 2);
  const rpc = createClient(QueueService, createConnectTransport({ baseUrl: coordinator.url, httpVersion: "2" }));
  // The same Connect protocol over HTTP/1.1: Node's http2 costs more CPU per call on both ends.
  const rpcH1 = createClient(QueueService, createConnectTransport({ baseUrl: coordinator.url, httpVersion: "1.1" }));
  const rows: Array<[string, string]> = [];
  const perRun = SECONDS * 4000 * 2; // generous backlog so no run drains its workload
  try {
    // Enqueue: a 10,000-task job over REST, three times.
    await rest("PUT", "/workloads/bench_enqueue", { lease_seconds: 300 });
    const enqueueRates: number[] = [];
    for (let i = 0; i < 3; i++) {
      const t0 = performance.now();
      const res = await rest("POST", "/jobs", { workload: "bench_enqueue", tasks: tasks(10_000) });
      if (res.status !== 201) throw new Error(`enqueue answered ${res.status}`);
      enqueueRates.push(10_000 / ((performance.now() - t0) / 1000));
    }
    const enqueueMedian = summary(enqueueRates).p50;
    rows.push(["enqueue, one 10,000-task job over REST (median of 3)", `${fmt(enqueueMedian)} tasks/s`]);
    console.error(`enqueue done: ${fmt(enqueueMedian)} tasks/s`);

    // Warm-up, not measured: JIT, connection pools and HTTP sessions, so the first timed run
    // does not pay for them.
    await fill(store, "bench_warm", 20_000);
    await connectRun(rpc, "bench_warm", 1, 2);
    await restRun(rest, "bench_warm", 1, 2);

    const runs: Array<[string, (w: string) => Promise<RunResult>, number]> = [
      ["Connect/HTTP2", (w) => connectRun(rpc, w, 1), 1],
      ["Connect/HTTP2", (w) => connectRun(rpc, w, 10), 10],
      ["Connect/HTTP1.1", (w) => connectRun(rpcH1, w, 1), 1],
      ["REST/HTTP1.1", (w) => restRun(rest, w, 1), 1],
      ["REST/HTTP1.1", (w) => restRun(rest, w, 10), 10],
    ];
    const results: Record<string, RunResult> = {};
    for (const [label, run, maxTasks] of runs) {
      const w = `bench_${label.split("/")[0].toLowerCase()}_${maxTasks}`;
      await fill(store, w, perRun * maxTasks);
      const r = await run(w);
      results[`${label} ${maxTasks}`] = r;
      rows.push([`end-to-end, ${label}, max_tasks ${maxTasks}`, `${fmt(r.tasksPerSecond)} tasks/s`]);
      console.error(`${label} max_tasks ${maxTasks}: ${fmt(r.tasksPerSecond)} tasks/s`);
    }
    // Same connection settings as the coordinator's pool, one connection per worker.
    const rawPool = createPool({
      connectionString: db.url,
      max: WORKERS,
      statementTimeoutMs: 60_000,
      connectTimeoutMs: 10_000,
      applicationName: "leasehold-bench-raw",
    });
    const raw1 = await (async () => {
      await fill(store, "bench_raw_1", perRun * 2);
      return rawSqlRun(rawPool, "bench_raw_1", 1);
    })();
    const raw10 = await (async () => {
      await fill(store, "bench_raw_10", perRun * 10);
      return rawSqlRun(rawPool, "bench_raw_10", 10);
    })();
    await rawPool.end();
    rows.push(["raw SQL ceiling (pg, same statements), max_tasks 1", `${fmt(raw1.tasksPerSecond)} tasks/s`]);
    rows.push(["raw SQL ceiling (pg, same statements), max_tasks 10", `${fmt(raw10.tasksPerSecond)} tasks/s`]);
    const c1 = results["Connect/HTTP2 1"];
    rows.push([
      "ratio end-to-end / raw SQL, max_tasks 1 (Connect/HTTP2, Connect/HTTP1.1, REST)",
      [c1, results["Connect/HTTP1.1 1"], results["REST/HTTP1.1 1"]].map((r) => fmt(r.tasksPerSecond / raw1.tasksPerSecond, 2)).join(", "),
    ]);
    rows.push([
      "ratio end-to-end / raw SQL, max_tasks 10 (Connect, REST)",
      `${fmt(results["Connect/HTTP2 10"].tasksPerSecond / raw10.tasksPerSecond, 2)}, ${fmt(results["REST/HTTP1.1 10"].tasksPerSecond / raw10.tasksPerSecond, 2)}`,
    ]);
    const lat = c1.claimLatencyMs;
    rows.push([
      "claim latency under load, Connect, max_tasks 1 (p50/p95/p99)",
      `${fmt(lat.p50, 2)} / ${fmt(lat.p95, 2)} / ${fmt(lat.p99, 2)} ms`,
    ]);

    // Pickup: job committed → a parked long-polling worker holds its task, over Connect and over REST.
    await store.putWorkload({ name: "bench_pickup", leaseSeconds: 300 });
    const pickup = async (claim: () => Promise<number>) => {
      const samples: number[] = [];
      for (let i = 0; i < 60; i++) {
        const parked = claim().then((n) => ({ at: performance.now(), n }));
        await new Promise((r) => setTimeout(r, 20)); // let it park
        await store.createJob({ workload: "bench_pickup", tasks: [{ chunkIndex: 0, inputUri: "s3://p", inputSha256: SHA }] });
        const committedAt = performance.now();
        const got = await parked;
        if (got.n === 1) samples.push(Math.max(0, got.at - committedAt));
      }
      return summary(samples);
    };
    const pickConnect = await pickup(
      async () => (await rpc.claimTasks({ workerId: "pickup", workloads: ["bench_pickup"], waitSeconds: 10 })).tasks.length,
    );
    const pickRest = await pickup(async () =>
      (await rest("POST", "/tasks/claim", { worker_id: "pickup", workloads: ["bench_pickup"], wait_seconds: 10 })).status === 200 ? 1 : 0,
    );
    rows.push([
      `pickup latency, long poll over LISTEN/NOTIFY, Connect (p50/p95, n=${pickConnect.n})`,
      `${fmt(pickConnect.p50, 2)} / ${fmt(pickConnect.p95, 2)} ms`,
    ]);
    rows.push([
      `pickup latency, long poll over LISTEN/NOTIFY, REST (p50/p95, n=${pickRest.n})`,
      `${fmt(pickRest.p50, 2)} / ${fmt(pickRest.p95, 2)} ms`,
    ]);

    if (BIG_ROWS > 0) {
      console.error(`filling ${fmt(BIG_ROWS)} rows…`);
      await fillBig(db.url, BIG_ROWS);
      // Small-table and deep-table runs alternate, three of each, so whatever drifts on a shared
      // machine (other load, checkpoints, the coordinator's heap) falls on both alike; each pair
      // gives a ratio, and the median ratio is reported.
      // Not measured: the first run after a million-row fill pays the full-page writes of the
      // first change to every page after its checkpoint, whichever table it runs on.
      await connectRun(rpc, "bench_big", 1, 2);
      const pairs: Array<{ small: RunResult; deep: RunResult }> = [];
      for (let i = 0; i < 3; i++) {
        const w = `bench_small_${i}`;
        await fill(store, w, perRun);
        const small = await connectRun(rpc, w, 1);
        const deep = await connectRun(rpc, "bench_big", 1);
        pairs.push({ small, deep });
        console.error(`pair ${i + 1}: p99 small ${fmt(small.claimLatencyMs.p99, 1)} ms, deep ${fmt(deep.claimLatencyMs.p99, 1)} ms`);
      }
      const latencies = (pick: (p: (typeof pairs)[number]) => RunResult) =>
        ["p50", "p95", "p99"].map((q) => fmt(median(pairs.map((p) => pick(p).claimLatencyMs[q as "p50"])), 2)).join(" / ");
      rows.push([
        `claim latency, small table, Connect, max_tasks 1 (p50/p95/p99, median of 3 alternating runs)`,
        `${latencies((p) => p.small)} ms`,
      ]);
      rows.push([`claim latency with ${fmt(BIG_ROWS)} completed+pending rows, same runs`, `${latencies((p) => p.deep)} ms`]);
      rows.push([
        "  p99 deep / p99 small, each pair (median)",
        `${pairs.map((p) => fmt(p.deep.claimLatencyMs.p99 / p.small.claimLatencyMs.p99, 2)).join(", ")} (${fmt(median(pairs.map((p) => p.deep.claimLatencyMs.p99 / p.small.claimLatencyMs.p99)), 2)})`,
      ]);
      rows.push([
        `  end-to-end, Connect, max_tasks 1, small / deep table (median)`,
        `${fmt(median(pairs.map((p) => p.small.tasksPerSecond)))} / ${fmt(median(pairs.map((p) => p.deep.tasksPerSecond)))} tasks/s`,
      ]);
    }
    rows.push(["coordinator peak RSS", `${fmt(coordinator.peakRssMb())} MB`]);

    // The generator's own ceiling: the same worker loops against the real API layer over an
    // in-memory queue (no database), in its own process on the same cores.
    const stub = await startCoordinator(db.url, {}, "bench/stub-coordinator.ts");
    try {
      const stubRpc = createClient(QueueService, createConnectTransport({ baseUrl: stub.url, httpVersion: "2" }));
      const stubRpcH1 = createClient(QueueService, createConnectTransport({ baseUrl: stub.url, httpVersion: "1.1" }));
      const stubRest = restClient(stub.url, WORKERS * 2);
      await connectRun(stubRpc, "stub", 1, 2);
      const sc = await connectRun(stubRpc, "stub", 1);
      const sc1 = await connectRun(stubRpcH1, "stub", 1);
      const sr = await restRun(stubRest, "stub", 1);
      rows.push([
        "generator + API layer alone (no database), max_tasks 1 (Connect/HTTP2, Connect/HTTP1.1, REST)",
        `${fmt(sc.tasksPerSecond)}, ${fmt(sc1.tasksPerSecond)}, ${fmt(sr.tasksPerSecond)} tasks/s`,
      ]);
    } finally {
      await stub.stop();
    }
  } finally {
    await coordinator.stop();
    await storePool.end();
    await db.stop();
  }
  const width = Math.max(...rows.map((r) => r[0].length));
  console.log(
    `\nLeasehold benchmark — ${WORKERS} workers, ${SECONDS}s runs, PG_POOL_MAX ${POOL_MAX}, ${os.cpus().length} cores (${os.cpus()[0]?.model ?? "?"}), node ${process.version}`,
  );
  for (const [k, v] of rows) console.log(`${k.padEnd(width)}  ${v}`);
  console.log(`(total ${fmt((performance.now() - started) / 1000, 0)} s)`);
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

/** Half completed, half pending, in one workload, written straight with SQL (the fill is not measured). */
async function fillBig(url: string, count: number) {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  await c.query(`INSERT INTO workloads (name, max_attempts, lease_seconds) VALUES ('bench_big', 3, 300) ON CONFLICT DO NOTHING`);
  const { rows } = await c.query(`INSERT INTO jobs (workload, status) VALUES ('bench_big', 'running') RETURNING id`);
  // Foreign-key triggers off for the fill only: the rows reference the job and workload just made.
  await c.query(`SET session_replication_role = replica`);
  await c.query(
    `INSERT INTO tasks (job_id, chunk_index, workload, input_uri, input_sha256, max_attempts, status, attempt, result_uri, result_sha256, completed_at)
     SELECT $1, i, 'bench_big', 's3://big', $2, 3,
            CASE WHEN i % 2 = 0 THEN 'completed' ELSE 'pending' END::task_status,
            CASE WHEN i % 2 = 0 THEN 1 ELSE 0 END,
            CASE WHEN i % 2 = 0 THEN 's3://done' END, CASE WHEN i % 2 = 0 THEN $2 END, CASE WHEN i % 2 = 0 THEN now() END
     FROM generate_series(0, $3 - 1) i`,
    [rows[0].id, SHA, count],
  );
  await c.query(`SET session_replication_role = origin`);
  await c.query(`VACUUM ANALYZE tasks`);
  // Write the fill's dirty pages out now, so no timed run pays for them.
  await c.query(`CHECKPOINT`);
  await c.end();
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
