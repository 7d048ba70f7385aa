// npx tsx bench/enqueue-ab.ts: one 10,000-task (ENQ_TASKS) CreateJob over REST against the real coordinator and
// PostgreSQL (the bench:peers enqueue measure), as two versions of the code see it, in alternating
// runs: each run starts that checkout's compiled coordinator (dist/src/main.js, as npm start runs it)
// on one embedded PostgreSQL, sends ENQ_JOBS jobs one after the other (the first ENQ_WARM unmeasured)
// and reports per job the coordinator's CPU time (utime + stime from /proc), the wall time from the
// first byte sent to the last byte of the answer, the process's peak RSS, and the CPU time of the
// PostgreSQL backends serving it (its connections' processes, from /proc). The tasks table is
// emptied before every run, so both sides insert into the same state. Not a test.
//
//   ENQ_BASE (required)  a checkout of the baseline with node_modules and dist/ built, e.g.
//                        git archive <ref> | tar -x -C /tmp/base && ln -s "$PWD/node_modules" /tmp/base/ && (cd /tmp/base && npx tsc -p tsconfig.build.json)
//   ENQ_B (.)            the other checkout (dist/ is built here first)
//   ENQ_PAIRS (3)        alternating pairs   ENQ_JOBS (8) jobs per run   ENQ_WARM (2) of them unmeasured
//   ENQ_TASKS (10000)    tasks per job (1000: the bulk-enqueue size; ENQ_JOBS 100 then)
//   ENQ_NODE_ARGS        extra node flags for both coordinators (e.g. --cpu-prof --cpu-prof-dir=DIR)
//   ENQ_VIEW (unset)     the CreateJob answer's view (basic: the job alone)
//   ENQ_SOLO (unset)     1: only B, no baseline      ENQ_STDOUT  append the coordinators' stdout to this file (e.g. with --trace-gc)

import { execFileSync, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { openSync, readFileSync } from "node:fs";
import path from "node:path";
import { performance } from "node:perf_hooks";
import pg from "pg";
import { Pool } from "undici";
import { fmt, freePort, startDatabase, startNodeOptions } from "./harness.js";

const BASE = process.env.ENQ_BASE;
const B = path.resolve(process.env.ENQ_B ?? ".");
const PAIRS = Number(process.env.ENQ_PAIRS ?? 3);
const JOBS = Number(process.env.ENQ_JOBS ?? 8);
const WARM = Number(process.env.ENQ_WARM ?? 2);
const SOLO = process.env.ENQ_SOLO === "1";
const TASKS = Number(process.env.ENQ_TASKS ?? 10_000);
const VIEW = process.env.ENQ_VIEW; // e.g. "basic": the answer without its tasks
const TICK_MS = 1000 / 100; // USER_HZ
const SHA = createHash("sha256").update("bench").digest("hex");

if (!BASE && !SOLO) throw new Error("ENQ_BASE: a baseline checkout (see the header), or ENQ_SOLO=1");

const body = (workload: string) =>
  JSON.stringify({
    workload,
    tasks: Array.from({ length: TASKS }, (_, i) => ({ chunk_index: i, input_uri: `s3://peers/${i}`, input_sha256: SHA })),
    ...(VIEW ? { view: VIEW } : {}),
  });

function procStat(pid: number) {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const kb = (name: string) => Number(new RegExp(`${name}:\\s+(\\d+) kB`).exec(status)?.[1] ?? NaN) / 1024;
  return { cpuMs: (Number(fields[11]) + Number(fields[12])) * TICK_MS, hwm: kb("VmHWM"), rss: kb("VmRSS") };
}

interface Sample {
  cpuMs: number;
  pgMs: number;
  wallMs: number;
  peakMb: number;
  idleMb: number;
}

async function run(root: string, dbUrl: string, admin: pg.Client): Promise<Sample> {
  await admin.query("TRUNCATE task_events, tasks, jobs");
  await admin.query("VACUUM ANALYZE tasks, jobs");
  const port = await freePort();
  const extra = process.env.ENQ_NODE_ARGS?.split(" ").filter(Boolean) ?? [];
  const child = spawn(process.execPath, [...startNodeOptions(root), ...extra, "dist/src/main.js"], {
    cwd: root,
    env: { ...process.env, DATABASE_URL: dbUrl, PORT: String(port), HOST: "127.0.0.1", LOG_LEVEL: "warn" },
    stdio: ["ignore", process.env.ENQ_STDOUT ? openSync(process.env.ENQ_STDOUT, "a") : "ignore", "inherit"],
  });
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; ; i++) {
    try {
      if ((await fetch(`${url}/readyz`)).ok) break;
    } catch {
      // not listening yet
    }
    if (i > 200 || child.exitCode !== null) throw new Error("coordinator did not become ready");
    await new Promise((r) => setTimeout(r, 100));
  }
  const pid = child.pid!;
  const client = new Pool(url, { connections: 1 });
  const workload = "enqueue_ab";
  const put = await client.request({
    method: "PUT",
    path: `/workloads/${workload}`,
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ lease_seconds: 300 }),
  });
  await put.body.dump();
  const text = body(workload);
  const idleMb = procStat(pid).rss;
  let cpuMs = 0;
  let pgMs = 0;
  let wallMs = 0;
  // The coordinator's backends (its pool's connections; the admin one excluded).
  const backendsMs = async () => {
    const { rows } = await admin.query("SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()");
    let ms = 0;
    for (const r of rows as { pid: number }[]) {
      try {
        ms += procStat(r.pid).cpuMs;
      } catch {
        // gone meanwhile
      }
    }
    return ms;
  };
  for (let i = 0; i < JOBS; i++) {
    const pg0 = await backendsMs();
    const cpu0 = procStat(pid).cpuMs;
    const t0 = performance.now();
    const res = await client.request({ method: "POST", path: "/jobs", headers: { "content-type": "application/json" }, body: text });
    const answer = await res.body.arrayBuffer();
    const t1 = performance.now();
    if (res.statusCode !== 201 || (!VIEW && answer.byteLength < TASKS * 400)) throw new Error(`create: ${res.statusCode}`);
    // Let the coordinator's work after the answer (log line, GC) land in this job's CPU.
    await new Promise((r) => setTimeout(r, TASKS >= 10_000 ? 50 : 5));
    if (i >= WARM) {
      cpuMs += procStat(pid).cpuMs - cpu0;
      pgMs += (await backendsMs()) - pg0;
      wallMs += t1 - t0;
    }
  }
  const peakMb = procStat(pid).hwm;
  await client.close();
  await new Promise<void>((resolve) => {
    child.once("exit", () => resolve());
    child.kill("SIGTERM");
  });
  const n = JOBS - WARM;
  return { cpuMs: cpuMs / n, pgMs: pgMs / n, wallMs: wallMs / n, peakMb, idleMb };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

