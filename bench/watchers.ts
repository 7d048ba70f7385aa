// npm run bench:watchers: what idle WatchJob streams cost a coordinator and its database, and how
// fast an event still reaches each of them. A real coordinator process (POLL_INTERVAL_MS 1000,
// with its LISTEN connection) holds WATCHERS_STREAMS Server-Sent-Event streams
// (`GET /jobs/{id}/events`) on WATCHERS_JOBS jobs where nothing happens; then each job gets one
// event (a claim) and the time from its commit to each stream's `data:` line is measured. Not a test.
//
//   WATCHERS_STREAMS (1000)  WATCHERS_JOBS (100)  WATCHERS_IDLE_SECONDS (10)  WATCHERS_TRACE (0)

import { createHash } from "node:crypto";
import http from "node:http";
import { readFileSync } from "node:fs";
import { performance } from "node:perf_hooks";
import pg from "pg";
import { fmt, restClient, startCoordinator, startDatabase, summary } from "./harness.js";

const STREAMS = Number(process.env.WATCHERS_STREAMS ?? 1000);
const JOBS = Number(process.env.WATCHERS_JOBS ?? 100);
const IDLE_SECONDS = Number(process.env.WATCHERS_IDLE_SECONDS ?? 10);
// Samples pg_stat_activity during the idle window (its own queries then count as transactions).
const TRACE = process.env.WATCHERS_TRACE === "1";
const SHA = createHash("sha256").update("watchers").digest("hex");
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function cpuMs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(f[11]) + Number(f[12])) * 10;
}

async function main() {
  const db = await startDatabase();
  const coordinator = await startCoordinator(db.url, { POLL_INTERVAL_MS: "1000", PG_POOL_MAX: "8" });
  const rest = restClient(coordinator.url);
  const probe = new pg.Client({ connectionString: db.url });
  probe.on("error", () => {});
  await probe.connect();
  const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity });
  const u = new URL(coordinator.url);
  try {
    await rest("PUT", "/workloads/watched", { lease_seconds: 300 });
    const jobIds: string[] = [];
    for (let i = 0; i < JOBS; i++) {
      const r = await rest("POST", "/jobs", { workload: "watched", tasks: [{ chunk_index: 0, input_uri: "s3://w", input_sha256: SHA }] });
      jobIds.push((r.json as { job: { id: string } }).job.id);
    }
    // Per stream: when its first event line arrived.
    const firstEventAt: number[] = new Array(STREAMS).fill(NaN);
    const requests: http.ClientRequest[] = [];
    let open = 0;
    const openStream = (i: number) => {
      const jobId = jobIds[i % JOBS];
      return new Promise<void>((resolve, reject) => {
        const req = http.get({ host: u.hostname, port: u.port, path: `/jobs/${jobId}/events`, agent }, (res) => {
          if (res.statusCode !== 200) {
            res.resume();
            reject(new Error(`stream ${i} answered ${res.statusCode}`));
            return;
          }
          let lines = 0;
          res.setEncoding("utf8");
          res.on("data", (chunk: string) => {
            for (const line of chunk.split("\n")) {
              if (!line.startsWith("data:")) continue;
              lines++;
              if (lines === 1) {
                open++;
                resolve(); // the snapshot
              } else if (Number.isNaN(firstEventAt[i])) firstEventAt[i] = performance.now();
            }
          });
          res.on("error", () => {});
        });
        req.on("error", reject);
        requests.push(req);
      });
    };
    // Opened 50 at a time: a thousand at once wait on the coordinator's pool past PG_CONNECT_TIMEOUT_MS.
    for (let i = 0; i < STREAMS; i += 50) await Promise.all(Array.from({ length: Math.min(50, STREAMS - i) }, (_, k) => openStream(i + k)));
    console.error(`${open} streams open on ${JOBS} jobs; idle for ${IDLE_SECONDS} s`);
    // Settle: idle backends report their transaction counts up to 10 s late (PGSTAT_IDLE_INTERVAL),
    // so the stream openings would otherwise land in the idle window.
    await sleep(12_000);
    const stat = async () =>
      (await probe.query(`SELECT xact_commit + xact_rollback AS n FROM pg_stat_database WHERE datname = current_database()`)).rows[0]
        .n as string;
    const x0 = Number(await stat());
    const c0 = cpuMs(coordinator.child.pid!);
    const t0 = performance.now();
    // What the database is busy with meanwhile: its active statements, sampled.
    const seen = new Map<string, number>();
    const tracer = (async () => {
      const tracePg = new pg.Client({ connectionString: db.url });
      await tracePg.connect();
      while (TRACE && performance.now() - t0 < IDLE_SECONDS * 1000) {
        const { rows } = await tracePg.query(
          `SELECT left(regexp_replace(query, '\\s+', ' ', 'g'), 70) AS q FROM pg_stat_activity WHERE state = 'active' AND pid <> pg_backend_pid() AND datname = current_database()`,
        );
        for (const r of rows) seen.set(r.q, (seen.get(r.q) ?? 0) + 1);
        await sleep(5);
      }
      await tracePg.end();
    })();
    await sleep(IDLE_SECONDS * 1000);
    await tracer;
    const elapsed = (performance.now() - t0) / 1000;
    const x1 = Number(await stat());
    const c1 = cpuMs(coordinator.child.pid!);
    // The probe's own two statements are in the count; take them out.
    const txPerSecond = (x1 - x0 - 2) / elapsed;
    const busy = [...seen].sort((a, b) => b[1] - a[1]).slice(0, 5);
    const corePercent = ((c1 - c0) / 1000 / elapsed) * 100;

    // One event per job: claim its task. The commit time is when the claim answered.
    const claimedAt: number[] = [];
    for (let j = 0; j < JOBS; j++) {
      await rest("POST", "/tasks/claim", { worker_id: "watch-bench", workloads: ["watched"], max_tasks: 1 });
      claimedAt.push(performance.now());
    }
    // Claims go in job order (one task per job, created in order).
    await sleep(3000);
    const latencies: number[] = [];
    let missing = 0;
    for (let i = 0; i < STREAMS; i++) {
      if (Number.isNaN(firstEventAt[i])) missing++;
      else latencies.push(Math.max(0, firstEventAt[i] - claimedAt[i % JOBS]));
    }
    const lat = summary(latencies);
    for (const r of requests) r.destroy();
    console.log(`\n${open} idle SSE WatchJob streams on ${JOBS} jobs, one coordinator (POLL_INTERVAL_MS 1000), ${fmt(elapsed, 1)} s idle`);
    console.log(`database transactions/s (all of the database's): ${fmt(txPerSecond, 1)}`);
    if (TRACE)
      console.log(`statements seen active while idle (sampled every ~5 ms): ${busy.map(([q, n]) => `${n}× ${q}`).join(" | ") || "none"}`);
    console.log(`coordinator CPU: ${fmt(corePercent, 2)}% of a core`);
    console.log(
      `event → stream (claim answered → data: line), p50 / p95 / max: ${fmt(lat.p50, 1)} / ${fmt(lat.p95, 1)} / ${fmt(Math.max(...latencies), 1)} ms; streams without the event: ${missing}`,
    );
  } finally {
    await probe.end();
    await coordinator.stop();
    await db.stop();
  }
  process.exit(0);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
