// npm run bench:pipelines: what jobs after jobs cost, on one coordinator's store (its long polls
// parked on the LISTEN connection, as a coordinator serves them) and an embedded PostgreSQL:
//
// 1. promotion latency: a child waiting on one parent, a worker parked on the child's workload;
//    the parent's task completed; from the parent's end to the child's lease (database clock:
//    the child task's started_at less the parent job's completed_at, the completing statement's
//    now(), so its commit is inside the figure), and from the completion's answer to the lease's
//    answer (client clock), PIPE_TRIALS times on an otherwise idle coordinator.
// 2. a 10-stage chain (PIPE_CHAINS workflows of PIPE_STAGES one-task nodes, one parked worker):
//    each stage's lease less its parent's end.
// 3. a 1,000-node fan-out and fan-in (a root, 998 nodes after it, one node after all of those;
//    PIPE_FAN_ROUNDS rounds, PIPE_FAN_WORKERS parked workers taking 10 at a time): CreateWorkflow's
//    time, the first and last of the 998 leased after the root's end, and the sink leased after
//    the last of the 998 ended.
// 4. the claim's cost per task with PIPE_WAITING waiting nodes (CreateWorkflow: each workflow a
//    root of another workload that never runs and 999 nodes after it, of the claimed workload at a
//    higher priority, so that a claim whose index held them would walk them first) beside none:
//    PIPE_CLAIM_TASKS tasks claimed one at a time and completed, by one worker, PIPE_ROUNDS rounds
//    each way (none, with, none again after they are deleted), VACUUM ANALYZE before each round;
//    wall time and PostgreSQL backend CPU per task, and the buffers one claim reads (EXPLAIN).
// Not a test.

import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import pg from "pg";
import { parseCoalescing } from "../src/config/index.js";
import { LongPollingQueue } from "../src/queue/long-poll.js";
import type { CreateWorkflowInput, Task } from "../src/queue/types.js";
import { CLAIM_TASK } from "../src/store/postgres/operations/claim.js";
import { TaskListener } from "../src/store/postgres/state/listener.js";
import { createPool, PostgresQueue } from "../src/store/postgres/store.js";
import { fmt, startDatabase, summary } from "./harness.js";

const TRIALS = Number(process.env.PIPE_TRIALS ?? 200);
const CHAINS = Number(process.env.PIPE_CHAINS ?? 20);
const STAGES = Number(process.env.PIPE_STAGES ?? 10);
const FAN_ROUNDS = Number(process.env.PIPE_FAN_ROUNDS ?? 3);
const FAN_WORKERS = Number(process.env.PIPE_FAN_WORKERS ?? 8);
const WAITING = Number(process.env.PIPE_WAITING ?? 100_000);
const CLAIM_TASKS = Number(process.env.PIPE_CLAIM_TASKS ?? 3000);
const ROUNDS = Number(process.env.PIPE_ROUNDS ?? 3);
const sha = (s: string) => createHash("sha256").update(s).digest("hex");
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

let store: PostgresQueue;
let parked: LongPollingQueue;
let probe: pg.Client;

function cpuMs(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(f[11]) + Number(f[12])) * 10;
  } catch {
    return 0;
  }
}
async function backendCpu(): Promise<Map<number, number>> {
  const { rows } = await probe.query(`SELECT pid FROM pg_stat_activity WHERE datname = current_database()`);
  return new Map(rows.map((r) => [r.pid as number, cpuMs(r.pid as number)]));
}

async function complete(t: Task, worker = "w"): Promise<void> {
  await store.completeTask({ taskId: t.id, workerId: worker, attempt: t.attempt, resultUri: `s3://o/${t.id}`, resultSha256: sha(t.id) });
}

/** Milliseconds from a job's end to the first lease of another job's task (database clock). */
async function gapMs(parentJob: string, childJob: string): Promise<number> {
  const { rows } = await probe.query(
    `SELECT extract(epoch FROM (SELECT min(started_at) FROM tasks WHERE job_id = $2) - (SELECT completed_at FROM jobs WHERE id = $1)) * 1000 AS ms`,
    [parentJob, childJob],
  );
  return Number(rows[0].ms);
}

