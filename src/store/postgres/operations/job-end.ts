// Ending a job under its failure policy: is it past its max_failed_tasks (fail_fast: fail it now
// and cancel its unfinished tasks), or are all its tasks final (completed, or failed when past
// max_failed_tasks)? Run after a task fails for good (FailTask, the lease reaper, pending expiry),
// once that failure has committed, and by the reaper's safety net.
//
// Why after the commit: two tasks failing at once each see the other still leased, so neither
// would see the job past its threshold (or done); each ends it (or finds it unfinished) after its own commit, and the later
// one sees both. The same holds for a failure racing the job's last completions, which re-check
// after their commit (complete.ts). Ends of one job run one at a time (JOB_LOCK), and every
// statement that ends a job checks that it is still pending or running while holding its row, so
// a job gets exactly one final status (and one final job_status event).

import type pg from "pg";
import type { Job } from "../../../queue/types.js";
import { isConnectionFailure, transaction } from "../sql/db.js";
import { jobStatusIn } from "../sql/fragments.js";
import { defineQuery } from "../sql/query.js";

/**
 * Job `j` has failed tasks past what it tolerates: its (max_failed_tasks + 1)th failed task exists.
 * Read through tasks_job_failed_idx, which holds only failed tasks.
 */
export const pastThreshold = (j: string) =>
  `EXISTS (SELECT 1 FROM tasks f WHERE f.job_id = ${j}.id AND f.status = 'failed' OFFSET ${j}.max_failed_tasks)`;

/**
 * Job `job` (an expression) has no pending or leased task (`exceptTask`: not counting that one).
 * Asked as the job's first unfinished status, not as a NOT EXISTS: statistics that see most of the
 * table as one job's pending tasks make a sequential scan look like it finds a match at once, and
 * for a job with nothing left it reads the whole table. Ordered by status, only
 * tasks_job_unfinished_idx answers it without a sort: one descent per job, whatever the statistics.
 */
export const nothingUnfinished = (job: string, exceptTask?: string) =>
  `(SELECT o.status FROM tasks o WHERE o.job_id = ${job} AND o.status IN ('pending', 'leased')${exceptTask ? ` AND o.id <> ${exceptTask}` : ""}
    ORDER BY o.status LIMIT 1) IS NULL`;

/** The final status of job `j` once all its tasks are final. */
export const finalStatus = (j: string) => `(CASE WHEN ${pastThreshold(j)} THEN 'failed' ELSE 'completed' END)::job_status`;

/**
 * Ends of one job (and CancelJob, RetryJob) one at a time, without a row lock on the job: the
 * claim and the completions lock a task, then its job, and an end locks the tasks it cancels
 * before the job, in that same order; a lock on the job row taken first would turn a completion
 * of one of those tasks into a deadlock. An advisory lock of the transaction (released at commit),
 * keyed by the job id's hash in Leasehold's own class (a collision only serializes two jobs).
 */
export const JOB_LOCK = defineQuery<{ jobId: string }>(
  "leasehold_job_lock",
  `SELECT pg_advisory_xact_lock(${0x4c48}, hashtext($1::text))`,
  (p) => [p.jobId],
);

/**
 * Several jobs' JOB_LOCK at once (CancelWorkflow, RetryWorkflow), in id order: every caller that
 * takes several takes them in that order, and the others take one.
 */
export const JOB_LOCKS = defineQuery<{ ids: string[] }>(
  null,
  `SELECT pg_advisory_xact_lock(${0x4c48}, hashtext(u.id::text)) FROM unnest($1::uuid[]) AS u(id)`,
  (p) => [[...p.ids].sort()],
);

/*
 * A fail_fast job past its threshold: its pending and leased tasks are cancelled, before the job
 * fails (END_JOB), so the job's final event is the last of the transaction. A leased task keeps
 * its lease_expires_at (and owner and attempt): its result is still accepted until then
 * (late-result.ts). $1 job id.
 */
export const CANCEL_PAST_THRESHOLD = defineQuery<{ jobId: string }>(
  "leasehold_cancel_past_threshold",
  `
UPDATE tasks t SET status = 'cancelled', completed_at = now(), version = t.version + 1
WHERE t.job_id = $1 AND t.status IN ('pending', 'leased')
  AND EXISTS (
    SELECT 1 FROM jobs j
    WHERE j.id = $1 AND j.status IN ('pending', 'running') AND j.failure_policy = 'fail_fast' AND ${pastThreshold("j")}
  )`,
  (p) => [p.jobId],
);

