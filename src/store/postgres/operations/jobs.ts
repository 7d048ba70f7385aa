// Jobs as their owners see them: GetJobStatus (with the failure of a failed job),
// ListCompletedResults, CancelJob, RetryJob and ListJobs.

import type pg from "pg";
import { FailedPreconditionError, NotFoundError } from "../../../queue/errors.js";
import type {
  CallOptions,
  CancelJobInput,
  Job,
  JobFailure,
  JobStatusResult,
  JsonObject,
  ListCompletedResultsInput,
  ListCompletedResultsResult,
  ListJobsInput,
  ListJobsResult,
  RetryJobInput,
  RetryJobResult,
  TaskCounts,
} from "../../../queue/types.js";
import { encodeJobsPageToken, encodePageToken, validateListJobs, validateListResults } from "../../../queue/list-validation.js";
import { LIMITS, requireUuid, validateCancel, validateRetryJob } from "../../../queue/validation.js";
import { NOTIFY_CHANNEL } from "../sql/channels.js";
import type { StoreContext } from "../state/context.js";
import { inTransaction, withClient } from "../sql/db.js";
import { defineQuery } from "../sql/query.js";
import { accountScope } from "../sql/scope.js";
import { toJob, type JobRow, type TaskRow } from "../sql/rows.js";
import { JOB_LOCK } from "./job-end.js";
import { quotaGate } from "./accounts.js";
import { emptyCounts } from "./task-stats.js";
import { withParents } from "./dependencies.js";
import { retryJobWithParents } from "./workflow-retry.js";
import type { Usage } from "../../../queue/types.js";

type JobId = { jobId: string };
const jobIdValue = (p: JobId) => [p.jobId];

/**
 * A bound token's account (CallOptions.account): a statement that takes one matches only that
 * account's jobs, so another account's job is not found, by the same statement and the same work
 * as a job that does not exist. null: every job (an unbound token, single-tenant mode).
 */
type Scoped = { account?: string | null };
const scopeValue = (p: Scoped) => p.account ?? null;

export const SELECT_JOB = defineQuery<JobId & Scoped, JobRow>(
  null,
  `SELECT *, run_at > now() AS run_at_ahead FROM jobs WHERE id = $1 AND ${accountScope("$2::text IS NULL OR account = $2")}`,
  (p) => [p.jobId, scopeValue(p)],
);

/*
 * The job's tasks counted by status, and (one more row, status NULL) its usage: the sum of its
 * tasks' usage per counter, read at read time from the same scan of the job's tasks rather than
 * kept on the job row, which every completion would then update.
 */
export const COUNT_JOB_TASKS = defineQuery<JobId, { status: keyof TaskCounts | null; n: number; usage: Usage | null }>(
  null,
  `WITH t AS MATERIALIZED (SELECT status, usage FROM tasks WHERE job_id = $1)
SELECT status, count(*)::int AS n, NULL::jsonb AS usage FROM t GROUP BY status
UNION ALL
SELECT NULL, 0, (SELECT jsonb_object_agg(u.k, u.s) FROM (SELECT e.key AS k, sum(e.value::numeric) AS s
  FROM t CROSS JOIN LATERAL jsonb_each_text(t.usage) e GROUP BY e.key) u)`,
  jobIdValue,
);

/** A completed task's result: a completed task always has one (only CompleteTask completes a task). */
interface CompletedResultRow {
  chunk_index: number;
  id: string;
  result_uri: string;
  result_sha256: string;
  metrics: JsonObject | null;
  completed_at: Date;
}

// Keyset pagination on (job_id, chunk_index): the unique index returns each page in chunk order.
// $4: the caller's account (Scoped), checked once on the job's row by its key.
export const LIST_COMPLETED_RESULTS = defineQuery<{ jobId: string; afterChunk: number; limit: number } & Scoped, CompletedResultRow>(
  null,
  `
SELECT chunk_index, id, result_uri, result_sha256, metrics, completed_at
FROM tasks
WHERE job_id = $1 AND chunk_index > $2 AND status = 'completed'
  AND ${accountScope("$4::text IS NULL OR (SELECT j.account FROM jobs j WHERE j.id = $1) = $4")}
ORDER BY chunk_index
LIMIT $3`,
  (p) => [p.jobId, p.afterChunk, p.limit, scopeValue(p)],
);

export const JOB_EXISTS = defineQuery<JobId & Scoped, { found: boolean }>(
  null,
  `SELECT EXISTS (SELECT 1 FROM jobs j WHERE j.id = $1 AND ${accountScope("$2::text IS NULL OR j.account = $2")}) AS found`,
  (p) => [p.jobId, scopeValue(p)],
);