async function promotionLatency(): Promise<void> {
  await store.putWorkload({ name: "pl_parent" });
  await store.putWorkload({ name: "pl_child" });
  const db: number[] = [];
  const client: number[] = [];
  for (let i = 0; i < TRIALS; i++) {
    const p = (await store.createJob({ workload: "pl_parent", inputUri: `s3://p/${i}`, inputSha256: sha(`p${i}`) })).job.id;
    const c = (await store.createJob({ workload: "pl_child", inputUri: `s3://c/${i}`, inputSha256: sha(`c${i}`), after: [{ jobId: p }] }))
      .job.id;
    let leasedAt = 0;
    const claim = parked.claimTasks({ workerId: "child", workloads: ["pl_child"], maxTasks: 1, waitSeconds: 30 }).then((t) => {
      leasedAt = performance.now();
      return t;
    });
    await sleep(20); // parked
    const [pt] = await store.claimTasks({ workerId: "parent", workloads: ["pl_parent"], maxTasks: 1 });
    await complete(pt, "parent");
    const answeredAt = performance.now();
    const [ct] = await claim;
    if (ct?.jobId !== c) throw new Error("the parked claim did not lease the child");
    client.push(leasedAt - answeredAt);
    db.push(await gapMs(p, c));
    await complete(ct, "child");
  }
  const d = summary(db);
  const k = summary(client);
  console.log(`\n1. promotion latency, one parent, a parked worker, idle coordinator (${TRIALS} trials)`);
  console.log(
    `   parent's end → child's lease (database clock):     p50 ${fmt(d.p50, 1)} ms  p95 ${fmt(d.p95, 1)} ms  p99 ${fmt(d.p99, 1)} ms`,
  );
  console.log(
    `   completion's answer → lease's answer (client clock): p50 ${fmt(k.p50, 1)} ms  p95 ${fmt(k.p95, 1)} ms  p99 ${fmt(k.p99, 1)} ms`,
  );
}

async function chain(): Promise<void> {
  await store.putWorkload({ name: "pl_chain" });
  const gaps: number[] = [];
  for (let k = 0; k < CHAINS; k++) {
    const nodes = Array.from({ length: STAGES }, (_, i) => ({
      name: `s${i}`,
      job: { workload: "pl_chain", inputUri: `s3://ch/${k}/${i}`, inputSha256: sha(`ch${k}/${i}`) },
      after: i > 0 ? [{ node: `s${i - 1}` }] : [],
    }));
    const { workflow } = await store.createWorkflow({ nodes });
    for (let i = 0; i < STAGES; i++) {
      const [t] = await parked.claimTasks({ workerId: "chain", workloads: ["pl_chain"], maxTasks: 1, waitSeconds: 30 });
      if (t.jobId !== workflow.nodes[i].jobId) throw new Error("the chain ran out of order");
      await complete(t, "chain");
    }
    for (let i = 1; i < STAGES; i++) gaps.push(await gapMs(workflow.nodes[i - 1].jobId, workflow.nodes[i].jobId));
  }
  const s = summary(gaps);
  console.log(`\n2. a ${STAGES}-stage chain (${CHAINS} chains, one parked worker): a stage's end → the next stage's lease`);
  console.log(`   p50 ${fmt(s.p50, 1)} ms  p95 ${fmt(s.p95, 1)} ms  p99 ${fmt(s.p99, 1)} ms  (${s.n} stage transitions)`);
}

