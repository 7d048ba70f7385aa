// npm run bench:sql-deep: claim latency through the store (SQL only, no coordinator) on a table of
// 1,000,000 tasks (500,000 completed, 500,000 pending, one job) against a small one (20,000 pending),
// 16 connections claiming and completing one task at a time, in alternating 3 s runs after one
// unmeasured run on the deep table, each run after a checkpoint. Prints p50/p99 of the claim and
// p99 deep / small per pair. Not a test.
//
//   DEEP_ROWS (1000000)   DEEP_PAIRS (3)   DEEP_SECONDS (3)   DEEP_WORKERS (16)

import { createHash } from "node:crypto";
import { performance } from "node:perf_hooks";
import { createPool, PostgresQueue } from "../src/store/postgres/store.js";
import { fmt, startDatabase, summary } from "./harness.js";
import { parseCoalescing } from "../src/config/index.js";

const ROWS = Number(process.env.DEEP_ROWS ?? 1_000_000);
const PAIRS = Number(process.env.DEEP_PAIRS ?? 3);
const SECONDS = Number(process.env.DEEP_SECONDS ?? 3);
const WORKERS = Number(process.env.DEEP_WORKERS ?? 16);
const SHA = createHash("sha256").update("deep").digest("hex");

async function main() {
  const db = await startDatabase();
  const pool = createPool({ connectionString: db.url, max: WORKERS + 2, statementTimeoutMs: 600_000, connectTimeoutMs: 10_000 });
  const store = new PostgresQueue(pool, {
    coalescing: parseCoalescing(process.env),
    defaultLeaseSeconds: 300,
    defaultMaxAttempts: 3,
    maxTasksPerJob: 10_000,
  });
  try {
    await store.putWorkload({ name: "deep", leaseSeconds: 300 });
    const { rows } = await pool.query(`INSERT INTO jobs (workload, status) VALUES ('deep', 'running') RETURNING id`);
    await pool.query(
      `INSERT INTO tasks (job_id, chunk_index, workload, input_uri, input_sha256, max_attempts, status, attempt, result_uri, result_sha256, completed_at)
       SELECT $1, i, 'deep', 's3://deep', $2, 3, CASE WHEN i % 2 = 0 THEN 'completed' ELSE 'pending' END::task_status,
              CASE WHEN i % 2 = 0 THEN 1 ELSE 0 END, CASE WHEN i % 2 = 0 THEN 's3://done' END, CASE WHEN i % 2 = 0 THEN $2 END,
              CASE WHEN i % 2 = 0 THEN now() END
       FROM generate_series(0, $3 - 1) i`,
      [rows[0].id, SHA, ROWS],
    );
    await pool.query("VACUUM ANALYZE tasks");
    await pool.query("CHECKPOINT");
    const run = async (workload: string) => {
      // Each run starts after a checkpoint, so both pay the full-page writes of the pages they touch first.
      await pool.query("CHECKPOINT");
      const latencies: number[] = [];
      const stopAt = performance.now() + SECONDS * 1000;
      await Promise.all(
        Array.from({ length: WORKERS }, async (_, i) => {
          const workerId = `deep-${i}`;
          while (performance.now() < stopAt) {
            const t0 = performance.now();
            const [task] = await store.claimTasks({ workloads: [workload], workerId, maxTasks: 1 });
            latencies.push(performance.now() - t0);
            if (!task) throw new Error("backlog ran out");
            await store.completeTask({ taskId: task.id, workerId, attempt: task.attempt, resultUri: "s3://out", resultSha256: SHA });
          }
        }),
      );
      return summary(latencies);
    };
    await run("deep");
    const ratios: number[] = [];
    for (let i = 1; i <= PAIRS; i++) {
      const small = `small_${i}`;
      await store.putWorkload({ name: small, leaseSeconds: 300 });
      for (let k = 0; k < 2; k++) {
        await store.createJob({
          workload: small,
          tasks: Array.from({ length: 10_000 }, (_, c) => ({ chunkIndex: c, inputUri: `s3://in/${c}`, inputSha256: SHA })),
        });
      }
      await pool.query("VACUUM ANALYZE tasks");
      await pool.query("CHECKPOINT");
      const s = await run(small);
      const d = await run("deep");
      ratios.push(d.p99 / s.p99);
      console.log(
        `pair ${i}: small p50/p99 ${fmt(s.p50, 2)} / ${fmt(s.p99, 2)} ms (n=${s.n}), deep ${fmt(d.p50, 2)} / ${fmt(d.p99, 2)} ms (n=${d.n}), p99 deep/small ${fmt(d.p99 / s.p99, 2)}`,
      );
    }
    console.log(`p99 deep / small, median of ${PAIRS} pairs: ${fmt([...ratios].sort((a, b) => a - b)[Math.floor(ratios.length / 2)], 2)}`);
  } finally {
    await pool.end();
    await db.stop();
  }
  process.exit(0);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
