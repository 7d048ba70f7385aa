// The Python examples (examples/python) against a live coordinator: a real
// server (test/support/api-server.ts, port 0) over a real, freshly migrated PostgreSQL
// database. Each runs as a child process (bounded in time, never left behind);
// the tests check what they print against what the database then holds (tasks,
// and the task_progress rows of task_events that ReportProgress writes).
//   json_worker.py: REST JSON with the standard library only (needs python3),
//     one JSON line per action.
//   worker.py + submit.py: the leasehold package (clients/python, installed in
//     the test venv), over Connect JSON and over gRPC: a job that completes, and
//     one whose chunk fails, which submit.py explains from the package's reads.
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { ROOT } from "../support/process.js";
import { queueFixture, sha, type QueueFixture } from "../support/queue.js";
import { apiServerFixture, type ApiServerFixture } from "../support/api-server.js";

/** The test venv's python (made by the global setup from requirements-dev.txt), or PYTHON when set. */
const PYTHON = inject("python");
const CHILD_TIMEOUT_MS = 30_000;
const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const HEX64_RE = /^[0-9a-f]{64}$/;
/** The workers' default --progress-steps: ReportProgress after each quarter of the work. */
const PROGRESS_STEPS = 4;

let fx: QueueFixture;
let api: ApiServerFixture;
let target: string;

// ---------- child processes: bounded in time, none left behind ----------

interface PyRun {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  lines: any[];
}

const live = new Set<ChildProcess>();

interface RunOptions {
  timeoutMs?: number;
  env?: Record<string, string>;
  /** stdout is not JSON lines (a program that logs) */
  text?: boolean;
  /** gets the child, e.g. to signal it */
  onSpawn?: (child: ChildProcess) => void;
}

function runPython(args: string[], { timeoutMs = CHILD_TIMEOUT_MS, env = {}, text = false, onSpawn }: RunOptions = {}): Promise<PyRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(PYTHON, args, {
      cwd: ROOT,
      env: { ...process.env, PYTHONUNBUFFERED: "1", PYTHONDONTWRITEBYTECODE: "1", ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    live.add(child);
    onSpawn?.(child);
    let stdout = "";
    let stderr = "";
    let timedOut = false;
    child.stdout.setEncoding("utf8").on("data", (d: string) => (stdout += d));
    child.stderr.setEncoding("utf8").on("data", (d: string) => (stderr += d));
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill("SIGKILL");
    }, timeoutMs);
    child.once("error", (err) => {
      clearTimeout(timer);
      live.delete(child);
      reject(new Error(`cannot run ${PYTHON} (is Python 3 installed and on PATH?): ${err.message}`));
    });
    child.once("close", (code, signal) => {
      clearTimeout(timer);
      live.delete(child);
      const run = `${PYTHON} ${args.join(" ")}`;
      if (timedOut) {
        reject(new Error(`${run} was killed after ${timeoutMs} ms\nstdout:\n${stdout}\nstderr:\n${stderr}`));
        return;
      }
      let lines: unknown[] = [];
      try {
        if (text) return resolve({ code, signal, stdout, stderr, lines });
        lines = stdout
          .split("\n")
          .filter((l) => l.trim() !== "")
          .map((l) => JSON.parse(l));
      } catch (err) {
        reject(new Error(`${run} printed a line that is not JSON (${(err as Error).message})\nstdout:\n${stdout}\nstderr:\n${stderr}`));
        return;
      }
      resolve({ code, signal, stdout, stderr, lines });
    });
  });
}

async function killLeftovers(): Promise<void> {
  await Promise.all(
    [...live].map(
      (child) =>
        new Promise<void>((resolve) => {
          if (child.exitCode !== null || child.signalCode !== null) return resolve();
          child.once("close", () => resolve());
          child.kill("SIGKILL");
        }),
    ),
  );
}

function describeRun(r: PyRun): string {
  return `exit ${r.code} (signal ${r.signal})\nstdout:\n${r.stdout}\nstderr:\n${r.stderr}`;
}

// ---------- fixtures ----------

beforeAll(async () => {
  fx = await queueFixture();
  api = await apiServerFixture({ queue: fx.queue, requestTimeoutMs: 10_000 });
  target = `127.0.0.1:${api.port}`;
});

