// GetAccountUsage: an account's use per workload, read from the rollup (account_usage) that
// usage-rollup.ts keeps equal to what the account's final jobs hold.

import type { AccountUsage, AccountUsageInput, Usage } from "../../../queue/types.js";
import type { CallOptions } from "../../../queue/types.js";
import { validateAccountUsage } from "../../../queue/usage.js";
import { requireAccount } from "./accounts.js";
import type { StoreContext } from "../state/context.js";
import { withClient } from "../sql/db.js";
import { defineQuery } from "../sql/query.js";

/*
 * GetAccountUsage: the rollup's rows of the account (usage-rollup.ts) whose hour starts in
 * [from, to), summed per workload; the primary key (account, hour, workload) finds them. Its cost
 * follows the hours and workloads asked for, not the tasks run: a year of one workload is 8,760 rows.
 * Jobs not yet counted by the rollup (final since its last pass) are not in it. A workload whose
 * rows sum to nothing in the interval (a job counted there, then retried into another hour: its
 * parts subtracted) is left out, as one that never ran there.
 * $1 account, $2 from (null: the beginning), $3 to (null: no end).
 */
const ACCOUNT_USAGE = defineQuery<
  { account: string; from: Date | null; to: Date | null },
  { workload: string; jobs: string; tasks_completed: string; tasks_failed: string; lease_seconds: number; usage: Usage | null }
>(
  null,
  `
WITH r AS MATERIALIZED (
  SELECT workload, jobs, tasks_completed, tasks_failed, lease_seconds, usage FROM account_usage
  WHERE account = $1 AND hour >= coalesce($2::timestamptz, '-infinity') AND hour < coalesce($3::timestamptz, 'infinity')
), sums AS (
  SELECT workload, jsonb_object_agg(k, s) AS usage
  FROM (SELECT r.workload, e.key AS k, sum(e.value::numeric) AS s FROM r CROSS JOIN LATERAL jsonb_each_text(r.usage) e GROUP BY r.workload, e.key) u
  GROUP BY workload
)
SELECT r.workload, sum(r.jobs)::text AS jobs, sum(r.tasks_completed)::text AS tasks_completed, sum(r.tasks_failed)::text AS tasks_failed,
  sum(r.lease_seconds)::float8 AS lease_seconds, min(s.usage::text)::jsonb AS usage
FROM r LEFT JOIN sums s USING (workload)
GROUP BY r.workload
HAVING sum(r.jobs) + sum(r.tasks_completed) + sum(r.tasks_failed) > 0
ORDER BY r.workload`,
  (p) => [p.account, p.from, p.to],
);

export async function getAccountUsage(ctx: StoreContext, input: AccountUsageInput, opts: CallOptions): Promise<AccountUsage> {
  const q = validateAccountUsage(input);
  return withClient(ctx.pool, opts.signal, async (c) => {
    await requireAccount(c, q.account, "account");
    const rows = await ACCOUNT_USAGE.run(c, q);
    return {
      account: q.account,
      workloads: rows.map((r) => ({
        workload: r.workload,
        jobs: Number(r.jobs),
        tasksCompleted: Number(r.tasks_completed),
        tasksFailed: Number(r.tasks_failed),
        leaseSeconds: r.lease_seconds,
        usage: r.usage ?? {},
      })),
    };
  });
}
