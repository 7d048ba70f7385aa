// Flow control through the Python package (clients/python), over both of its transports (Connect
// JSON and grpcio), against a real coordinator (createApiServer on port 0) over a real, freshly
// migrated PostgreSQL database: test/support/python_flow.py drives Client.put_workload's caps,
// pause/resume, put_key_limit, create_job's concurrency_key and required_labels, Worker(labels=...)
// and get_task's waiting reasons, printing one JSON line per step; this file checks those lines
// against what the database then holds.
import { spawn } from "node:child_process";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { ROOT } from "../support/process.js";
import { queueFixture, type QueueFixture } from "../support/queue.js";
import { apiServerFixture, type ApiServerFixture } from "../support/api-server.js";

/** The test venv's python (made by the global setup from requirements-dev.txt). */
const PYTHON = inject("python");
/** A bound for a hung run, not a measure: a run takes a few seconds on a quiet machine. */
const CHILD_TIMEOUT_MS = 150_000;

let fx: QueueFixture;
let api: ApiServerFixture;
let url: string;

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Step = Record<string, any>;

interface FlowRun {
  code: number | null;
  output: string;
  steps: Map<string, Step>;
}

function runFlow(transport: string, prefix: string): Promise<FlowRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(PYTHON, ["test/support/python_flow.py", url, transport, prefix], {
      cwd: ROOT,
      env: { ...process.env, PYTHONUNBUFFERED: "1", PYTHONDONTWRITEBYTECODE: "1" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.setEncoding("utf8").on("data", (d: string) => (stdout += d));
    child.stderr.setEncoding("utf8").on("data", (d: string) => (stderr += d));
    const timer = setTimeout(() => child.kill("SIGKILL"), CHILD_TIMEOUT_MS);
    child.once("error", (err) => {
      clearTimeout(timer);
      reject(new Error(`cannot run ${PYTHON}: ${err.message}`));
    });
    child.once("close", (code) => {
      clearTimeout(timer);
      const steps = new Map<string, Step>();
      for (const line of stdout.split("\n")) {
        if (!line.trim()) continue;
        const step = JSON.parse(line) as Step;
        steps.set(step.step, step);
      }
      resolve({ code, output: `exit ${code}\nstdout:\n${stdout}\nstderr:\n${stderr}`, steps });
    });
  });
}

beforeAll(async () => {
  fx = await queueFixture();
  api = await apiServerFixture({ queue: fx.queue, requestTimeoutMs: 10_000 });
  url = api.base;
});

afterAll(async () => {
  await api?.close();
  await fx?.close();
});