afterAll(async () => {
  await killLeftovers();
  await api?.close();
  await fx?.close();
});

interface TaskRow {
  id: string;
  chunk_index: number;
  status: string;
  attempt: number;
  lease_owner: string | null;
  result_uri: string | null;
  result_sha256: string | null;
  metrics: Record<string, unknown> | null;
  error_code: string | null;
  error_message: string | null;
}

async function taskRows(jobId: string): Promise<TaskRow[]> {
  const { rows } = await fx.pool.query<TaskRow>(
    `SELECT id, chunk_index, status, attempt, lease_owner, result_uri, result_sha256, metrics, error_code, error_message
       FROM tasks WHERE job_id = $1 ORDER BY chunk_index`,
    [jobId],
  );
  return rows;
}

interface ProgressRow {
  task_id: string;
  chunk_index: number;
  status: string;
  attempt: number;
  worker_id: string;
  progress: number;
  message: string | null;
  partial_result_uri: string | null;
}

/** The job's progress reports (task_events of kind task_progress), in the order they were recorded. */
async function progressRows(jobId: string): Promise<ProgressRow[]> {
  const { rows } = await fx.pool.query<ProgressRow>(
    `SELECT task_id, chunk_index, status, attempt, worker_id, progress, message, partial_result_uri
       FROM task_events WHERE job_id = $1 AND kind = 'task_progress' ORDER BY id`,
    [jobId],
  );
  return rows;
}

/** A fresh workload with one job of `chunks` tasks; returns the job id and task ids by chunk. */
async function seed(workload: string, chunks: number): Promise<{ jobId: string; taskIds: string[] }> {
  await fx.queue.putWorkload({ name: workload, maxAttempts: 3, leaseSeconds: 30 });
  const { job, tasks } = await fx.queue.createJob({
    workload,
    tasks: Array.from({ length: chunks }, (_, i) => ({
      chunkIndex: i,
      inputUri: `s3://in/${workload}/${i}`,
      inputSha256: sha(`${workload}-${i}`),
    })),
  });
  return { jobId: job.id, taskIds: tasks.map((t) => t.id) };
}

// ---------- the same scenarios for both workers ----------

interface WorkerKind {
  name: string;
  script: string;
  /** extra CLI arguments */
  args: () => string[];
  before?: () => void;
}

const kinds: WorkerKind[] = [
  { name: "json_worker.py (REST JSON, standard library)", script: "examples/python/json_worker.py", args: () => [] },
];

