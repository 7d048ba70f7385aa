// npm run bench:api: the API layer's own CPU per call, with no database. A stub coordinator
// (bench/stub-coordinator.ts: the real createApiServer over a queue that answers from memory, the
// request log at info to /dev/null and the RPC histogram on, as in production) is driven by 16
// concurrent claim → complete loops over REST (undici keep-alive pool), gRPC and Connect (connect-es
// clients over one HTTP/2 connection), and gRPC again from @grpc/grpc-js (grpcjs: one channel, a
// stand-in for Python's grpcio) and from a bare node:http2 client (grpch2: one session, the
// cheapest gRPC generator Node has, which bench:peers uses; connect-es' gRPC client is slow enough
// to limit the calls per second the stub sees). The figure is the stub process's own CPU time (utime +
// stime from /proc) per call, which the load generator's cost does not touch; on a shared
// machine throughput varies, CPU per call much less. Then CreateJob of 10,000 tasks over REST:
// CPU per call and the stub's peak RSS.
//
//   API_SECONDS (4)  length of each timed run     API_ROUNDS (3)  rounds (modes alternate within each)
//   API_MODES (floor,rest,grpc,grpcjs,grpch2,grpc10,connect,create)   API_NODE_ARGS   extra node flags for the stub (e.g. --cpu-prof)
//   API_STUB_CWD (.)  checkout whose stub to run (an A/B against another worktree)
//   API_STUB_JS       run this compiled stub with plain node instead of bench/stub-coordinator.ts under tsx

import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { performance } from "node:perf_hooks";
import { createClient, type Client } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { QueueService } from "../gen/leasehold/queue/v1/queue_pb.js";
import { freePort, grpcClient, grpcH2Client, restClient } from "./harness.js";

const SECONDS = Number(process.env.API_SECONDS ?? 4);
const ROUNDS = Number(process.env.API_ROUNDS ?? 3);
const WORKERS = 16;
const MODES = (process.env.API_MODES ?? "floor,rest,grpc,grpcjs,grpch2,grpc10,connect,create").split(",");
const SHA = createHash("sha256").update("bench").digest("hex");
const TICK_US = 1e6 / 100; // USER_HZ

interface Stub {
  url: string;
  pid: number;
  cpuUs(): number;
  peakRssMb(): number;
  stop(): Promise<void>;
}

async function startStub(env: Record<string, string> = {}, cwd = process.env.API_STUB_CWD ?? process.cwd()): Promise<Stub> {
  const port = await freePort();
  const nodeArgs = (process.env.API_NODE_ARGS ?? "").split(" ").filter(Boolean);
  const script = process.env.API_STUB_JS ? [process.env.API_STUB_JS] : ["--import", "tsx", "bench/stub-coordinator.ts"];
  const child = spawn(process.execPath, [...nodeArgs, ...script], {
    env: {
      ...process.env,
      PORT: String(port),
      STUB_LOG_LEVEL: process.env.STUB_LOG_LEVEL ?? "info",
      STUB_METRICS: process.env.STUB_METRICS ?? "1",
      ...env,
    },
    stdio: ["ignore", "ignore", "inherit"],
    cwd,
  });
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; ; i++) {
    try {
      if ((await fetch(`${url}/healthz`)).ok) break;
    } catch {
      // not listening yet
    }
    if (i > 200 || child.exitCode !== null) throw new Error("stub did not start");
    await new Promise((r) => setTimeout(r, 100));
  }
  const pid = child.pid!;
  return {
    url,
    pid,
    cpuUs() {
      const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
      return (Number(fields[11]) + Number(fields[12])) * TICK_US;
    },
    peakRssMb() {
      const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
      return m ? Number(m[1]) / 1024 : NaN;
    },
    stop: () =>
      new Promise((resolve) => {
        child.once("exit", () => resolve());
        child.kill("SIGTERM");
      }),
  };
}

type Rest = ReturnType<typeof restClient>;
type Rpc = Client<typeof QueueService>;

