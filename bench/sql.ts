// npm run bench:sql: Leasehold's claim and complete statements as SQL only (no coordinator), next to
// a bare SKIP LOCKED queue loop on a two-index table, 16 connections, prepared statements, in
// alternating runs on one server. Leasehold runs twice per round: chained (each result report
// claims the next tasks in the same statement, COMPLETE_TASK(S)_AND_CLAIM: what a worker using
// claim_next runs) and as a claim then a completion; plus WAL bytes and backend CPU per task and EXPLAIN (ANALYZE, BUFFERS, WAL) of
// one claim and one completion in steady state. Not a test.
//
//   --runs N | SQL_RUNS (3)   alternating rounds    SQL_SECONDS (4)   length of each run
//   SQL_WORKERS (16)          connections           SQL_MAX_TASKS (1) tasks per claim (Leasehold)
//   SQL_SETUP                 SQL run once before the runs (A/B of a candidate change)

import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { performance } from "node:perf_hooks";
import pg from "pg";
import { CLAIM_TASKS } from "../src/store/postgres/operations/claim.js";
import {
  COMPLETE_TASK,
  COMPLETE_TASK_AND_CLAIM,
  COMPLETE_TASKS,
  COMPLETE_TASKS_AND_CLAIM,
} from "../src/store/postgres/operations/complete.js";
import { createPool, PostgresQueue } from "../src/store/postgres/store.js";
import { fmt, startDatabase } from "./harness.js";
import { parseCoalescing } from "../src/config/index.js";

const argRuns = process.argv.indexOf("--runs");
const RUNS = Number(argRuns >= 0 ? process.argv[argRuns + 1] : (process.env.SQL_RUNS ?? 3));
const SECONDS = Number(process.env.SQL_SECONDS ?? 4);
const WORKERS = Number(process.env.SQL_WORKERS ?? 16);
const MAX_TASKS = Number(process.env.SQL_MAX_TASKS ?? 1);
const SHA = createHash("sha256").update("sql").digest("hex");

// The bare loop: what graphile-worker and River do, minus everything else (claim by a partial
// index in run_at order, complete by deleting the row).
const BARE_SCHEMA = `
CREATE TABLE bare_jobs (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, queue text NOT NULL, payload jsonb NOT NULL DEFAULT '{}',
  run_at timestamptz NOT NULL DEFAULT now(), attempts int NOT NULL DEFAULT 0, locked_by text, locked_at timestamptz);
CREATE INDEX bare_jobs_available ON bare_jobs (queue, run_at, id) WHERE locked_at IS NULL;`;
const BARE_CLAIM = `
UPDATE bare_jobs SET locked_by = $2, locked_at = now(), attempts = attempts + 1
WHERE id = (SELECT id FROM bare_jobs WHERE queue = $1 AND locked_at IS NULL AND run_at <= now() ORDER BY run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING id`;
const BARE_COMPLETE = `DELETE FROM bare_jobs WHERE id = $1 AND locked_by = $2`;

/** COMPLETE_TASKS' recordset: one result per task the worker holds. */
function batchResults(tasks: { id: string; attempt: number }[], workerId: string): string {
  return JSON.stringify(
    tasks.map((t) => ({
      task_id: t.id,
      worker_id: workerId,
      attempt: t.attempt,
      result_uri: "s3://out",
      result_sha256: SHA,
      metrics: null,
    })),
  );
}

/** CPU seconds (user + system) these backends have used so far (/proc/<pid>/stat; 0 where unreadable). */
function cpuSeconds(pids: number[]): number {
  let ticks = 0;
  for (const pid of pids) {
    try {
      const f = readFileSync(`/proc/${pid}/stat`, "utf8");
      const rest = f.slice(f.lastIndexOf(")") + 2).split(" ");
      ticks += Number(rest[11]) + Number(rest[12]); // utime, stime (fields 14, 15), in USER_HZ (100)
    } catch {
      // not Linux, or another user's process
    }
  }
  return ticks / 100;
}

async function run(
  pool: pg.Pool,
  loop: (c: pg.PoolClient, id: number) => Promise<number>,
): Promise<{ rate: number; walPerTask: number; cpuUsPerTask: number }> {
  const lsn = async () => (await pool.query("SELECT pg_current_wal_insert_lsn()::text AS l")).rows[0].l as string;
  const clients = await Promise.all(Array.from({ length: WORKERS }, () => pool.connect()));
  // The CPU time of the backends serving the loop: per task, it does not depend on how busy the
  // shared machine is the way a rate does.
  const pids = await Promise.all(clients.map(async (c) => (await c.query("SELECT pg_backend_pid() AS p")).rows[0].p as number));
  const cpu0 = cpuSeconds(pids);
  const w0 = await lsn();
  const t0 = performance.now();
  const stopAt = t0 + SECONDS * 1000;
  const counts = await Promise.all(
    clients.map(async (c, id) => {
      let n = 0;
      while (performance.now() < stopAt) {
        const got = await loop(c, id);
        if (got === 0) throw new Error("backlog ran out");
        n += got;
      }
      return n;
    }),
  );
  const elapsed = (performance.now() - t0) / 1000;
  const cpu1 = cpuSeconds(pids);
  const w1 = await lsn();
  for (const c of clients) c.release();
  const done = counts.reduce((a, b) => a + b, 0);
  const wal = Number((await pool.query("SELECT pg_wal_lsn_diff($1, $2) AS d", [w1, w0])).rows[0].d);
  return { rate: done / elapsed, walPerTask: wal / done, cpuUsPerTask: ((cpu1 - cpu0) * 1e6) / done };
}

