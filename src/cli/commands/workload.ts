// `workload put` and `workload list` (admin RPCs: PutWorkload, ListWorkloads).
import type { JsonObject } from "@bufbuild/protobuf";
import { ListWorkloadsResponseSchema, PutWorkloadResponseSchema } from "../../../gen/leasehold/queue/v1/queue_pb.js";
import { intOption, readInput, readJsonFile } from "../args.js";
import type { CommandSpec } from "../command.js";
import { CliError } from "../errors.js";
import { jsonOf, out, printJson, table, time } from "../format.js";

export const workloadCommands: CommandSpec[] = [
  {
    name: "workload put",
    positionals: ["NAME"],
    options: [
      { name: "max-attempts", value: "N" },
      { name: "lease-seconds", value: "N" },
      { name: "max-pending-seconds", value: "N" },
      { name: "parameters-schema", value: "FILE.json" },
    ],
    summary: ["register a workload or change its settings"],
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
  {
    name: "workload list",
    positionals: [],
    options: [],
    summary: ["list the registered workloads"],
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
];
