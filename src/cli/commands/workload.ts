// `workload put`, `workload list` and flow control: `workload pause` / `resume`, `workload
// key-limit` and `workload keys` (admin RPCs: PutWorkload, ListWorkloads, PauseWorkload,
// ResumeWorkload, PutKeyLimit, ListWorkloadKeys).
import type { JsonObject } from "@bufbuild/protobuf";
import {
  FailurePolicy,
  ListWorkloadKeysResponseSchema,
  ListWorkloadsResponseSchema,
  PauseWorkloadResponseSchema,
  PutKeyLimitResponseSchema,
  PutWorkloadResponseSchema,
  ResumeWorkloadResponseSchema,
  type Workload,
} from "../../../gen/leasehold/queue/v1/queue_pb.js";
import { FAILURE_POLICIES } from "../../queue/types.js";
import { intOption, positiveNumberOption, readInput, readJsonFile, stringOption } from "../args.js";
import type { CommandSpec } from "../command.js";
import { CliError, UsageError } from "../errors.js";
import { jsonOf, out, printJson, table, time } from "../format.js";

function parseFailurePolicy(value: string | undefined): FailurePolicy {
  if (value === undefined) return FailurePolicy.UNSPECIFIED;
  if (value === "fail_fast") return FailurePolicy.FAIL_FAST;
  if (value === "continue") return FailurePolicy.CONTINUE;
  throw new UsageError(`--failure-policy must be one of ${FAILURE_POLICIES.join(", ")}, not ${JSON.stringify(value)}`);
}

/** "max_attempts 3, lease_seconds 60, …": the settings, flow control's only where set. */
function settingsLine(w: Workload | undefined): string {
  if (w === undefined) return "workload ?";
  const parts = [`max_attempts ${w.maxAttempts}`, `lease_seconds ${w.leaseSeconds}`, `max_pending_seconds ${w.maxPendingSeconds}`];
  if (w.parametersSchema) parts.push("parameters_schema set");
  if (w.failurePolicy === FailurePolicy.CONTINUE) parts.push("failure_policy continue");
  if (w.maxFailedTasks > 0) parts.push(`max_failed_tasks ${w.maxFailedTasks}`);
  if (w.maxLeased > 0) parts.push(`max_leased ${w.maxLeased}`);
  if (w.maxLeasedPerKey > 0) parts.push(`max_leased_per_key ${w.maxLeasedPerKey}`);
  if (w.maxLeasesPerSecond > 0) parts.push(`max_leases_per_second ${w.maxLeasesPerSecond}`, `leases_burst ${w.leasesBurst}`);
  if (w.paused) parts.push("paused");
  return `workload ${w.name}: ${parts.join(", ")}`;
}

const dash = (n: number) => (n > 0 ? String(n) : "-");