// Cancel: tasks first, then the job, the same lock order as the claim (tasks, then job), so a
// cancel racing a claim cannot deadlock; the job's final event is then the transaction's last. A
// leased task keeps its lease (owner, attempt, lease_expires_at): its result is still accepted
// until the lease would have expired (late-result.ts). A waiting job's tasks are waiting.
export const CANCEL_JOB_TASKS = defineQuery<JobId>(
  null,
  `
UPDATE tasks SET status = 'cancelled', completed_at = now(), version = version + 1
WHERE job_id = $1 AND status IN ('pending', 'leased', 'waiting')`,
  jobIdValue,
);

export const CANCEL_JOB = defineQuery<{ jobId: string; reason: string | null }, JobRow>(
  null,
  `
UPDATE jobs SET status = 'cancelled', cancel_reason = $2, completed_at = now(), updated_at = now()
WHERE id = $1 AND status IN ('pending', 'running')
RETURNING *`,
  (p) => [p.jobId, p.reason],
);

/*
 * RetryJob: a failed or cancelled job's failed and cancelled tasks go back to pending with a fresh
 * attempt budget on top of the attempts used (attempt stays the fencing token, so it never goes
 * back: a worker still holding an old attempt can never match a new lease), capped at $3; so do
 * the failed tasks of a completed job that tolerated them (max_failed_tasks). Completed tasks keep
 * their results. Tasks first, then the job, the lock order of the claim and of CancelJob. The job
 * is pending again, or running when some of its tasks have run. Claimable work wakes long polls.
 * A settled job is never retried: its settlement answered for the work done, so more work is a new
 * job (an unsettled one leaves ListSettlements until it is final again). A job the usage rollup
 * counted is given back to it (rolled_up_at cleared): once final again it is counted anew, as the
 * difference from what was counted (usage-rollup.ts).
 * $1 job id, $2 fresh attempts (null: the workload's max_attempts), $3 attempt cap, $4 the
 * caller's account (Scoped: another account's job retries nothing and is then not found).
 */
export const RETRY_JOB = defineQuery<
  { jobId: string; maxAttempts: number | null; attemptCap: number } & Scoped,
  JobRow & { retried_tasks: number }
>(
  null,
  `
WITH retried AS (
  UPDATE tasks t
  SET status = 'pending',
      max_attempts = least(t.attempt + coalesce($2::int, wl.max_attempts), $3::int),
      run_after = now(), completed_at = NULL, lease_expires_at = NULL,
      error_code = NULL, error_message = NULL, version = t.version + 1
  FROM workloads wl
  WHERE t.job_id = $1 AND t.status IN ('failed', 'cancelled') AND wl.name = t.workload AND t.attempt < $3::int
    AND EXISTS (SELECT 1 FROM jobs j WHERE j.id = $1 AND j.status IN ('failed', 'cancelled', 'completed') AND j.settled_at IS NULL
                AND ${accountScope("$4::text IS NULL OR j.account = $4")})
  RETURNING t.workload
), job AS (
  UPDATE jobs j
  SET status = CASE WHEN EXISTS (SELECT 1 FROM tasks o WHERE o.job_id = $1 AND o.started_at IS NOT NULL)
                 THEN 'running' ELSE 'pending' END::job_status,
      completed_at = NULL, cancel_reason = NULL, updated_at = now(), rolled_up_at = NULL
  WHERE j.id = $1 AND j.status IN ('failed', 'cancelled', 'completed') AND j.settled_at IS NULL AND EXISTS (SELECT 1 FROM retried)
  RETURNING j.*
), woken AS (
  SELECT pg_notify('${NOTIFY_CHANNEL}', workload || ':' || count(*)) FROM retried GROUP BY workload
)
SELECT job.*, (SELECT count(*) FROM retried)::int AS retried_tasks, (SELECT count(*) FROM woken) AS notified FROM job`,
  (p) => [p.jobId, p.maxAttempts, p.attemptCap, scopeValue(p)],
);

/*
 * What a RetryJob of a job of an account adds to the account's quota count (accounts.ts): the tasks
 * it makes pending again (as RETRY_JOB picks them) and, when the job's finalizer is still to come,
 * the task held for it. Nothing for a job without an account, one that is not retried, or another
 * account's (Scoped). $1 job id, $2 attempt cap, $3 the caller's account.
 */
