// The loads bench:peers (bench/peers.ts) puts on Leasehold, and how it times any system's: a
// window after a warm-up, or a drain of a fixed number of tasks from a cold start (the acceptance
// check's way), each with the CPU per task of the coordinator, the whole PostgreSQL server and
// this process (bench/cpu.ts).

import { createHash } from "node:crypto";
import { performance } from "node:perf_hooks";
import pg from "pg";
import type { PostgresQueue } from "../src/store/postgres/store.js";
import { cpuNow, cpuPer, type CpuPerItem } from "./cpu.js";
import type { Coordinator, grpcH2Client } from "./harness.js";
import type { Boss, GraphileWorkerUtils } from "./peers/load.js";

export const SHA = createHash("sha256").update("peers").digest("hex");
export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A REST call: undici's Pool (restClient) or node:http's Agent (httpClient), both in harness.ts. */
export type Rest = (method: string, pathname: string, body?: unknown) => Promise<{ status: number; json: unknown }>;
export type Grpc = Pick<ReturnType<typeof grpcH2Client>, "claim" | "complete" | "completeMany">;

export interface Measure {
  rate: number;
  cpu: CpuPerItem;
}

/** A load: `start` begins it and resolves its stopper; `count` is the tasks (or jobs) done so far. */
export interface Load {
  start: () => Promise<() => Promise<void>>;
  count: () => number;
}

