// npm run bench:scale: end-to-end tasks/s with 1, 2 and 3 coordinator processes on one
// PostgreSQL, the workers spread evenly over them (as a load balancer would), claim → complete
// over REST/HTTP1.1 with max_tasks 1 and 10. Each setting runs SCALE_SECONDS (default 5) and
// is repeated SCALE_RUNS times (default 3); the median is printed.

import { createHash } from "node:crypto";
import { performance } from "node:perf_hooks";
import { createPool, PostgresQueue } from "../src/store/postgres/store.js";
import { fmt, restClient, startCoordinator, startDatabase, summary, type Coordinator } from "./harness.js";
import { parseCoalescing } from "../src/config/index.js";

const WORKERS = Number(process.env.BENCH_WORKERS ?? 16);
const SECONDS = Number(process.env.SCALE_SECONDS ?? 5);
const RUNS = Number(process.env.SCALE_RUNS ?? 3);
const SHA = createHash("sha256").update("scale").digest("hex");

async function main() {
  const db = await startDatabase();
  const pool = createPool({ connectionString: db.url, max: 4, statementTimeoutMs: 600_000, connectTimeoutMs: 10_000 });
  const store = new PostgresQueue(pool, {
    coalescing: parseCoalescing(process.env),
    defaultLeaseSeconds: 300,
    defaultMaxAttempts: 3,
    maxTasksPerJob: 10_000,
  });
  const coordinators: Coordinator[] = [];
  const lines: string[] = [];
  try {
    for (let n = 1; n <= 3; n++) {
      coordinators.push(await startCoordinator(db.url, { PG_POOL_MAX: "8" }));
      for (const maxTasks of [1, 10]) {
        const rates: number[] = [];
        for (let run = 0; run < RUNS; run++) {
          const workload = `scale_${n}_${maxTasks}_${run}`;
          await store.putWorkload({ name: workload, leaseSeconds: 300 });
          const backlog = SECONDS * 3000 * maxTasks;
          for (let done = 0; done < backlog; done += 10_000) {
            await store.createJob({
              workload,
              tasks: Array.from({ length: Math.min(10_000, backlog - done) }, (_, i) => ({
                chunkIndex: i,
                inputUri: "s3://scale",
                inputSha256: SHA,
              })),
            });
          }
          const clients = coordinators.map((c) => restClient(c.url, WORKERS));
          let completed = 0;
          const start = performance.now();
          const stopAt = start + SECONDS * 1000;
          await Promise.all(
            Array.from({ length: WORKERS }, async (_, w) => {
              const rest = clients[w % clients.length];
              const worker_id = `scale-${w}`;
              while (performance.now() < stopAt) {
                const claim = await rest("POST", "/tasks/claim", { worker_id, workloads: [workload], max_tasks: maxTasks });
                if (claim.status !== 200) break;
                const tasks = (claim.json as { tasks: Array<{ id: string; attempt: number }> }).tasks;
                if (tasks.length === 1) {
                  await rest("POST", `/tasks/${tasks[0].id}/result`, {
                    worker_id,
                    attempt: tasks[0].attempt,
                    result_uri: "s3://o",
                    result_sha256: SHA,
                  });
                } else {
                  await rest("POST", "/tasks/results", {
                    results: tasks.map((t) => ({ task_id: t.id, worker_id, attempt: t.attempt, result_uri: "s3://o", result_sha256: SHA })),
                  });
                }
                completed += tasks.length;
              }
            }),
          );
          rates.push(completed / ((performance.now() - start) / 1000));
        }
        const line = `${n} coordinator(s), max_tasks ${String(maxTasks).padStart(2)}: median ${fmt(summary(rates).p50)} tasks/s (runs: ${rates.map((r) => fmt(r)).join(", ")})`;
        console.log(line);
        lines.push(line);
      }
    }
  } finally {
    for (const c of coordinators) await c.stop();
    await pool.end();
    await db.stop();
  }
  console.log(`\n${WORKERS} workers over REST/HTTP1.1, ${SECONDS}s runs, PG_POOL_MAX 8 per coordinator`);
  for (const l of lines) console.log(l);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