export const RETRY_QUOTA = defineQuery<{ jobId: string; attemptCap: number } & Scoped, { account: string; tasks: number }>(
  null,
  `
SELECT j.account, ((SELECT count(*) FROM tasks t WHERE t.job_id = j.id AND t.status IN ('failed', 'cancelled') AND t.attempt < $2::int)
  + CASE WHEN j.finalizer_workload IS NOT NULL AND j.finalizer_job_id IS NULL THEN 1 ELSE 0 END)::int AS tasks
FROM jobs j
WHERE j.id = $1 AND j.account IS NOT NULL AND j.status IN ('failed', 'cancelled', 'completed') AND j.settled_at IS NULL
  AND ${accountScope("$3::text IS NULL OR j.account = $3")}`,
  (p) => [p.jobId, p.attemptCap, scopeValue(p)],
);

/*
 * ListJobs, newest first, keyset-paginated on (created_at, id): one variant per index
 * (jobs_created_idx, jobs_status_created_idx) because generic plans (plan_cache_mode) cannot pick
 * an index by whether a parameter is null. created_at travels as text with microseconds so the
 * cursor is exact. $1 after created_at ('infinity' for the first page), $2 after id, $3 limit,
 * $4 workload ('' for any) [, $5 status].
 */
const jobsPage = (statusFilter: string) => `
SELECT *, to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS created_at_cursor, run_at > now() AS run_at_ahead
FROM jobs
WHERE ${statusFilter} (created_at, id) < ($1::timestamptz, $2::uuid) AND ($4::text = '' OR workload = $4)
ORDER BY created_at DESC, id DESC
LIMIT $3`;
interface JobsPage {
  afterCreatedAt: string;
  afterId: string;
  limit: number;
  /** '' for any */
  workload: string;
}
type JobsPageRow = JobRow & { created_at_cursor: string };
const jobsPageValues = (p: JobsPage) => [p.afterCreatedAt, p.afterId, p.limit, p.workload];
export const LIST_JOBS = defineQuery<JobsPage, JobsPageRow>(null, jobsPage(""), jobsPageValues);
export const LIST_JOBS_BY_STATUS = defineQuery<JobsPage & { status: string }, JobsPageRow>(
  null,
  jobsPage("status = $5::job_status AND"),
  (p) => [...jobsPageValues(p), p.status],
);
// A scheduled job is stored as pending with its run_at ahead (the delayed_finalizer migration),
// a waiting one as pending with parents not final (waiting_on > 0; the dependencies migration):
// the filters for each tell them apart, through jobs_status_created_idx all the same. Waiting
// comes first: a waiting job with a run_at ahead is waiting.
export const LIST_JOBS_SCHEDULED = defineQuery<JobsPage, JobsPageRow>(
  null,
  jobsPage("status = 'pending' AND waiting_on = 0 AND run_at > now() AND"),
  jobsPageValues,
);
export const LIST_JOBS_PENDING = defineQuery<JobsPage, JobsPageRow>(
  null,
  jobsPage("status = 'pending' AND waiting_on = 0 AND (run_at IS NULL OR run_at <= now()) AND"),
  jobsPageValues,
);
export const LIST_JOBS_WAITING = defineQuery<JobsPage, JobsPageRow>(
  null,
  jobsPage("status = 'pending' AND waiting_on > 0 AND"),
  jobsPageValues,
);
// The status filter as ListJobs names it, from parameter $n (null: any), waiting, scheduled and
// pending told apart as above.
const statusNamed = (n: number) => `($${n}::text IS NULL OR CASE $${n}::text
    WHEN 'waiting' THEN status = 'pending' AND waiting_on > 0
    WHEN 'scheduled' THEN status = 'pending' AND waiting_on = 0 AND run_at > now()
    WHEN 'pending' THEN status = 'pending' AND waiting_on = 0 AND (run_at IS NULL OR run_at <= now())
    ELSE status::text = $${n}::text END)`;
// A schedule's jobs through jobs_schedule_created_idx; $5 the schedule, $6 the status filter, $7
// the account (null: any).
export const LIST_JOBS_BY_SCHEDULE = defineQuery<
  JobsPage & { schedule: string; status: string | null; account: string | null },
  JobsPageRow
>(null, jobsPage(`schedule_name = $5 AND ${statusNamed(6)} AND ${accountScope("$7::text IS NULL OR account = $7")} AND`), (p) => [
  ...jobsPageValues(p),
  p.schedule,
  p.status,
  p.account,
]);
// One account's jobs through jobs_account_idx (a bound token lists only its own); $5 the account,
// $6 the status filter.
export const LIST_JOBS_BY_ACCOUNT = defineQuery<JobsPage & { account: string; status: string | null }, JobsPageRow>(
  null,
  jobsPage(`${accountScope("account = $5")} AND ${statusNamed(6)} AND`),
  (p) => [...jobsPageValues(p), p.account, p.status],
);