execFileSync(process.execPath, [path.join(B, "node_modules", "typescript", "bin", "tsc"), "-p", "tsconfig.build.json"], {
  cwd: B,
  stdio: "inherit",
});
const db = await startDatabase();
const admin = new pg.Client({ connectionString: db.url });
await admin.connect();
const sides: [string, string][] = SOLO
  ? [["B", B]]
  : [
      ["A", path.resolve(BASE!)],
      ["B", B],
    ];
const samples = new Map<string, Sample[]>(sides.map(([name]) => [name, []]));
try {
  for (let pair = 0; pair < PAIRS; pair++) {
    const order = pair % 2 === 0 ? sides : [...sides].reverse();
    for (const [name, root] of order) {
      const s = await run(root, db.url, admin);
      samples.get(name)!.push(s);
      console.log(
        `pair ${pair + 1} ${name}: ${fmt(s.cpuMs, 1)} ms CPU/job, ${fmt(s.pgMs, 1)} ms PostgreSQL CPU/job, ${fmt(s.wallMs, 1)} ms wall/job, peak RSS ${fmt(s.peakMb, 1)} MB (idle ${fmt(s.idleMb, 1)})`,
      );
    }
  }
} finally {
  await admin.end();
  await db.stop();
}
console.log(`\nmedians of ${PAIRS} runs (${JOBS - WARM} measured jobs each):`);
for (const [name, root] of sides) {
  const s = samples.get(name)!;
  console.log(
    `  ${name} ${root}: ${fmt(median(s.map((x) => x.cpuMs)), 1)} ms CPU/job, ${fmt(median(s.map((x) => x.pgMs)), 1)} ms PostgreSQL CPU/job, ${fmt(median(s.map((x) => x.wallMs)), 1)} ms wall/job, peak RSS ${fmt(median(s.map((x) => x.peakMb)), 1)} MB`,
  );
}
