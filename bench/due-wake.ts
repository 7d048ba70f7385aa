// npm run bench:due-wake: DUE_JOBS one-task jobs due at the same second, leased by DUE_WORKERS
// workers, two ways: parked long polls woken at the due time (the due-time timer's NOTIFY, poll
// floor POLL_INTERVAL_MS), and pollers that claim every DUE_POLL_MS without waiting (how a queue
// without a due-time wake-up gets the same pickup). For each: how late the last task was leased
// after the due time (database clock), the claim statements run, and the PostgreSQL backends' CPU
// over the window from DUE_LEAD_MS before the due time until every task was leased. Not a test.
//
//   DUE_JOBS (10000)  DUE_WORKERS (16)  DUE_POLL_MS (200)  DUE_LEAD_MS (3000)  DUE_ROUNDS (3)

import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import pg from "pg";
import { LongPollingQueue, type ParkingCalls } from "../src/queue/long-poll.js";
import { TaskListener } from "../src/store/postgres/state/listener.js";
import { createPool, PostgresQueue } from "../src/store/postgres/store.js";
import { fmt, startDatabase } from "./harness.js";
import { parseCoalescing } from "../src/config/index.js";

const JOBS = Number(process.env.DUE_JOBS ?? 10_000);
const WORKERS = Number(process.env.DUE_WORKERS ?? 16);
const POLL_MS = Number(process.env.DUE_POLL_MS ?? 200);
const LEAD_MS = Number(process.env.DUE_LEAD_MS ?? 3000);
const ROUNDS = Number(process.env.DUE_ROUNDS ?? 3);
const SHA = createHash("sha256").update("due").digest("hex");
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function cpuMs(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(f[11]) + Number(f[12])) * 10;
  } catch {
    return 0;
  }
}

async function backendCpu(probe: pg.Client): Promise<Map<number, number>> {
  const { rows } = await probe.query(`SELECT pid FROM pg_stat_activity`);
  return new Map(rows.map((r) => [r.pid as number, cpuMs(r.pid as number)]));
}

async function xacts(probe: pg.Client): Promise<number> {
  const { rows } = await probe.query(`SELECT xact_commit + xact_rollback AS n FROM pg_stat_database WHERE datname = current_database()`);
  return Number(rows[0].n);
}

async function round(url: string, mode: "wake" | "poll", workload: string) {
  const pool = createPool({ connectionString: url, max: WORKERS + 4, statementTimeoutMs: 30_000, connectTimeoutMs: 10_000 });
  const store = new PostgresQueue(pool, {
    coalescing: parseCoalescing(process.env),
    defaultLeaseSeconds: 300,
    defaultMaxAttempts: 3,
    maxTasksPerJob: 10,
  });
  const listener = new TaskListener(url);
  await listener.start();
  const queue: ParkingCalls = mode === "wake" ? new LongPollingQueue(store, listener, { pollIntervalMs: 1000 }) : store;
  const probe = new pg.Client({ connectionString: url });
  probe.on("error", () => {}); // a lost probe fails its next query, which ends the run
  await probe.connect();
  await store.putWorkload({ name: workload, leaseSeconds: 300 });
  // Jobs made 16 at a time, due a little after the last is made.
  const dueAt = new Date(Date.now() + 10_000 + JOBS * 9);
  let made = 0;
  await Promise.all(
    Array.from({ length: 16 }, async () => {
      while (made < JOBS) {
        made++;
        await store.createJob({ workload, inputUri: "s3://due", inputSha256: SHA, runAt: dueAt });
      }
    }),
  );
  if (Date.now() > dueAt.getTime() - LEAD_MS) throw new Error("jobs made too slowly for the due time; raise the margin");
  let leased = 0;
  let claims = 0;
  let stop = false;
  const workers = Array.from({ length: WORKERS }, async (_, i) => {
    // Pollers start with the window; parked claimers are parked well before it.
    if (mode === "poll") await sleep(Math.max(0, dueAt.getTime() - LEAD_MS - Date.now()) + (i * POLL_MS) / WORKERS);
    while (!stop && leased < JOBS) {
      claims++;
      const got = await queue.claimTasks({
        workerId: `w${i}`,
        workloads: [workload],
        maxTasks: 100,
        waitSeconds: mode === "wake" ? 30 : 0,
      });
      leased += got.length;
      if (got.length === 0 && mode === "poll") await sleep(POLL_MS);
    }
  });
  // Every pooled connection open before the window, so no backend's start-up lands in it.
  await Promise.all(Array.from({ length: WORKERS + 4 }, () => pool.query("SELECT pg_sleep(0.05)")));
  await sleep(Math.max(0, dueAt.getTime() - LEAD_MS - Date.now()));
  const cpu0 = await backendCpu(probe);
  const x0 = await xacts(probe);
  const claims0 = claims;
  while (leased < JOBS) await sleep(5);
  const cpu1 = await backendCpu(probe);
  const x1 = await xacts(probe);
  stop = true;
  if (queue instanceof LongPollingQueue) queue.close();
  await Promise.all(workers);
  let dbCpu = 0;
  // A backend that started within the window counts from 0 (the pools are warmed first, so few do).
  for (const [pid, c] of cpu1) dbCpu += c - (cpu0.get(pid) ?? 0);
  const { rows } = await probe.query(
    `SELECT (extract(epoch FROM max(started_at) - $2::timestamptz) * 1000)::float8 AS last_ms,
            (extract(epoch FROM min(started_at) - $2::timestamptz) * 1000)::float8 AS first_ms
     FROM tasks WHERE workload = $1`,
    [workload, dueAt],
  );
  store.stopTimers();
  await listener.stop();
  await probe.end();
  await pool.end();
  return {
    firstMs: rows[0].first_ms as number,
    lastMs: rows[0].last_ms as number,
    dbCpuMs: dbCpu,
    claims: claims - claims0,
    xacts: x1 - x0,
  };
}

async function main() {
  const db = await startDatabase();
  try {
    const results: Record<string, Awaited<ReturnType<typeof round>>[]> = { wake: [], poll: [] };
    for (let r = 0; r < ROUNDS; r++) {
      for (const mode of ["wake", "poll"] as const) {
        const res = await round(db.url, mode, `due_${mode}_${r}`);
        results[mode].push(res);
        console.error(`${mode} round ${r + 1}: ${JSON.stringify(res)}`);
      }
    }
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
    console.log(`${JOBS} one-task jobs due at one second, ${WORKERS} workers, median of ${ROUNDS} rounds`);
    console.log(
      `mode                      first leased  last leased  claims  db transactions  db backends' CPU (window from ${LEAD_MS} ms before due)`,
    );
    for (const mode of ["wake", "poll"] as const) {
      const rs = results[mode];
      const label = mode === "wake" ? "parked, due-time wake" : `pollers every ${POLL_MS} ms`;
      console.log(
        `${label.padEnd(26)}${fmt(median(rs.map((x) => x.firstMs)))} ms`.padEnd(40) +
          `${fmt(median(rs.map((x) => x.lastMs)))} ms`.padEnd(13) +
          `${fmt(median(rs.map((x) => x.claims)))}`.padEnd(8) +
          `${fmt(median(rs.map((x) => x.xacts)))}`.padEnd(17) +
          `${fmt(median(rs.map((x) => x.dbCpuMs)))} ms`,
      );
    }
  } finally {
    await db.stop();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
