// npm run bench:usage: what reporting usage costs. A coordinator process (compiled, as `npm start`
// runs it) over an embedded PostgreSQL, and USAGE_WORKERS gRPC workers (grpc-js, one channel)
// that each claim a task and then report results with claim_next, chained, until the job is
// drained: the workers' usual path. Each round drains one job with plain results and one whose
// results carry three usage counters, the order alternating round by round, in the same
// coordinator and database. The figures are the coordinator's and PostgreSQL's CPU (utime + stime
// from /proc, bench/cpu.ts) per task; the medians over the rounds and their ratio, usage/plain.
// CPU per task is what to read on a shared machine: throughput there follows the neighbours.
//
//   USAGE_TASKS (3000) tasks per job   USAGE_ROUNDS (5) rounds   USAGE_WORKERS (8) concurrent workers
//   USAGE_BATCH (0) when > 0, workers claim and report this many at once (CompleteTasks) instead

import { createHash } from "node:crypto";
import { cpuNow, cpuPer } from "./cpu.js";
import { fmt, grpcClient, restClient, startCoordinator, startDatabase, summary } from "./harness.js";

const TASKS = Number(process.env.USAGE_TASKS ?? 3000);
const ROUNDS = Number(process.env.USAGE_ROUNDS ?? 5);
const WORKERS = Number(process.env.USAGE_WORKERS ?? 8);
const BATCH = Number(process.env.USAGE_BATCH ?? 0);
const SHA = createHash("sha256").update("bench").digest("hex");
const USAGE = { gpu_ms: 1234n, tokens: 56789n, output_bytes: 1048576n };

type Grpc = ReturnType<typeof grpcClient>;

async function worker(rpc: Grpc, workload: string, id: string, usage: boolean): Promise<number> {
  const next = { workerId: id, workloads: [workload], maxTasks: BATCH > 0 ? BATCH : 1 };
  let tasks = (await rpc.claim(next)).tasks;
  let done = 0;
  while (tasks.length > 0) {
    const results = tasks.map((t) => ({
      taskId: t.id,
      workerId: id,
      attempt: t.attempt,
      resultUri: `s3://out/${t.id}`,
      resultSha256: SHA,
      usage: usage ? USAGE : {},
    }));
    if (BATCH > 0) tasks = (await rpc.completeMany({ results, claimNext: next })).nextTasks;
    else tasks = (await rpc.complete({ ...results[0], claimNext: next })).nextTasks;
    done += results.length;
  }
  return done;
}

async function main() {
  const db = await startDatabase();
  const coordinator = await startCoordinator(db.url, { MAX_TASKS_PER_JOB: String(Math.max(TASKS, 10_000)) });
  const rest = restClient(coordinator.url, 4);
  const rpc = grpcClient(coordinator.url);
  const per: Record<"plain" | "usage", { coordinator: number[]; postgres: number[]; rate: number[] }> = {
    plain: { coordinator: [], postgres: [], rate: [] },
    usage: { coordinator: [], postgres: [], rate: [] },
  };
  try {
    let seq = 0;
    const drain = async (mode: "plain" | "usage") => {
      const workload = `bench_usage_${++seq}`;
      await rest("PUT", `/workloads/${workload}`, { lease_seconds: 300 });
      const tasks = Array.from({ length: TASKS }, (_, i) => ({ chunk_index: i, input_uri: `s3://bench/${i}`, input_sha256: SHA }));
      const res = await rest("POST", "/jobs", { workload, tasks });
      if (res.status !== 201) throw new Error(`CreateJob answered ${res.status}: ${JSON.stringify(res.json)}`);
      const a = cpuNow(coordinator);
      const t0 = performance.now();
      const counts = await Promise.all(Array.from({ length: WORKERS }, (_, i) => worker(rpc, workload, `w${i}`, mode === "usage")));
      const seconds = (performance.now() - t0) / 1000;
      const n = counts.reduce((s, x) => s + x, 0);
      if (n !== TASKS) throw new Error(`${mode}: ${n} of ${TASKS} tasks reported`);
      return { cpu: cpuPer(a, cpuNow(coordinator), n), rate: n / seconds };
    };
    // Warm-up, not measured: JIT, pools, prepared statements of both forms.
    await drain("plain");
    await drain("usage");
    for (let r = 0; r < ROUNDS; r++) {
      const order: Array<"plain" | "usage"> = r % 2 === 0 ? ["plain", "usage"] : ["usage", "plain"];
      for (const mode of order) {
        const { cpu, rate } = await drain(mode);
        per[mode].coordinator.push(cpu.coordinator * 1000);
        per[mode].postgres.push(cpu.postgres * 1000);
        per[mode].rate.push(rate);
        console.error(
          `round ${r + 1} ${mode}: coordinator ${fmt(cpu.coordinator * 1000)} µs, PostgreSQL ${fmt(cpu.postgres * 1000)} µs per task, ${fmt(rate)} tasks/s`,
        );
      }
    }
  } finally {
    rpc.close();
    await coordinator.stop();
    await db.stop();
  }
  const med = (xs: number[]) => summary(xs).p50;
  const line = (what: string, key: "coordinator" | "postgres") => {
    const p = med(per.plain[key]);
    const u = med(per.usage[key]);
    return `${what.padEnd(26)} plain ${fmt(p).padStart(6)} µs   usage ${fmt(u).padStart(6)} µs   usage/plain ${(u / p).toFixed(3)}`;
  };
  console.log(
    `bench:usage — ${TASKS} tasks per job, ${WORKERS} gRPC workers, ${BATCH > 0 ? `CompleteTasks of ${BATCH}` : "CompleteTask"} with claim_next, ${ROUNDS} rounds (medians)`,
  );
  console.log(line("coordinator CPU per task", "coordinator"));
  console.log(line("PostgreSQL CPU per task", "postgres"));
  const sum = (m: "plain" | "usage") => med(per[m].coordinator) + med(per[m].postgres);
  console.log(`${"both".padEnd(26)} usage/plain ${(sum("usage") / sum("plain")).toFixed(3)}`);
  console.log(`${"throughput".padEnd(26)} plain ${fmt(med(per.plain.rate))} tasks/s, usage ${fmt(med(per.usage.rate))} tasks/s`);
}

await main();
