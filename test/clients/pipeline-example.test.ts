// The stitch-then-report pipeline as a newcomer runs it (examples/python/README.md): against a fresh
// coordinator with the demo workload `scimesh` registered (as `npm start` registers it), the worker of
// examples/python/pipeline.py works on all three stages, `leasehold workflow create -f
// examples/pipeline.yaml --watch` runs the YAML file through the CLI to its end, and `pipeline.py
// submit` runs the same pipeline from Python; over Connect JSON and gRPC. The stages' results are
// checked in the database: each stage ran after its parents and read them (the stitch every chunk's
// result in order, the report the stitch's from its task alone). The example is typed under mypy --strict.
import { spawn, type ChildProcess } from "node:child_process";
import { createHash } from "node:crypto";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { apiServerFixture, type ApiServerFixture } from "../support/api-server.js";
import { runCli } from "../support/cli.js";
import { ROOT } from "../support/process.js";
import { queueFixture, type QueueFixture } from "../support/queue.js";
import { runCommand } from "../support/ts-consumer.js";

const PYTHON = inject("python");
const sha = (s: string) => createHash("sha256").update(s).digest("hex");

let fx: QueueFixture;
let api: ApiServerFixture;
const live = new Set<ChildProcess>();

beforeAll(async () => {
  fx = await queueFixture();
  api = await apiServerFixture({ queue: fx.queue, requestTimeoutMs: 10_000 });
  // As `npm start` registers its demo workload (src/main.ts); the worker registers stitch and report itself.
  await fx.queue.putWorkload({ name: "scimesh", maxAttempts: 3, leaseSeconds: 300 });
});

afterAll(async () => {
  for (const c of live) c.kill("SIGKILL");
  await api?.close();
  await fx?.close();
});

function python(
  args: string[],
  env: Record<string, string>,
): { child: ChildProcess; output: () => string; exited: Promise<number | null> } {
  const child = spawn(PYTHON, args, {
    cwd: ROOT,
    env: { ...process.env, PYTHONUNBUFFERED: "1", PYTHONDONTWRITEBYTECODE: "1", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  live.add(child);
  let out = "";
  child.stdout!.setEncoding("utf8").on("data", (d: string) => (out += d));
  child.stderr!.setEncoding("utf8").on("data", (d: string) => (out += d));
  const exited = new Promise<number | null>((resolve) => child.once("close", (code) => (live.delete(child), resolve(code))));
  return { child, output: () => out, exited };
}

interface StageRow {
  node: string;
  chunk_index: number;
  status: string;
  result_uri: string;
  result_sha256: string;
  metrics: Record<string, unknown> | null;
  completed_at: Date;
}

/** Every task of a workflow's nodes, by node and chunk. */
async function stages(workflowId: string): Promise<StageRow[]> {
  const { rows } = await fx.pool.query<StageRow>(
    `SELECT j.workflow_node AS node, t.chunk_index, t.status, t.result_uri, t.result_sha256, t.metrics, t.completed_at
       FROM tasks t JOIN jobs j ON j.id = t.job_id WHERE j.workflow_id = $1 ORDER BY t.completed_at, t.chunk_index`,
    [workflowId],
  );
  return rows;
}

/** Each stage completed after every task of the one before it, and read it. */
function expectPipeline(rows: StageRow[], chunks: number, stitchedUri: string, reportUri: string): void {
  expect(rows.map((r) => r.status)).toEqual(Array(chunks + 2).fill("completed"));
  expect(rows.map((r) => r.node)).toEqual([...Array(chunks).fill("chunks"), "stitch", "report"]);
  const meshes = rows.filter((r) => r.node === "chunks").sort((a, b) => a.chunk_index - b.chunk_index);
  const [stitch, report] = rows.slice(chunks);
  expect(stitch.result_uri).toBe(stitchedUri);
  expect(stitch.result_sha256).toBe(sha(meshes.map((m) => m.result_uri).join("\n")));
  expect(stitch.metrics).toEqual({ chunks });
  expect(report.result_uri).toBe(reportUri);
  expect(report.result_sha256).toBe(sha(`report on ${stitchedUri}`));
}

describe.each(["json", "grpc"])("the stitch-then-report pipeline (examples/, %s)", (transport) => {
  it("runs from examples/pipeline.yaml through the CLI, and from Python, with pipeline.py's worker", async () => {
    const env = { LEASEHOLD_TRANSPORT: transport };
    const worker = python(["examples/python/pipeline.py", "worker", api.base], env);
    try {
      const cli = await runCli(["--url", api.base, "workflow", "create", "-f", "examples/pipeline.yaml", "--watch"]);
      expect(cli.code, `${cli.stdout}${cli.stderr}\n${worker.output()}`).toBe(0);
      const id = /^workflow ([0-9a-f-]{36}) \(mesh-001\): pending, 0\/3 nodes completed$/m.exec(cli.stdout)?.[1];
      expect(id, cli.stdout).toBeDefined();
      expect(cli.stdout).toMatch(new RegExp(`^workflow ${id} completed: 3/3 nodes completed$`, "m"));
      expect(cli.stderr).toContain("report: running → completed (1/1 tasks completed)");
      expectPipeline(await stages(id!), 4, "s3://bucket/mesh-001/stitched.h5", "s3://bucket/mesh-001/report.pdf");

      const submit = python(["examples/python/pipeline.py", "submit", api.base, "5"], env);
      expect(await submit.exited, submit.output()).toBe(0);
      const lines = submit
        .output()
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l) as Record<string, unknown>);
      expect(lines[0]).toMatchObject({ nodes: { chunks: "pending", stitch: "waiting", report: "waiting" } });
      const workflowId = lines[0].workflow_id as string;
      expect(lines.filter((l) => l.node === "report").map((l) => l.status)).toEqual(["pending", "running", "completed"]);
      expect(lines.at(-2)).toEqual({
        workflow_id: workflowId,
        status: "completed",
        nodes: { chunks: ["completed", 5, 5], stitch: ["completed", 1, 1], report: ["completed", 1, 1] },
      });
      expect(lines.at(-1)).toEqual({ report: "s3://bucket/mesh/report.pdf", sha256: sha("report on s3://bucket/mesh/stitched.h5") });
      expectPipeline(await stages(workflowId), 5, "s3://bucket/mesh/stitched.h5", "s3://bucket/mesh/report.pdf");
    } finally {
      worker.child.kill("SIGTERM");
    }
    expect(await worker.exited, worker.output()).toBe(0);
    // The two pipelines' six and seven tasks.
    expect(worker.output()).toMatch(/drained: \{'claimed': 13, 'completed': 13, 'failed': 0/);
  }, 180_000);
});

it("the pipeline example is typed under mypy --strict", async () => {
  const r = await runCommand(PYTHON, ["-m", "mypy", "--strict", "examples/python/pipeline.py"], { cwd: ROOT, timeoutMs: 180_000 });
  expect(r.code, r.output).toBe(0);
}, 200_000);