async function fan(): Promise<void> {
  await store.putWorkload({ name: "pl_fan" });
  const rows: { create: number; first: number; last: number; sink: number }[] = [];
  for (let r = 0; r < FAN_ROUNDS; r++) {
    const mids = Array.from({ length: 998 }, (_, i) => `m${i}`);
    const input: CreateWorkflowInput = {
      nodes: [
        { name: "root", job: { workload: "pl_fan", inputUri: `s3://f/${r}/root`, inputSha256: sha(`f${r}root`) } },
        ...mids.map((name) => ({
          name,
          job: { workload: "pl_fan", inputUri: `s3://f/${r}/${name}`, inputSha256: sha(`f${r}${name}`) },
          after: [{ node: "root" }],
        })),
        {
          name: "sink",
          job: { workload: "pl_fan", inputUri: `s3://f/${r}/sink`, inputSha256: sha(`f${r}sink`) },
          after: mids.map((node) => ({ node })),
        },
      ],
    };
    const t0 = performance.now();
    const { workflow } = await store.createWorkflow(input);
    const createMs = performance.now() - t0;
    const ids = new Map(workflow.nodes.map((n) => [n.name, n.jobId]));
    let done = 0;
    await Promise.all(
      Array.from({ length: FAN_WORKERS }, async (_, w) => {
        while (done < 1000) {
          const tasks = await parked.claimTasks({ workerId: `f${w}`, workloads: ["pl_fan"], maxTasks: 10, waitSeconds: 2 });
          if (tasks.length === 0) continue;
          await store.completeTasks(
            tasks.map((t) => ({ taskId: t.id, workerId: `f${w}`, attempt: t.attempt, resultUri: "s3://o", resultSha256: sha(t.id) })),
          );
          done += tasks.length;
        }
      }),
    );
    const { rows: m } = await probe.query(
      `SELECT extract(epoch FROM min(t.started_at) - r.completed_at) * 1000 AS first, extract(epoch FROM max(t.started_at) - r.completed_at) * 1000 AS last,
              max(j.completed_at) AS mids_done
       FROM jobs j JOIN tasks t ON t.job_id = j.id, jobs r
       WHERE j.workflow_id = $1 AND j.workflow_node NOT IN ('root', 'sink') AND r.id = $2
       GROUP BY r.completed_at`,
      [workflow.id, ids.get("root")],
    );
    const { rows: s } = await probe.query(
      `SELECT extract(epoch FROM (SELECT started_at FROM tasks WHERE job_id = $1) - $2::timestamptz) * 1000 AS ms`,
      [ids.get("sink"), m[0].mids_done],
    );
    rows.push({ create: createMs, first: Number(m[0].first), last: Number(m[0].last), sink: Number(s[0].ms) });
    console.error(`fan round ${r + 1}: ${JSON.stringify(rows.at(-1))}`);
  }
  console.log(
    `\n3. a 1,000-node fan-out and fan-in (root → 998 → sink), ${FAN_WORKERS} parked workers taking 10 at a time, median of ${FAN_ROUNDS}`,
  );
  console.log(`   CreateWorkflow of 1,000 nodes: ${fmt(median(rows.map((x) => x.create)))} ms`);
  console.log(
    `   root's end → first of the 998 leased: ${fmt(median(rows.map((x) => x.first)), 1)} ms; → last of them leased: ${fmt(median(rows.map((x) => x.last)))} ms`,
  );
  console.log(`   last of the 998's end → sink leased: ${fmt(median(rows.map((x) => x.sink)), 1)} ms`);
}

/** One round of claim + complete, one task at a time: wall and backend CPU per task (µs), and one claim's buffers. */
async function claimRound(tag: string): Promise<{ wallUs: number; cpuUs: number; buffers: number }> {
  for (let j = 0; j < CLAIM_TASKS / 1000; j++) {
    await store.createJob({
      workload: "pl_claim",
      tasks: Array.from({ length: 1000 }, (_, i) => ({
        chunkIndex: i,
        inputUri: `s3://cl/${tag}/${j}/${i}`,
        inputSha256: sha(`${tag}${j}${i}`),
      })),
    });
  }
  await probe.query(`VACUUM ANALYZE tasks`);
  await probe.query(`VACUUM ANALYZE jobs`);
  // One claim's plan, rolled back: the buffers it reads.
  await probe.query("BEGIN");
  const { rows: plan } = await probe.query(`EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${CLAIM_TASK}`, [
    ["pl_claim"],
    1,
    "probe",
    null,
    "{}",
    "{}",
  ]);
  await probe.query("ROLLBACK");
  const top = (plan[0]["QUERY PLAN"] as { Plan: { "Shared Hit Blocks": number; "Shared Read Blocks": number } }[])[0].Plan;
  const cpu0 = await backendCpu();
  const t0 = performance.now();
  for (let i = 0; i < CLAIM_TASKS; i++) {
    const [t] = await store.claimTasks({ workerId: "claimer", workloads: ["pl_claim"], maxTasks: 1 });
    await complete(t, "claimer");
  }
  const wall = performance.now() - t0;
  const cpu1 = await backendCpu();
  let cpu = 0;
  for (const [pid, c] of cpu1) cpu += c - (cpu0.get(pid) ?? 0);
  return {
    wallUs: (wall * 1000) / CLAIM_TASKS,
    cpuUs: (cpu * 1000) / CLAIM_TASKS,
    buffers: top["Shared Hit Blocks"] + top["Shared Read Blocks"],
  };
}