/*
 * The task that failed a failed job: its failed task (the first to fail, should two have failed in
 * concurrent transactions), through tasks_job_failed_idx. lease_owner is kept when a task fails,
 * so it names the worker of the last attempt.
 */
export const JOB_FAILURE = defineQuery<
  JobId,
  Pick<TaskRow, "id" | "chunk_index" | "error_code" | "error_message" | "attempt" | "lease_owner" | "completed_at">
>(
  null,
  `
SELECT id, chunk_index, error_code, error_message, attempt, lease_owner, completed_at
FROM tasks
WHERE job_id = $1 AND status = 'failed'
ORDER BY completed_at, chunk_index
LIMIT 1`,
  jobIdValue,
);

export async function getJobStatus(ctx: StoreContext, jobId: string, opts: CallOptions): Promise<JobStatusResult> {
  const id = requireUuid("job_id", jobId);
  return withClient(ctx.pool, opts.signal, (c) => readJobStatus(c, id, opts.account));
}

/** A job's status; NotFoundError when it does not exist or is not `account`'s (when one is given). */
export async function readJobStatus(c: pg.PoolClient, id: string, account?: string): Promise<JobStatusResult> {
  const row = await SELECT_JOB.maybe(c, { jobId: id, account });
  if (!row) throw new NotFoundError("job", id);
  const counts = await COUNT_JOB_TASKS.run(c, { jobId: id });
  const taskCounts = emptyCounts();
  let usage: Usage | undefined;
  for (const r of counts) {
    if (r.status === null) usage = r.usage ?? undefined;
    else taskCounts[r.status] = r.n;
  }
  const totalTasks = counts.reduce((n, r) => n + r.n, 0);
  const job = await withParents(c, { ...toJob(row), usage });
  const failure = job.status === "failed" ? await readJobFailure(c, id) : null;
  return { job, taskCounts, totalTasks, progress: totalTasks === 0 ? 0 : taskCounts.completed / totalTasks, failure };
}

export async function listCompletedResults(
  ctx: StoreContext,
  input: ListCompletedResultsInput,
  opts: CallOptions,
): Promise<ListCompletedResultsResult> {
  const q = validateListResults(input);
  return withClient(ctx.pool, opts.signal, async (c) => {
    // One row past the page tells whether another page exists.
    const scope = { jobId: q.jobId, account: opts.account };
    const rows = await LIST_COMPLETED_RESULTS.run(c, { ...scope, afterChunk: q.afterChunk, limit: q.pageSize + 1 });
    if (rows.length === 0 && !(await JOB_EXISTS.one(c, scope)).found) throw new NotFoundError("job", q.jobId);
    const page = rows.slice(0, q.pageSize);
    return {
      results: page.map((r) => ({
        chunkIndex: r.chunk_index,
        taskId: r.id,
        resultUri: r.result_uri,
        resultSha256: r.result_sha256,
        metrics: r.metrics ?? null,
        completedAt: r.completed_at,
      })),
      nextPageToken: rows.length > q.pageSize ? encodePageToken(page[page.length - 1].chunk_index) : "",
    };
  });
}

export async function cancelJob(ctx: StoreContext, input: CancelJobInput, opts: CallOptions): Promise<Job> {
  const cancel = validateCancel(input);
  return inTransaction(ctx.pool, opts.signal, async (c) => {
    // One at a time with the job's ends (job-end.ts): both cancel its unfinished tasks.
    await JOB_LOCK.run(c, { jobId: cancel.jobId });
    const existing = await SELECT_JOB.maybe(c, { jobId: cancel.jobId, account: opts.account });
    if (!existing) throw new NotFoundError("job", cancel.jobId);
    // A finished job stays as it is: cancelling it again (or after it ended) is a no-op.
    if (existing.status !== "pending" && existing.status !== "running") return toJob(existing);
    await CANCEL_JOB_TASKS.run(c, { jobId: cancel.jobId });
    const cancelled = await CANCEL_JOB.maybe(c, { jobId: cancel.jobId, reason: cancel.reason });
    if (cancelled) return toJob(cancelled);
    // It finished between our read and our update; report what it is now.
    return toJob(await SELECT_JOB.one(c, { jobId: cancel.jobId }));
  });
}