describe.each(kinds)("$name", ({ script, args, before }) => {
  const tag = path.basename(script, ".py");
  const worker = (workload: string, extra: string[]) =>
    runPython([script, "--target", target, "--workload", workload, "--worker-id", `${tag}-1`, ...args(), ...extra]);

  it("claims → heartbeats → reports progress → completes the first task with a manifest, fails the second; the job fails", async () => {
    before?.();
    const workload = `py_${tag}_flow`;
    const { jobId, taskIds } = await seed(workload, 2);

    // 0.2 s of "work" per task, in PROGRESS_STEPS steps each followed by a progress report.
    const r = await worker(workload, ["--tasks", "2", "--max-tasks", "1", "--lease-seconds", "20", "--work-seconds", "0.2"]);
    expect(r.code, describeRun(r)).toBe(0);
    const reports = Array<string>(PROGRESS_STEPS).fill("progress");
    expect(r.lines.map((l) => l.action)).toEqual([
      "claim",
      "heartbeat",
      ...reports,
      "complete",
      "claim",
      "heartbeat",
      ...reports,
      "fail",
      "done",
    ]);
    const of = (action: string) => r.lines.filter((l) => l.action === action);
    const [claim1, claim2] = of("claim");
    const [beat1, beat2] = of("heartbeat");
    const [complete] = of("complete");
    const [fail] = of("fail");
    const [done] = of("done");

    // Claim order within a job is by chunk index.
    expect(claim1).toMatchObject({
      worker_id: `${tag}-1`,
      workload,
      tasks: [{ task_id: taskIds[0], job_id: jobId, chunk_index: 0, attempt: 1 }],
    });
    expect(claim2).toMatchObject({ tasks: [{ task_id: taskIds[1], job_id: jobId, chunk_index: 1, attempt: 1 }] });
    for (const [beat, id] of [
      [beat1, taskIds[0]],
      [beat2, taskIds[1]],
    ]) {
      expect(beat).toMatchObject({ task_id: id, attempt: 1 });
    }

    // Progress step/steps with "step k/n" after each step of each task, in order.
    const expectedReports = taskIds.flatMap((taskId, chunk) =>
      Array.from({ length: PROGRESS_STEPS }, (_, i) => ({
        taskId,
        chunk,
        progress: (i + 1) / PROGRESS_STEPS,
        message: `step ${i + 1}/${PROGRESS_STEPS}`,
      })),
    );
    const progress = of("progress");
    expect(progress).toEqual(
      expectedReports.map(({ taskId, progress, message }) => ({
        action: "progress",
        task_id: taskId,
        attempt: 1,
        progress,
        message,
        lease_expires_at: expect.any(String),
      })),
    );

    // A progress report extends the lease exactly like a heartbeat.
    for (const line of [beat1, beat2, ...progress]) {
      // RFC 3339 UTC, about 20 s ahead (the lease asked for).
      const ahead = Date.parse(line.lease_expires_at) - Date.now();
      expect(ahead).toBeGreaterThan(10_000);
      expect(ahead).toBeLessThanOrEqual(21_000);
    }
    expect(complete).toMatchObject({ task_id: taskIds[0], attempt: 1, status: "TASK_STATUS_COMPLETED" });
    expect(complete.result_uri).toBe(`example://leasehold-results/${jobId}/0.json`);
    expect(complete.result_sha256).toMatch(HEX64_RE);
    expect(complete.metrics).toMatchObject({ worker: `${tag}-1` });
    expect(complete.metrics.bytes).toBeGreaterThan(0);
    expect(fail).toMatchObject({
      task_id: taskIds[1],
      attempt: 1,
      error_code: "example_failure",
      retryable: false,
      status: "TASK_STATUS_FAILED",
    });
    expect(done).toEqual({ action: "done", processed: 2, lease_lost: 0 });

    // What the database holds is exactly what the worker reported: one task_progress event per report ...
    expect(await progressRows(jobId)).toEqual(
      expectedReports.map(({ taskId, chunk, progress, message }) => ({
        task_id: taskId,
        chunk_index: chunk,
        status: "leased",
        attempt: 1,
        worker_id: `${tag}-1`,
        progress,
        message,
        partial_result_uri: null,
      })),
    );
    // ... and the tasks.
    const rows = await taskRows(jobId);
    expect(rows).toEqual([
      {
        id: taskIds[0],
        chunk_index: 0,
        status: "completed",
        attempt: 1,
        lease_owner: `${tag}-1`,
        result_uri: complete.result_uri,
        result_sha256: complete.result_sha256,
        metrics: complete.metrics,
        error_code: null,
        error_message: null,
      },
      {
        id: taskIds[1],
        chunk_index: 1,
        status: "failed",
        attempt: 1,
        lease_owner: `${tag}-1`,
        result_uri: null,
        result_sha256: null,
        metrics: null,
        error_code: "example_failure",
        error_message: fail.error_message,
      },
    ]);
    const status = await fx.queue.getJobStatus(jobId);
    expect(status.job.status).toBe("failed");
    expect(status.taskCounts).toEqual({ pending: 0, leased: 0, completed: 1, failed: 1, cancelled: 0, waiting: 0 });
    expect(status.totalTasks).toBe(2);
    expect(status.progress).toBe(0.5);
    const results = await fx.queue.listCompletedResults({ jobId });
    expect(results.results).toHaveLength(1);
    expect(results.results[0]).toMatchObject({
      chunkIndex: 0,
      taskId: taskIds[0],
      resultUri: complete.result_uri,
      resultSha256: complete.result_sha256,
      metrics: complete.metrics,
    });
  });

  it("exits 0 with an empty claim when nothing is queued", async () => {
    before?.();
    const workload = `py_${tag}_empty`;
    await fx.queue.putWorkload({ name: workload });
    const r = await worker(workload, ["--tasks", "2", "--wait-seconds", "0"]);
    expect(r.code, describeRun(r)).toBe(0);
    expect(r.lines).toEqual([
      { action: "claim", worker_id: `${tag}-1`, workload, tasks: [] },
      { action: "done", processed: 0, lease_lost: 0 },
    ]);
  });

  it("reports a lost lease (expired before the result or a progress report) with the request id, drops the task and exits 3", async () => {
    before?.();
    // Lease of 1 s, 2.5 s of "work": what comes next arrives after the lease expired → ABORTED / 409.
    // With --progress-steps 0 that is the result; with --progress-steps 1, the progress report
    // after the work (lease-checked like a heartbeat). Both run at once, so the test takes 2.5 s.
    const cases = [
      { step: "complete", progressSteps: "0" },
      { step: "progress", progressSteps: "1" },
    ];
    await Promise.all(
      cases.map(async ({ step, progressSteps }) => {
        const workload = `py_${tag}_lost_${step}`;
        const { jobId, taskIds } = await seed(workload, 1);
        const r = await worker(workload, [
          "--tasks",
          "1",
          "--lease-seconds",
          "1",
          "--work-seconds",
          "2.5",
          "--progress-steps",
          progressSteps,
        ]);
        expect(r.code, describeRun(r)).toBe(3);
        expect(r.lines.map((l) => l.action)).toEqual(["claim", "heartbeat", "lease_lost", "done"]);
        const lost = r.lines[2];
        expect(lost).toMatchObject({ task_id: taskIds[0], attempt: 1, step });
        expect(lost.request_id).toMatch(UUID_RE);
        expect(lost.message).toMatch(/lease/i);
        expect(r.lines[3]).toEqual({ action: "done", processed: 1, lease_lost: 1 });
        expect(r.stderr).toContain(lost.request_id);

        // Nothing was recorded: no progress, the task still leased (expired, for the reaper), the job running.
        expect(await progressRows(jobId)).toEqual([]);
        const [row] = await taskRows(jobId);
        expect(row).toMatchObject({ status: "leased", attempt: 1, result_uri: null, result_sha256: null, error_code: null });
        expect((await fx.queue.getJobStatus(jobId)).job.status).toBe("running");
      }),
    );
  });
});