async function claimBeside(): Promise<void> {
  await store.putWorkload({ name: "pl_claim", maxAttempts: 1 });
  await store.putWorkload({ name: "pl_blocker" });
  const none: Awaited<ReturnType<typeof claimRound>>[] = [];
  const withWaiting: typeof none = [];
  const after: typeof none = [];
  for (let r = 0; r < ROUNDS; r++) none.push(await claimRound(`a${r}`));
  const workflows = Math.ceil(WAITING / 999);
  const t0 = performance.now();
  for (let k = 0; k < workflows; k++) {
    await store.createWorkflow({
      nodes: [
        { name: "blocker", job: { workload: "pl_blocker", inputUri: `s3://b/${k}`, inputSha256: sha(`b${k}`) } },
        ...Array.from({ length: 999 }, (_, i) => ({
          name: `n${i}`,
          job: { workload: "pl_claim", priority: 10, inputUri: `s3://wt/${k}/${i}`, inputSha256: sha(`wt${k}/${i}`) },
          after: [{ node: "blocker" }],
        })),
      ],
    });
  }
  const made = performance.now() - t0;
  const { rows } = await probe.query(`SELECT count(*)::int AS n FROM tasks WHERE status = 'waiting' AND workload = 'pl_claim'`);
  console.error(`${rows[0].n} waiting nodes made in ${fmt(made)} ms (${workflows} CreateWorkflow calls of 1,000 nodes)`);
  for (let r = 0; r < ROUNDS; r++) withWaiting.push(await claimRound(`b${r}`));
  await probe.query(`DELETE FROM tasks WHERE status = 'waiting'`);
  for (let r = 0; r < ROUNDS; r++) after.push(await claimRound(`c${r}`));
  const line = (label: string, xs: typeof none) =>
    `   ${label.padEnd(34)} wall ${fmt(median(xs.map((x) => x.wallUs)))} µs/task   backend CPU ${fmt(median(xs.map((x) => x.cpuUs)))} µs/task   one claim reads ${fmt(median(xs.map((x) => x.buffers)))} buffers`;
  console.log(`\n4. the claim's cost per task (claim one, complete it; ${CLAIM_TASKS} tasks a round, median of ${ROUNDS})`);
  console.log(line("no waiting node", none));
  console.log(line(`${fmt(rows[0].n)} waiting nodes`, withWaiting));
  console.log(line("none again (the waiting deleted)", after));
  const ratio = median(withWaiting.map((x) => x.wallUs)) / median([...none, ...after].map((x) => x.wallUs));
  const cpuRatio = median(withWaiting.map((x) => x.cpuUs)) / median([...none, ...after].map((x) => x.cpuUs));
  console.log(`   with / without: wall ${fmt(ratio, 3)}×, backend CPU ${fmt(cpuRatio, 3)}×`);
}

async function main(): Promise<void> {
  const db = await startDatabase();
  const pool = createPool({ connectionString: db.url, max: 20, statementTimeoutMs: 120_000, connectTimeoutMs: 10_000 });
  const listener = new TaskListener(db.url);
  await listener.start();
  store = new PostgresQueue(pool, {
    coalescing: parseCoalescing(process.env),
    defaultLeaseSeconds: 300,
    defaultMaxAttempts: 3,
    maxTasksPerJob: 10_000,
    taskWakes: listener,
  });
  parked = new LongPollingQueue(store, listener, { pollIntervalMs: 1000 });
  probe = new pg.Client({ connectionString: db.url });
  probe.on("error", () => {});
  await probe.connect();
  try {
    const only = process.env.PIPE_ONLY?.split(",");
    if (!only || only.includes("latency")) await promotionLatency();
    if (!only || only.includes("chain")) await chain();
    if (!only || only.includes("fan")) await fan();
    if (!only || only.includes("claim")) await claimBeside();
  } finally {
    parked.close();
    store.stopTimers();
    await listener.stop();
    await probe.end();
    await pool.end();
    await db.stop();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
