// The usage rollup: every final job of an account is counted into account_usage (per account,
// hour of the job's completed_at in UTC, and workload: jobs, tasks completed and failed, lease
// seconds of the tasks' attempts, usage summed per counter), so GetAccountUsage reads a few rows per
// hour and workload, never the tasks. Run by StoreMaintenance (store-maintenance.ts) when its probe finds
// a job to count (jobs_unrolled_idx); GetAccountUsage's read is in operations/account-usage.ts.
//
// Each job is counted once, and counted again when it changes after that: RetryJob (once the job is
// final again) and a late result (late-result.ts) clear its rolled_up_at. The rollup keeps what it
// added of each job (jobs.rolled_usage) and adds the difference, the new parts less the old ones,
// so account_usage is always the sum of what its jobs hold now: its usage equals the sum of the
// account's final jobs' Job.usage, retried or not (a job that ends in another hour moves there).
//
// A batch is two statements in one transaction: PICK_UNROLLED takes the jobs FOR UPDATE SKIP LOCKED,
// then ROLL_UP_USAGE counts them in a snapshot of its own, taken after the locks. So coordinators
// running it at once take disjoint jobs, and whatever changes a counted job (a late result, a
// retry) either committed before that snapshot (and is counted) or waits for this commit on the
// job's row and then gives the job back to the rollup (counted next pass). In one statement, a
// change committed between the statement's snapshot and its lock was marked as counted unseen.

import type pg from "pg";
import { inTransaction } from "../sql/db.js";
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

/** One batch's jobs: the oldest final jobs of accounts not counted since they last changed, locked. $1 jobs per batch. */
export const PICK_UNROLLED = defineQuery<{ batchJobs: number }, { id: string }>(
  "leasehold_pick_unrolled",
  `
SELECT id FROM jobs
WHERE rolled_up_at IS NULL AND account IS NOT NULL AND status IN ('completed', 'failed', 'cancelled')
ORDER BY completed_at, id
LIMIT $1
FOR UPDATE SKIP LOCKED`,
  (p) => [p.batchJobs],
);

/** A part of a job's count, as rolled_usage keeps it. */
const partFields = `'hour', n.hour, 'workload', n.workload, 'jobs', n.jobs, 'tasks_completed', n.tasks_completed,
      'tasks_failed', n.tasks_failed, 'lease_seconds', n.lease_seconds, 'usage', n.usage`;

/*
 * One batch, the jobs PICK_UNROLLED locked: their tasks (tasks_job_chunk_idx) and their tasks'
 * status events (by job, task_events' (job_id, xid) index; only events written since the oldest
 * job of the batch was created, so old partitions are skipped). An attempt's lease seconds run
 * from its `leased` event to the task's next status event (completed, failed, retried, expired,
 * cancelled); an attempt without one (a lease still running when a job was cancelled and never
 * reported) counts nothing. Each job's parts (per workload: jobs are counted under their own
 * workload, tasks and lease seconds under the task's) are what the job holds now; less the parts
 * the rollup added of it before (rolled_usage: none for a job counted the first time), they are
 * the delta merged into account_usage with ON CONFLICT, which serialises coordinators adding to
 * one (account, hour, workload) row; in key order, so two batches that add to the same rows lock
 * them in the same order and wait for each other, never deadlock. The new parts are kept.
 * $1 the jobs. Returns one row per job counted.
 */