describe.each(["json", "grpc"])("worker.py and submit.py (the leasehold package, %s)", (transport) => {
  it("submit.py creates a job, follows it to completed and prints its results; worker.py runs it and drains on SIGTERM", async () => {
    const workload = `py_pkg_${transport}`;
    await fx.queue.putWorkload({ name: workload, leaseSeconds: 30 });
    const env = { LEASEHOLD_TRANSPORT: transport };
    let workerChild: ChildProcess | undefined;
    const worker = runPython(["examples/python/worker.py", `http://${target}`, workload], {
      env,
      text: true,
      onSpawn: (c) => (workerChild = c),
    });
    const submit = await runPython(["examples/python/submit.py", `http://${target}`, workload, "5"], { env });
    expect(submit.code, describeRun(submit)).toBe(0);
    workerChild?.kill("SIGTERM");
    const ran = await worker;
    expect(ran.code, describeRun(ran)).toBe(0);
    expect(ran.stderr).toMatch(/drained/);

    // The job's status when the watch began (the worker may have claimed already), each change after
    // it, then the results.
    const statuses = submit.lines.filter((l) => "status" in l);
    const results = submit.lines.filter((l) => "chunk_index" in l);
    const jobId = statuses[0].job_id;
    expect(jobId).toMatch(UUID_RE);
    expect(statuses.map((l) => l.job_id)).toEqual(statuses.map(() => jobId));
    expect([
      ["pending", "running", "completed"],
      ["running", "completed"],
    ]).toContainEqual(statuses.map((l) => l.status));
    expect(submit.lines).toEqual([...statuses, ...results]);
    expect(results.map((r) => r.chunk_index)).toEqual([0, 1, 2, 3, 4]);
    const rows = await taskRows(jobId);
    expect(rows.map((r) => [r.status, r.attempt, r.result_uri, r.result_sha256])).toEqual(
      results.map((r) => ["completed", 1, r.uri, r.sha256]),
    );
    for (const row of rows) {
      expect(row.result_sha256).toMatch(HEX64_RE);
      expect(row.metrics).toEqual({ bytes: expect.any(Number), worker: row.lease_owner });
    }
    // One "halfway" report per task, from task.progress() (lanes run at once: compare by chunk).
    const progress = (await progressRows(jobId)).sort((a, b) => a.chunk_index - b.chunk_index);
    expect(progress.map((p) => [p.chunk_index, p.progress, p.message, p.worker_id])).toEqual(
      rows.map((r) => [r.chunk_index, 0.5, "halfway", r.lease_owner]),
    );
  });
});