export async function withClient<T>(url: string, fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

/**
 * Waits (at most 30 s) until no autovacuum worker runs on the server, so a window does not carry
 * the vacuum of another system's last run: each system's server CPU is its own load's.
 */
export async function quiet(url: string): Promise<void> {
  await withClient(url, async (c) => {
    for (let i = 0; i < 300; i++) {
      const { rows } = await c.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM pg_stat_activity WHERE backend_type = 'autovacuum worker'`,
      );
      if (rows[0].n === 0) return;
      await sleep(100);
    }
  });
}

/** Runs `load`, lets it warm up for `warmupMs`, then counts for `seconds`. */
export async function window(load: Load, opts: { seconds: number; warmupMs: number; coordinator?: Coordinator }): Promise<Measure> {
  const stop = await load.start();
  await sleep(opts.warmupMs);
  const c0 = load.count();
  const cpu0 = cpuNow(opts.coordinator);
  const t0 = performance.now();
  await sleep(opts.seconds * 1000);
  const c1 = load.count();
  const cpu1 = cpuNow(opts.coordinator);
  const elapsed = (performance.now() - t0) / 1000;
  await stop();
  const items = Math.max(1, c1 - c0);
  return { rate: (c1 - c0) / elapsed, cpu: cpuPer(cpu0, cpu1, items) };
}

/**
 * The acceptance check's way: `total` tasks from a cold start, timed from the load's start to the
 * last one done (connections made, code not yet warm, the tail where workers run out), CPU over all of it.
 */
export async function drain(load: Load, total: number, coordinator?: Coordinator): Promise<Measure> {
  const cpu0 = cpuNow(coordinator);
  const t0 = performance.now();
  const stop = await load.start();
  let seen = 0;
  let since = performance.now();
  while (load.count() < total) {
    await sleep(2);
    if (load.count() !== seen) [seen, since] = [load.count(), performance.now()];
    else if (performance.now() - since > 60_000) throw new Error(`drain stalled at ${seen} of ${total}`);
  }
  const elapsed = (performance.now() - t0) / 1000;
  const cpu1 = cpuNow(coordinator);
  await stop();
  return { rate: total / elapsed, cpu: cpuPer(cpu0, cpu1, total) };
}

/** n copies of loop(), each running until stopped; returns the stopper. */
export function loops(n: number, loop: (id: number, running: () => boolean) => Promise<void>): () => Promise<void> {
  let running = true;
  const all = Promise.all(Array.from({ length: n }, (_, i) => loop(i, () => running)));
  return async () => {
    running = false;
    await all;
  };
}

/** A worker's pacing: at most `perSecond / workers` calls a second each, at even intervals from a random start. */
function pacer(pace: { perSecond: number; workers: number } | undefined): () => Promise<void> {
  if (!pace) return async () => {};
  const interval = (1000 * pace.workers) / pace.perSecond;
  let next = performance.now() + Math.random() * interval;
  return async () => {
    const wait = next - performance.now();
    if (wait > 0) await sleep(wait);
    next += interval;
  };
}

export function taskSpecs(n: number) {
  return Array.from({ length: n }, (_, i) => ({ chunk_index: i, input_uri: `s3://peers/${i}`, input_sha256: SHA }));
}

export async function fillLeasehold(store: PostgresQueue, workload: string, count: number, perJob = 10_000) {
  await store.putWorkload({ name: workload, leaseSeconds: 300, maxAttempts: 3 });
  for (let done = 0; done < count; done += perJob) {
    const n = Math.min(perJob, count - done);
    await store.createJob({
      workload,
      tasks: taskSpecs(n).map((t) => ({ chunkIndex: t.chunk_index, inputUri: t.input_uri, inputSha256: t.input_sha256 })),
    });
  }
}

/** count jobs of one task each, written by SQL as CreateJob would (the fill is not what is measured). */
export async function fillOneTaskJobs(url: string, workload: string, count: number) {
  await withClient(url, async (c) => {
    await c.query(
      `WITH j AS (INSERT INTO jobs (workload) SELECT $1 FROM generate_series(1, $2) RETURNING id)
       INSERT INTO tasks (job_id, chunk_index, workload, input_uri, input_sha256, max_attempts) SELECT id, 0, $1, 's3://one', $3, 3 FROM j`,
      [workload, count, SHA],
    );
    await c.query("VACUUM ANALYZE jobs, tasks");
  });
}

type RestTask = { id: string; attempt: number; chunk_index: number };

/**
 * `workers` REST workers. `chained` (how a Leasehold worker should run, as the Python client does):
 * each result report carries claim_next and answers the worker's next tasks, one call per claim; a
 * worker calls ClaimTasks itself only when a report brought nothing. Otherwise two calls, a claim
 * and a report. `pace`: at most that many calls a second over all workers. A claim that finds
 * nothing is an error (a window's backlog must outlast it), unless `untilEmpty` (a drain): then
 * the worker stops.
 */
export function leaseholdClaimComplete(
  rest: Rest,
  workload: string,
  opts: { workers: number; maxTasks: number; chained?: boolean; pace?: number; untilEmpty?: boolean },
): Load {
  const { maxTasks, workers } = opts;
  const chained = opts.chained ?? true;
  let done = 0;
  const start = async () =>
    loops(workers, async (id, running) => {
      const worker_id = `peers-${id}`;
      const claim_next = chained ? { workloads: [workload], max_tasks: maxTasks } : undefined;
      const paced = pacer(opts.pace ? { perSecond: opts.pace, workers } : undefined);
      let got: RestTask[] = [];
      while (running()) {
        await paced();
        if (got.length === 0) {
          const claim = await rest("POST", "/tasks/claim", { worker_id, workloads: [workload], max_tasks: maxTasks });
          if (claim.status === 204 && opts.untilEmpty) return;
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

/** The same loop as leaseholdClaimComplete over gRPC (HTTP/2, one connection for all workers), chained through claimNext. */
export function leaseholdGrpcClaimComplete(rpc: Grpc, workload: string, opts: { workers: number; maxTasks: number; pace?: number }): Load {
  const { maxTasks, workers } = opts;
  let done = 0;
  const start = async () =>
    loops(workers, async (id, running) => {
      const workerId = `peers-grpc-${id}`;
      const claimNext = { workloads: [workload], maxTasks };
      const paced = pacer(opts.pace ? { perSecond: opts.pace, workers } : undefined);
      let got: { id: string; attempt: number; chunkIndex: number }[] = [];
      while (running()) {
        await paced();
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

/**
 * `workers` submitters of one-task jobs (POST /jobs), each one after another; `limit`: stop after
 * that many in all; `keyed`: each job with an idempotency key of its own (as a submitter that
 * retries sends it).
 */
export function leaseholdSubmitters(rest: Rest, workload: string, opts: { workers: number; limit?: number; keyed?: boolean }): Load {
  let done = 0;
  let sent = 0;
  const limit = opts.limit ?? Infinity;
  const start = async () =>
    loops(opts.workers, async (id, running) => {
      let i = 0;
      while (running() && sent < limit) {
        sent++;
        const n = i++;
        const r = await rest("POST", "/jobs", {
          workload,
          tasks: [{ chunk_index: 0, input_uri: `s3://one/${id}/${n}`, input_sha256: SHA }],
          ...(opts.keyed ? { idempotency_key: `${workload}-${id}-${n}` } : {}),
        });
        if (r.status !== 201) throw new Error(`POST /jobs answered ${r.status}`);
        done++;
      }
    });
  return { start, count: () => done };
}

// ---------- the peers' fills and their enqueue load ----------

/** graphile-worker jobs of the task "peers", by addJobs of 10,000. */
export async function graphileFill(utils: GraphileWorkerUtils, count: number) {
  for (let done = 0; done < count; done += 10_000) {
    const n = Math.min(10_000, count - done);
    await utils.addJobs(Array.from({ length: n }, (_, i) => ({ identifier: "peers", payload: { i: done + i } })));
  }
}

/** pg-boss jobs on `queue`, by insert of 10,000. */
export async function bossFill(boss: Boss, queue: string, count: number) {
  for (let done = 0; done < count; done += 10_000) {
    const n = Math.min(10_000, count - done);
    await boss.insert(
      queue,
      Array.from({ length: n }, (_, i) => ({ data: { i: done + i } })),
    );
  }
}

/** `workers` callers of graphile-worker's addJob, one after another each (at most `limit` jobs in all). */
export function addJobLoad(utils: GraphileWorkerUtils, workers: number, limit = Infinity): Load {
  let done = 0;
  let sent = 0;
  return {
    start: async () =>
      loops(workers, async (id, running) => {
        let i = 0;
        while (running() && sent < limit) {
          sent++;
          await utils.addJob("peers_one", { id, i: i++ });
          done++;
        }
      }),
    count: () => done,
  };
}

export function med(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  if (s.length === 0) return NaN;
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
}