export const ROLL_UP_USAGE = defineQuery<{ jobIds: string[] }, { id: string }>(
  "leasehold_roll_up_usage",
  `
WITH picked AS MATERIALIZED (
  SELECT id, account, workload, completed_at, created_at, rolled_usage FROM jobs
  WHERE id = ANY ($1::uuid[]) AND status IN ('completed', 'failed', 'cancelled')
), picked_tasks AS MATERIALIZED (
  SELECT p.id AS job_id, p.account, ${hourOf("p.completed_at")} AS hour, t.id, t.workload, t.status, t.usage
  FROM picked p JOIN tasks t ON t.job_id = p.id
), leases AS (
  SELECT e.task_id, e.status, extract(epoch FROM lead(e.created_at) OVER (PARTITION BY e.task_id ORDER BY e.id) - e.created_at) AS secs
  FROM task_events e
  WHERE e.job_id = ANY (ARRAY(SELECT id FROM picked)) AND e.kind = 'task_status'
    AND e.created_at >= (SELECT min(created_at) FROM picked)
), parts AS (
  SELECT job_id, account, hour, workload, sum(jobs)::bigint AS jobs, sum(completed)::bigint AS tasks_completed,
         sum(failed)::bigint AS tasks_failed, sum(secs)::float8 AS lease_seconds
  FROM (
    SELECT id AS job_id, account, ${hourOf("completed_at")} AS hour, workload, 1 AS jobs, 0 AS completed, 0 AS failed, 0::float8 AS secs FROM picked
    UNION ALL
    SELECT job_id, account, hour, workload, 0, (status = 'completed')::int, (status = 'failed')::int, 0 FROM picked_tasks
    UNION ALL
    SELECT t.job_id, t.account, t.hour, t.workload, 0, 0, 0, l.secs FROM leases l JOIN picked_tasks t ON t.id = l.task_id
    WHERE l.status = 'leased' AND l.secs IS NOT NULL
  ) x
  GROUP BY job_id, account, hour, workload
), part_sums AS (
  SELECT job_id, workload, jsonb_object_agg(k, s) AS usage
  FROM (
    SELECT t.job_id, t.workload, e.key AS k, sum(e.value::numeric) AS s
    FROM picked_tasks t CROSS JOIN LATERAL jsonb_each_text(t.usage) e
    GROUP BY t.job_id, t.workload, e.key
  ) u
  GROUP BY job_id, workload
), new_parts AS MATERIALIZED (
  SELECT p.*, coalesce(s.usage, '{}') AS usage FROM parts p LEFT JOIN part_sums s USING (job_id, workload)
), old_parts AS MATERIALIZED (
  SELECT p.account, (o->>'hour')::timestamptz AS hour, o->>'workload' AS workload, (o->>'jobs')::bigint AS jobs,
    (o->>'tasks_completed')::bigint AS tasks_completed, (o->>'tasks_failed')::bigint AS tasks_failed,
    (o->>'lease_seconds')::float8 AS lease_seconds, o->'usage' AS usage
  FROM picked p CROSS JOIN LATERAL jsonb_array_elements(p.rolled_usage) o
  WHERE p.rolled_usage IS NOT NULL
), delta AS (
  SELECT account, hour, workload, sum(jobs)::bigint AS jobs, sum(tasks_completed)::bigint AS tasks_completed,
         sum(tasks_failed)::bigint AS tasks_failed, sum(lease_seconds)::float8 AS lease_seconds
  FROM (
    SELECT account, hour, workload, jobs, tasks_completed, tasks_failed, lease_seconds FROM new_parts
    UNION ALL
    SELECT account, hour, workload, -jobs, -tasks_completed, -tasks_failed, -lease_seconds FROM old_parts
  ) x
  GROUP BY account, hour, workload
), delta_sums AS (
  SELECT account, hour, workload, jsonb_object_agg(k, s) AS usage
  FROM (
    SELECT x.account, x.hour, x.workload, e.key AS k, sum(x.sign * e.value::numeric) AS s
    FROM (
      SELECT account, hour, workload, usage, 1 AS sign FROM new_parts
      UNION ALL
      SELECT account, hour, workload, usage, -1 FROM old_parts
    ) x CROSS JOIN LATERAL jsonb_each_text(x.usage) e
    GROUP BY x.account, x.hour, x.workload, e.key
  ) u
  GROUP BY account, hour, workload
), added AS (
  INSERT INTO account_usage AS a (account, hour, workload, jobs, tasks_completed, tasks_failed, lease_seconds, usage)
  SELECT d.account, d.hour, d.workload, d.jobs, d.tasks_completed, d.tasks_failed, d.lease_seconds, coalesce(s.usage, '{}')
  FROM delta d LEFT JOIN delta_sums s USING (account, hour, workload)
  ORDER BY d.account, d.hour, d.workload
  ON CONFLICT (account, hour, workload) DO UPDATE SET
    jobs = a.jobs + EXCLUDED.jobs,
    tasks_completed = a.tasks_completed + EXCLUDED.tasks_completed,
    tasks_failed = a.tasks_failed + EXCLUDED.tasks_failed,
    lease_seconds = a.lease_seconds + EXCLUDED.lease_seconds,
    usage = CASE WHEN EXCLUDED.usage = '{}' THEN a.usage ELSE ${usageSum("a.usage", "EXCLUDED.usage")} END
), marked AS (
  UPDATE jobs j SET rolled_up_at = now(),
    rolled_usage = (SELECT jsonb_agg(jsonb_build_object(${partFields})) FROM new_parts n WHERE n.job_id = j.id)
  FROM picked p WHERE j.id = p.id
  RETURNING j.id
)
SELECT id FROM marked`,
  (p) => [p.jobIds],
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
      const picked = await inTransaction(this.pool, signal, async (c) => {
        const jobs = await PICK_UNROLLED.run(c, { batchJobs: this.batchJobs });
        if (jobs.length > 0) await ROLL_UP_USAGE.run(c, { jobIds: jobs.map((j) => j.id) });
        return jobs.length;
      });
      counted += picked;
      if (picked < this.batchJobs) break;
    }
    return counted;
  }
}
