// `leasehold` command line (package.json "bin"; `npm run leasehold -- …` in a
// checkout). It never starts the coordinator (that is `npm start`).
//
//   leasehold token new --role submitter|worker|admin [--worker-prefix P] [--json]
//
// prints a fresh random token and the AUTH_TOKENS_FILE line that admits it (the
// line holds only the token's sha256; the token itself is stored nowhere).
//
// Every other command talks to a running coordinator through the generated
// Connect client (Connect protocol over HTTP/1.1). The CLI reads no environment
// variables: the coordinator's address and token come from --url and --token.
// The command line is parsed by commander; the commands themselves are the COMMANDS table.
import { createHash, randomBytes } from "node:crypto";
import { readFileSync, realpathSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { fromJson, toJson, type DescMessage, type JsonObject, type JsonValue, type MessageShape } from "@bufbuild/protobuf";
import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import { ConnectError, createClient, type CallOptions, type Client, type Interceptor } from "@connectrpc/connect";
import { codeToString } from "@connectrpc/connect/protocol-connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { Command as Program, CommanderError } from "commander";
import { ROLES, tokenEntryProblem } from "./config/index.js";
import { JOB_STATUSES, TASK_STATUSES } from "./queue/types.js";
import { BadRequestSchema } from "../gen/google/rpc/error_details_pb.js";
import {
  AttemptOutcome,
  CancelJobResponseSchema,
  CreateJobRequestSchema,
  CreateJobResponseSchema,
  GetJobResponseSchema,
  GetTaskResponseSchema,
  JobEventKind,
  JobStatus,
  ListJobsResponseSchema,
  ListTasksResponseSchema,
  ListWorkloadsResponseSchema,
  PutWorkloadResponseSchema,
  QueueService,
  ResultManifestSchema,
  RetryJobResponseSchema,
  TaskStatus,
  WatchJobResponseSchema,
  type GetJobResponse,
  type Job,
  type JobFailure,
  type ResultManifest,
  type TaskAttempt,
  type TaskDetail,
  type WatchJobResponse,
} from "../gen/leasehold/queue/v1/queue_pb.js";

const DEFAULT_URL = "http://127.0.0.1:8080";

const USAGE = `usage: leasehold [--url URL] [--token T] [--json] [--timeout-ms N] COMMAND …

  token new --role ${ROLES.join("|")} [--worker-prefix PREFIX]
                                 print a new token and its AUTH_TOKENS_FILE line
  workload put NAME [--max-attempts N] [--lease-seconds N] [--max-pending-seconds N]
               [--parameters-schema FILE.json]
                                 register a workload or change its settings
  workload list                  list the registered workloads
  job submit FILE.json|- [--watch]
                                 create a job from a CreateJobRequest in proto JSON
                                 (- reads stdin); --watch then watches it
  job get ID                     status, task counts and progress of a job (and why it failed)
  job watch ID                   follow a job until it finishes (and say why it failed)
  job tasks ID [--status pending|leased|completed|failed|cancelled]
                                 a job's tasks in chunk order, with attempts and errors
  task get ID                    one task and each of its attempts: worker, times, outcome
  job results ID [--page-size N] result manifests of the completed tasks, by chunk
  job cancel ID [--reason R]     cancel a pending or running job
  job retry ID [--max-attempts N]
                                 put a failed or cancelled job's tasks back to pending
  jobs list [--status pending|running|completed|failed|cancelled] [--workload W]
            [--limit N]          newest jobs first (at most --limit, default 50)

  --url         coordinator address (default ${DEFAULT_URL})
  --token       bearer token sent as "Authorization: Bearer T"
  --json        machine output: one JSON document per command with the proto
                field names (job watch: one JSON line per stream message);
                token new: {"token": …, "config_line": …}
  --timeout-ms  deadline of each call (job watch: of the whole stream)
  --worker-prefix  token new, worker tokens: every worker_id they use must start with this

exit codes: 0 success (job watch: the job completed), 1 error or the job failed,
            2 bad usage, 3 the watched job was cancelled
`;

class UsageError extends Error {}

/** A plain runtime failure: printed as "leasehold: <message>", exit 1. */
class CliError extends Error {}

/** A token: "lh_" and 32 random bytes in base64url (256 bits). */
export function newToken(): string {
  return `lh_${randomBytes(32).toString("base64url")}`;
}

export function configLine(token: string, role: string, workerPrefix?: string): string {
  const hash = createHash("sha256").update(token, "utf8").digest("hex");
  const fields = [hash, role, ...(workerPrefix !== undefined ? [workerPrefix] : [])];
  const problem = tokenEntryProblem(fields);
  if (problem) throw new UsageError(problem.replace("as third field", "(--worker-prefix)"));
  return fields.join(" ");
}

function tokenNew(opts: { role?: string; workerPrefix?: string; json?: boolean }): string {
  if (opts.role === undefined) throw new UsageError("--role is required");
  const token = newToken();
  const line = configLine(token, opts.role, opts.workerPrefix);
  if (opts.json) return `${JSON.stringify({ token, config_line: line })}\n`;
  return `${token}\n${line}\n`;
}

// ---------------------------------------------------------------------------
// Argument parsing

/** A command's own options: "--name VALUE" (string) or a flag (boolean). */
type OptionSpec = Record<string, { type: "string" | "boolean" }>;

interface Invocation {
  client: Client<typeof QueueService>;
  callOptions: CallOptions;
  json: boolean;
  /** Positionals after the command words. */
  args: string[];
  /** Command options by their --long-name. */
  opts: Record<string, string | boolean | undefined>;
}

interface Command {
  /** Number of positionals the command takes. */
  positionals: string[];
  options: OptionSpec;
  run(inv: Invocation): Promise<number>;
}

/** A non-negative int32 option (or a positive one with min 1). */
export function intOption(name: string, value: string | boolean | undefined, min = 0): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== "string" || !/^\d+$/.test(value) || Number(value) > 2 ** 31 - 1 || Number(value) < min) {
    throw new UsageError(`--${name} must be an integer ≥ ${min}, not ${JSON.stringify(value)}`);
  }
  return Number(value);
}

