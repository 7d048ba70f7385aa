// bench:flow's load: a coordinator "target" (the one under test or an older commit's), the REST
// worker loops it is driven with, the backlog top-up, and the live-lease sampler.

import { createHash } from "node:crypto";
import { performance } from "node:perf_hooks";
import pg from "pg";
import type { Coordinator, restClient } from "./harness.js";

export const SHA = createHash("sha256").update("flow").digest("hex");
export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A coordinator with the database it owns (each target has a database of its own on one server). */
export interface Target {
  name: string;
  coordinator: Coordinator;
  rest: ReturnType<typeof restClient>;
  /** a few connections of the bench's own, for counting and setup */
  pool: pg.Pool;
  /** 503 answers so far (each retried), e.g. a claim that waited out PG_CONNECT_TIMEOUT_MS for a pooled connection */
  unavailable: number;
}

/**
 * A REST call that retries a 503 (UNAVAILABLE, retryable: nothing was done) after 20 ms, as a
 * worker client does, and counts it.
 */
async function call(t: Target, method: string, pathname: string, body?: unknown) {
  for (;;) {
    const r = await t.rest(method, pathname, body);
    if (r.status !== 503) return r;
    t.unavailable++;
    await sleep(20);
  }
}

export function median(xs: number[]): number {
  const s = xs.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  if (s.length === 0) return NaN;
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
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

type RestTask = { id: string; attempt: number; chunk_index: number };

/**
 * One REST result report for the tasks a worker holds (a single task by its own route, several by
 * /tasks/results), carrying `claimNext` when given; answers the tasks it claimed.
 */
async function report(t: Target, workerId: string, got: RestTask[], claimNext: unknown): Promise<RestTask[]> {
  const result = (task: RestTask) => ({
    worker_id: workerId,
    attempt: task.attempt,
    result_uri: `s3://out/${task.chunk_index}`,
    result_sha256: SHA,
  });
  const r =
    got.length === 1
      ? await call(t, "POST", `/tasks/${got[0].id}/result`, { ...result(got[0]), claim_next: claimNext })
      : await call(t, "POST", "/tasks/results", {
          results: got.map((task) => ({ task_id: task.id, ...result(task) })),
          claim_next: claimNext,
        });
  if (r.status !== 200) throw new Error(`${t.name}: result report answered ${r.status}: ${JSON.stringify(r.json)}`);
  return claimNext ? ((r.json as { next_tasks?: RestTask[] }).next_tasks ?? []) : [];
}

/**
 * `workers` REST workers as the Python client runs them: each result report carries claim_next
 * and answers the worker's next tasks; a worker calls ClaimTasks itself only when a report brought
 * nothing. With `waitSeconds` both claims long-poll (a workload at its cap answers nothing until a
 * slot frees); without it an empty claim means the backlog ran out, which is an error. When
 * stopped, a worker reports what it holds without claiming more, so no lease outlives the window.
 */
export function chainedWorkers(t: Target, workload: string, maxTasks: number, workers: number, waitSeconds = 0) {
  let done = 0;
  const claim = { workloads: [workload], max_tasks: maxTasks, ...(waitSeconds ? { wait_seconds: waitSeconds } : {}) };
  const start = () =>
    loops(workers, async (id, running) => {
      const worker_id = `flow-${t.name}-${id}`;
      let got: RestTask[] = [];
      for (;;) {
        if (got.length === 0) {
          if (!running()) return;
          const r = await call(t, "POST", "/tasks/claim", { worker_id, ...claim });
          if (r.status === 204) {
            if (waitSeconds) continue;
            throw new Error(`${t.name}: ${workload}: claim found nothing: the backlog ran out`);
          }
          if (r.status !== 200) throw new Error(`${t.name}: claim answered ${r.status}: ${JSON.stringify(r.json)}`);
          got = (r.json as { tasks: RestTask[] }).tasks;
        }
        const next = await report(t, worker_id, got, running() ? claim : undefined);
        done += got.length;
        got = next;
      }
    });
  return { start, count: () => done };
}

/**
 * `workers` REST workers doing a timed single-task claim, then its report (two calls, so the time
 * is the claim's alone), until `claims` claims were made between them. Answers each claim's time.
 */
export async function timedClaims(t: Target, workload: string, workers: number, claims: number): Promise<number[]> {
  const ms: number[] = [];
  let issued = 0;
  await Promise.all(
    Array.from({ length: workers }, async (_, id) => {
      const worker_id = `flow-${t.name}-${id}`;
      while (issued < claims) {
        issued++;
        const t0 = performance.now();
        const r = await call(t, "POST", "/tasks/claim", { worker_id, workloads: [workload], max_tasks: 1 });
        ms.push(performance.now() - t0);
        if (r.status !== 200) throw new Error(`${t.name}: ${workload}: claim answered ${r.status}: the backlog ran out?`);
        await report(t, worker_id, (r.json as { tasks: RestTask[] }).tasks, undefined);
      }
    }),
  );
  return ms;
}

/**
 * Tops `workload` up to `need` pending tasks through the target's own CreateJob (REST, so an older
 * commit's coordinator fills its own schema): jobs of up to 10,000 tasks, or with `keys` one job
 * per key (`k0`, `k1`, …) each round, so every key has its share. Not measured.
 */
export async function topUp(t: Target, workload: string, need: number, keys = 0): Promise<void> {
  const { rows } = await t.pool.query(`SELECT count(*)::int AS n FROM tasks WHERE workload = $1 AND status = 'pending'`, [workload]);
  let missing = need - (rows[0].n as number);
  while (missing > 0) {
    const perJob = keys ? Math.min(10_000, Math.ceil(missing / keys)) : Math.min(10_000, missing);
    for (let k = 0; k < Math.max(1, keys) && missing > 0; k++) {
      const tasks = Array.from({ length: perJob }, (_, i) => ({ chunk_index: i, input_uri: `s3://flow/${i}`, input_sha256: SHA }));
      const r = await call(t, "POST", "/jobs", { workload, tasks, ...(keys ? { concurrency_key: `k${k}` } : {}) });
      if (r.status !== 201) throw new Error(`${t.name}: POST /jobs answered ${r.status}: ${JSON.stringify(r.json)}`);
      missing -= perJob;
    }
  }
}

/** Samples the workload's live leases (what a cap counts) every ~20 ms until stopped; answers mean and max. */
export function leaseSampler(t: Target, workload: string) {
  const samples: number[] = [];
  let running = true;
  const done = (async () => {
    while (running) {
      const { rows } = await t.pool.query(
        `SELECT count(*)::int AS n FROM tasks WHERE workload = $1 AND status = 'leased' AND lease_expires_at > now()`,
        [workload],
      );
      samples.push(rows[0].n as number);
      await sleep(20);
    }
  })();
  return async () => {
    running = false;
    await done;
    return {
      mean: samples.reduce((a, b) => a + b, 0) / Math.max(1, samples.length),
      max: Math.max(0, ...samples),
      n: samples.length,
    };
  };
}

/** WAL written so far (pg_current_wal_insert_lsn: every byte inserted, flushed or not), in bytes from 0/0. */
export async function walBytes(pool: pg.Pool): Promise<number> {
  const { rows } = await pool.query(`SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::float8 AS b`);
  return rows[0].b as number;
}