export async function retryJob(ctx: StoreContext, input: RetryJobInput, opts: CallOptions): Promise<RetryJobResult> {
  const r = validateRetryJob(input);
  return inTransaction(ctx.pool, opts.signal, async (c) => {
    // One at a time with the job's ends and cancels (job-end.ts).
    await JOB_LOCK.run(c, { jobId: r.jobId });
    const scope = { jobId: r.jobId, account: opts.account };
    // A job with parents waits for them again, or may not run at all (workflow-retry.ts).
    const own = await SELECT_JOB.maybe(c, scope);
    if (own?.dependency_policy) {
      const reopened = await retryJobWithParents(c, own, r.maxAttempts ?? null);
      if (reopened) return reopened;
    }
    // Held to the account's quota as a CreateJob is: the account's row locked, then counted in a
    // later statement, so retries and creates on every coordinator pass it one at a time.
    const quota = await RETRY_QUOTA.maybe(c, { ...scope, attemptCap: LIMITS.attempt.max });
    if (quota) await quotaGate(c, quota.account, quota.tasks, "account");
    const retried = await RETRY_JOB.maybe(c, { ...scope, maxAttempts: r.maxAttempts, attemptCap: LIMITS.attempt.max });
    if (retried) return { job: toJob(retried), retriedTasks: retried.retried_tasks };
    const job = await SELECT_JOB.maybe(c, scope);
    if (!job) throw new NotFoundError("job", r.jobId);
    if (job.settled_at) throw new FailedPreconditionError(`job ${r.jobId} is settled: settled jobs are not retried; create a new job`);
    const status = job.status;
    if (status === "completed") {
      throw new FailedPreconditionError(
        `job ${r.jobId} is completed with no failed task: only a failed or cancelled job, or a completed one with failed tasks, can be retried`,
      );
    }
    if (status !== "failed" && status !== "cancelled") {
      throw new FailedPreconditionError(`job ${r.jobId} is ${status}: only a failed or cancelled job can be retried`);
    }
    throw new FailedPreconditionError(
      `job ${r.jobId} has no task left to retry (each is completed or has used ${LIMITS.attempt.max} attempts)`,
    );
  });
}

export async function listJobs(ctx: StoreContext, input: ListJobsInput, opts: CallOptions): Promise<ListJobsResult> {
  const q = validateListJobs(input);
  // One row past the page tells whether another page exists.
  const p: JobsPage = {
    afterCreatedAt: q.after?.createdAt ?? "infinity",
    afterId: q.after?.id ?? "ffffffff-ffff-ffff-ffff-ffffffffffff",
    limit: q.pageSize + 1,
    workload: q.workload ?? "",
  };
  // A bound token lists its own account's jobs: naming another lists nothing (as an account with no jobs would).
  const named = input.account || undefined;
  if (opts.account !== undefined && named !== undefined && named !== opts.account) return { jobs: [], nextPageToken: "" };
  const account = opts.account ?? named;
  const rows = await withClient(ctx.pool, opts.signal, (c) =>
    q.scheduleName
      ? LIST_JOBS_BY_SCHEDULE.run(c, { ...p, schedule: q.scheduleName, status: q.status, account: account ?? null })
      : account !== undefined
        ? LIST_JOBS_BY_ACCOUNT.run(c, { ...p, account, status: q.status })
        : q.status === "waiting"
          ? LIST_JOBS_WAITING.run(c, p)
          : q.status === "scheduled"
            ? LIST_JOBS_SCHEDULED.run(c, p)
            : q.status === "pending"
              ? LIST_JOBS_PENDING.run(c, p)
              : q.status
                ? LIST_JOBS_BY_STATUS.run(c, { ...p, status: q.status })
                : LIST_JOBS.run(c, p),
  );
  const page = rows.slice(0, q.pageSize);
  const last = page[page.length - 1];
  return {
    jobs: page.map(toJob),
    nextPageToken: rows.length > q.pageSize ? encodeJobsPageToken(last.created_at_cursor, last.id) : "",
  };
}

async function readJobFailure(c: pg.PoolClient, jobId: string): Promise<JobFailure | null> {
  const r = await JOB_FAILURE.maybe(c, { jobId });
  if (!r) return null;
  return {
    taskId: r.id,
    chunkIndex: r.chunk_index,
    errorCode: r.error_code ?? null,
    errorMessage: r.error_message ?? null,
    attempt: r.attempt,
    workerId: r.lease_owner ?? null,
    failedAt: r.completed_at ?? null,
  };
}