describe.each(["json", "grpc"])("the Python client's flow control over %s", (transport) => {
  const prefix = `py-flow-${transport}`;
  let run: FlowRun;
  const step = (name: string): Step => {
    const s = run.steps.get(name);
    expect(s, `step ${name} missing\n${run.output}`).toBeDefined();
    return s!;
  };

  beforeAll(async () => {
    run = await runFlow(transport, prefix);
  }, CHILD_TIMEOUT_MS + 10_000);

  it("runs every step", () => {
    expect(run.code, run.output).toBe(0);
    expect(run.steps.has("done"), run.output).toBe(true);
  });

  it("put_workload, pause and resume answer the workload with its caps and paused", async () => {
    const caps = `${prefix}-caps`;
    expect(step("put_workload")).toMatchObject({
      name: caps,
      max_leased: 8,
      max_leased_per_key: 2,
      max_leases_per_second: 50.5,
      leases_burst: 10,
      paused: false,
    });
    expect(step("pause")).toMatchObject({ name: caps, paused: true, max_leased: 8 });
    expect(step("pause_again")).toMatchObject({ paused: true });
    // PutWorkload replaces the caps it is given (a cap left out is removed) and keeps the pause.
    expect(step("put_while_paused")).toMatchObject({ paused: true, max_leased: 4, max_leased_per_key: 0, leases_burst: 0 });
    expect(step("listed")).toMatchObject({ paused: true, max_leased: 4 });
    expect(step("resume")).toMatchObject({ paused: false, max_leased: 4 });
    const { rows } = await fx.pool.query("SELECT paused, max_leased, max_leased_per_key FROM workloads WHERE name = $1", [caps]);
    expect(rows).toEqual([{ paused: false, max_leased: 4, max_leased_per_key: null }]);
  });

  it("bad input raises InvalidArgumentError naming the field, an unknown workload NotFoundError; nothing is written", async () => {
    const invalid = { class: "InvalidArgumentError", code: "invalid_argument" };
    // The coordinator's answers: a 400 (over JSON) with a request id.
    for (const [name, field] of [
      ["bad_label_value", "required_labels[gpu]"],
      ["bad_task_label_name", "tasks[0].required_labels"],
      ["bad_key_length", "concurrency_key"],
      ["bad_cap", "max_leased"],
      ["bad_rate", "leases_burst"],
      ["bad_key_cap", "max_leased"],
    ] as const) {
      const s = step(name);
      expect(s, name).toMatchObject({ ...invalid, fields: [field] });
      expect(s.request_id, name).toMatch(/\S/);
      expect(s.http_status, name).toBe(transport === "json" ? 400 : null);
    }
    // The client's own check of a value no request can carry: refused before anything is sent.
    expect(step("bad_label_type")).toMatchObject({ ...invalid, fields: ["required_labels[gpu]"], request_id: null });
    for (const name of ["pause_unknown", "resume_unknown", "key_limit_unknown"]) {
      const s = step(name);
      expect(s, name).toMatchObject({ class: "NotFoundError", code: "not_found" });
      expect(s.http_status, name).toBe(transport === "json" ? 404 : null);
    }
    expect(step("worker_label_type")).toMatchObject({ raised: "ValueError" });
    expect(step("worker_bad_labels")).toMatchObject({ raised: "WorkerConfigError", alive: false });
    expect(step("worker_bad_labels").message).toMatch(/labels/);
    expect(await fx.count("jobs", `workload = '${prefix}-bad'`)).toBe(0);
    expect(await fx.count("tasks", `workload = '${prefix}-bad'`)).toBe(0);
    const { rows } = await fx.pool.query("SELECT max_leased, max_leases_per_second, leases_burst FROM workloads WHERE name = $1", [
      `${prefix}-bad`,
    ]);
    expect(rows).toEqual([{ max_leased: null, max_leases_per_second: null, leases_burst: null }]);
    expect(await fx.count("workloads", `name = '${prefix}-nosuch'`)).toBe(0);
  });

  it("a gpu=a100 task is not leased by a worker without the label, and is by Worker(labels={'gpu': 'a100'})", async () => {
    expect(step("created_labelled")).toMatchObject({
      job_labels: { gpu: "a100" },
      job_key: "tenant-g",
      task_key: "tenant-g",
      task_labels: [{ gpu: "a100" }, { region: "eu" }, { gpu: "a100", region: "eu" }],
    });
    expect(step("waiting_no_workers")).toMatchObject({ reason: "no_workers", status: "pending" });
    const cpu = step("cpu_worker");
    expect(cpu.seen).toHaveLength(1); // the unlabelled chunk only
    expect(cpu.claimed).toBe(1);
    expect(cpu.gpu_status).toEqual(["pending", "pending"]);
    expect(cpu.reasons).toEqual(["labels_unmatched", "labels_unmatched"]);
    expect(cpu.details[0]).toContain("gpu=a100");
    expect(step("listed_task")).toMatchObject({ labels: { gpu: "a100", region: "eu" }, reason: "" });
    const gpu = step("gpu_worker");
    expect(gpu.owners).toEqual([`${prefix}-gpu`, `${prefix}-gpu`]);
    expect(gpu.seen.map((s: Step) => s.required_labels)).toEqual(expect.arrayContaining([{ gpu: "a100" }, { gpu: "a100", region: "eu" }]));
    expect(gpu.seen.find((s: Step) => s.concurrency_key === "tenant-g")).toBeDefined();
    // Every lease of the gpu workload's labelled tasks, from the event log: only the gpu worker's.
    const { rows } = await fx.pool.query<{ worker_id: string; n: number }>(
      `SELECT e.worker_id, count(*)::int AS n FROM task_events e JOIN tasks t ON t.id = e.task_id
        WHERE t.workload = $1 AND t.required_labels ? 'gpu' AND e.kind = 'task_status' AND e.status = 'leased'
        GROUP BY e.worker_id`,
      [`${prefix}-gpu`],
    );
    expect(rows).toEqual([{ worker_id: `${prefix}-gpu`, n: 2 }]);
  });

  it("pause stops claims (a held lease runs on) and resume lets the tasks run", async () => {
    expect(step("paused_workload")).toMatchObject({ paused: true });
    expect(step("while_paused")).toMatchObject({
      pending: 3,
      leased: 0,
      reason: "workload_paused",
      held: "completed",
      after_held: 3,
    });
    expect(step("resumed_workload")).toMatchObject({ paused: false });
    expect(step("after_resume")).toMatchObject({ completed: 3 });
    expect(await fx.count("tasks", `workload = '${prefix}-paused' AND status = 'completed'`)).toBe(4);
    // The three paused tasks were leased only after the resume: each once, after the pause's probe task completed.
    const { rows } = await fx.pool.query<{ late: number }>(
      `SELECT count(*)::int AS late FROM task_events e JOIN tasks t ON t.id = e.task_id
        WHERE t.workload = $1 AND e.kind = 'task_status' AND e.status = 'leased'
          AND e.id > (SELECT max(e2.id) FROM task_events e2 JOIN tasks t2 ON t2.id = e2.task_id
                       WHERE t2.workload = $2 AND e2.kind = 'task_status' AND e2.status = 'completed')`,
      [`${prefix}-paused`, `${prefix}-other`],
    );
    expect(rows[0].late).toBe(3);
  });

  it("put_key_limit changes a key's cap; get_task tells key_cap and workload_cap with their counts", async () => {
    const capped = step("capped");
    expect(capped).toMatchObject({ key_leased: 1, key_reasons: ["key_cap"], cap_leased: 1, cap_reason: "workload_cap" });
    expect(capped.key_detail).toContain("1 of 1");
    expect(capped.cap_detail).toContain("1 of 1");
    expect(step("key_limit")).toMatchObject({ workload: `${prefix}-keyed`, key: "tenant-a", max_leased: 3 });
    expect(step("raised")).toMatchObject({ leased: 3, pending: 1, reason: "key_cap" });
    expect(step("raised").detail).toContain("3 of 3");
    expect(step("capped_done")).toMatchObject({ keys: ["tenant-a"] });
    const { rows } = await fx.pool.query("SELECT key, max_leased FROM workload_key_limits WHERE workload = $1", [`${prefix}-keyed`]);
    expect(rows).toEqual([{ key: "tenant-a", max_leased: 3 }]);
    expect(await fx.count("tasks", `workload = '${prefix}-keyed' AND status = 'completed'`)).toBe(4);
  });
});