/** "failed" → JobStatus.FAILED. */
export function parseJobStatus(name: string): JobStatus {
  const i = JOB_STATUSES.indexOf(name.toLowerCase() as (typeof JOB_STATUSES)[number]);
  if (i < 0) throw new UsageError(`--status must be one of ${JOB_STATUSES.join(", ")}, not ${JSON.stringify(name)}`);
  return JobStatus[name.toUpperCase() as keyof typeof JobStatus];
}

/** "failed" → TaskStatus.FAILED. */
export function parseTaskStatus(name: string): TaskStatus {
  const i = TASK_STATUSES.indexOf(name.toLowerCase() as (typeof TASK_STATUSES)[number]);
  if (i < 0) throw new UsageError(`--status must be one of ${TASK_STATUSES.join(", ")}, not ${JSON.stringify(name)}`);
  return TaskStatus[name.toUpperCase() as keyof typeof TaskStatus];
}

export function jobStatusName(s: JobStatus): string {
  return (JobStatus[s] ?? String(s)).toLowerCase();
}

function taskStatusName(s: TaskStatus): string {
  return (TaskStatus[s] ?? String(s)).toLowerCase();
}

function outcomeName(o: AttemptOutcome): string {
  return (AttemptOutcome[o] ?? String(o)).toLowerCase();
}

/** "oom: out of memory" (the message only when there is one). */
function errorText(code: string, message: string): string {
  return message ? `${code}: ${message}` : code;
}

/** "chunk 3117 (task …, attempt 2, worker w-7): oom: out of memory" */
export function failureLine(f: Pick<JobFailure, "chunkIndex" | "taskId" | "attempt" | "workerId" | "errorCode" | "errorMessage">): string {
  const where = [`task ${f.taskId}`, ...(f.attempt > 0 ? [`attempt ${f.attempt}`] : []), ...(f.workerId ? [`worker ${f.workerId}`] : [])];
  return `chunk ${f.chunkIndex} (${where.join(", ")}): ${errorText(f.errorCode, f.errorMessage)}`;
}

