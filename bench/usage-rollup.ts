// npm run bench:usage-rollup: what the usage rollup and GetAccountUsage cost at ROLLUP_TASKS
// (1,000,000) tasks. An embedded PostgreSQL, migrated; ROLLUP_TASKS / 10,000 jobs of 10,000 tasks
// of one account over three workloads, created through the store (CreateJob), then made final by
// SQL as if every task had been claimed and completed with usage (two counters), with its two
// status events (leased, completed) 1-60 s apart, the jobs' completed_at spread over 30 days.
// Then: the rollup's passes until every job is counted (wall time per job and per 1,000 tasks);
// then every job counted again, as after a retry or a late result of each (the rollup subtracts
// what it counted of a job before and adds what it holds now), which must leave account_usage as it
// was; and GetAccountUsage through the store, over everything and over one day (median of 20 calls, ms).
// The machine may be shared: the wall times are upper bounds.
//
//   ROLLUP_TASKS (1000000)   ROLLUP_BATCH (50) jobs per rollup statement

import { performance } from "node:perf_hooks";
import { createPool, PostgresQueue } from "../src/store/postgres/store.js";
import { UsageRollup } from "../src/store/postgres/background/usage-rollup.js";
import { fmt, startDatabase, summary } from "./harness.js";
import { createHash } from "node:crypto";

const TASKS = Number(process.env.ROLLUP_TASKS ?? 1_000_000);
const BATCH = Number(process.env.ROLLUP_BATCH ?? 50);
const PER_JOB = 10_000;
const SHA = createHash("sha256").update("bench").digest("hex");

async function main() {
  const db = await startDatabase();
  const pool = createPool({ connectionString: db.url, max: 4, statementTimeoutMs: 600_000, connectTimeoutMs: 10_000 });
  pool.on("error", () => {});
  const queue = new PostgresQueue(pool, { defaultLeaseSeconds: 300, defaultMaxAttempts: 3, maxTasksPerJob: PER_JOB, coalescing: false });
  try {
    const t0 = performance.now();
    await pool.query(`INSERT INTO accounts (name) VALUES ('acme')`);
    const workloads = ["render", "encode", "caption"];
    for (const w of workloads) await queue.putWorkload({ name: w, leaseSeconds: 300 });
    const jobs = Math.ceil(TASKS / PER_JOB);
    const tasks = Array.from({ length: PER_JOB }, (_, i) => ({ chunkIndex: i, inputUri: `s3://in/${i}`, inputSha256: SHA }));
    for (let j = 0; j < jobs; j++) await queue.createJob({ workload: workloads[j % workloads.length], tasks });
    await pool.query(`UPDATE jobs SET account = 'acme', created_at = now() - interval '31 days'`);
    await pool.query(`
      UPDATE tasks SET status = 'completed', attempt = 1, lease_owner = 'w', result_uri = 's3://out', result_sha256 = '${SHA}',
        usage = jsonb_build_object('gpu_ms', 1000 + chunk_index % 100, 'tokens', 7), completed_at = now()`);
    await pool.query(`
      INSERT INTO task_events (job_id, task_id, chunk_index, kind, status, previous_status, attempt, worker_id, created_at)
      SELECT job_id, id, chunk_index, 'task_status', 'leased', 'pending', 1, 'w', now() - interval '2 minutes' FROM tasks
      UNION ALL
      SELECT job_id, id, chunk_index, 'task_status', 'completed', 'leased', 1, 'w',
        now() - interval '2 minutes' + make_interval(secs => 1 + chunk_index % 60) FROM tasks`);
    await pool.query(`UPDATE jobs SET status = 'completed', completed_at = now() - make_interval(hours => (random() * 720)::int)`);
    for (const table of ["jobs", "tasks", "task_events", "account_usage"]) await pool.query(`VACUUM ANALYZE ${table}`);
    console.error(`filled ${fmt(jobs * PER_JOB)} tasks of ${jobs} jobs in ${fmt((performance.now() - t0) / 1000)} s`);

    const rollup = new UsageRollup(pool, { batchJobs: BATCH, batchesPerPass: 1_000_000 });
    const r0 = performance.now();
    const counted = await rollup.runOnce(undefined);
    const ms = performance.now() - r0;
    if (counted !== jobs) throw new Error(`rollup counted ${counted} of ${jobs} jobs`);
    const totals = `SELECT count(*)::int AS n, sum(tasks_completed)::bigint AS t, sum(jobs)::bigint AS j,
      sum((usage->>'gpu_ms')::bigint)::bigint AS gpu FROM account_usage`;
    const rows = (await pool.query(totals)).rows[0];

    // Every job changed after it was counted: counted again, as the difference.
    await pool.query(`UPDATE jobs SET rolled_up_at = NULL`);
    await pool.query(`VACUUM ANALYZE jobs`);
    const a0 = performance.now();
    const recounted = await rollup.runOnce(undefined);
    const againMs = performance.now() - a0;
    if (recounted !== jobs) throw new Error(`the second rollup counted ${recounted} of ${jobs} jobs`);
    const after = (await pool.query(totals)).rows[0];
    if (JSON.stringify(after) !== JSON.stringify(rows))
      throw new Error(`counted again, account_usage changed: ${JSON.stringify([rows, after])}`);

    const time = async (from?: Date, to?: Date) => {
      const samples: number[] = [];
      for (let i = 0; i < 20; i++) {
        const a = performance.now();
        await queue.getAccountUsage({ account: "acme", from, to });
        samples.push(performance.now() - a);
      }
      return summary(samples).p50;
    };
    const all = await time();
    const day = await time(new Date(Date.now() - 86_400_000), new Date());
    console.log(`bench:usage-rollup — ${fmt(jobs * PER_JOB)} tasks, ${jobs} jobs of ${fmt(PER_JOB)}, one account, 3 workloads, 30 days`);
    console.log(
      `rollup: ${fmt(ms / 1000, 1)} s for every job (${BATCH} jobs per statement): ${fmt(ms / jobs)} ms per job, ${fmt((ms / (jobs * PER_JOB)) * 1000, 1)} ms per 1,000 tasks`,
    );
    console.log(
      `counted again (every job changed): ${fmt(againMs / 1000, 1)} s: ${fmt(againMs / jobs)} ms per job, ${fmt((againMs / (jobs * PER_JOB)) * 1000, 1)} ms per 1,000 tasks; account_usage unchanged`,
    );
    console.log(`account_usage: ${rows.n} rows (hour x workload) holding ${rows.t} completed tasks`);
    console.log(`GetAccountUsage (median of 20): all 30 days ${fmt(all, 1)} ms, one day ${fmt(day, 1)} ms`);
  } finally {
    await pool.end();
    await db.stop();
  }
}

await main();
