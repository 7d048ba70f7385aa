// The `leasehold` CLI end to end: each command runs as a real child process
// (node --import tsx src/cli/main.ts) against a real coordinator process over a
// migrated database of its own; a worker loop in the test drives tasks through
// the REST API while `job watch` follows the job.
import { spawn, type ChildProcess } from "node:child_process";
import { randomUUID } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  AttemptOutcome,
  GetJobResponseSchema,
  JobEventKind,
  JobEventSchema,
  JobStatus,
  TaskAttemptSchema,
  TaskCountsSchema,
  TaskSchema,
  TaskStatus,
  WatchJobResponseSchema,
} from "../../gen/leasehold/queue/v1/queue_pb.js";
import { parseJobStatus, parseTaskStatus } from "../../src/cli/args.js";
import { failureLine, table, taskErrorCell } from "../../src/cli/format.js";
import { COMMANDS, USAGE } from "../../src/cli/program.js";
import { exitCodeOf, WatchState } from "../../src/cli/watch.js";
import { createTestDatabase, type TestDatabase } from "../support/db.js";
import { killAll, ROOT, spawnCoordinator } from "../support/process.js";
import { sha } from "../support/queue.js";
import { nodeEntry } from "../support/entry.js";

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

let db: TestDatabase;
let base: string;
let tmp: string;
const children = new Set<ChildProcess>();

beforeAll(async () => {
  tmp = mkdtempSync(path.join(os.tmpdir(), "leasehold-cli-"));
  db = await createTestDatabase();
  base = await spawnCoordinator({ DATABASE_URL: db.url, PORT: "0" }).listening();
});

afterAll(async () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
  await killAll();
  await db?.drop();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

interface Run {
  child: ChildProcess;
  stdout(): string;
  stderr(): string;
  done: Promise<{ code: number | null; stdout: string; stderr: string }>;
}

/** Starts the CLI (with --url of the test coordinator unless `url` is false). */
function start(args: string[], opts: { stdin?: string; url?: boolean } = {}): Run {
  const argv = opts.url === false ? args : ["--url", base, ...args];
  const child = spawn(process.execPath, [...nodeEntry("src/cli/main.ts"), ...argv], { cwd: ROOT, stdio: ["pipe", "pipe", "pipe"] });
  children.add(child);
  let stdout = "";
  let stderr = "";
  child.stdout?.setEncoding("utf8").on("data", (d: string) => (stdout += d));
  child.stderr?.setEncoding("utf8").on("data", (d: string) => (stderr += d));
  child.stdin?.end(opts.stdin ?? "");
  const done = new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
    child.on("close", (code) => {
      children.delete(child);
      resolve({ code, stdout, stderr });
    });
  });
  return { child, stdout: () => stdout, stderr: () => stderr, done };
}

function cli(args: string[], opts: { stdin?: string; url?: boolean } = {}) {
  return start(args, opts).done;
}

/** Runs a --json command that must succeed; its stdout parsed. */
async function cliJson<T = Record<string, unknown>>(args: string[]): Promise<T> {
  const r = await cli(["--json", ...args]);
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as T;
}

