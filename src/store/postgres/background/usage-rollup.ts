// The usage rollup: every final job of an account is counted once into account_usage (per account,
// hour of the job's completed_at in UTC, and workload: jobs, tasks completed and failed, lease
// seconds of the tasks' attempts, usage summed per counter), so GetAccountUsage reads a few rows per
// hour and workload, never the tasks. Run by StoreMaintenance (store-maintenance.ts) when its probe finds
// a job to count (jobs_unrolled_idx); GetAccountUsage's read is in operations/account-usage.ts.
//
// Once per job: the statement takes its jobs FOR UPDATE SKIP LOCKED and marks them (rolled_up_at)
// in the transaction that adds them, so coordinators running it at once take disjoint jobs, and a
// job marked by a transaction that committed after this one's snapshot is re-checked by the row
// lock (READ COMMITTED) and left out. A job that is retried after it was counted (RetryJob) is not
// counted again: the rollup is what the account's jobs had used when they first became final.

import type pg from "pg";
import { withClient } from "../sql/db.js";
import { usageSum } from "../sql/fragments.js";
import { defineQuery } from "../sql/query.js";

export interface UsageRollupConfig {
  /** Jobs counted per statement (each with all its tasks and their events). */
  batchJobs?: number;
  /** Statements per pass, so one pass stays short however much is due. */
  batchesPerPass?: number;
}

export const USAGE_ROLLUP_DEFAULTS = { batchJobs: 50, batchesPerPass: 20 } as const;

/** The hour a job's completion is counted in: UTC, whatever the session's TimeZone. */
const hourOf = (t: string) => `date_trunc('hour', ${t}, 'UTC')`;

/*
 * One batch: the oldest final jobs of accounts not yet counted, their tasks (tasks_job_chunk_idx)
 * and their tasks' status events (by job, task_events' (job_id, xid) index; only events written
 * since the oldest job of the batch was created, so old partitions are skipped). An attempt's lease
 * seconds run from its `leased` event to the task's next status event (completed, failed, retried,
 * expired, cancelled); an attempt without one (a lease still running when a job was cancelled and
 * never reported) counts nothing. The counts are merged into account_usage with ON CONFLICT, which
 * serialises coordinators adding to one (account, hour, workload) row; in key order, so two batches
 * that add to the same rows lock them in the same order and wait for each other, never deadlock.
 * Jobs are counted under their own workload, tasks and lease seconds under the task's.
 * $1 jobs per batch. Returns one row per job counted.
 */
export const ROLL_UP_USAGE = defineQuery<{ batchJobs: number }, { id: string }>(
  "leasehold_roll_up_usage",
  `
WITH picked AS (
  SELECT id, account, workload, completed_at, created_at FROM jobs
  WHERE rolled_up_at IS NULL AND account IS NOT NULL AND status IN ('completed', 'failed', 'cancelled')
  ORDER BY completed_at, id
  LIMIT $1
  FOR UPDATE SKIP LOCKED
), marked AS (
  UPDATE jobs j SET rolled_up_at = now() FROM picked p WHERE j.id = p.id RETURNING j.id
), picked_tasks AS MATERIALIZED (
  SELECT p.account, ${hourOf("p.completed_at")} AS hour, t.id, t.workload, t.status, t.usage
  FROM picked p JOIN tasks t ON t.job_id = p.id
), leases AS (
  SELECT e.task_id, e.status, extract(epoch FROM lead(e.created_at) OVER (PARTITION BY e.task_id ORDER BY e.id) - e.created_at) AS secs
  FROM task_events e
  WHERE e.job_id = ANY (ARRAY(SELECT id FROM picked)) AND e.kind = 'task_status'
    AND e.created_at >= (SELECT min(created_at) FROM picked)
), counts AS (
  SELECT account, hour, workload, sum(jobs)::bigint AS jobs, sum(completed)::bigint AS tasks_completed,
         sum(failed)::bigint AS tasks_failed, sum(secs)::float8 AS lease_seconds
  FROM (
    SELECT account, ${hourOf("completed_at")} AS hour, workload, 1 AS jobs, 0 AS completed, 0 AS failed, 0::float8 AS secs FROM picked
    UNION ALL
    SELECT account, hour, workload, 0, (status = 'completed')::int, (status = 'failed')::int, 0 FROM picked_tasks
    UNION ALL
    SELECT t.account, t.hour, t.workload, 0, 0, 0, l.secs FROM leases l JOIN picked_tasks t ON t.id = l.task_id
    WHERE l.status = 'leased' AND l.secs IS NOT NULL
  ) x
  GROUP BY account, hour, workload
), sums AS (
  SELECT account, hour, workload, jsonb_object_agg(k, s) AS usage
  FROM (
    SELECT t.account, t.hour, t.workload, e.key AS k, sum(e.value::numeric) AS s
    FROM picked_tasks t CROSS JOIN LATERAL jsonb_each_text(t.usage) e
    GROUP BY t.account, t.hour, t.workload, e.key
  ) u
  GROUP BY account, hour, workload
), added AS (
  INSERT INTO account_usage AS a (account, hour, workload, jobs, tasks_completed, tasks_failed, lease_seconds, usage)
  SELECT c.account, c.hour, c.workload, c.jobs, c.tasks_completed, c.tasks_failed, c.lease_seconds, coalesce(s.usage, '{}')
  FROM counts c LEFT JOIN sums s USING (account, hour, workload)
  ORDER BY c.account, c.hour, c.workload
  ON CONFLICT (account, hour, workload) DO UPDATE SET
    jobs = a.jobs + EXCLUDED.jobs,
    tasks_completed = a.tasks_completed + EXCLUDED.tasks_completed,
    tasks_failed = a.tasks_failed + EXCLUDED.tasks_failed,
    lease_seconds = a.lease_seconds + EXCLUDED.lease_seconds,
    usage = CASE WHEN EXCLUDED.usage = '{}' THEN a.usage ELSE ${usageSum("a.usage", "EXCLUDED.usage")} END
)
SELECT id FROM marked`,
  (p) => [p.batchJobs],
);

/** Whether any final job of an account waits to be counted (jobs_unrolled_idx): the maintenance probe's part. */
export const UNROLLED_JOBS_DUE = `EXISTS (
    SELECT 1 FROM jobs WHERE rolled_up_at IS NULL AND account IS NOT NULL AND status IN ('completed', 'failed', 'cancelled')
  )`;

export class UsageRollup {
  private readonly batchJobs: number;
  private readonly batchesPerPass: number;

  constructor(
    private readonly pool: pg.Pool,
    config: UsageRollupConfig = {},
  ) {
    this.batchJobs = config.batchJobs ?? USAGE_ROLLUP_DEFAULTS.batchJobs;
    this.batchesPerPass = config.batchesPerPass ?? USAGE_ROLLUP_DEFAULTS.batchesPerPass;
  }

  /** One pass; returns how many jobs were counted. Each batch is its own statement and transaction. */
  async runOnce(signal: AbortSignal | undefined): Promise<number> {
    let counted = 0;
    for (let i = 0; i < this.batchesPerPass; i++) {
      const jobs = await withClient(this.pool, signal, (c) => ROLL_UP_USAGE.run(c, { batchJobs: this.batchJobs }));
      counted += jobs.length;
      if (jobs.length < this.batchJobs) break;
    }
    return counted;
  }
}