function transportFor(url: string, token: string | undefined) {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new UsageError(`--url is not a URL: ${JSON.stringify(url)}`);
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:") throw new UsageError(`--url must be http:// or https://, not ${url}`);
  const interceptors: Interceptor[] = [];
  if (token !== undefined) {
    interceptors.push((next) => (req) => {
      req.header.set("Authorization", `Bearer ${token}`);
      return next(req);
    });
  }
  return createConnectTransport({ baseUrl: url, httpVersion: "1.1", interceptors });
}

// ---------------------------------------------------------------------------
// Output helpers

/** The REST API's JSON form: proto field names, implicit fields included. */
const JSON_WRITE = { useProtoFieldName: true, alwaysEmitImplicit: true } as const;

function jsonOf<Desc extends DescMessage>(schema: Desc, msg: MessageShape<Desc>): JsonValue {
  return toJson(schema, msg, JSON_WRITE);
}

function printJson(value: JsonValue): void {
  process.stdout.write(`${JSON.stringify(value)}\n`);
}

function out(line: string): void {
  process.stdout.write(`${line}\n`);
}

/** Rows as columns padded to their widest cell (the last column unpadded). */
export function table(rows: string[][]): string {
  const widths: number[] = [];
  for (const row of rows) row.forEach((cell, i) => (widths[i] = Math.max(widths[i] ?? 0, cell.length)));
  return rows.map((row) => row.map((cell, i) => (i === row.length - 1 ? cell : cell.padEnd(widths[i]))).join("  ")).join("\n");
}

function time(ts: Timestamp | undefined): string {
  return ts === undefined
    ? "-"
    : timestampDate(ts)
        .toISOString()
        .replace(/\.\d+Z$/, "Z");
}

function percent(fraction: number): string {
  return `${Math.floor(Math.min(1, Math.max(0, fraction)) * 100)}%`;
}

// ---------------------------------------------------------------------------
// Watching a job

const FINAL_EXIT = new Map<JobStatus, number>([
  [JobStatus.COMPLETED, 0],
  [JobStatus.FAILED, 1],
  [JobStatus.CANCELLED, 3],
]);

/** Exit code of a finished job (0 completed, 1 failed, 3 cancelled); undefined while it runs. */
export function exitCodeOf(status: JobStatus): number | undefined {
  return FINAL_EXIT.get(status);
}

/** What `job watch` knows of a job: the snapshot with every later event applied. */
export class WatchState {
  jobId = "";
  status = JobStatus.UNSPECIFIED;
  total = 0;
  readonly counts = new Map<TaskStatus, number>();
  /** Latest progress fraction of each task leased now. */
  readonly progress = new Map<string, number>();
  /** What failed the job: from a final snapshot, or the first task that failed for good. */
  failure: Pick<JobFailure, "chunkIndex" | "taskId" | "attempt" | "workerId" | "errorCode" | "errorMessage"> | undefined;

  /** Applies one stream message; true when a task or the job changed status. */
  apply(msg: WatchJobResponse): boolean {
    const u = msg.update;
    if (u.case === "snapshot") {
      this.loadSnapshot(u.value);
      return true;
    }
    if (u.case !== "event") return false;
    const e = u.value;
    switch (e.kind) {
      case JobEventKind.TASK_STATUS:
        if (e.previousTaskStatus !== TaskStatus.UNSPECIFIED) this.add(e.previousTaskStatus, -1);
        this.add(e.taskStatus, 1);
        // A new status (or a new lease) starts the task's progress over.
        this.progress.delete(e.taskId);
        if (e.taskStatus === TaskStatus.FAILED && this.failure === undefined) {
          this.failure = {
            chunkIndex: e.chunkIndex,
            taskId: e.taskId,
            attempt: e.attempt,
            workerId: e.workerId,
            errorCode: e.errorCode,
            errorMessage: e.errorMessage,
          };
        }
        return true;
      case JobEventKind.TASK_PROGRESS:
        if (e.taskStatus === TaskStatus.LEASED || e.taskStatus === TaskStatus.UNSPECIFIED) this.progress.set(e.taskId, e.progress);
        return false;
      case JobEventKind.JOB_STATUS:
        this.status = e.jobStatus;
        return true;
      default:
        return false;
    }
  }

