// `account usage NAME [--from T] [--to T]`: GetAccountUsage (billing and admin), the account's
// usage per workload from the rollup (account_usage), over the hours that start in [from, to).
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { GetAccountUsageResponseSchema } from "../../../gen/leasehold/queue/v1/queue_pb.js";
import { stringOption } from "../args.js";
import type { CommandSpec } from "../command.js";
import { UsageError } from "../errors.js";
import { jsonOf, out, printJson, table } from "../format.js";

/** --from / --to: an RFC 3339 time (a date alone is its midnight UTC). */
function timeOption(name: string, value: string | string[] | boolean | undefined) {
  const s = stringOption(value);
  if (s === undefined) return undefined;
  const d = new Date(s);
  if (!/^\d{4}-\d{2}-\d{2}/.test(s) || Number.isNaN(d.getTime()))
    throw new UsageError(`--${name} must be an RFC 3339 time (2026-12-01T18:00:00Z) or a date (2026-12-01), not ${JSON.stringify(s)}`);
  return timestampFromDate(d);
}

/** Counters as "gpu_ms=1200 tokens=7", by name. */
const counters = (u: { [k: string]: bigint }) =>
  Object.keys(u)
    .sort()
    .map((k) => `${k}=${u[k]}`)
    .join(" ") || "-";

export const accountUsageCommands: CommandSpec[] = [
  {
    name: "account usage",
    positionals: ["NAME"],
    options: [
      { name: "from", value: "RFC3339" },
      { name: "to", value: "RFC3339" },
    ],
    summary: [
      "an account's usage per workload: jobs, tasks completed",
      "and failed, lease seconds, usage counters (the hours",
      "that start in [--from, --to); jobs final since the",
      "last rollup pass are not in it yet)",
    ],
    async run({ client, callOptions, json, args: [name], opts }) {
      const from = timeOption("from", opts["from"]);
      const to = timeOption("to", opts["to"]);
      const res = await client.getAccountUsage({ account: name, from, to }, callOptions);
      if (json) printJson(jsonOf(GetAccountUsageResponseSchema, res));
      else if (res.workloads.length === 0) out(`no usage recorded for account ${res.account}`);
      else
        out(
          table([
            ["WORKLOAD", "JOBS", "COMPLETED", "FAILED", "LEASE_SECONDS", "USAGE"],
            ...res.workloads.map((w) => [
              w.workload,
              String(w.jobs),
              String(w.tasksCompleted),
              String(w.tasksFailed),
              w.leaseSeconds.toFixed(1),
              counters(w.usage),
            ]),
          ]),
        );
      return 0;
    },
  },
];