describe.each(["json", "grpc"])("submit.py explains a failed job (the leasehold package, %s)", (transport) => {
  it("prints the job's failure, each failed chunk with its error and attempts, the cancelled chunks, and the ordered results of the rest", async () => {
    const workload = `py_fail_${transport}`;
    await fx.queue.putWorkload({ name: workload, leaseSeconds: 30, maxAttempts: 2 });
    const env = { LEASEHOLD_TRANSPORT: transport };
    let workerChild: ChildProcess | undefined;
    const worker = runPython(["examples/python/worker.py", `http://${target}`, workload], {
      env,
      text: true,
      onSpawn: (c) => (workerChild = c),
    });
    const submit = await runPython(["examples/python/submit.py", `http://${target}`, workload, "6", "--fail-chunk", "2"], { env });
    expect(submit.code, describeRun(submit)).toBe(0);
    workerChild?.kill("SIGTERM");
    const ran = await worker;
    expect(ran.code, describeRun(ran)).toBe(0);

    const statuses = submit.lines.filter((l) => "status" in l);
    const jobId = statuses[0].job_id;
    expect(statuses.at(-1).status).toBe("failed");
    const rows = await taskRows(jobId);
    const failedRow = rows.find((r) => r.chunk_index === 2)!;
    expect([failedRow.status, failedRow.error_code, failedRow.error_message]).toEqual(["failed", "bad_chunk", "chunk 2 is corrupt"]);

    // What the database holds, in this order: statuses, the failure, the failed and cancelled chunks
    // (chunk order), then the completed chunks' results (chunk order). A chunk in flight when chunk 2 failed
    // was cancelled, and its result, arriving within its lease, is kept (cancelled -> completed); when that
    // came after submit.py read the tasks, it printed the chunk as cancelled.
    const { rows: late } = await fx.pool.query<{ chunk_index: number }>(
      `SELECT chunk_index FROM task_events
        WHERE job_id = $1 AND kind = 'task_status' AND previous_status = 'cancelled' AND status = 'completed'`,
      [jobId],
    );
    const lateCompleted = new Set(late.map((r) => r.chunk_index));
    const cancelled: number[] = submit.lines.filter((l) => "cancelled_chunk" in l).map((l) => l.cancelled_chunk);
    for (const c of cancelled) expect(rows[c].status === "cancelled" || lateCompleted.has(c), `chunk ${c}`).toBe(true);
    // submit.py lists the tasks, then the results: a chunk whose late result was kept between the two
    // reads is printed both as cancelled and among the results (only such a chunk may be).
    const printedChunks = new Set(submit.lines.filter((l) => "chunk_index" in l).map((l) => l.chunk_index));
    const printedResults = rows
      .filter(
        (r) =>
          r.status === "completed" &&
          (!cancelled.includes(r.chunk_index) || (lateCompleted.has(r.chunk_index) && printedChunks.has(r.chunk_index))),
      )
      .map((r) => ({ chunk_index: r.chunk_index, uri: r.result_uri, sha256: r.result_sha256 }));
    // submit.py lists the job's tasks in chunk order: a chunk cancelled while in flight may come
    // before the failed chunk (chunk 0 or 1, still leased when chunk 2 failed).
    const failedLine = {
      failed_chunk: 2,
      error_code: "bad_chunk",
      error_message: "chunk 2 is corrupt",
      attempts: [{ attempt: 1, worker_id: failedRow.lease_owner, outcome: "failed", error_code: "bad_chunk" }],
    };
    const unfinishedLines = [
      { chunk: 2, line: failedLine as object },
      ...cancelled.map((c) => ({ chunk: c, line: { cancelled_chunk: c } })),
    ]
      .sort((a, b) => a.chunk - b.chunk)
      .map((u) => u.line);
    expect(submit.lines).toEqual([
      ...statuses,
      {
        job_id: jobId,
        failure: {
          chunk_index: 2,
          error_code: "bad_chunk",
          error_message: "chunk 2 is corrupt",
          attempt: 1,
          worker_id: failedRow.lease_owner,
        },
      },
      ...unfinishedLines,
      ...printedResults,
    ]);
    expect([...new Set([2, ...cancelled, ...printedResults.map((r) => r.chunk_index)])].sort()).toEqual([0, 1, 2, 3, 4, 5]);
    expect(rows.filter((r) => r.status === "failed").map((r) => r.chunk_index)).toEqual([2]);
  });
});