/** 16 loops of one claim and one completion; resolves the number of calls made. */
async function loops(seconds: number, cycle: (workerId: string) => Promise<void>): Promise<number> {
  const stopAt = performance.now() + seconds * 1000;
  const counts = await Promise.all(
    Array.from({ length: WORKERS }, async (_, i) => {
      let n = 0;
      while (performance.now() < stopAt) {
        await cycle(`w-${i}`);
        n += 2;
      }
      return n;
    }),
  );
  return counts.reduce((a, b) => a + b, 0);
}

function restCycle(rest: Rest) {
  return async (workerId: string) => {
    const claim = await rest("POST", "/tasks/claim", { worker_id: workerId, workloads: ["stub"] });
    if (claim.status !== 200) throw new Error(`claim: ${claim.status} ${JSON.stringify(claim.json)}`);
    const t = (claim.json as { tasks: { id: string; attempt: number }[] }).tasks[0];
    const done = await rest("POST", `/tasks/${t.id}/result`, {
      worker_id: workerId,
      attempt: t.attempt,
      result_uri: "s3://out/x",
      result_sha256: SHA,
    });
    if (done.status !== 200) throw new Error(`result: ${done.status} ${JSON.stringify(done.json)}`);
  };
}

/** Batched: claim up to ten, report them in one CompleteTasks. */
function rpcBatchCycle(rpc: Rpc) {
  return async (workerId: string) => {
    const { tasks } = await rpc.claimTasks({ workerId, workloads: ["stub"], maxTasks: 10 });
    await rpc.completeTasks({
      results: tasks.map((t) => ({ taskId: t.id, workerId, attempt: t.attempt, resultUri: "s3://out/x", resultSha256: SHA })),
    });
  };
}

function rpcCycle(rpc: Rpc) {
  return async (workerId: string) => {
    const { tasks } = await rpc.claimTasks({ workerId, workloads: ["stub"] });
    const t = tasks[0];
    await rpc.completeTask({ taskId: t.id, workerId, attempt: t.attempt, resultUri: "s3://out/x", resultSha256: SHA });
  };
}

/** The same cycle from @grpc/grpc-js, the stand-in for Python's grpcio that bench:peers drives. */
function grpcJsCycle(rpc: Pick<ReturnType<typeof grpcClient>, "claim" | "complete">) {
  return async (workerId: string) => {
    const { tasks } = await rpc.claim({ workerId, workloads: ["stub"] });
    const t = tasks[0];
    await rpc.complete({ taskId: t.id, workerId, attempt: t.attempt, resultUri: "s3://out/x", resultSha256: SHA });
  };
}

async function measure(stub: Stub, run: (seconds: number) => Promise<number>): Promise<{ us: number; perSecond: number }> {
  await run(0.5); // warm-up
  const cpu0 = stub.cpuUs();
  const t0 = performance.now();
  const calls = await run(SECONDS);
  const cpu = stub.cpuUs() - cpu0;
  return { us: cpu / calls, perSecond: calls / ((performance.now() - t0) / 1000) };
}

const FLOOR = "floor: bare node:http, same REST exchange";
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

const results = new Map<string, { us: number[]; perSecond: number[]; rss: number[] }>();
const record = (name: string, us: number, perSecond: number, rss = NaN) => {
  const r = results.get(name) ?? { us: [], perSecond: [], rss: [] };
  r.us.push(us);
  r.perSecond.push(perSecond);
  r.rss.push(rss);
  results.set(name, r);
  console.log(
    `  ${name}: ${us.toFixed(0)} µs CPU/call, ${perSecond.toFixed(0)} calls/s${Number.isNaN(rss) ? "" : `, peak RSS ${rss.toFixed(0)} MB`}`,
  );
};

/** The floor: a bare node:http server (this checkout's stub, STUB_BARE) answering the same requests with fixed JSON. */
async function measureFloor() {
  const bare = await startStub({ STUB_BARE: "1" }, process.cwd());
  try {
    const rest = restClient(bare.url, WORKERS * 2);
    const m = await measure(bare, (s) => loops(s, restCycle(rest)));
    record(FLOOR, m.us, m.perSecond);
  } finally {
    await bare.stop();
  }
}

