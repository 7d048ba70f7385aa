// One job's life: `job create`, `job submit`, `job get`, `job watch`, `job results`, `job cancel`, `job retry`.
import { create, fromJson, type JsonObject } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import {
  CancelJobResponseSchema,
  CreateJobRequestSchema,
  CreateJobResponseSchema,
  DependencyPolicy,
  DependencySchema,
  FinalizerSchema,
  GetJobResponseSchema,
  JobStatus,
  JobView,
  ResultManifestSchema,
  RetryJobResponseSchema,
  type Job,
  type ResultManifest,
} from "../../../gen/leasehold/queue/v1/queue_pb.js";
import { intOption, pairsOption, readInput, readJsonFile, stringOption } from "../args.js";
import type { CommandSpec } from "../command.js";
import { CliError, UsageError } from "../errors.js";
import { failureLine, jobStatusName, jsonOf, out, percent, printJson } from "../format.js";
import { watch } from "../watch.js";

function jobLine(job: Job | undefined): string {
  return job === undefined ? "job ?" : `job ${job.id} ${jobStatusName(job.status)}`;
}

const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? "" : "s"}`;

const DURATION_UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** --run-at: an RFC 3339 time, or +DURATION from now (+90s, +5m, +1h30m, +2d). */
export function parseRunAt(value: string | string[] | boolean | undefined): Date | undefined {
  if (value === undefined) return undefined;
  const text = typeof value === "string" ? value.trim() : "";
  if (text.startsWith("+")) {
    const parts = [...text.slice(1).matchAll(/(\d+)(ms|s|m|h|d)/g)];
    if (parts.length > 0 && parts.map((p) => p[0]).join("") === text.slice(1)) {
      return new Date(Date.now() + parts.reduce((ms, p) => ms + Number(p[1]) * DURATION_UNIT_MS[p[2]], 0));
    }
  } else if (/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})$/i.test(text) && !Number.isNaN(Date.parse(text))) {
    return new Date(text);
  }
  throw new UsageError(
    `--run-at must be an RFC 3339 time (2026-12-01T18:00:00Z) or +DURATION (+90s, +5m, +1h30m, +2d), not ${JSON.stringify(value)}`,
  );
}

function jsonObjectOption(name: string, value: string | string[] | boolean | undefined): JsonObject | undefined {
  if (value === undefined) return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(String(value));
  } catch {
    parsed = undefined;
  }
  if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) throw new UsageError(`--${name} must be a JSON object`);
  return parsed as JsonObject;
}

/** The options `job create` and `job submit` share: when, what it runs after, and what runs after it. */
const LATER_OPTIONS = [
  { name: "run-at", value: "RFC3339|+DURATION" },
  { name: "after", value: "JOB_ID", repeatable: true },
  { name: "after-optional", value: "JOB_ID", repeatable: true },
  { name: "dependency-policy", value: "all_completed|all_final" },
  { name: "finalizer-workload", value: "W" },
  { name: "finalizer-parameters", value: "JSON" },
  { name: "finalizer-on-failure" },
];

const DEPENDENCY_POLICIES: Record<string, DependencyPolicy> = {
  all_completed: DependencyPolicy.ALL_COMPLETED,
  all_final: DependencyPolicy.ALL_FINAL,
};

/** A repeatable option's values (one given once is a string). */
function listOption(value: string | string[] | boolean | undefined): string[] {
  return value === undefined || typeof value === "boolean" ? [] : Array.isArray(value) ? value : [value];
}

/**
 * The view a CreateJob of the CLI asks for: the human line reads no task, so the job alone
 * (JOB_VIEW_BASIC: a large job's tasks are neither written nor sent back); --json prints the
 * contract's answer, tasks and all. A view the request names itself (job submit's file) is kept.
 */
function answerView(request: ReturnType<typeof create<typeof CreateJobRequestSchema>>, json: boolean): void {
  if (!json && request.view === JobView.UNSPECIFIED) request.view = JobView.BASIC;
}

/** --run-at and the finalizer options onto a CreateJobRequest (over what it already says). */
function applyLaterOptions(
  request: ReturnType<typeof create<typeof CreateJobRequestSchema>>,
  opts: Record<string, string | string[] | boolean | undefined>,
): void {
  const runAt = parseRunAt(opts["run-at"]);
  if (runAt) request.runAt = timestampFromDate(runAt);
  // The parents: --after must complete (under all_completed), --after-optional need only end.
  const parents = [
    ...listOption(opts.after).map((jobId) => create(DependencySchema, { jobId })),
    ...listOption(opts["after-optional"]).map((jobId) => create(DependencySchema, { jobId, optional: true })),
  ];
  if (parents.length > 0) request.after = [...request.after, ...parents];
  const policy = stringOption(opts["dependency-policy"]);
  if (policy !== undefined) {
    if (!(policy in DEPENDENCY_POLICIES)) {
      throw new UsageError(`--dependency-policy must be all_completed or all_final, not ${JSON.stringify(policy)}`);
    }
    if (request.after.length === 0) throw new UsageError("--dependency-policy needs --after or --after-optional");
    request.dependencyPolicy = DEPENDENCY_POLICIES[policy];
  }
  const workload = stringOption(opts["finalizer-workload"]);
  if (workload === undefined && (opts["finalizer-parameters"] !== undefined || opts["finalizer-on-failure"] !== undefined)) {
    throw new UsageError("--finalizer-parameters and --finalizer-on-failure need --finalizer-workload");
  }
  if (workload !== undefined) {
    request.finalizer = create(FinalizerSchema, {
      workload,
      parameters: jsonObjectOption("finalizer-parameters", opts["finalizer-parameters"]),
      runOnFailure: opts["finalizer-on-failure"] === true,
    });
  }
}

export const jobCommands: CommandSpec[] = [
  {
    name: "job create",
    positionals: ["WORKLOAD"],
    options: [
      { name: "input-uri", value: "URI", required: true },
      { name: "input-sha256", value: "HEX", required: true },
      { name: "parameters", value: "JSON" },
      { name: "priority", value: "N" },
      { name: "account", value: "NAME" },
      ...LATER_OPTIONS,
      { name: "watch" },
    ],
    summary: [
      "create a one-task job; --run-at delays it (RFC 3339 or +5m); --after waits for",
      "jobs to complete (--after-optional: to end), --finalizer-workload enqueues a job",
      "when it ends (--finalizer-on-failure: after a failure too)",
    ],
    async run(inv) {
      const request = create(CreateJobRequestSchema, {
        workload: inv.args[0],
        inputUri: stringOption(inv.opts["input-uri"]) ?? "",
        inputSha256: stringOption(inv.opts["input-sha256"]) ?? "",
        parameters: jsonObjectOption("parameters", inv.opts.parameters),
        priority: intOption("priority", inv.opts.priority) ?? 0,
        account: stringOption(inv.opts.account) ?? "",
      });
      applyLaterOptions(request, inv.opts);
      answerView(request, inv.json);
      const res = await inv.client.createJob(request, inv.callOptions);
      if (inv.json) printJson(jsonOf(CreateJobResponseSchema, res));
      else out(`${jobLine(res.job)}${res.job?.runAt ? ` (due ${new Date(Number(res.job.runAt.seconds) * 1000).toISOString()})` : ""}`);
      if (inv.opts.watch === true && res.job !== undefined) return watch(inv, res.job.id);
      return 0;
    },
  },
  {
    name: "job submit",
    positionals: ["FILE.json|-"],
    options: [
      ...LATER_OPTIONS,
      { name: "watch" },
      { name: "concurrency-key", value: "K" },
      { name: "required-label", value: "KEY=VALUE", repeatable: true },
    ],
    summary: [
      "create a job from a CreateJobRequest in proto JSON",
      "(- reads stdin; --run-at and --finalizer-* as job create); --watch then watches it;",
      "--concurrency-key and --required-label set those",
      "fields of the request",
    ],
    async run(inv) {
      const file = inv.args[0];
      const source = file === "-" ? "stdin" : file;
      const body = readJsonFile(source, await readInput(file));
      let request;
      try {
        request = fromJson(CreateJobRequestSchema, body);
      } catch (err) {
        throw new CliError(`${source}: not a CreateJobRequest: ${(err as Error).message}`);
      }
      request.concurrencyKey = stringOption(inv.opts["concurrency-key"]) ?? request.concurrencyKey;
      const labels = pairsOption("required-label", inv.opts["required-label"]);
      if (labels !== undefined) request.requiredLabels = { ...request.requiredLabels, ...labels };
      applyLaterOptions(request, inv.opts);
      answerView(request, inv.json);
      const res = await inv.client.createJob(request, inv.callOptions);
      if (inv.json) printJson(jsonOf(CreateJobResponseSchema, res));
      // The job's tasks are the request's (one, from the job's own input, when it lists none); an
      // idempotent replay's are too, as a replay is the same request.
      else out(`job ${res.job?.id} submitted: ${plural(res.tasks.length || request.tasks.length || 1, "task")}`);
      if (inv.opts.watch === true && res.job !== undefined) return watch(inv, res.job.id);
      return 0;
    },
  },
  {
    name: "job get",
    positionals: ["ID"],
    options: [],
    summary: ["status, task counts and progress of a job (and why it failed)"],
    async run({ client, callOptions, json, args: [jobId] }) {
      const res = await client.getJob({ jobId }, callOptions);
      if (json) printJson(jsonOf(GetJobResponseSchema, res));
      else {
        const c = res.taskCounts;
        const job = res.job;
        out(`job ${job?.id} (workload ${job?.workload})`);
        out(`status:   ${jobStatusName(job?.status ?? JobStatus.UNSPECIFIED)}${job?.cancelReason ? ` (${job.cancelReason})` : ""}`);
        out(
          `tasks:    ${res.totalTasks} (${c?.waiting ? `waiting ${c.waiting}, ` : ""}pending ${c?.pending ?? 0}, leased ${c?.leased ?? 0}, completed ${c?.completed ?? 0}, failed ${c?.failed ?? 0}, cancelled ${c?.cancelled ?? 0})`,
        );
        out(`progress: ${percent(res.progress)}`);
        if (res.failure) out(`failure:  ${failureLine(res.failure)}`);
        if (job?.runAt) out(`run at:   ${new Date(Number(job.runAt.seconds) * 1000).toISOString()}`);
        if (job?.finalizer) out(`finalizer: ${job.finalizer.workload}${job.finalizerJobId ? ` → job ${job.finalizerJobId}` : ""}`);
        if (job?.parentJobId) out(`parent:   job ${job.parentJobId}`);
        if (job?.workflowId) out(`workflow: ${job.workflowId} (node ${job.workflowNode})`);
        if (job && job.parents.length > 0) {
          const policy = job.dependencyPolicy === DependencyPolicy.ALL_FINAL ? "all_final" : "all_completed";
          out(
            `after:    ${job.parents.length} job${job.parents.length === 1 ? "" : "s"} (${policy}${job.waitingParents > 0 ? `, waiting for ${job.waitingParents}` : ""})`,
          );
          for (const p of job.parents) {
            const name = p.node ? ` (node ${p.node})` : "";
            out(
              `  ${p.jobId}${name} ${jobStatusName(p.status)}, ${p.completedTasks}/${p.totalTasks} tasks completed${p.optional ? ", optional" : ""}`,
            );
          }
        }
      }
      return 0;
    },
  },
  {
    name: "job watch",
    positionals: ["ID"],
    options: [],
    summary: ["follow a job until it finishes (and say why it failed)"],
    run: (inv) => watch(inv, inv.args[0]),
  },
  {
    name: "job results",
    positionals: ["ID"],
    options: [{ name: "page-size", value: "N" }],
    summary: ["result manifests of the completed tasks, by chunk"],
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
  {
    name: "job cancel",
    positionals: ["ID"],
    options: [{ name: "reason", value: "R" }],
    summary: ["cancel a pending or running job"],
    async run({ client, callOptions, json, args: [jobId], opts }) {
      const res = await client.cancelJob({ jobId, reason: stringOption(opts.reason) ?? "" }, callOptions);
      if (json) printJson(jsonOf(CancelJobResponseSchema, res));
      else out(jobLine(res.job));
      return 0;
    },
  },
  {
    name: "job retry",
    positionals: ["ID"],
    options: [{ name: "max-attempts", value: "N" }],
    summary: ["put a failed or cancelled job's tasks back to pending"],
    async run({ client, callOptions, json, args: [jobId], opts }) {
      const maxAttempts = intOption("max-attempts", opts["max-attempts"], 1);
      const res = await client.retryJob({ jobId, maxAttempts }, callOptions);
      if (json) printJson(jsonOf(RetryJobResponseSchema, res));
      else out(`${jobLine(res.job)}: ${plural(res.retriedTasks, "task")} back to pending`);
      return 0;
    },
  },
];