  private loadSnapshot(s: GetJobResponse): void {
    this.jobId = s.job?.id ?? this.jobId;
    this.status = s.job?.status ?? JobStatus.UNSPECIFIED;
    this.total = s.totalTasks;
    const c = s.taskCounts;
    this.counts.clear();
    this.counts.set(TaskStatus.PENDING, c?.pending ?? 0);
    this.counts.set(TaskStatus.LEASED, c?.leased ?? 0);
    this.counts.set(TaskStatus.COMPLETED, c?.completed ?? 0);
    this.counts.set(TaskStatus.FAILED, c?.failed ?? 0);
    this.counts.set(TaskStatus.CANCELLED, c?.cancelled ?? 0);
    this.progress.clear();
    this.failure = s.failure;
  }

  private add(status: TaskStatus, n: number): void {
    this.counts.set(status, (this.counts.get(status) ?? 0) + n);
  }

  count(status: TaskStatus): number {
    return this.counts.get(status) ?? 0;
  }

  /** (completed + the latest progress of each leased task) / total, from 0 to 1. */
  fraction(): number {
    if (this.total <= 0) return 0;
    let done = this.count(TaskStatus.COMPLETED);
    for (const p of this.progress.values()) done += Math.min(1, Math.max(0, p));
    return Math.min(1, done / this.total);
  }

  /** "running 1/3 completed (pending 1, leased 1, failed 0, cancelled 0)" */
  line(): string {
    const others = [TaskStatus.PENDING, TaskStatus.LEASED, TaskStatus.FAILED, TaskStatus.CANCELLED]
      .map((s) => `${taskStatusName(s)} ${this.count(s)}`)
      .join(", ");
    return `${jobStatusName(this.status)} ${this.count(TaskStatus.COMPLETED)}/${this.total} completed (${others})`;
  }

  bar(width = 30): string {
    const f = this.fraction();
    const filled = Math.round(f * width);
    return `[${"#".repeat(filled)}${"-".repeat(width - filled)}] ${this.count(TaskStatus.COMPLETED)}/${this.total} ${percent(f).padStart(4)} ${jobStatusName(this.status)}`;
  }
}

async function watch(inv: Invocation, jobId: string): Promise<number> {
  const state = new WatchState();
  const tty = !inv.json && process.stderr.isTTY === true;
  let drawn = false;
  try {
    for await (const msg of inv.client.watchJob({ jobId }, inv.callOptions)) {
      const changed = state.apply(msg);
      if (inv.json) printJson(jsonOf(WatchJobResponseSchema, msg));
      else if (tty) {
        process.stderr.write(`\r${state.bar()}\x1b[K`);
        drawn = true;
      } else if (changed) process.stderr.write(`${state.line()}\n`);
    }
  } finally {
    if (drawn) process.stderr.write("\n");
  }
  const code = exitCodeOf(state.status);
  if (code === undefined) {
    throw new CliError(`the stream of job ${jobId} ended before the job finished (status ${jobStatusName(state.status)})`);
  }
  if (!inv.json) {
    out(`job ${jobId} ${jobStatusName(state.status)}: ${state.count(TaskStatus.COMPLETED)}/${state.total} tasks completed`);
    if (state.status === JobStatus.FAILED && state.failure) out(`failed at ${failureLine(state.failure)}`);
  }
  return code;
}

// ---------------------------------------------------------------------------
// Commands

function readJsonFile(file: string, text: string): JsonValue {
  try {
    return JSON.parse(text) as JsonValue;
  } catch (err) {
    throw new CliError(`${file}: not JSON: ${(err as Error).message}`);
  }
}

