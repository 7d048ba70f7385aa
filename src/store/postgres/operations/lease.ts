// A worker's writes to a task it holds besides its result: RenewLease, ReportProgress and FailTask,
// each fenced by (task, worker, attempt) and a live lease; a refused write is explained by
// queue/fencing.ts from the task as it is.

import { leaseConflict } from "../../../queue/fencing.js";
import type { CallOptions, FailTaskInput, RenewLeaseInput, ReportProgressInput, Task } from "../../../queue/types.js";
import { validateFail, validateRenew, validateReportProgress } from "../../../queue/validation.js";
import { EVENTS_CHANNEL } from "../sql/channels.js";
import type { StoreContext } from "../state/context.js";
import { withClient } from "../sql/db.js";
import { failedEvents, freedSlotsNotify, liveLease, retriedNotify, usageSum, watchedJobs } from "../sql/fragments.js";
import { loadTask } from "./inspection.js";
import { endJob } from "./job-end.js";
import { namedQuery } from "../sql/query.js";
import { toTask, type TaskRow } from "../sql/rows.js";

const RENEW_LEASE_TEXT = `
UPDATE tasks t
SET lease_expires_at = now() + make_interval(secs => coalesce(@leaseSeconds::int, wl.lease_seconds)),
    version = t.version + 1
FROM workloads wl
WHERE ${liveLease("t")} AND wl.name = t.workload
RETURNING t.*`;

/*
 * A progress report: the same fenced lease extension as RENEW_LEASE plus one task_events row, in
 * one statement, so a report from a worker that lost its lease records nothing.
 */
const REPORT_PROGRESS_TEXT = `
WITH renewed AS (
  UPDATE tasks t
  SET lease_expires_at = now() + make_interval(secs => coalesce(@leaseSeconds::int, wl.lease_seconds)),
      version = t.version + 1
  FROM workloads wl
  WHERE ${liveLease("t")} AND wl.name = t.workload
  RETURNING t.*
), event AS (
  INSERT INTO task_events (job_id, task_id, chunk_index, kind, status, attempt, worker_id, progress, message, partial_result_uri)
  SELECT job_id, id, chunk_index, 'task_progress', status::text, attempt, lease_owner, @progress, @message, @partialResultUri FROM renewed
), woken AS (
  -- As the status-event triggers do: only a watched job is notified.
  SELECT pg_notify('${EVENTS_CHANNEL}', renewed.job_id::text) FROM renewed
  WHERE EXISTS (SELECT 1 FROM job_watchers w WHERE w.job_id = renewed.job_id)
)
SELECT renewed.*, (SELECT count(*) FROM woken) AS notified FROM renewed`;

/*
 * Fail one task: back to pending after a backoff while attempts remain and the worker calls it
 * retryable, else failed for good, after which its job is ended under its failure policy
 * (job-end.ts: by default the job fails and its unfinished tasks are cancelled, their holders
 * learning it at their next heartbeat). Backoff: the worker's retry_after_seconds, else
 * 2^attempt seconds, ±25% jitter, capped at 5 minutes.
 * The failure's event is written here, not by the status trigger (event_flip), so that it carries
 * the report's usage: a failed attempt consumed resources too.
 * @usage jsonb, NULL for none.
 */
const FAIL_TASK_TEXT = `
WITH cur AS (
  UPDATE tasks t
  SET status = CASE WHEN @retryable::boolean AND t.attempt < t.max_attempts THEN 'pending' ELSE 'failed' END::task_status,
      run_after = CASE WHEN @retryable::boolean AND t.attempt < t.max_attempts
        THEN now() + make_interval(secs => coalesce(@retryAfterSeconds::float8, least(300, power(2, t.attempt)) * (0.75 + random() * 0.5)))
        ELSE t.run_after END,
      completed_at = CASE WHEN @retryable::boolean AND t.attempt < t.max_attempts THEN NULL ELSE now() END,
      lease_expires_at = NULL,
      error_code = @errorCode,
      error_message = @errorMessage,
      usage = ${usageSum("t.usage", "@usage::jsonb")},
      version = t.version + 1, event_flip = NOT t.event_flip
  WHERE ${liveLease("t")}
  RETURNING t.*
), ${failedEvents("@usage::jsonb")}, ${watchedJobs("cur")}, ${retriedNotify("cur")}, ${freedSlotsNotify("cur")}
SELECT cur.*, (SELECT count(*) FROM woken) + (SELECT count(*) FROM freed) + (SELECT count(*) FROM watched) AS notified FROM cur`;