export const workloadCommands: CommandSpec[] = [
  {
    name: "workload put",
    positionals: ["NAME"],
    options: [
      { name: "max-attempts", value: "N" },
      { name: "lease-seconds", value: "N" },
      { name: "max-pending-seconds", value: "N" },
      { name: "parameters-schema", value: "FILE.json" },
      { name: "failure-policy", value: FAILURE_POLICIES.join("|") },
      { name: "max-failed-tasks", value: "N" },
      { name: "max-leased", value: "N" },
      { name: "max-leased-per-key", value: "N" },
      { name: "max-leases-per-second", value: "R" },
      { name: "leases-burst", value: "N" },
    ],
    summary: [
      "register a workload or change its settings",
      "(all are replaced: a setting left out goes back",
      "to its default, a cap or rate limit left out is",
      "removed; pause is kept)",
    ],
    async run({ client, callOptions, json, args: [name], opts }) {
      const maxAttempts = intOption("max-attempts", opts["max-attempts"], 1);
      const leaseSeconds = intOption("lease-seconds", opts["lease-seconds"], 1);
      const maxPendingSeconds = intOption("max-pending-seconds", opts["max-pending-seconds"]);
      const failurePolicy = parseFailurePolicy(stringOption(opts["failure-policy"]));
      const maxFailedTasks = intOption("max-failed-tasks", opts["max-failed-tasks"]);
      const maxLeased = intOption("max-leased", opts["max-leased"], 1);
      const maxLeasedPerKey = intOption("max-leased-per-key", opts["max-leased-per-key"], 1);
      const maxLeasesPerSecond = positiveNumberOption("max-leases-per-second", opts["max-leases-per-second"]);
      const leasesBurst = intOption("leases-burst", opts["leases-burst"], 1);
      if ((maxLeasesPerSecond === undefined) !== (leasesBurst === undefined))
        throw new UsageError("--max-leases-per-second and --leases-burst go together (the rate limit's token bucket needs a size)");
      let parametersSchema: JsonObject | undefined;
      const schemaFile = stringOption(opts["parameters-schema"]);
      if (schemaFile !== undefined) {
        const value = readJsonFile(schemaFile, await readInput(schemaFile));
        if (value === null || typeof value !== "object" || Array.isArray(value))
          throw new CliError(`${schemaFile}: a JSON Schema must be a JSON object`);
        parametersSchema = value;
      }
      const res = await client.putWorkload(
        {
          name,
          maxAttempts,
          leaseSeconds,
          maxPendingSeconds,
          parametersSchema,
          failurePolicy,
          maxFailedTasks,
          maxLeased,
          maxLeasedPerKey,
          maxLeasesPerSecond,
          leasesBurst,
        },
        callOptions,
      );
      if (json) printJson(jsonOf(PutWorkloadResponseSchema, res));
      else out(settingsLine(res.workload));
      return 0;
    },
  },
  {
    name: "workload list",
    positionals: [],
    options: [],
    summary: ["the registered workloads: settings, caps, rate", "limits (- for none) and whether each is paused"],
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
          dash(w.maxLeased),
          dash(w.maxLeasedPerKey),
          w.maxLeasesPerSecond > 0 ? `${w.maxLeasesPerSecond}/s` : "-",
          dash(w.leasesBurst),
          w.paused ? "yes" : "no",
          time(w.updatedAt),
        ]);
        const header = ["NAME", "MAX_ATTEMPTS", "LEASE_SECONDS", "MAX_PENDING_SECONDS", "SCHEMA"];
        out(table([[...header, "MAX_LEASED", "PER_KEY", "RATE", "BURST", "PAUSED", "UPDATED"], ...rows]));
      }
      return 0;
    },
  },
  {
    name: "workload pause",
    positionals: ["NAME"],
    options: [],
    summary: ["lease none of its tasks until resumed (leases", "held run on; jobs are still accepted)"],
    async run({ client, callOptions, json, args: [name] }) {
      const res = await client.pauseWorkload({ name }, callOptions);
      if (json) printJson(jsonOf(PauseWorkloadResponseSchema, res));
      else out(`workload ${res.workload?.name ?? name} paused`);
      return 0;
    },
  },
  {
    name: "workload resume",
    positionals: ["NAME"],
    options: [],
    summary: ["lease its tasks again (wakes waiting claims)"],
    async run({ client, callOptions, json, args: [name] }) {
      const res = await client.resumeWorkload({ name }, callOptions);
      if (json) printJson(jsonOf(ResumeWorkloadResponseSchema, res));
      else out(`workload ${res.workload?.name ?? name} resumed`);
      return 0;
    },
  },
  {
    name: "workload key-limit",
    positionals: ["NAME", "KEY"],
    options: [{ name: "max-leased", value: "N", required: true }, { name: "clear" }],
    summary: [
      "one concurrency key's own cap, in place of the",
      "workload's --max-leased-per-key (--clear, instead of",
      "--max-leased: remove it, back to the workload's)",
    ],
    async run({ client, callOptions, json, args: [name, key], opts }) {
      const clear = opts.clear === true;
      const maxLeased = intOption("max-leased", opts["max-leased"], 1);
      if (clear && maxLeased !== undefined) throw new UsageError("workload key-limit: --max-leased and --clear: give one of them");
      if (!clear && maxLeased === undefined) throw new UsageError("workload key-limit: --max-leased N (or --clear) is required");
      const res = await client.putKeyLimit({ name, key, maxLeased: maxLeased ?? 0, clear }, callOptions);
      if (json) printJson(jsonOf(PutKeyLimitResponseSchema, res));
      else if (clear) out(`workload ${res.name} key ${JSON.stringify(res.key)}: own cap removed`);
      else out(`workload ${res.name} key ${JSON.stringify(res.key)}: max_leased ${res.maxLeased}`);
      return 0;
    },
  },
  {
    name: "workload keys",
    positionals: ["NAME"],
    options: [{ name: "limit", value: "N" }],
    summary: ["its concurrency keys, busiest first: leased (live),", "cap and pending tasks of each (at most --limit, 100)"],
    async run({ client, callOptions, json, args: [name], opts }) {
      const limit = intOption("limit", opts.limit, 1) ?? 0;
      const res = await client.listWorkloadKeys({ name, limit }, callOptions);
      if (json) printJson(jsonOf(ListWorkloadKeysResponseSchema, res));
      else if (res.keys.length === 0) out("no keys");
      else {
        const rows = res.keys.map((k) => [
          k.key === "" ? '""' : k.key,
          String(k.leased),
          k.maxLeased > 0 ? `${k.maxLeased}${k.ownLimit ? " (own)" : ""}` : "-",
          String(k.pending),
        ]);
        out(table([["KEY", "LEASED", "CAP", "PENDING"], ...rows]));
        if (res.truncated) out(`(the ${res.keys.length} busiest keys; --limit N shows more)`);
      }
      return 0;
    },
  },
];
