// Python's grpcio against the direct gRPC path under load: 64 concurrent streams on one channel
// (grpc.aio), a sustained run of a few thousand claims, completions and reads of a job whose
// tasks carry non-ASCII text and nested Structs (test/support/grpcio_load.py), over a real
// PostgreSQL. Every answer must parse in grpcio (a response it cannot parse is an error there:
// "Exception deserializing response!") and carry what the job was created with; one lane in
// eight sends gzip-compressed requests, which connect-es' router serves. Zero errors, and every
// task completed exactly once.
import { spawn } from "node:child_process";
import { afterAll, beforeAll, expect, inject, it } from "vitest";
import { ROOT } from "../support/process.js";
import { queueFixture, sha, type QueueFixture } from "../support/queue.js";
import { apiServerFixture, type ApiServerFixture } from "../support/api-server.js";

const PYTHON = inject("python");
const TASKS = 3000;
const LANES = 64;
const GZIP_EVERY = 8;
const RUN_TIMEOUT_MS = 600_000;

let fx: QueueFixture;
let api: ApiServerFixture;
let target: string;

beforeAll(async () => {
  fx = await queueFixture();
  api = await apiServerFixture({ queue: fx.queue, maxBodyBytes: 1024 * 1024, requestTimeoutMs: 120_000 });
  target = `127.0.0.1:${api.port}`;
});

afterAll(async () => {
  await api?.close();
  await fx?.close();
});

interface LoadReport {
  calls: number;
  completed: number;
  errors: { lane: string; code: string; details: string }[];
  mismatches: string[];
}

function runLoad(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(PYTHON, ["test/support/grpcio_load.py", ...args], {
      cwd: ROOT,
      env: { ...process.env, PYTHONUNBUFFERED: "1", PYTHONDONTWRITEBYTECODE: "1" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.setEncoding("utf8").on("data", (d: string) => (stdout += d));
    child.stderr.setEncoding("utf8").on("data", (d: string) => (stderr += d));
    const timer = setTimeout(() => child.kill("SIGKILL"), RUN_TIMEOUT_MS);
    child.on("error", reject);
    child.on("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

it(
  "64 concurrent grpcio streams, a few thousand calls: every answer parses and is right, no error, every task completed once",
  async () => {
    const workload = "grpcio_load";
    await fx.queue.putWorkload({ name: workload, leaseSeconds: 300 });
    const { job } = await fx.queue.createJob({
      workload,
      tasks: Array.from({ length: TASKS }, (_, i) => ({
        chunkIndex: i,
        inputUri: `s3://in/${i}`,
        inputSha256: sha(i),
        parameters: { label: `Grüße ✓ 🚀 ${i}`, chunk: i, nested: { list: [i, "ü", null, true] } },
      })),
    });
    const run = await runLoad([target, workload, job.id, String(TASKS), String(LANES), String(GZIP_EVERY)]);
    expect(run.code, run.stderr).toBe(0);
    expect(run.stderr).not.toContain("Exception deserializing");
    const report = JSON.parse(run.stdout.trim().split("\n").pop()!) as LoadReport;
    expect(report.errors).toEqual([]);
    expect(report.mismatches).toEqual([]);
    expect(report.completed).toBe(TASKS);
    expect(report.calls).toBeGreaterThan(2000);
    expect(await fx.count("tasks", `job_id = '${job.id}' AND status = 'completed'`)).toBe(TASKS);
    expect(await fx.count("tasks", `job_id = '${job.id}' AND attempt <> 1`)).toBe(0);
  },
  RUN_TIMEOUT_MS + 60_000,
);
