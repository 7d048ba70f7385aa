// Usage adjustments (usage accepted after its job was settled): `adjustments list` (not yet
// settled, oldest first) and `adjustment settle` (record one's settlement, once), as
// `settlements list` and `job settle` do for jobs.
import {
  ListAdjustmentsResponseSchema,
  SettleAdjustmentResponseSchema,
  type UsageAdjustment,
} from "../../../gen/leasehold/queue/v1/queue_pb.js";
import { intOption, stringOption } from "../args.js";
import type { CommandSpec } from "../command.js";
import { UsageError } from "../errors.js";
import { jsonOf, out, printJson, table, time } from "../format.js";
import { unitsOption } from "./settlement.js";

function usageCell(a: UsageAdjustment): string {
  const entries = Object.entries(a.usage).sort(([x], [y]) => x.localeCompare(y));
  return entries.length === 0 ? "-" : entries.map(([k, v]) => `${k}=${v}`).join(" ");
}

export const adjustmentCommands: CommandSpec[] = [
  {
    name: "adjustments list",
    positionals: [],
    options: [
      { name: "account", value: "A" },
      { name: "limit", value: "N" },
    ],
    summary: ["usage accepted after its job was settled, not yet settled, oldest first (at most --limit, default 100)"],
    async run({ client, callOptions, json, opts }) {
      const account = stringOption(opts.account) ?? "";
      const limit = intOption("limit", opts.limit, 1) ?? 100;
      const adjustments: UsageAdjustment[] = [];
      let pageToken = "";
      do {
        const pageSize = Math.min(limit - adjustments.length, 1000);
        const res = await client.listAdjustments({ account, pageSize, pageToken }, callOptions);
        adjustments.push(...res.adjustments.slice(0, limit - adjustments.length));
        pageToken = res.nextPageToken;
      } while (pageToken !== "" && adjustments.length < limit);
      if (json)
        printJson(
          jsonOf(ListAdjustmentsResponseSchema, {
            $typeName: "leasehold.queue.v1.ListAdjustmentsResponse",
            adjustments,
            nextPageToken: pageToken,
          }),
        );
      else if (adjustments.length === 0) out("no unsettled adjustments");
      else {
        const rows = adjustments.map((a) => [a.id, a.jobId, a.account || "-", a.workload, usageCell(a), time(a.createdAt)]);
        out(table([["ID", "JOB", "ACCOUNT", "WORKLOAD", "USAGE", "ACCEPTED"], ...rows]));
      }
      return 0;
    },
  },
  {
    name: "adjustment settle",
    positionals: ["ID"],
    options: [
      { name: "key", value: "K", required: true },
      { name: "units", value: "N", required: true },
    ],
    summary: ["record an adjustment's settlement, once (the same --key and --units again answer the same)"],
    async run({ client, callOptions, json, args: [adjustmentId], opts }) {
      const settlementKey = stringOption(opts.key);
      if (settlementKey === undefined || settlementKey === "") throw new UsageError("--key is required");
      const settledUnits = unitsOption(opts.units);
      const res = await client.settleAdjustment({ adjustmentId, settlementKey, settledUnits }, callOptions);
      if (json) printJson(jsonOf(SettleAdjustmentResponseSchema, res));
      else {
        const s = res.adjustment?.settlement;
        out(
          `adjustment ${adjustmentId} settled: key ${s?.settlementKey ?? settlementKey}, ${s?.settledUnits ?? settledUnits} units, at ${time(s?.settledAt)}`,
        );
      }
      return 0;
    },
  },
];
