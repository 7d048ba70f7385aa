// npm run soak: steady claim → complete load against a real coordinator for SOAK_SECONDS
// (default 600), printing throughput, coordinator RSS, open file descriptors and database
// connections every 10 s, with the tasks table's dead tuples and the size of its partial indexes
// (where dead entries from claims and completions pile up until vacuum removes them), then whether
// any of them grew and the last interval's throughput against the first's. Not part of npm test.
//   SOAK_SECONDS (600)  SOAK_WORKERS (16)  SOAK_MODE (api | sql: the statements alone, from pg)
//   SOAK_CHAIN (1: in api mode each result report claims the next task through claim_next; 0: two calls)

import { createHash } from "node:crypto";
import { readdirSync } from "node:fs";
import { performance } from "node:perf_hooks";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import pg from "pg";
import { QueueService, type Task } from "../gen/leasehold/queue/v1/queue_pb.js";
import { CLAIM_TASKS } from "../src/store/postgres/operations/claim.js";
import { COMPLETE_TASK } from "../src/store/postgres/operations/complete.js";
import { createPool } from "../src/store/postgres/store.js";
import { fmt, restClient, startCoordinator, startDatabase } from "./harness.js";

const SECONDS = Number(process.env.SOAK_SECONDS ?? 600);
const WORKERS = Number(process.env.SOAK_WORKERS ?? 16);
const SHA = createHash("sha256").update("soak").digest("hex");
// SOAK_MODE=sql: the workers run the store's claim and complete statements straight from pg (16
// connections, prepared, no coordinator in the loop), so only the database's share is soaked.
const SQL_MODE = process.env.SOAK_MODE === "sql";
const CHAIN = process.env.SOAK_CHAIN !== "0";