/** The fence every write names: the task, the worker that holds it, and the attempt it holds. */
interface LeaseParams {
  taskId: string;
  workerId: string;
  attempt: number;
  leaseSeconds: number | null;
}
const LEASE_PARAMS = ["taskId", "workerId", "attempt"] as const satisfies readonly (keyof LeaseParams)[];
// Each statement's parameters in the order of its $1..$N, as they were numbered by hand.
const renewLeaseQuery = namedQuery<LeaseParams, TaskRow>("leasehold_renew_lease", RENEW_LEASE_TEXT, [...LEASE_PARAMS, "leaseSeconds"]);
const reportProgressQuery = namedQuery<
  LeaseParams & { progress: number; message: string | null; partialResultUri: string | null },
  TaskRow
>("leasehold_report_progress", REPORT_PROGRESS_TEXT, [...LEASE_PARAMS, "leaseSeconds", "progress", "message", "partialResultUri"]);
const failTaskQuery = namedQuery<
  Omit<LeaseParams, "leaseSeconds"> & {
    errorCode: string;
    retryable: boolean;
    errorMessage: string | null;
    retryAfterSeconds: number | null;
    usage: string | null;
  },
  TaskRow
>("leasehold_fail_task", FAIL_TASK_TEXT, [...LEASE_PARAMS, "errorCode", "retryable", "errorMessage", "retryAfterSeconds", "usage"]);
/** The statements' text as PostgreSQL runs them, for snapshots (test/sql/). */
export const RENEW_LEASE = renewLeaseQuery.text;
export const REPORT_PROGRESS = reportProgressQuery.text;
export const FAIL_TASK = failTaskQuery.text;

export async function renewLease(ctx: StoreContext, input: RenewLeaseInput, opts: CallOptions): Promise<Task> {
  const renew = validateRenew(input);
  if (ctx.coalescer) return ctx.coalescer.renew(renew, opts.signal);
  return withClient(ctx.pool, opts.signal, async (c) => {
    const row = await renewLeaseQuery.maybe(c, { ...renew, leaseSeconds: renew.leaseSeconds ?? null });
    if (row) return toTask(row);
    throw leaseConflict(await loadTask(c, renew.taskId), renew);
  });
}

export async function reportProgress(ctx: StoreContext, input: ReportProgressInput, opts: CallOptions): Promise<Task> {
  const p = validateReportProgress(input);
  return withClient(ctx.pool, opts.signal, async (c) => {
    const row = await reportProgressQuery.maybe(c, {
      ...p,
      leaseSeconds: p.leaseSeconds ?? null,
      message: p.message ?? null,
      partialResultUri: p.partialResultUri ?? null,
    });
    if (row) return toTask(row);
    throw leaseConflict(await loadTask(c, p.taskId), p);
  });
}

export async function failTask(ctx: StoreContext, input: FailTaskInput, opts: CallOptions): Promise<Task> {
  const f = validateFail(input);
  if (ctx.coalescer) return ctx.coalescer.fail(f, opts.signal);
  return withClient(ctx.pool, opts.signal, async (c) => {
    const row = await failTaskQuery.maybe(c, {
      ...f,
      retryAfterSeconds: f.retryAfterSeconds ?? null,
      usage: f.usage === undefined ? null : JSON.stringify(f.usage),
    });
    if (row) {
      ctx.options.observer?.taskFailed(row.status === "pending");
      if (row.status !== "failed") return toTask(row);
      // Failed for good (committed): the job's failure policy decides what becomes of it.
      await endJob(c, row.job_id);
      return toTask(row);
    }
    throw leaseConflict(await loadTask(c, f.taskId), f);
  });
}
