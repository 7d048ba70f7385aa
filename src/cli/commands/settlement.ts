// Settling jobs: `settlements list` (final billable jobs not yet settled, oldest final first) and
// `job settle` (record one job's settlement, once).
import { ListSettlementsResponseSchema, SettleJobResponseSchema, type Job } from "../../../gen/leasehold/queue/v1/queue_pb.js";
import { intOption, stringOption } from "../args.js";
import type { CommandSpec } from "../command.js";
import { UsageError } from "../errors.js";
import { jobStatusName, jsonOf, out, printJson, table, time } from "../format.js";

type OptionValue = string | string[] | boolean | undefined;

/** --units: an integer ≥ 0 (int64: past 2^31, as the field allows). */
export function unitsOption(value: OptionValue): bigint {
  if (typeof value !== "string" || !/^\d{1,19}$/.test(value) || BigInt(value) > BigInt(Number.MAX_SAFE_INTEGER))
    throw new UsageError(`--units must be an integer from 0 to ${Number.MAX_SAFE_INTEGER}, not ${JSON.stringify(value ?? "")}`);
  return BigInt(value);
}

/** Usage counters as "gpu_ms=1200 tokens=7" ("-" for none). */
function usageCell(j: Job): string {
  const entries = Object.entries(j.usage).sort(([a], [b]) => a.localeCompare(b));
  return entries.length === 0 ? "-" : entries.map(([k, v]) => `${k}=${v}`).join(" ");
}

export const settlementCommands: CommandSpec[] = [
  {
    name: "settlements list",
    positionals: [],
    options: [
      { name: "account", value: "A" },
      { name: "limit", value: "N" },
    ],
    summary: ["final billable jobs not yet settled, oldest final first (at most --limit, default 100)"],
    async run({ client, callOptions, json, opts }) {
      const account = stringOption(opts.account) ?? "";
      const limit = intOption("limit", opts.limit, 1) ?? 100;
      const jobs: Job[] = [];
      let pageToken = "";
      do {
        const pageSize = Math.min(limit - jobs.length, 1000);
        const res = await client.listSettlements({ account, pageSize, pageToken }, callOptions);
        jobs.push(...res.jobs.slice(0, limit - jobs.length));
        pageToken = res.nextPageToken;
      } while (pageToken !== "" && jobs.length < limit);
      if (json)
        printJson(
          jsonOf(ListSettlementsResponseSchema, {
            $typeName: "leasehold.queue.v1.ListSettlementsResponse",
            jobs,
            nextPageToken: pageToken,
          }),
        );
      else if (jobs.length === 0) out("no unsettled jobs");
      else {
        const rows = jobs.map((j) => [
          j.id,
          jobStatusName(j.status),
          j.account || "-",
          j.billing ? String(j.billing.reservedUnits) : "-",
          j.billing?.billingKey || "-",
          usageCell(j),
          time(j.completedAt),
        ]);
        out(table([["ID", "STATUS", "ACCOUNT", "RESERVED", "BILLING KEY", "USAGE", "FINAL"], ...rows]));
      }
      return 0;
    },
  },
  {
    name: "job settle",
    positionals: ["ID"],
    options: [
      { name: "key", value: "K", required: true },
      { name: "units", value: "N", required: true },
    ],
    summary: ["record a final billable job's settlement, once (the same --key and --units", "again answer the same)"],
    async run({ client, callOptions, json, args: [jobId], opts }) {
      const settlementKey = stringOption(opts.key);
      if (settlementKey === undefined || settlementKey === "") throw new UsageError("--key is required");
      const settledUnits = unitsOption(opts.units);
      const res = await client.settleJob({ jobId, settlementKey, settledUnits }, callOptions);
      if (json) printJson(jsonOf(SettleJobResponseSchema, res));
      else {
        const s = res.job?.settlement;
        out(
          `job ${jobId} settled: key ${s?.settlementKey ?? settlementKey}, ${s?.settledUnits ?? settledUnits} units, at ${time(s?.settledAt)}`,
        );
      }
      return 0;
    },
  },
];
