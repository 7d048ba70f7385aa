// Task counts by workload and status for metrics (TaskStatsSource), read at scrape time.

import { TASK_STATUSES, type CallOptions, type TaskCounts, type WorkloadTaskStats } from "../../../queue/types.js";
import type { StoreContext } from "../state/context.js";
import { transaction, withClient } from "../sql/db.js";
import { defineQuery, type NoParams } from "../sql/query.js";

interface StatsRow {
  workload: string;
  status: keyof TaskCounts;
  n: number;
  oldest_pending_seconds: number;
}

// Metrics: unfinished tasks by workload and status, read through a partial index that holds
// exactly them (tasks_job_unfinished_idx), and the oldest claimable one per workload.
export const UNFINISHED_TASK_STATS = defineQuery<NoParams, StatsRow>(
  null,
  `
SELECT workload, status::text AS status, count(*)::int AS n,
  coalesce(extract(epoch FROM now() - min(run_after) FILTER (WHERE status = 'pending' AND run_after <= now())), 0)::float8 AS oldest_pending_seconds
FROM tasks
WHERE status IN ('pending', 'leased')
GROUP BY workload, status`,
);

// Metrics, rarely: every task by workload and status, a full scan (run with seqscan allowed).
export const ALL_TASK_STATS = defineQuery<NoParams, StatsRow>(
  null,
  `SELECT workload, status::text AS status, count(*)::int AS n, 0::float8 AS oldest_pending_seconds FROM tasks GROUP BY workload, status`,
);

export async function taskStats(ctx: StoreContext, scope: "unfinished" | "all", opts: CallOptions): Promise<WorkloadTaskStats[]> {
  const rows = await withClient(ctx.pool, opts.signal, async (c) => {
    const unfinished = await UNFINISHED_TASK_STATS.run(c);
    if (scope === "unfinished") return unfinished;
    // A count of everything wants a sequential scan, also where the role still turns them off
    // (an older deployment behind a pooler set enable_seqscan=off for it).
    const all = await transaction(c, async () => {
      await c.query("SET LOCAL enable_seqscan = on");
      return ALL_TASK_STATS.run(c);
    });
    // Counts from the full scan; the oldest-pending ages from the unfinished query.
    return [...all, ...unfinished.map((r) => ({ ...r, n: 0 }))];
  });
  const byWorkload = new Map<string, WorkloadTaskStats>();
  for (const r of rows) {
    let stats = byWorkload.get(r.workload);
    if (!stats) byWorkload.set(r.workload, (stats = { workload: r.workload, counts: emptyCounts(), oldestPendingSeconds: 0 }));
    stats.counts[r.status] += r.n;
    stats.oldestPendingSeconds = Math.max(stats.oldestPendingSeconds, r.oldest_pending_seconds);
  }
  return [...byWorkload.values()].sort((a, b) => a.workload.localeCompare(b.workload));
}

export function emptyCounts(): TaskCounts {
  return Object.fromEntries(TASK_STATUSES.map((s) => [s, 0])) as TaskCounts;
}