async function waitFor(what: string, cond: () => boolean, timeoutMs = 20_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

async function rest(method: string, route: string, body?: unknown): Promise<{ status: number; json: Record<string, unknown> }> {
  const res = await fetch(`${base}${route}`, {
    method,
    headers: body === undefined ? {} : { "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, json: text ? (JSON.parse(text) as Record<string, unknown>) : {} };
}

interface RestTask {
  id: string;
  attempt: number;
  chunk_index: number;
}

async function claim(workload: string, worker: string, max: number): Promise<RestTask[]> {
  const r = await rest("POST", "/tasks/claim", { worker_id: worker, workloads: [workload], max_tasks: max });
  expect(r.status === 200 || r.status === 204, JSON.stringify(r.json)).toBe(true);
  return r.status === 204 ? [] : (r.json.tasks as RestTask[]);
}

async function ok(method: string, route: string, body: unknown): Promise<void> {
  const r = await rest(method, route, body);
  expect(r.status, `${route}: ${JSON.stringify(r.json)}`).toBe(200);
}

const resultUri = (chunk: number) => `s3://out/${chunk}`;

/** A job file of n chunks on `workload`, in the snake_case proto JSON form. */
function jobFile(workload: string, n: number, name = `${workload}.json`): string {
  const file = path.join(tmp, name);
  writeFileSync(file, JSON.stringify({ workload, tasks: chunks(workload, n) }));
  return file;
}

function chunks(workload: string, n: number) {
  return Array.from({ length: n }, (_, i) => ({
    chunk_index: i,
    input_uri: `s3://in/${workload}/${i}`,
    input_sha256: sha(`${workload}${i}`),
  }));
}

// Setup goes through REST (a CLI process costs about a second); the CLI runs what is under test.

async function putWorkload(name: string, body: Record<string, unknown> = {}): Promise<void> {
  await ok("PUT", `/workloads/${name}`, body);
}

/** A new job of n tasks on a (new) workload; its id. */
async function newJob(workload: string, n: number, workloadBody: Record<string, unknown> = {}): Promise<string> {
  await putWorkload(workload, workloadBody);
  const r = await rest("POST", "/jobs", { workload, tasks: chunks(workload, n) });
  expect(r.status, JSON.stringify(r.json)).toBe(201);
  return (r.json.job as { id: string }).id;
}

async function complete(worker: string, t: RestTask): Promise<void> {
  await ok("POST", `/tasks/${t.id}/result`, {
    worker_id: worker,
    attempt: t.attempt,
    result_uri: resultUri(t.chunk_index),
    result_sha256: sha(`r${t.chunk_index}`),
  });
}

/** A job whose n tasks all completed. */
async function completedJob(workload: string, n: number): Promise<string> {
  const id = await newJob(workload, n);
  for (const t of await claim(workload, "w-done", n)) await complete("w-done", t);
  return id;
}

/** A job whose single task failed for good. */
async function failedJob(workload: string): Promise<string> {
  const id = await newJob(workload, 1, { max_attempts: 1 });
  const [task] = await claim(workload, "w-fail", 1);
  await ok("POST", `/tasks/${task.id}/failure`, {
    worker_id: "w-fail",
    attempt: task.attempt,
    error_code: "bad_input",
    error_message: "no",
    retryable: false,
  });
  return id;
}

/** The NDJSON lines of a `--json job watch`. */
function ndjson(stdout: string): { snapshot?: { job: JsonJob; total_tasks: number }; event?: Record<string, unknown> }[] {
  return stdout
    .trimEnd()
    .split("\n")
    .map((l) => JSON.parse(l) as { snapshot?: { job: JsonJob; total_tasks: number }; event?: Record<string, unknown> });
}

interface JsonJob {
  id: string;
  status: string;
  workload: string;
}

describe("WatchState (unit)", () => {
  it("counts from the snapshot, moves a task on each status event, and adds leased tasks' progress", () => {
    const s = new WatchState();
    const snapshot = create(GetJobResponseSchema, {
      job: { id: "j", status: JobStatus.RUNNING },
      taskCounts: create(TaskCountsSchema, { pending: 1, leased: 2, completed: 1 }),
      totalTasks: 4,
    });
    expect(s.apply(create(WatchJobResponseSchema, { update: { case: "snapshot", value: snapshot } }))).toBe(true);
    const event = (e: MessageInitShape<typeof JobEventSchema>) =>
      create(WatchJobResponseSchema, { update: { case: "event", value: create(JobEventSchema, { jobId: "j", ...e }) } });
    expect(s.apply(event({ kind: JobEventKind.TASK_PROGRESS, taskId: "a", taskStatus: TaskStatus.LEASED, progress: 0.5 }))).toBe(false);
    expect(s.apply(event({ kind: JobEventKind.TASK_PROGRESS, taskId: "b", taskStatus: TaskStatus.LEASED, progress: 0.25 }))).toBe(false);
    expect(s.fraction()).toBeCloseTo((1 + 0.5 + 0.25) / 4);
    expect(
      s.apply(
        event({ kind: JobEventKind.TASK_STATUS, taskId: "a", previousTaskStatus: TaskStatus.LEASED, taskStatus: TaskStatus.COMPLETED }),
      ),
    ).toBe(true);
    expect(s.count(TaskStatus.LEASED)).toBe(1);
    expect(s.count(TaskStatus.COMPLETED)).toBe(2);
    expect(s.fraction()).toBeCloseTo((2 + 0.25) / 4);
    expect(s.line()).toBe("running 2/4 completed (pending 1, leased 1, failed 0, cancelled 0)");
    expect(s.bar(10)).toMatch(/^\[#{6}-{4}\] 2\/4 +56% running$/);
    expect(exitCodeOf(s.status)).toBeUndefined();
    s.apply(event({ kind: JobEventKind.JOB_STATUS, jobStatus: JobStatus.CANCELLED, previousJobStatus: JobStatus.RUNNING }));
    expect(exitCodeOf(s.status)).toBe(3);
    expect([JobStatus.COMPLETED, JobStatus.FAILED].map(exitCodeOf)).toEqual([0, 1]);
  });

  it("remembers the task that failed the job from a live stream (not a retried failure) and names it", () => {
    const s = new WatchState();
    s.apply(
      create(WatchJobResponseSchema, {
        update: { case: "snapshot", value: create(GetJobResponseSchema, { job: { id: "j", status: JobStatus.RUNNING }, totalTasks: 2 }) },
      }),
    );
    const event = (e: MessageInitShape<typeof JobEventSchema>) =>
      create(WatchJobResponseSchema, {
        update: { case: "event", value: create(JobEventSchema, { jobId: "j", kind: JobEventKind.TASK_STATUS, ...e }) },
      });
    s.apply(
      event({
        taskId: "t7",
        chunkIndex: 7,
        previousTaskStatus: TaskStatus.LEASED,
        taskStatus: TaskStatus.PENDING,
        attempt: 1,
        workerId: "w1",
        errorCode: "nan",
      }),
    );
    expect(s.failure).toBeUndefined();
    s.apply(
      event({
        taskId: "t7",
        chunkIndex: 7,
        previousTaskStatus: TaskStatus.LEASED,
        taskStatus: TaskStatus.FAILED,
        attempt: 2,
        workerId: "w2",
        errorCode: "oom",
        errorMessage: "out of memory",
      }),
    );
    s.apply(event({ taskId: "t8", chunkIndex: 8, previousTaskStatus: TaskStatus.PENDING, taskStatus: TaskStatus.CANCELLED }));
    expect(s.failure && failureLine(s.failure)).toBe("chunk 7 (task t7, attempt 2, worker w2): oom: out of memory");
    expect(failureLine({ chunkIndex: 3, taskId: "t3", attempt: 0, workerId: "", errorCode: "expired", errorMessage: "" })).toBe(
      "chunk 3 (task t3): expired",
    );
    expect(parseTaskStatus("leased")).toBe(TaskStatus.LEASED);
    expect(() => parseTaskStatus("running")).toThrow(/--status must be one of pending, leased/);
  });

  it("parses status names and aligns tables", () => {
    expect(parseJobStatus("failed")).toBe(JobStatus.FAILED);
    expect(parseJobStatus("Cancelled")).toBe(JobStatus.CANCELLED);
    expect(() => parseJobStatus("done")).toThrow(/--status/);
    expect(
      table([
        ["A", "BB", "C"],
        ["aaa", "b", "c"],
      ]),
    ).toBe("A    BB  C\naaa  b   c");
  });
});

describe("error column and usage text (unit)", () => {
  const attempt = (n: number, outcome: AttemptOutcome, errorCode = "", errorMessage = "") =>
    create(TaskAttemptSchema, { attempt: n, outcome, errorCode, errorMessage });

  it("names a task's error as the cause only when it failed, else as the earlier attempt's", () => {
    const failed = create(TaskSchema, { status: TaskStatus.FAILED, errorCode: "oom", errorMessage: "out of memory" });
    expect(taskErrorCell({ task: failed, attempts: [attempt(1, AttemptOutcome.FAILED, "oom", "out of memory")] })).toBe(
      "oom: out of memory",
    );
    const cancelled = create(TaskSchema, { status: TaskStatus.CANCELLED, errorCode: "nan", errorMessage: "NaN at step 7" });
    const attempts = [attempt(1, AttemptOutcome.FAILED, "nan", "NaN at step 7"), attempt(2, AttemptOutcome.CANCELLED)];
    expect(taskErrorCell({ task: cancelled, attempts })).toBe("(attempt 1: nan: NaN at step 7)");
    expect(taskErrorCell({ task: create(TaskSchema, { status: TaskStatus.CANCELLED }), attempts: [] })).toBe("");
  });

  it("lists every command and every option it declares", () => {
    for (const cmd of COMMANDS) {
      expect(USAGE).toContain(`  ${cmd.name}`);
      for (const o of cmd.options) expect(USAGE).toContain(`--${o.name}`);
    }
    expect(USAGE).toMatch(
      /^usage: leasehold \[--url URL\] \[--token T\] \[--token-file FILE\] \[--ca-file FILE\] \[--json\] \[--timeout-ms N\] COMMAND …\n/,
    );
    expect(USAGE).toContain("exit codes:");
  });
});

describe("leasehold CLI against a live coordinator", () => {
  it("workload put, then workload list (human and --json)", async () => {
    const schemaFile = path.join(tmp, "schema.json");
    const schema = { type: "object", properties: { quality: { type: "string" } } };
    writeFileSync(schemaFile, JSON.stringify(schema));
    const [put, putJson] = await Promise.all([
      cli(["workload", "put", "cli_alpha", "--max-attempts", "2", "--lease-seconds", "30", "--max-pending-seconds", "600"]),
      cliJson<{ workload: Record<string, unknown> }>(["workload", "put", "cli_beta", "--parameters-schema", schemaFile]),
    ]);
    expect(put.code, put.stderr).toBe(0);
    expect(put.stdout).toBe("workload cli_alpha: max_attempts 2, lease_seconds 30, max_pending_seconds 600\n");
    expect(putJson.workload).toMatchObject({
      name: "cli_beta",
      max_attempts: 3,
      lease_seconds: 60,
      max_pending_seconds: 0,
      parameters_schema: schema,
    });
    expect(putJson.workload.created_at).toMatch(/^\d{4}-\d\d-\d\dT/);

    const [list, listJson] = await Promise.all([
      cli(["workload", "list"]),
      cliJson<{ workloads: Record<string, unknown>[] }>(["workload", "list"]),
    ]);
    expect(list.code, list.stderr).toBe(0);
    const lines = list.stdout.trimEnd().split("\n");
    expect(lines[0]).toMatch(
      /^NAME +MAX_ATTEMPTS +LEASE_SECONDS +MAX_PENDING_SECONDS +SCHEMA +MAX_LEASED +PER_KEY +RATE +BURST +PAUSED +UPDATED$/,
    );
    const alpha = lines.find((l) => l.startsWith("cli_alpha "));
    const beta = lines.find((l) => l.startsWith("cli_beta "));
    expect(alpha?.split(/ +/).slice(0, 10)).toEqual(["cli_alpha", "2", "30", "600", "no", "-", "-", "-", "-", "no"]);
    expect(beta?.split(/ +/).slice(0, 10)).toEqual(["cli_beta", "3", "60", "0", "yes", "-", "-", "-", "-", "no"]);
    // Aligned: every column starts at the same offset in each row.
    for (const header of ["MAX_ATTEMPTS", "LEASE_SECONDS", "UPDATED"]) {
      const col = lines[0].indexOf(header);
      for (const l of lines.slice(1)) expect(l.slice(col - 2, col + 1)).toMatch(/^ {2}\S$/);
    }

    const names = listJson.workloads.map((w) => w.name);
    expect(names).toEqual([...names].sort());
    expect(listJson.workloads.find((w) => w.name === "cli_alpha")).toMatchObject({
      max_attempts: 2,
      lease_seconds: 30,
      max_pending_seconds: 600,
    });
  });

  it("job submit from a file (3 tasks), then job get shows it pending with 3 tasks", async () => {
    await putWorkload("cli_submit");
    const submitted = await cli(["job", "submit", jobFile("cli_submit", 3)]);
    expect(submitted.code, submitted.stderr).toBe(0);
    const m = /^job (\S+) submitted: 3 tasks\n$/.exec(submitted.stdout);
    expect(m, submitted.stdout).not.toBeNull();
    const id = m![1];
    expect(id).toMatch(UUID);

    const [get, json, viaStdin, bad, basic] = await Promise.all([
      cli(["job", "get", id]),
      cliJson<{ job: JsonJob; total_tasks: number; task_counts: Record<string, number>; progress: number }>(["job", "get", id]),
      // stdin, camelCase, and --json: the CreateJobResponse with its tasks.
      cli(["--json", "job", "submit", "-"], {
        stdin: JSON.stringify({ workload: "cli_submit", inputUri: "s3://in/one", inputSha256: sha("one"), idempotencyKey: "k1" }),
      }),
      cli(["job", "submit", "-"], { stdin: JSON.stringify({ workload: "cli_submit", bogus: 1 }) }),
      // A view the file names is kept: the job alone, even with --json.
      cli(["--json", "job", "submit", "-"], {
        stdin: JSON.stringify({ workload: "cli_submit", tasks: chunks("cli_submit_basic", 2), view: "JOB_VIEW_BASIC" }),
      }),
    ]);
    expect(get.code, get.stderr).toBe(0);
    expect(get.stdout).toBe(
      `job ${id} (workload cli_submit)\nstatus:   pending\ntasks:    3 (pending 3, leased 0, completed 0, failed 0, cancelled 0)\nprogress: 0%\n`,
    );
    expect(json.job).toMatchObject({ id, status: "JOB_STATUS_PENDING", workload: "cli_submit" });
    expect(json.total_tasks).toBe(3);
    expect(json.task_counts).toEqual({ pending: 3, leased: 0, completed: 0, failed: 0, cancelled: 0, waiting: 0 });

    expect(viaStdin.code, viaStdin.stderr).toBe(0);
    const created = JSON.parse(viaStdin.stdout) as {
      job: JsonJob & { idempotency_key: string };
      tasks: { chunk_index: number; input_uri: string }[];
    };
    expect(created.job.idempotency_key).toBe("k1");
    expect(created.tasks).toMatchObject([{ chunk_index: 0, input_uri: "s3://in/one" }]);

    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/^leasehold: stdin: not a CreateJobRequest: .*bogus/);

    expect(basic.code, basic.stderr).toBe(0);
    const alone = JSON.parse(basic.stdout) as { job: JsonJob; tasks: unknown[] };
    expect(alone.job).toMatchObject({ workload: "cli_submit", status: "JOB_STATUS_PENDING" });
    expect(alone.tasks).toEqual([]);
    const counts = await cliJson<{ total_tasks: number }>(["job", "get", alone.job.id]);
    expect(counts.total_tasks).toBe(2);
  });

  it("job watch --json streams a snapshot, task status and progress events, and exits 0 when the job completes", async () => {
    const id = await newJob("cli_watch", 3);
    const watch = start(["--json", "job", "watch", id]);
    await waitFor("the snapshot line", () => watch.stdout().includes("\n"));

    const worker = "w-watch";
    const tasks = await claim("cli_watch", worker, 3);
    expect(tasks).toHaveLength(3);
    await ok("POST", `/tasks/${tasks[0].id}/progress`, { worker_id: worker, attempt: tasks[0].attempt, progress: 0.5 });
    for (const t of tasks) await complete(worker, t);

    const r = await watch.done;
    expect(r.code, r.stderr).toBe(0);
    const lines = ndjson(r.stdout);
    expect(lines[0].snapshot?.job.id).toBe(id);
    expect(lines[0].snapshot?.total_tasks).toBe(3);
    expect(lines.slice(1).every((l) => l.event !== undefined && l.snapshot === undefined)).toBe(true);
    const events = lines.slice(1).map((l) => l.event!);
    const statusEvents = events.filter((e) => e.kind === "JOB_EVENT_KIND_TASK_STATUS");
    expect(statusEvents.filter((e) => e.task_status === "TASK_STATUS_COMPLETED")).toHaveLength(3);
    expect(statusEvents.some((e) => e.task_status === "TASK_STATUS_LEASED" && e.previous_task_status === "TASK_STATUS_PENDING")).toBe(true);
    const progress = events.filter((e) => e.kind === "JOB_EVENT_KIND_TASK_PROGRESS");
    expect(progress).toHaveLength(1);
    expect(progress[0]).toMatchObject({ task_id: tasks[0].id, progress: 0.5 });
    expect(events.at(-1)).toMatchObject({ kind: "JOB_EVENT_KIND_JOB_STATUS", job_status: "JOB_STATUS_COMPLETED" });
    // Ids increase in commit order.
    const ids = events.map((e) => BigInt(e.id as string));
    expect(ids.every((v, i) => i === 0 || v > ids[i - 1])).toBe(true);
  });

  it("job submit --watch (human, no TTY): one stderr line per status change, outcome on stdout, exit 0", async () => {
    await putWorkload("cli_human");
    const run = start(["job", "submit", jobFile("cli_human", 1), "--watch"]);
    await waitFor("the first status line", () => /pending 0\/1 completed/.test(run.stderr()));
    const [task] = await claim("cli_human", "w-human", 1);
    await complete("w-human", task);
    const r = await run.done;
    expect(r.code, r.stderr).toBe(0);
    const [submitted, outcome, ...rest] = r.stdout.trimEnd().split("\n");
    expect(submitted).toMatch(/^job \S+ submitted: 1 task$/);
    const id = submitted.split(" ")[1];
    expect(outcome).toBe(`job ${id} completed: 1/1 tasks completed`);
    expect(rest).toEqual([]);
    expect(r.stderr).not.toContain("\r");
    expect(r.stderr.trimEnd().split("\n").at(-1)).toBe("completed 1/1 completed (pending 0, leased 0, failed 0, cancelled 0)");
  });

  it("job results lists the manifests in chunk order (human and --json), across pages", async () => {
    const id = await completedJob("cli_results", 3);
    const [human, json] = await Promise.all([
      cli(["job", "results", id, "--page-size", "2"]),
      cliJson<{ chunk_index: number; result_uri: string; result_sha256: string; task_id: string }[]>([
        "job",
        "results",
        id,
        "--page-size",
        "1",
      ]),
    ]);
    expect(human.code, human.stderr).toBe(0);
    expect(human.stdout).toBe([0, 1, 2].map((i) => `${i} ${resultUri(i)} ${sha(`r${i}`)}\n`).join(""));
    expect(json.map((r) => [r.chunk_index, r.result_uri, r.result_sha256])).toEqual([0, 1, 2].map((i) => [i, resultUri(i), sha(`r${i}`)]));
    expect(json[0].task_id).toMatch(UUID);
  });

  it("job watch exits 1 on a failed job and 3 on a cancelled one (already final, and live); job cancel", async () => {
    const failed = await failedJob("cli_fail");
    const cancelled = await newJob("cli_cancel", 2);
    const [watchFailed, cancel] = await Promise.all([
      cli(["job", "watch", failed]),
      cli(["job", "cancel", cancelled, "--reason", "not needed"]),
    ]);
    expect(watchFailed.code, watchFailed.stderr).toBe(1);
    const failedTask = (await rest("GET", `/jobs/${failed}/tasks`)).json.tasks as { task: { id: string } }[];
    expect(watchFailed.stdout).toBe(
      `job ${failed} failed: 0/1 tasks completed\nfailed at chunk 0 (task ${failedTask[0].task.id}, attempt 1, worker w-fail): bad_input: no\n`,
    );
    expect(cancel.code, cancel.stderr).toBe(0);
    expect(cancel.stdout).toBe(`job ${cancelled} cancelled\n`);

    // Live: the watcher is already following when the job is cancelled.
    const live = await newJob("cli_cancel", 1);
    const watchLive = start(["--json", "job", "watch", live]);
    const [watchCancelled, get] = await Promise.all([cli(["job", "watch", cancelled]), cli(["job", "get", cancelled])]);
    expect(watchCancelled.code, watchCancelled.stderr).toBe(3);
    expect(watchCancelled.stdout).toBe(`job ${cancelled} cancelled: 0/2 tasks completed\n`);
    expect(get.stdout).toContain("status:   cancelled (not needed)");

    await waitFor("the snapshot line", () => watchLive.stdout().includes("\n"));
    const cancelJson = await cliJson<{ job: JsonJob & { cancel_reason: string } }>(["job", "cancel", live]);
    expect(cancelJson.job).toMatchObject({ id: live, status: "JOB_STATUS_CANCELLED" });
    const r = await watchLive.done;
    expect(r.code, r.stderr).toBe(3);
    expect(ndjson(r.stdout).at(-1)?.event).toMatchObject({ kind: "JOB_EVENT_KIND_JOB_STATUS", job_status: "JOB_STATUS_CANCELLED" });
  });

  it("jobs list --status failed contains a failed job; job retry makes its tasks pending again", async () => {
    const [failed, completed] = await Promise.all([failedJob("cli_retry"), completedJob("cli_retry_done", 1)]);
    const [failedList, human, done, notRetryable] = await Promise.all([
      cliJson<{ jobs: JsonJob[] }>(["jobs", "list", "--status", "failed"]),
      cli(["jobs", "list", "--status", "failed", "--workload", "cli_retry"]),
      cli(["jobs", "list", "--workload", "cli_retry_done"]),
      // A job that is not failed or cancelled cannot be retried.
      cli(["job", "retry", completed]),
    ]);
    expect(failedList.jobs.map((j) => j.id)).toContain(failed);
    expect(failedList.jobs.every((j) => j.status === "JOB_STATUS_FAILED")).toBe(true);
    expect(human.code, human.stderr).toBe(0);
    const lines = human.stdout.trimEnd().split("\n");
    expect(lines[0]).toMatch(/^ID +STATUS +PROGRESS +WORKLOAD +PRIORITY +CREATED$/);
    expect(lines.slice(1).map((l) => l.split(/ +/).slice(0, 4))).toEqual([[failed, "failed", "0%", "cli_retry"]]);
    // The progress column is GetJob's: all of a completed job's one task.
    expect(
      done.stdout
        .trimEnd()
        .split("\n")
        .slice(1)
        .map((l) => l.split(/ +/).slice(0, 4)),
    ).toEqual([[completed, "completed", "100%", "cli_retry_done"]]);
    expect(notRetryable.code).toBe(1);
    expect(notRetryable.stderr).toMatch(/^leasehold: failed_precondition: /);

    const retry = await cli(["job", "retry", failed, "--max-attempts", "2"]);
    expect(retry.code, retry.stderr).toBe(0);
    expect(retry.stdout).toMatch(new RegExp(`^job ${failed} (pending|running): 1 task back to pending\\n$`));
    const [get, after] = await Promise.all([
      cliJson<{ job: JsonJob; task_counts: Record<string, number> }>(["job", "get", failed]),
      cliJson<{ jobs: JsonJob[] }>(["jobs", "list", "--status", "failed"]),
    ]);
    expect(["JOB_STATUS_PENDING", "JOB_STATUS_RUNNING"]).toContain(get.job.status);
    expect(get.task_counts).toMatchObject({ pending: 1, failed: 0 });
    expect(after.jobs.map((j) => j.id)).not.toContain(failed);
  });

  it("jobs list follows pages up to --limit, newest first", async () => {
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push(await newJob("cli_many", 1));
    const [all, two, none] = await Promise.all([
      cliJson<{ jobs: JsonJob[] }>(["jobs", "list", "--workload", "cli_many"]),
      cliJson<{ jobs: JsonJob[]; next_page_token: string }>(["jobs", "list", "--workload", "cli_many", "--limit", "2"]),
      cli(["jobs", "list", "--workload", "cli_nobody"]),
    ]);
    expect(all.jobs.map((j) => j.id)).toEqual([...ids].reverse());
    expect(two.jobs.map((j) => j.id)).toEqual([ids[2], ids[1]]);
    expect(two.next_page_token).not.toBe("");
    expect(none.stdout).toBe("no jobs\n");
  });

  it("bad usage exits 2 with the usage of what was asked; an unknown job exits 1 with not_found and the request id", async () => {
    const usage = [
      ["job", "get"],
      ["job", "frobnicate", "x"],
      ["jobs", "list", "--status", "done"],
      ["workload", "put", "x", "--max-attempts", "many"],
      ["job", "get", "x", "--bogus"],
    ];
    const results = await Promise.all(usage.map((args) => cli(args)));
    results.forEach((r, i) => {
      expect(r.code, usage[i].join(" ")).toBe(2);
      expect(r.stdout).toBe("");
      expect(r.stderr).toMatch(/^leasehold: .+\nusage: leasehold /);
      // The command's (or for an unknown one, its group's) usage, not the whole text.
      expect(r.stderr).toContain(`  ${usage[i][0]} `);
      expect(r.stderr).not.toContain("exit codes:");
    });

    const [unknown, missingFile, down] = await Promise.all([
      cli(["job", "get", randomUUID()]),
      cli(["job", "submit", path.join(tmp, "missing.json")]),
      cli(["--url", "http://127.0.0.1:1", "workload", "list"], { url: false }),
    ]);
    expect(unknown.code).toBe(1);
    expect(unknown.stdout).toBe("");
    expect(unknown.stderr).toMatch(/^leasehold: not_found: .*\(request id [\w.:-]+\)\n$/);
    expect(missingFile.code).toBe(1);
    expect(missingFile.stderr).toMatch(/^leasehold: cannot read .*missing\.json: ENOENT/);
    expect(down.code).toBe(1);
    expect(down.stderr).toMatch(/^leasehold: unavailable: /);
  });
});

describe("why a job failed", () => {
  /** A job of three chunks: 0 completed, 1 failed retryably then for good (which fails the job), 2 cancelled. */
  async function failingJob(workload: string): Promise<{ jobId: string; ids: string[] }> {
    const jobId = await newJob(workload, 3, { max_attempts: 2 });
    const [t0] = await claim(workload, "w-a", 1);
    await complete("w-a", t0);
    const [t1] = await claim(workload, "w-b", 1);
    await ok("POST", `/tasks/${t1.id}/failure`, {
      worker_id: "w-b",
      attempt: 1,
      error_code: "nan",
      error_message: "NaN at step 7",
      retry_after_seconds: 0,
    });
    const [again] = await claim(workload, "w-c", 1);
    expect([again.id, again.attempt]).toEqual([t1.id, 2]);
    await ok("POST", `/tasks/${t1.id}/failure`, {
      worker_id: "w-c",
      attempt: 2,
      error_code: "oom",
      error_message: "out of memory",
      retryable: false,
    });
    const tasks = (await rest("GET", `/jobs/${jobId}/tasks`)).json.tasks as { task: { id: string } }[];
    return { jobId, ids: tasks.map((t) => t.task.id) };
  }

  it("job get and job watch name the failing chunk and its error; job watch --json's snapshot carries it", async () => {
    const { jobId, ids } = await failingJob("cli_why");
    const [get, watch, watchJson] = await Promise.all([
      cli(["job", "get", jobId]),
      cli(["job", "watch", jobId]),
      cli(["--json", "job", "watch", jobId]),
    ]);
    expect(get.code, get.stderr).toBe(0);
    expect(get.stdout).toContain(`failure:  chunk 1 (task ${ids[1]}, attempt 2, worker w-c): oom: out of memory\n`);
    expect(watch.code).toBe(1);
    expect(watch.stdout).toBe(
      `job ${jobId} failed: 1/3 tasks completed\nfailed at chunk 1 (task ${ids[1]}, attempt 2, worker w-c): oom: out of memory\n`,
    );
    expect(watchJson.code).toBe(1);
    expect(JSON.parse(watchJson.stdout).snapshot.failure).toMatchObject({
      task_id: ids[1],
      chunk_index: 1,
      error_code: "oom",
      error_message: "out of memory",
    });
  });

  it("job tasks [--status failed] lists tasks in chunk order with their errors (human and --json)", async () => {
    const { jobId, ids } = await failingJob("cli_tasks");
    const [all, failed, failedJson, bad] = await Promise.all([
      cli(["job", "tasks", jobId]),
      cli(["job", "tasks", jobId, "--status", "failed"]),
      cliJson<{ tasks: { task: { id: string; chunk_index: number }; attempts: { outcome: string; error_code: string }[] }[] }>([
        "job",
        "tasks",
        jobId,
        "--status",
        "failed",
      ]),
      cli(["job", "tasks", jobId, "--status", "done"]),
    ]);
    expect(all.code, all.stderr).toBe(0);
    const lines = all.stdout.trimEnd().split("\n");
    expect(lines[0].split(/ +/)).toEqual(["CHUNK", "STATUS", "ATTEMPT", "WORKER", "TASK", "ERROR"]);
    expect(lines.slice(1).map((l) => l.split(/ +/).slice(0, 5))).toEqual([
      ["0", "completed", "1/2", "w-a", ids[0]],
      ["1", "failed", "2/2", "w-c", ids[1]],
      ["2", "cancelled", "0/2", "-", ids[2]],
    ]);
    expect(lines[2]).toMatch(/oom: out of memory$/);
    expect(
      failed.stdout
        .trimEnd()
        .split("\n")
        .slice(1)
        .map((l) => l.split(/ +/)[0]),
    ).toEqual(["1"]);
    expect(failedJson.tasks.map((t) => t.task.id)).toEqual([ids[1]]);
    expect(failedJson.tasks[0].attempts.map((a) => [a.outcome, a.error_code])).toEqual([
      ["ATTEMPT_OUTCOME_FAILED", "nan"],
      ["ATTEMPT_OUTCOME_FAILED", "oom"],
    ]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("--status must be one of pending, leased, completed, failed, cancelled");
  });

  it("task get shows each attempt: worker, outcome and error (human and --json); an unknown task exits 1", async () => {
    const { ids } = await failingJob("cli_task_get");
    const [human, json, unknown] = await Promise.all([
      cli(["task", "get", ids[1]]),
      cliJson<{
        task: { id: string; status: string };
        attempts: { attempt: number; worker_id: string; outcome: string; retried: boolean }[];
      }>(["task", "get", ids[1]]),
      cli(["task", "get", randomUUID()]),
    ]);
    expect(human.code, human.stderr).toBe(0);
    const lines = human.stdout.trimEnd().split("\n");
    expect(lines[1]).toBe("status:   failed (attempt 2 of 2)");
    expect(lines[2]).toBe("error:    oom: out of memory");
    expect(lines[3]).toBe("attempts:");
    expect(lines[4]).toMatch(/^ {2}#1 +w-b +\S+Z +\S+Z +failed \(retried\) +nan: NaN at step 7$/);
    expect(lines[5]).toMatch(/^ {2}#2 +w-c +\S+Z +\S+Z +failed +oom: out of memory$/);
    expect(json.task).toMatchObject({ id: ids[1], status: "TASK_STATUS_FAILED" });
    expect(json.attempts.map((a) => [a.attempt, a.worker_id, a.outcome, a.retried])).toEqual([
      [1, "w-b", "ATTEMPT_OUTCOME_FAILED", true],
      [2, "w-c", "ATTEMPT_OUTCOME_FAILED", false],
    ]);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/^leasehold: not_found: task_id: task "[0-9a-f-]+" not found \(request id [\w.:-]+\)\n$/);
  });

  it("a cancelled chunk names its earlier attempt's error as that attempt's, not as why it stopped (job tasks, task get)", async () => {
    const jobId = await newJob("cli_cancelled", 1, { max_attempts: 2 });
    const [t] = await claim("cli_cancelled", "w-a", 1);
    await ok("POST", `/tasks/${t.id}/failure`, {
      worker_id: "w-a",
      attempt: 1,
      error_code: "nan",
      error_message: "NaN at step 7",
      retry_after_seconds: 60,
    });
    await ok("POST", `/jobs/${jobId}/cancel`, { reason: "enough" });
    const [tasks, get] = await Promise.all([cli(["job", "tasks", jobId]), cli(["task", "get", t.id])]);
    expect(tasks.code, tasks.stderr).toBe(0);
    const row = tasks.stdout.trimEnd().split("\n")[1];
    expect(row.split(/ +/).slice(0, 2)).toEqual(["0", "cancelled"]);
    expect(row).toMatch(/ \(attempt 1: nan: NaN at step 7\)$/);
    expect(get.code, get.stderr).toBe(0);
    const lines = get.stdout.split("\n");
    expect(lines[1]).toBe("status:   cancelled (attempt 1 of 2)");
    expect(lines[2]).toBe("earlier:  (attempt 1: nan: NaN at step 7)");
    expect(get.stdout).not.toMatch(/^error:/m);
  });

  it("an error with several field violations prints each on its own line, and the request id once", async () => {
    await putWorkload("cli_schema", { parameters_schema: { type: "object", required: ["model"], properties: { lr: { type: "number" } } } });
    const file = path.join(tmp, "bad-params.json");
    writeFileSync(
      file,
      JSON.stringify({ workload: "cli_schema", input_uri: "s3://in/x", input_sha256: sha("x"), parameters: { lr: "fast" } }),
    );
    const r = await cli(["job", "submit", file]);
    expect(r.code).toBe(1);
    const lines = r.stderr.trimEnd().split("\n");
    expect(lines[0]).toMatch(
      /^leasehold: invalid_argument: parameters: does not match the cli_schema schema \(2 problems\): .* \(request id [\w.:-]+\)$/,
    );
    expect(lines.slice(1)).toEqual(["  parameters.model: is required", "  parameters.lr: must be number"]);
    expect(r.stderr.match(/request id/g)).toHaveLength(1);
  });
});

describe("--token", () => {
  it("is sent as a bearer token", async () => {
    const admin = `lh_cli_${randomUUID()}`;
    const tokens = path.join(tmp, "tokens");
    writeFileSync(tokens, `${sha(admin)} admin\n`);
    await putWorkload("cli_token");
    const secured = await spawnCoordinator({ DATABASE_URL: db.url, PORT: "0", AUTH_TOKENS_FILE: tokens }).listening();
    const [without, wrong, withToken] = await Promise.all([
      cli(["--url", secured, "workload", "list"], { url: false }),
      cli(["--url", secured, "--token", "lh_wrong", "workload", "list"], { url: false }),
      cli(["workload", "list", "--url", secured, "--token", admin, "--json"], { url: false }),
    ]);
    expect(without.code).toBe(1);
    expect(without.stderr).toMatch(/^leasehold: unauthenticated: /);
    expect(wrong.stderr).toMatch(/^leasehold: unauthenticated: /);
    expect(withToken.code, withToken.stderr).toBe(0);
    expect((JSON.parse(withToken.stdout) as { workloads: { name: string }[] }).workloads.map((w) => w.name)).toContain("cli_token");
  });
});

describe("flow control from the CLI", () => {
  /** One row of the database, read directly (what the CLI's call wrote). */
  async function row(sql: string, values: unknown[]): Promise<Record<string, unknown>> {
    const c = new pg.Client({ connectionString: db.url });
    c.on("error", () => {});
    await c.connect();
    try {
      const { rows } = await c.query(sql, values);
      expect(rows, sql).toHaveLength(1);
      return rows[0] as Record<string, unknown>;
    } finally {
      await c.end();
    }
  }

  it("workload put sets caps, a rate limit and a failure policy; list shows them; pause, resume, key-limit", async () => {
    const put = await cli([
      "workload",
      "put",
      "cli_flow",
      "--max-leased",
      "8",
      "--max-leased-per-key",
      "2",
      "--max-leases-per-second",
      "2.5",
      "--leases-burst",
      "10",
      "--failure-policy",
      "continue",
      "--max-failed-tasks",
      "3",
    ]);
    expect(put.code, put.stderr).toBe(0);
    expect(put.stdout).toBe(
      "workload cli_flow: max_attempts 3, lease_seconds 60, max_pending_seconds 0, failure_policy continue, max_failed_tasks 3, " +
        "max_leased 8, max_leased_per_key 2, max_leases_per_second 2.5, leases_burst 10\n",
    );
    expect(
      await row(
        "SELECT max_leased, max_leased_per_key, max_leases_per_second, leases_burst, failure_policy::text AS fp, max_failed_tasks, paused FROM workloads WHERE name = $1",
        ["cli_flow"],
      ),
    ).toEqual({
      max_leased: 8,
      max_leased_per_key: 2,
      max_leases_per_second: 2.5,
      leases_burst: 10,
      fp: "continue",
      max_failed_tasks: 3,
      paused: false,
    });

    const paused = await cli(["workload", "pause", "cli_flow"]);
    expect(paused.code, paused.stderr).toBe(0);
    expect(paused.stdout).toBe("workload cli_flow paused\n");
    expect(await row("SELECT paused FROM workloads WHERE name = $1", ["cli_flow"])).toEqual({ paused: true });

    const [list, listJson, keyLimit] = await Promise.all([
      cli(["workload", "list"]),
      cliJson<{ workloads: Record<string, unknown>[] }>(["workload", "list"]),
      cli(["workload", "key-limit", "cli_flow", "acme", "--max-leased", "5"]),
    ]);
    expect(list.code, list.stderr).toBe(0);
    const line = list.stdout.split("\n").find((l) => l.startsWith("cli_flow "));
    expect(line?.split(/ +/).slice(0, 10)).toEqual(["cli_flow", "3", "60", "0", "no", "8", "2", "2.5/s", "10", "yes"]);
    expect(listJson.workloads.find((w) => w.name === "cli_flow")).toMatchObject({
      max_leased: 8,
      max_leased_per_key: 2,
      max_leases_per_second: 2.5,
      leases_burst: 10,
      paused: true,
    });
    expect(keyLimit.code, keyLimit.stderr).toBe(0);
    expect(keyLimit.stdout).toBe('workload cli_flow key "acme": max_leased 5\n');
    expect(await row("SELECT max_leased FROM workload_key_limits WHERE workload = $1 AND key = $2", ["cli_flow", "acme"])).toEqual({
      max_leased: 5,
    });

    const [resumed, resumedJson] = await Promise.all([
      cli(["workload", "resume", "cli_flow"]),
      cliJson<{ workload: Record<string, unknown> }>(["workload", "resume", "cli_flow"]),
    ]);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(resumed.stdout).toBe("workload cli_flow resumed\n");
    expect(resumedJson.workload).toMatchObject({ name: "cli_flow", paused: false });
    expect(await row("SELECT paused FROM workloads WHERE name = $1", ["cli_flow"])).toEqual({ paused: false });
  });

  it("bad flow-control usage exits 2 and writes nothing; pausing an unknown workload exits 1 with not_found", async () => {
    const [noBurst, zeroCap, noCap, badLabel, unknown] = await Promise.all([
      cli(["workload", "put", "cli_flow_bad", "--max-leases-per-second", "5"]),
      cli(["workload", "put", "cli_flow_bad", "--max-leased", "0"]),
      cli(["workload", "key-limit", "cli_flow_bad", "acme"]),
      cli(["job", "submit", "-", "--required-label", "gpu"], { stdin: "{}" }),
      cli(["workload", "pause", "cli_no_such_workload"]),
    ]);
    expect(noBurst.code).toBe(2);
    expect(noBurst.stderr).toMatch(/^leasehold: --max-leases-per-second and --leases-burst go together/);
    expect(zeroCap.code).toBe(2);
    expect(zeroCap.stderr).toMatch(/^leasehold: --max-leased must be an integer ≥ 1, not "0"/);
    expect(noCap.code).toBe(2);
    expect(noCap.stderr).toMatch(/--max-leased N \(or --clear\) is required/);
    expect(badLabel.code).toBe(2);
    expect(badLabel.stderr).toMatch(/^leasehold: --required-label must be KEY=VALUE, not "gpu"/);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/^leasehold: not_found: .*cli_no_such_workload.*\(request id [\w.:-]+\)\n$/);
    expect(await row("SELECT count(*)::int AS n FROM workloads WHERE name = $1", ["cli_flow_bad"])).toEqual({ n: 0 });
  });

  it("job submit --concurrency-key and --required-label reach the tasks; task get says why a pending task waits", async () => {
    await putWorkload("cli_wait", { max_leased_per_key: 1 });
    const submitted = await cli([
      "--json",
      "job",
      "submit",
      jobFile("cli_wait", 2),
      "--concurrency-key",
      "acme",
      "--required-label",
      "gpu=a100",
      "--required-label",
      "region=eu",
    ]);
    expect(submitted.code, submitted.stderr).toBe(0);
    const created = JSON.parse(submitted.stdout) as { job: { id: string; concurrency_key: string }; tasks: { id: string }[] };
    const [first, second] = created.tasks.map((t) => t.id);
    expect(
      await row(
        "SELECT count(*)::int AS n, min(concurrency_key) AS key, min(required_labels::text) AS labels FROM tasks WHERE job_id = $1",
        [created.job.id],
      ),
    ).toEqual({ n: 2, key: "acme", labels: '{"gpu": "a100", "region": "eu"}' });

    const waiting = async (taskId: string) => {
      const r = await cli(["task", "get", taskId]);
      expect(r.code, r.stderr).toBe(0);
      return r.stdout.split("\n").find((l) => l.startsWith("waiting:"));
    };
    expect(await waiting(first)).toBe("waiting:  no_workers: no worker has asked for this workload in the last minute");

    // A worker without the labels asks: the task names the labels it needs.
    expect(await claimWithLabels("cli_wait", { gpu: "t4" })).toEqual([]);
    expect(await waiting(first)).toMatch(/^waiting: {2}labels_unmatched: needs labels .*gpu.*a100.*/);

    // One with them leases the first task; the key's cap of 1 holds the second.
    expect((await claimWithLabels("cli_wait", { gpu: "a100", region: "eu" })).map((t) => t.id)).toEqual([first]);
    expect(await waiting(second)).toBe('waiting:  key_cap: key cap reached: 1 of 1 leased for concurrency key "acme"');

    const paused = await cli(["workload", "pause", "cli_wait"]);
    expect(paused.code, paused.stderr).toBe(0);
    const [human, json] = await Promise.all([
      cli(["task", "get", second]),
      cliJson<{ waiting_reason: string; waiting_detail: string }>(["task", "get", second]),
    ]);
    expect(human.stdout.split("\n").slice(1, 3)).toEqual([
      "status:   pending (attempt 0 of 3)",
      "waiting:  workload_paused: the workload is paused (ResumeWorkload resumes it)",
    ]);
    expect(json).toMatchObject({ waiting_reason: "WAITING_REASON_WORKLOAD_PAUSED" });

    // The workload's keys: acme holds its one slot and waits with one more.
    const keys = await cli(["workload", "keys", "cli_wait"]);
    expect(keys.code, keys.stderr).toBe(0);
    expect(
      keys.stdout
        .trimEnd()
        .split("\n")
        .map((l) => l.split(/ +/)),
    ).toEqual([
      ["KEY", "LEASED", "CAP", "PENDING"],
      ["acme", "1", "1", "1"],
    ]);
    // A leased task waits for nothing: no waiting line.
    expect(await waiting(first)).toBeUndefined();
    // Ten CLI processes, mostly one after another: each starts Node, slow on a loaded machine.
  }, 180_000);
});

async function claimWithLabels(workload: string, labels: Record<string, string>): Promise<RestTask[]> {
  const r = await rest("POST", "/tasks/claim", { worker_id: "w-labels", workloads: [workload], max_tasks: 2, labels });
  expect(r.status === 200 || r.status === 204, JSON.stringify(r.json)).toBe(true);
  return r.status === 204 ? [] : (r.json.tasks as RestTask[]);
}