async function main() {
  const db = await startDatabase();
  const pool = createPool({
    connectionString: db.url,
    max: WORKERS + 2,
    statementTimeoutMs: 60_000,
    connectTimeoutMs: 10_000,
    applicationName: "leasehold-bench-sql",
  });
  const store = new PostgresQueue(pool, {
    coalescing: parseCoalescing(process.env),
    defaultLeaseSeconds: 300,
    defaultMaxAttempts: 3,
    maxTasksPerJob: 10_000,
  });
  const perRun = Math.ceil(SECONDS * 6000);
  type Measured = Awaited<ReturnType<typeof run>>;
  const results: Array<{ bare: Measured; leasehold: Measured; chained: Measured }> = [];
  try {
    await pool.query(BARE_SCHEMA);
    // A/B hook: SQL run once before anything is measured (e.g. a candidate index or setting).
    if (process.env.SQL_SETUP) await pool.query(process.env.SQL_SETUP);
    const leaseholdLoop = (workload: string) => async (c: pg.PoolClient, id: number) => {
      const workerId = `sql-${id}`;
      const { rows } = await c.query({ name: "claim", text: CLAIM_TASKS, values: [[workload], MAX_TASKS, workerId, null, "{}"] });
      if (rows.length === 1) {
        const r = await c.query({
          name: "complete",
          text: COMPLETE_TASK,
          values: [rows[0].id, workerId, rows[0].attempt, "s3://out", SHA, null],
        });
        if (r.rows[0]?.recheck_job) throw new Error("unexpected recheck mid-job");
      } else if (rows.length > 1) {
        await c.query({ name: "complete_many", text: COMPLETE_TASKS, values: [batchResults(rows, workerId), rows.map((r) => r.id)] });
      }
      return rows.length;
    };
    // One statement per report: the worker holds the tasks the last report claimed.
    const chainedLoop = (workload: string) => {
      const held = new Map<number, { id: string; attempt: number }[]>();
      return async (c: pg.PoolClient, id: number) => {
        const workerId = `sql-${id}`;
        let tasks = held.get(id) ?? [];
        if (tasks.length === 0) {
          tasks = (await c.query({ name: "claim", text: CLAIM_TASKS, values: [[workload], MAX_TASKS, workerId, null, "{}"] })).rows;
          if (tasks.length === 0) return 0;
        }
        const next = [workload],
          limit = MAX_TASKS;
        let rows;
        if (tasks.length === 1) {
          rows = (
            await c.query({
              name: "complete_and_claim",
              text: COMPLETE_TASK_AND_CLAIM,
              values: [tasks[0].id, workerId, tasks[0].attempt, "s3://out", SHA, null, next, limit, workerId, null, "{}"],
            })
          ).rows;
        } else {
          rows = (
            await c.query({
              name: "complete_many_and_claim",
              text: COMPLETE_TASKS_AND_CLAIM,
              values: [batchResults(tasks, workerId), tasks.map((r) => r.id), next, limit, workerId, null, "{}"],
            })
          ).rows;
        }
        if (rows.filter((r) => r.part === 0).length !== tasks.length) throw new Error("a completion was refused");
        held.set(
          id,
          rows.filter((r) => r.part === 1),
        );
        return tasks.length;
      };
    };
    const bareLoop = (queue: string) => async (c: pg.PoolClient, id: number) => {
      const { rows } = await c.query({ name: "bare_claim", text: BARE_CLAIM, values: [queue, `sql-${id}`] });
      if (rows.length === 0) return 0;
      await c.query({ name: "bare_complete", text: BARE_COMPLETE, values: [rows[0].id, `sql-${id}`] });
      return 1;
    };
    const fill = async (i: number) => {
      const workload = `sql_${i}`;
      await store.putWorkload({ name: workload, leaseSeconds: 300 });
      for (let done = 0; done < perRun * MAX_TASKS; done += 10_000) {
        const n = Math.min(10_000, perRun * MAX_TASKS - done);
        await store.createJob({
          workload,
          tasks: Array.from({ length: n }, (_, k) => ({ chunkIndex: k, inputUri: `s3://in/${k}`, inputSha256: SHA })),
        });
      }
      await pool.query(`INSERT INTO bare_jobs (queue) SELECT $1 FROM generate_series(1, $2)`, [`q_${i}`, perRun]);
      await pool.query("VACUUM ANALYZE tasks, jobs, bare_jobs");
      await pool.query("CHECKPOINT");
    };
    // Warm-up, not measured.
    await fill(0);
    await run(pool, bareLoop("q_0"));
    await run(pool, leaseholdLoop("sql_0"));
    for (let i = 1; i <= RUNS; i++) {
      await fill(i);
      const bare = await run(pool, bareLoop(`q_${i}`));
      const chained = await run(pool, chainedLoop(`sql_${i}`));
      await fill(RUNS + i);
      const leasehold = await run(pool, leaseholdLoop(`sql_${RUNS + i}`));
      results.push({ bare, leasehold, chained });
      console.error(
        `round ${i}: bare ${fmt(bare.rate)}/s (${fmt(bare.walPerTask)} WAL B/task, ${fmt(bare.cpuUsPerTask)} µs backend CPU/task), leasehold chained ${fmt(chained.rate)}/s (${fmt(chained.walPerTask)} WAL B/task, ${fmt(chained.cpuUsPerTask)} µs), ratio ${fmt(chained.rate / bare.rate, 2)}; claim then complete ${fmt(leasehold.rate)}/s (${fmt(leasehold.walPerTask)} WAL B/task, ${fmt(leasehold.cpuUsPerTask)} µs), ratio ${fmt(leasehold.rate / bare.rate, 2)}`,
      );
    }
    // One claim and one completion, explained, in the state the runs left.
    const c = await pool.connect();
    try {
      await c.query("BEGIN");
      // Prepared, so the plans shown are the generic plans the pool's connections run
      // (plan_cache_mode=force_generic_plan).
      const plan = async (label: string, text: string, types: string, values: unknown[]) => {
        await c.query(`PREPARE explain_${label} (${types}) AS ${text}`);
        const args = values
          .map((v) => (v === null ? "NULL" : typeof v === "number" ? String(v) : Array.isArray(v) ? `'{${v.join(",")}}'` : `'${v}'`))
          .join(", ");
        const { rows } = await c.query(`EXPLAIN (ANALYZE, BUFFERS, WAL, COSTS OFF, SUMMARY OFF) EXECUTE explain_${label} (${args})`);
        console.log(`\n-- ${label}\n${rows.map((r) => r["QUERY PLAN"]).join("\n")}`);
      };
      const w = `sql_${RUNS}`;
      await plan("claim", CLAIM_TASKS, "text[], int, text, int", [[w], MAX_TASKS, "explain", null]);
      // The completion in a transaction of its own, as in the loop (foreign-key checks on a row the
      // same transaction wrote are not skipped, which would distort the plan's trigger times).
      await c.query("COMMIT");
      await c.query("BEGIN");
      const { rows } = await c.query(`SELECT id, attempt FROM tasks WHERE lease_owner = 'explain' AND status = 'leased' LIMIT 1`);
      if (rows[0])
        await plan("complete", COMPLETE_TASK, "uuid, text, int, text, text, jsonb", [
          rows[0].id,
          "explain",
          rows[0].attempt,
          "s3://out",
          SHA,
          null,
        ]);
      await c.query("ROLLBACK");
    } finally {
      c.release();
    }
  } finally {
    await pool.end();
    await db.stop();
  }
  const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  console.log(`\nSQL only, ${WORKERS} connections, ${SECONDS}s runs, ${RUNS} alternating rounds, max_tasks ${MAX_TASKS}`);
  console.log(
    `bare SKIP LOCKED claim + delete:   ${fmt(med(results.map((r) => r.bare.rate)))} tasks/s, ${fmt(med(results.map((r) => r.bare.walPerTask)))} WAL bytes/task, ${fmt(med(results.map((r) => r.bare.cpuUsPerTask)))} µs backend CPU/task`,
  );
  for (const [label, key] of [
    ["Leasehold chained (claim_next):  ", "chained"],
    ["Leasehold claim, then complete:  ", "leasehold"],
  ] as const) {
    console.log(
      `${label} ${fmt(med(results.map((r) => r[key].rate)))} tasks/s, ${fmt(med(results.map((r) => r[key].walPerTask)))} WAL bytes/task, ${fmt(med(results.map((r) => r[key].cpuUsPerTask)))} µs backend CPU/task; ratio per round ${results.map((r) => fmt(r[key].rate / r.bare.rate, 2)).join(", ")} (median ${fmt(med(results.map((r) => r[key].rate / r.bare.rate)), 2)})`,
    );
  }
  process.exit(0);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