describe.each(["json", "grpc"])("submit.py with --failure-policy continue (the leasehold package, %s)", (transport) => {
  it("lets every other chunk finish: the job fails once all are final, with the failed chunk explained and every other result", async () => {
    const workload = `py_continue_${transport}`;
    await fx.queue.putWorkload({ name: workload, leaseSeconds: 30, maxAttempts: 1 });
    const env = { LEASEHOLD_TRANSPORT: transport };
    let workerChild: ChildProcess | undefined;
    const worker = runPython(["examples/python/worker.py", `http://${target}`, workload], {
      env,
      text: true,
      onSpawn: (c) => (workerChild = c),
    });
    const submit = await runPython(
      ["examples/python/submit.py", `http://${target}`, workload, "6", "--fail-chunk", "2", "--failure-policy", "continue"],
      { env },
    );
    expect(submit.code, describeRun(submit)).toBe(0);
    workerChild?.kill("SIGTERM");
    const ran = await worker;
    expect(ran.code, describeRun(ran)).toBe(0);

    const statuses = submit.lines.filter((l) => "status" in l);
    const jobId = statuses[0].job_id;
    const rows = await taskRows(jobId);
    expect(rows.map((r) => r.status)).toEqual(["completed", "completed", "failed", "completed", "completed", "completed"]);
    expect(submit.lines).toEqual([
      ...statuses,
      {
        job_id: jobId,
        failure: {
          chunk_index: 2,
          error_code: "bad_chunk",
          error_message: "chunk 2 is corrupt",
          attempt: 1,
          worker_id: rows[2].lease_owner,
        },
      },
      {
        failed_chunk: 2,
        error_code: "bad_chunk",
        error_message: "chunk 2 is corrupt",
        attempts: [{ attempt: 1, worker_id: rows[2].lease_owner, outcome: "failed", error_code: "bad_chunk" }],
      },
      ...[0, 1, 3, 4, 5].map((i) => ({ chunk_index: i, uri: rows[i].result_uri, sha256: rows[i].result_sha256 })),
    ]);
    expect(statuses.at(-1).status).toBe("failed");
  });
});

describe("rich error details from Python grpcio", () => {
  it("reads BadRequest (every violation) and RequestInfo from grpc-status-details-bin, as grpcio-status does", async () => {
    const workload = "py_schema";
    await fx.queue.putWorkload({
      name: workload,
      parametersSchema: { type: "object", required: ["model"], additionalProperties: false, properties: { lr: { type: "number" } } },
    });
    const jobsBefore = await fx.count("jobs");
    const dir = mkdtempSync(path.join(os.tmpdir(), "leasehold-status-details-"));
    const r = await runPython(["test/support/grpc_status_details.py", ROOT, target, dir, workload]);
    expect(r.code, describeRun(r)).toBe(0);
    expect(r.lines).toEqual([
      {
        code: "INVALID_ARGUMENT",
        message: "task_id: must be a UUID",
        violations: [["task_id", "must be a UUID"]],
        request_id: "py-get-task",
      },
      {
        code: "INVALID_ARGUMENT",
        message: expect.stringMatching(/^parameters: does not match the py_schema schema \(3 problems\)/),
        violations: [
          ["parameters.model", "is required"],
          ["parameters.batch", "is not allowed (the schema has no such property)"],
          ["parameters.lr", "must be number"],
        ],
        request_id: "py-create-job",
      },
    ]);
    expect(await fx.count("jobs")).toBe(jobsBefore);
    rmSync(dir, { recursive: true, force: true });
  });
});