async function main() {
  const db = await startDatabase();
  const coordinator = await startCoordinator(db.url);
  const rpc = createClient(QueueService, createConnectTransport({ baseUrl: coordinator.url, httpVersion: "2" }));
  const rest = restClient(coordinator.url);
  const probe = new pg.Client({ connectionString: db.url });
  await probe.connect();
  await rpc.putWorkload({ name: "soak", leaseSeconds: 60, maxAttempts: 3 });

  const stopAt = performance.now() + SECONDS * 1000;
  let completed = 0;
  let errors = 0;

  // Keep a backlog of a few thousand tasks: new 1,000-task jobs while the queue runs low.
  const feeder = (async () => {
    while (performance.now() < stopAt) {
      const { rows } = await probe.query(`SELECT count(*)::int AS n FROM tasks WHERE workload = 'soak' AND status = 'pending'`);
      if (rows[0].n < 5000) {
        await rest("POST", "/jobs", {
          workload: "soak",
          tasks: Array.from({ length: 1000 }, (_, i) => ({ chunk_index: i, input_uri: `s3://soak/${i}`, input_sha256: SHA })),
        });
      } else {
        await new Promise((r) => setTimeout(r, 200));
      }
    }
  })();

  const sqlPool = SQL_MODE
    ? createPool({
        connectionString: db.url,
        max: WORKERS,
        statementTimeoutMs: 60_000,
        connectTimeoutMs: 10_000,
        applicationName: "leasehold-soak-sql",
      })
    : undefined;
  const workers = Array.from({ length: WORKERS }, async (_, id) => {
    const workerId = `soak-${id}`;
    while (SQL_MODE && performance.now() < stopAt) {
      try {
        const { rows } = await sqlPool!.query({ name: "claim", text: CLAIM_TASKS, values: [["soak"], 1, workerId, null, "{}"] });
        if (rows.length === 0) await new Promise((r) => setTimeout(r, 50));
        for (const t of rows) {
          await sqlPool!.query({
            name: "complete",
            text: COMPLETE_TASK,
            values: [t.id, workerId, t.attempt, "s3://soak/out", SHA, JSON.stringify({ id })],
          });
          completed++;
        }
      } catch {
        errors++;
      }
    }
    // As the Python Worker runs: each result report claims the worker's next task (claim_next);
    // ClaimTasks (long-polled) only when a report brought nothing. SOAK_CHAIN=0: two calls per task.
    let next: Task[] = [];
    while (!SQL_MODE && performance.now() < stopAt) {
      try {
        const tasks = next.length > 0 ? next : (await rpc.claimTasks({ workerId, workloads: ["soak"], maxTasks: 1, waitSeconds: 1 })).tasks;
        next = [];
        for (const t of tasks) {
          const done = await rpc.completeTask({
            taskId: t.id,
            workerId,
            attempt: t.attempt,
            resultUri: "s3://soak/out",
            resultSha256: SHA,
            metrics: { id },
            claimNext: CHAIN ? { workerId, workloads: ["soak"], maxTasks: 1 } : undefined,
          });
          next = done.nextTasks;
          completed++;
        }
      } catch {
        next = [];
        errors++;
      }
    }
  });

  const samples: Array<{ rss: number; fds: number; conns: number; rate: number }> = [];
  let last = completed;
  let lastAt = performance.now();
  const fdCount = () => {
    try {
      return readdirSync(`/proc/${coordinator.child.pid}/fd`).length;
    } catch {
      return NaN;
    }
  };
  console.log("elapsed_s  tasks/s  rss_mb  fds  db_conns  errors  dead_tup  claim_idx_kb  lease_idx_kb  autovacuums");
  // The sample in flight, awaited before the probe's connection closes (else its query fails at the end).
  let sampling: Promise<void> = Promise.resolve();
  const reporter = setInterval(() => (sampling = sample()), 10_000);
  const sample = async () => {
    const now = performance.now();
    const rate = (completed - last) / ((now - lastAt) / 1000);
    last = completed;
    lastAt = now;
    const { rows } = await probe.query(
      `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND application_name LIKE 'leasehold%'`,
    );
    const { rows: t } = await probe.query(
      `SELECT n_dead_tup::int AS dead, autovacuum_count::int AS vacuums,
              pg_relation_size('tasks_claim_pending_idx') / 1024 AS claim_kb, pg_relation_size('tasks_lease_expiry_idx') / 1024 AS lease_kb
       FROM pg_stat_user_tables WHERE relname = 'tasks'`,
    );
    const row = { rss: coordinator.rssMb(), fds: fdCount(), conns: rows[0].n, rate };
    samples.push(row);
    console.log(
      `${fmt((SECONDS * 1000 - (stopAt - now)) / 1000).padStart(9)}  ${fmt(rate).padStart(7)}  ${fmt(row.rss, 1).padStart(6)}  ${String(row.fds).padStart(3)}  ${String(row.conns).padStart(8)}  ${String(errors).padStart(6)}  ${String(t[0].dead).padStart(8)}  ${String(t[0].claim_kb).padStart(12)}  ${String(t[0].lease_kb).padStart(12)}  ${String(t[0].vacuums).padStart(11)}`,
    );
  };

  await Promise.all([feeder, ...workers]);
  clearInterval(reporter);
  await sampling;
  await sqlPool?.end();
  await probe.end();
  await coordinator.stop();
  await db.stop();

  // Growth: compare the second sample (after warm-up) with the last.
  if (samples.length >= 3) {
    const a = samples[1];
    const b = samples[samples.length - 1];
    // Minutes (six 10 s intervals): the first after the warm-up interval against the last.
    const mean = (xs: typeof samples) => xs.reduce((n, x) => n + x.rate, 0) / xs.length;
    const first = mean(samples.slice(1, 7));
    const lastRate = mean(samples.slice(Math.max(1, samples.length - 6)));
    console.log(
      `\nthroughput, last minute / first minute after warm-up: ${fmt(lastRate)} / ${fmt(first)} tasks/s = ${fmt(lastRate / first, 2)}`,
    );
    console.log(
      `after warm-up → end: rss ${fmt(a.rss, 1)} → ${fmt(b.rss, 1)} MB, fds ${a.fds} → ${b.fds}, db connections ${a.conns} → ${b.conns}`,
    );
  }
  console.log(
    `completed ${completed} tasks in ${SECONDS} s (${fmt(completed / SECONDS)} tasks/s), ${errors} errors, coordinator peak RSS ${fmt(coordinator.peakRssMb(), 1)} MB`,
  );
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