/*
 * The job's final status, when it has one: failed when a fail_fast job is past its threshold (its
 * unfinished tasks were just cancelled), else, when no task is pending or leased, failed past the
 * threshold and completed within it. A job that is neither stays as it is. $1 job id.
 */
export const END_JOB = defineQuery<{ jobId: string }, { id: string; status: Job["status"] }>(
  "leasehold_end_job",
  `
UPDATE jobs j
SET status = CASE WHEN ${pastThreshold("j")} THEN 'failed' ELSE 'completed' END::job_status,
    completed_at = now(), updated_at = now()
WHERE j.id = $1 AND j.status IN ('pending', 'running')
  AND ((j.failure_policy = 'fail_fast' AND ${pastThreshold("j")})
       OR ${nothingUnfinished("j.id")})
RETURNING j.id, j.status`,
  (p) => [p.jobId],
);

/**
 * Runs in its own statement after completions commit (and in pending expiry's transaction), so its
 * snapshot sees every commit that came before: the last of several racing completers always finds
 * the job done. Its final status counts the failed tasks (the failure policy's threshold).
 */
export const FINISH_JOBS_IF_DONE = `
UPDATE jobs j SET status = ${finalStatus("j")}, completed_at = now(), updated_at = now()
WHERE j.id = ANY($1::uuid[]) AND ${jobStatusIn("j.status", "pending", "running")}
  AND ${nothingUnfinished("j.id")}`;
export const FINISH_JOBS = defineQuery<{ jobIds: string[] }>("leasehold_finish_jobs", FINISH_JOBS_IF_DONE, (p) => [p.jobIds]);

/**
 * FINISH_JOBS after a completion committed. A database error here (a deadlock, a statement
 * timeout, a lost connection) must not answer the call as failed: its results are written, and
 * sent again they are replays, which check no job. The lease reaper's safety net (STALLED_JOBS,
 * below) ends a running job with nothing unfinished. Anything else (a bug) still throws.
 */
export async function finishJobsAfterCommit(c: pg.ClientBase, jobIds: string[]): Promise<void> {
  if (jobIds.length === 0) return;
  try {
    await FINISH_JOBS.run(c, { jobIds });
  } catch (err) {
    if (!isDatabaseOrConnectionError(err)) throw err;
  }
}

/** An error from PostgreSQL (it carries a SQLSTATE) or from the connection to it. */
function isDatabaseOrConnectionError(err: unknown): boolean {
  return err instanceof Error && (typeof (err as { code?: unknown }).code === "string" || isConnectionFailure(err));
}

/*
 * The reaper's safety net for a coordinator that died between a failure's or a completion's commit
 * and its end: running jobs with nothing unfinished, and fail_fast ones past their threshold.
 * One partial-index probe per running job (two for a fail_fast one). $1 limit.
 */
const stalled = `j.status = 'running'
    AND (${nothingUnfinished("j.id")}
         OR (j.failure_policy = 'fail_fast' AND ${pastThreshold("j")}))`;
export const STALLED_JOBS_DUE = `EXISTS (SELECT 1 FROM jobs j WHERE ${stalled})`;
export const STALLED_JOBS = defineQuery<{ limit: number }, { id: string }>(
  null,
  `SELECT j.id FROM jobs j WHERE ${stalled} LIMIT $1`,
  (p) => [p.limit],
);

/**
 * Ends one job, if it is done, in a transaction of its own on `c` (see the top of this file); returns the
 * job's status when this call ended it. `c` must not be in a transaction.
 */
export async function endJob(c: pg.PoolClient, jobId: string): Promise<Job["status"] | undefined> {
  return transaction(c, async () => {
    await JOB_LOCK.run(c, { jobId });
    // New statements, new snapshots: these see every end and failure committed before the lock.
    await CANCEL_PAST_THRESHOLD.run(c, { jobId });
    return (await END_JOB.maybe(c, { jobId }))?.status;
  });
}

/** endJob for several jobs, one transaction each, in a fixed order. */
export async function endJobs(c: pg.PoolClient, jobIds: Iterable<string>): Promise<void> {
  for (const id of [...new Set(jobIds)].sort()) await endJob(c, id);
}
