// One job's life: `job submit`, `job get`, `job watch`, `job results`, `job cancel`, `job retry`.
import { fromJson } from "@bufbuild/protobuf";
import {
  CancelJobResponseSchema,
  CreateJobRequestSchema,
  CreateJobResponseSchema,
  GetJobResponseSchema,
  JobStatus,
  ResultManifestSchema,
  RetryJobResponseSchema,
  type Job,
  type ResultManifest,
} from "../../../gen/leasehold/queue/v1/queue_pb.js";
import { intOption, pairsOption, readInput, readJsonFile, stringOption } from "../args.js";
import type { CommandSpec } from "../command.js";
import { CliError } from "../errors.js";
import { failureLine, jobStatusName, jsonOf, out, percent, printJson } from "../format.js";
import { watch } from "../watch.js";

function jobLine(job: Job | undefined): string {
  return job === undefined ? "job ?" : `job ${job.id} ${jobStatusName(job.status)}`;
}

const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? "" : "s"}`;

export const jobCommands: CommandSpec[] = [
  {
    name: "job submit",
    positionals: ["FILE.json|-"],
    options: [{ name: "watch" }, { name: "concurrency-key", value: "K" }, { name: "required-label", value: "KEY=VALUE", repeatable: true }],
    summary: [
      "create a job from a CreateJobRequest in proto JSON",
      "(- reads stdin); --watch then watches it;",
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
      const res = await inv.client.createJob(request, inv.callOptions);
      if (inv.json) printJson(jsonOf(CreateJobResponseSchema, res));
      else out(`job ${res.job?.id} submitted: ${plural(res.tasks.length, "task")}`);
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
          `tasks:    ${res.totalTasks} (pending ${c?.pending ?? 0}, leased ${c?.leased ?? 0}, completed ${c?.completed ?? 0}, failed ${c?.failed ?? 0}, cancelled ${c?.cancelled ?? 0})`,
        );
        out(`progress: ${percent(res.progress)}`);
        if (res.failure) out(`failure:  ${failureLine(res.failure)}`);
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