for (let round = 1; round <= ROUNDS; round++) {
  console.log(`round ${round}`);
  if (MODES.includes("floor")) await measureFloor();
  const stub = await startStub();
  try {
    for (const mode of MODES) {
      if (mode === "rest") {
        const rest = restClient(stub.url, WORKERS * 2);
        const m = await measure(stub, (s) => loops(s, restCycle(rest)));
        record("REST claim → result", m.us, m.perSecond);
      } else if (mode === "grpcjs") {
        const rpc = grpcClient(stub.url);
        try {
          const m = await measure(stub, (s) => loops(s, grpcJsCycle(rpc)));
          record("gRPC claim → complete, from @grpc/grpc-js", m.us, m.perSecond);
        } finally {
          rpc.close();
        }
      } else if (mode === "grpch2") {
        const rpc = grpcH2Client(stub.url);
        try {
          const m = await measure(stub, (s) => loops(s, grpcJsCycle(rpc)));
          record("gRPC claim → complete, from bare node:http2", m.us, m.perSecond);
        } finally {
          rpc.close();
        }
      } else if (mode === "grpc10") {
        const rpc = createClient(QueueService, createGrpcTransport({ baseUrl: stub.url }));
        const m = await measure(stub, (s) => loops(s, rpcBatchCycle(rpc)));
        record("gRPC batched: claim 10 → CompleteTasks (per call)", m.us, m.perSecond);
      } else if (mode === "grpc" || mode === "connect") {
        const transport =
          mode === "grpc"
            ? createGrpcTransport({ baseUrl: stub.url })
            : createConnectTransport({ baseUrl: stub.url, httpVersion: "2", useBinaryFormat: true });
        const m = await measure(stub, (s) => loops(s, rpcCycle(createClient(QueueService, transport))));
        record(mode === "grpc" ? "gRPC claim → complete" : "Connect (binary, h2) claim → complete", m.us, m.perSecond);
      }
    }
  } finally {
    await stub.stop();
  }
  if (MODES.includes("create")) {
    // A fresh process, so the peak RSS is the big request's.
    const fresh = await startStub();
    try {
      const rest = restClient(fresh.url, 1);
      const body = {
        workload: "stub",
        tasks: Array.from({ length: 10_000 }, (_, i) => ({ chunk_index: i, input_uri: `s3://bench/input/${i}`, input_sha256: SHA })),
      };
      const rss0 = fresh.peakRssMb();
      const n = 5;
      const cpu0 = fresh.cpuUs();
      const t0 = performance.now();
      for (let i = 0; i < n; i++) {
        const r = await rest("POST", "/jobs", body);
        if (r.status !== 201) throw new Error(`create: ${r.status}`);
      }
      const cpu = fresh.cpuUs() - cpu0;
      record(
        `CreateJob 10,000 tasks (REST), idle RSS ${rss0.toFixed(0)} MB`,
        cpu / n,
        n / ((performance.now() - t0) / 1000),
        fresh.peakRssMb(),
      );
    } finally {
      await fresh.stop();
    }
  }
}

const floor = results.get(FLOOR)?.us;
if (floor) {
  // Contention on a shared machine inflates every figure of a round alike: the ratio to the floor
  // of the same round is steadier than the figure.
  console.log(`\nper call, as a multiple of the same round's bare node:http floor (median of ${ROUNDS}):`);
  for (const [name, r] of results) {
    if (name === FLOOR || name.startsWith("CreateJob")) continue;
    const ratios = r.us.map((us, i) => us / floor[i]);
    console.log(`  ${name.padEnd(58)} ${median(ratios).toFixed(2).padStart(7)} x`);
  }
}
console.log(`\nmedians of ${ROUNDS} (stub CPU per call; calls/s is of a shared machine):`);
for (const [name, r] of results) {
  const rss = median(r.rss);
  console.log(
    `  ${name.padEnd(58)} ${median(r.us).toFixed(0).padStart(7)} µs ${median(r.perSecond).toFixed(0).padStart(7)}/s${Number.isNaN(rss) ? "" : ` peak RSS ${rss.toFixed(0)} MB`}`,
  );
}