async function readInput(file: string): Promise<string> {
  if (file === "-") {
    const chunks: Buffer[] = [];
    for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
    return Buffer.concat(chunks).toString("utf8");
  }
  try {
    return readFileSync(file, "utf8");
  } catch (err) {
    throw new CliError(`cannot read ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
}

function jobLine(job: Job | undefined): string {
  return job === undefined ? "job ?" : `job ${job.id} ${jobStatusName(job.status)}`;
}

const COMMANDS: Record<string, Command> = {
  "workload put": {
    positionals: ["NAME"],
    options: {
      "max-attempts": { type: "string" },
      "lease-seconds": { type: "string" },
      "max-pending-seconds": { type: "string" },
      "parameters-schema": { type: "string" },
    },
    async run({ client, callOptions, json, args: [name], opts }) {
      const maxAttempts = intOption("max-attempts", opts["max-attempts"], 1);
      const leaseSeconds = intOption("lease-seconds", opts["lease-seconds"], 1);
      const maxPendingSeconds = intOption("max-pending-seconds", opts["max-pending-seconds"]);
      let parametersSchema: JsonObject | undefined;
      const schemaFile = opts["parameters-schema"];
      if (typeof schemaFile === "string") {
        const value = readJsonFile(schemaFile, await readInput(schemaFile));
        if (value === null || typeof value !== "object" || Array.isArray(value))
          throw new CliError(`${schemaFile}: a JSON Schema must be a JSON object`);
        parametersSchema = value;
      }
      const res = await client.putWorkload({ name, maxAttempts, leaseSeconds, maxPendingSeconds, parametersSchema }, callOptions);
      if (json) printJson(jsonOf(PutWorkloadResponseSchema, res));
      else {
        const w = res.workload;
        out(
          `workload ${w?.name}: max_attempts ${w?.maxAttempts}, lease_seconds ${w?.leaseSeconds}, max_pending_seconds ${w?.maxPendingSeconds}${w?.parametersSchema ? ", parameters_schema set" : ""}`,
        );
      }
      return 0;
    },
  },

  "workload list": {
    positionals: [],
    options: {},
    async run({ client, callOptions, json }) {
      const res = await client.listWorkloads({}, callOptions);
      if (json) printJson(jsonOf(ListWorkloadsResponseSchema, res));
      else if (res.workloads.length === 0) out("no workloads");
      else {
        const rows = res.workloads.map((w) => [
          w.name,
          String(w.maxAttempts),
          String(w.leaseSeconds),
          String(w.maxPendingSeconds),
          w.parametersSchema ? "yes" : "no",
          time(w.updatedAt),
        ]);
        out(table([["NAME", "MAX_ATTEMPTS", "LEASE_SECONDS", "MAX_PENDING_SECONDS", "SCHEMA", "UPDATED"], ...rows]));
      }
      return 0;
    },
  },

  "job submit": {
    positionals: ["FILE.json"],
    options: { watch: { type: "boolean" } },
    async run(inv) {
      const file = inv.args[0];
      const body = readJsonFile(file === "-" ? "stdin" : file, await readInput(file));
      let request;
      try {
        request = fromJson(CreateJobRequestSchema, body);
      } catch (err) {
        throw new CliError(`${file === "-" ? "stdin" : file}: not a CreateJobRequest: ${(err as Error).message}`);
      }
      const res = await inv.client.createJob(request, inv.callOptions);
      if (inv.json) printJson(jsonOf(CreateJobResponseSchema, res));
      else out(`job ${res.job?.id} submitted: ${res.tasks.length} task${res.tasks.length === 1 ? "" : "s"}`);
      if (inv.opts.watch === true && res.job !== undefined) return watch(inv, res.job.id);
      return 0;
    },
  },

  "job get": {
    positionals: ["ID"],
    options: {},
    async run({ client, callOptions, json, args: [jobId] }) {
      const res = await client.getJob({ jobId }, callOptions);
      if (json) printJson(jsonOf(GetJobResponseSchema, res));
      else {
        const c = res.taskCounts;
        const job = res.job;
        out(`job ${job?.id} (workload ${job?.workload})`);
        out(`status:   ${jobStatusName(job?.status ?? JobStatus.UNSPECIFIED)}${job?.cancelReason ? ` (${job.cancelReason})` : ""}`);
        out(
          `tasks:    ${res.totalTasks} (pending ${c?.pending ?? 0}, leased ${c?.leased ?? 0}, completed ${c?.completed ?? 0}, failed ${c?.failed ?? 0}, cancelled ${c?.cancelled ?? 0})`,
        );
        out(`progress: ${percent(res.progress)}`);
        if (res.failure) out(`failure:  ${failureLine(res.failure)}`);
      }
      return 0;
    },
  },

  "job tasks": {
    positionals: ["ID"],
    options: { status: { type: "string" } },
    async run({ client, callOptions, json, args: [jobId], opts }) {
      const status = typeof opts.status === "string" ? parseTaskStatus(opts.status) : TaskStatus.UNSPECIFIED;
      const tasks: TaskDetail[] = [];
      let pageToken = "";
      do {
        const res = await client.listTasks({ jobId, status, pageSize: 1000, pageToken }, callOptions);
        tasks.push(...res.tasks);
        pageToken = res.nextPageToken;
      } while (pageToken !== "");
      if (json) printJson(jsonOf(ListTasksResponseSchema, { $typeName: "leasehold.queue.v1.ListTasksResponse", tasks, nextPageToken: "" }));
      else if (tasks.length === 0) out("no tasks");
      else {
        const rows = tasks.map(({ task, attempts }) => {
          const last = attempts.at(-1);
          return [
            String(task?.chunkIndex ?? "?"),
            taskStatusName(task?.status ?? TaskStatus.UNSPECIFIED),
            `${task?.attempt ?? 0}/${task?.maxAttempts ?? 0}`,
            last?.workerId || "-",
            task?.id ?? "?",
            task?.errorCode ? errorText(task.errorCode, task.errorMessage) : "",
          ];
        });
        out(table([["CHUNK", "STATUS", "ATTEMPT", "WORKER", "TASK", "ERROR"], ...rows]));
      }
      return 0;
    },
  },

  "task get": {
    positionals: ["ID"],
    options: {},
    async run({ client, callOptions, json, args: [taskId] }) {
      const res = await client.getTask({ taskId }, callOptions);
      if (json) printJson(jsonOf(GetTaskResponseSchema, res));
      else {
        const t = res.task;
        out(`task ${t?.id} (job ${t?.jobId}, chunk ${t?.chunkIndex}, workload ${t?.workload})`);
        out(`status:   ${taskStatusName(t?.status ?? TaskStatus.UNSPECIFIED)} (attempt ${t?.attempt ?? 0} of ${t?.maxAttempts ?? 0})`);
        if (t?.errorCode) out(`error:    ${errorText(t.errorCode, t.errorMessage)}`);
        if (t?.resultUri) out(`result:   ${t.resultUri} ${t.resultSha256}`);
        if (res.attempts.length === 0) out("attempts: none (never leased)");
        else {
          out("attempts:");
          out(table(res.attempts.map(attemptRow)).replace(/^/gm, "  "));
        }
      }
      return 0;
    },
  },

  "job watch": {
    positionals: ["ID"],
    options: {},
    run: (inv) => watch(inv, inv.args[0]),
  },

  "job results": {
    positionals: ["ID"],
    options: { "page-size": { type: "string" } },
    async run({ client, callOptions, json, args: [jobId], opts }) {
      const pageSize = intOption("page-size", opts["page-size"], 1) ?? 0;
      const results: ResultManifest[] = [];
      let pageToken = "";
      do {
        const res = await client.listCompletedResults({ jobId, pageSize, pageToken }, callOptions);
        results.push(...res.results);
        pageToken = res.nextPageToken;
      } while (pageToken !== "");
      if (json) printJson(results.map((r) => jsonOf(ResultManifestSchema, r)));
      else for (const r of results) out(`${r.chunkIndex} ${r.resultUri} ${r.resultSha256}`);
      return 0;
    },
  },

  "job cancel": {
    positionals: ["ID"],
    options: { reason: { type: "string" } },
    async run({ client, callOptions, json, args: [jobId], opts }) {
      const res = await client.cancelJob({ jobId, reason: typeof opts.reason === "string" ? opts.reason : "" }, callOptions);
      if (json) printJson(jsonOf(CancelJobResponseSchema, res));
      else out(jobLine(res.job));
      return 0;
    },
  },

  "job retry": {
    positionals: ["ID"],
    options: { "max-attempts": { type: "string" } },
    async run({ client, callOptions, json, args: [jobId], opts }) {
      const maxAttempts = intOption("max-attempts", opts["max-attempts"], 1);
      const res = await client.retryJob({ jobId, maxAttempts }, callOptions);
      if (json) printJson(jsonOf(RetryJobResponseSchema, res));
      else out(`${jobLine(res.job)}: ${res.retriedTasks} task${res.retriedTasks === 1 ? "" : "s"} back to pending`);
      return 0;
    },
  },

  "jobs list": {
    positionals: [],
    options: { status: { type: "string" }, workload: { type: "string" }, limit: { type: "string" } },
    async run({ client, callOptions, json, opts }) {
      const status = typeof opts.status === "string" ? parseJobStatus(opts.status) : JobStatus.UNSPECIFIED;
      const workload = typeof opts.workload === "string" ? opts.workload : "";
      const limit = intOption("limit", opts.limit, 1) ?? 50;
      const jobs: Job[] = [];
      let pageToken = "";
      do {
        const pageSize = Math.min(limit - jobs.length, 1000);
        const res = await client.listJobs({ status, workload, pageSize, pageToken }, callOptions);
        jobs.push(...res.jobs.slice(0, limit - jobs.length));
        pageToken = res.nextPageToken;
      } while (pageToken !== "" && jobs.length < limit);
      if (json)
        printJson(jsonOf(ListJobsResponseSchema, { $typeName: "leasehold.queue.v1.ListJobsResponse", jobs, nextPageToken: pageToken }));
      else if (jobs.length === 0) out("no jobs");
      else {
        const rows = jobs.map((j) => [j.id, jobStatusName(j.status), j.workload, String(j.priority), time(j.createdAt)]);
        out(table([["ID", "STATUS", "WORKLOAD", "PRIORITY", "CREATED"], ...rows]));
      }
      return 0;
    },
  },
};

/** The global options, as commander parses them wherever they stand on the line. */
interface GlobalOptions {
  url?: string;
  token?: string;
  json?: boolean;
  timeoutMs?: string;
}

async function runCommand(
  name: string,
  cmd: Command,
  positionals: string[],
  opts: Record<string, string | boolean | undefined>,
  globals: GlobalOptions,
): Promise<number> {
  if (positionals.some((p) => p === "")) throw new UsageError(`${name}: empty ${cmd.positionals.join(" ")}`);
  const timeoutMs = intOption("timeout-ms", globals.timeoutMs, 1);
  const client = createClient(QueueService, transportFor(globals.url ?? DEFAULT_URL, globals.token));
  return cmd.run({
    client,
    callOptions: timeoutMs === undefined ? {} : { timeoutMs },
    json: globals.json === true,
    args: positionals,
    opts,
  });
}

/** commander's camelCase option keys back to the --long-names the commands use. */
function byLongName(spec: OptionSpec, parsed: Record<string, unknown>): Record<string, string | boolean | undefined> {
  const out: Record<string, string | boolean | undefined> = {};
  for (const long of Object.keys(spec))
    out[long] = parsed[long.replace(/-([a-z])/g, (_, c: string) => c.toUpperCase())] as string | boolean | undefined;
  return out;
}

/**
 * The command line as a commander program: the global options (anywhere on the line), `token new`,
 * and one subcommand per entry of COMMANDS ("job get" is `job` → `get`). Every command's action
 * stores its exit code in `result`; help is the one USAGE text.
 */
function buildProgram(result: { code: number }): Program {
  const configure = (p: Program) =>
    p
      .exitOverride()
      .configureOutput({ writeOut: (str) => process.stdout.write(str), writeErr: () => {} })
      .configureHelp({ formatHelp: () => USAGE })
      .allowExcessArguments(false)
      .helpCommand(false);
  const program = configure(new Program("leasehold"))
    .option("--url <URL>")
    .option("--token <T>")
    .option("--json")
    .option("--timeout-ms <N>");
  const group = (name: string) => program.commands.find((c) => c.name() === name) ?? configure(program.command(name));

  configure(group("token").command("new"))
    .option("--role <ROLE>")
    .option("--worker-prefix <PREFIX>")
    .action((_opts, command: Program) => {
      const opts = command.optsWithGlobals<{ role?: string; workerPrefix?: string; json?: boolean }>();
      process.stdout.write(tokenNew(opts));
      if (!opts.json && process.stderr.isTTY) {
        process.stderr.write("first line: the token (give it to the client; it is not stored anywhere)\n");
        process.stderr.write("second line: append it to the file named by AUTH_TOKENS_FILE and restart the coordinator\n");
      }
      result.code = 0;
    });

  for (const [name, cmd] of Object.entries(COMMANDS)) {
    const [groupName, commandName] = name.split(" ");
    const sub = configure(group(groupName).command(commandName));
    for (const positional of cmd.positionals) sub.argument(`<${positional}>`);
    for (const [long, { type }] of Object.entries(cmd.options)) sub.option(type === "string" ? `--${long} <VALUE>` : `--${long}`);
    sub.action(async (...args: unknown[]) => {
      const command = args[args.length - 1] as Program;
      const positionals = args.slice(0, cmd.positionals.length) as string[];
      result.code = await runCommand(
        name,
        cmd,
        positionals,
        byLongName(cmd.options, command.opts()),
        command.optsWithGlobals<GlobalOptions>(),
      );
    });
  }
  return program;
}

/** One attempt as a row: number, worker, leased, ended, outcome and what it said. */
function attemptRow(a: TaskAttempt): string[] {
  const p = a.lastProgress;
  const detail = [
    ...(a.errorCode ? [errorText(a.errorCode, a.errorMessage)] : []),
    ...(p ? [`progress ${percent(p.progress)}${p.message ? ` ${JSON.stringify(p.message)}` : ""}`] : []),
  ].join("; ");
  const outcome = `${outcomeName(a.outcome)}${a.retried ? " (retried)" : ""}`;
  return [`#${a.attempt}`, a.workerId || "-", time(a.leasedAt), a.endedAt ? time(a.endedAt) : "-", outcome, detail];
}

/**
 * "leasehold: not_found: job … not found (request id …)", and each field violation on a line of
 * its own when there are several (one is already the message).
 */
export function describeConnectError(err: ConnectError): string {
  const requestId = err.metadata.get("x-request-id");
  const violations = err.findDetails(BadRequestSchema).flatMap((d) => d.fieldViolations);
  const list = violations.length > 1 ? violations.map((v) => `\n  ${v.field}: ${v.description}`).join("") : "";
  return `${codeToString(err.code)}: ${err.rawMessage}${requestId ? ` (request id ${requestId})` : ""}${list}`;
}

export async function main(argv: string[]): Promise<number> {
  if (argv.length === 0) {
    process.stdout.write(USAGE);
    return 2;
  }
  if (argv[0] === "help") {
    process.stdout.write(USAGE);
    return 0;
  }
  const result = { code: 0 };
  try {
    await buildProgram(result).parseAsync(argv, { from: "user" });
    return result.code;
  } catch (err) {
    if (err instanceof ConnectError) {
      process.stderr.write(`leasehold: ${describeConnectError(err)}\n`);
      return 1;
    }
    if (err instanceof CommanderError) {
      if (err.code === "commander.helpDisplayed" || err.code === "commander.version") return 0;
      // "job" alone (a group without its command) asks commander for help: that is bad usage too.
      const message = err.code === "commander.help" ? "missing command" : err.message.replace(/^error: /, "");
      process.stderr.write(`leasehold: ${message}\n${USAGE}`);
      return 2;
    }
    if (err instanceof UsageError) {
      process.stderr.write(`leasehold: ${err.message}\n${USAGE}`);
      return 2;
    }
    if (err instanceof CliError) {
      process.stderr.write(`leasehold: ${err.message}\n`);
      return 1;
    }
    throw err;
  }
}

/** True when this module is the program (node src/cli.ts, dist/src/cli.js, bin/leasehold.js or its npm symlink), not an import. */
function isProgram(): boolean {
  const script = process.argv[1];
  if (script === undefined) return false;
  let real: string;
  try {
    real = realpathSync(script);
  } catch {
    return false;
  }
  const self = fileURLToPath(import.meta.url);
  // bin/leasehold.js sits at the project root, above src/ (run from source) or dist/src/ (the build).
  const bins = [path.resolve(path.dirname(self), "../bin/leasehold.js"), path.resolve(path.dirname(self), "../../bin/leasehold.js")];
  return real === self || bins.includes(real);
}

if (isProgram()) process.exitCode = await main(process.argv.slice(2));
