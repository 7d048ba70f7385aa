// Settlement: ListSettlements (final billable jobs not yet settled) and SettleJob (recorded once).
// A job is billable when it has an account or a billing context (reserved_units or billing_key);
// only billable jobs are listed, settled, and kept by retention until settled (retention.ts).

import type { ListSettlementsInput, ListSettlementsResult, SettleJobInput, Usage } from "../../../queue/types.js";
import { FailedPreconditionError, NotFoundError, SettlementConflictError } from "../../../queue/errors.js";
import type { SettlementBacklog } from "../../../queue/service.js";
import { encodeSettlementsPageToken, validateListSettlements, validateSettleJob } from "../../../queue/settlement-validation.js";
import type { CallOptions, Job } from "../../../queue/types.js";
import { EVENTS_CHANNEL } from "../sql/channels.js";
import type { StoreContext } from "../state/context.js";
import { inTransaction, withClient } from "../sql/db.js";
import { defineQuery, type NoParams } from "../sql/query.js";
import { accountScope } from "../sql/scope.js";
import { toJob, type JobRow } from "../sql/rows.js";
import { JOB_LOCK } from "./job-end.js";

/** Job `j` is billable: the predicate of jobs_unsettled_idx, written as the index states it. */
export const billable = (j: string) => `(${j}.account IS NOT NULL OR ${j}.reserved_units IS NOT NULL OR ${j}.billing_key IS NOT NULL)`;

const FINAL = `('completed', 'failed', 'cancelled')`;

/** Usage of job `j` summed over its tasks' accepted reports, as one jsonb object (null: none). */
export const usageTotal = (j: string) => `(
  SELECT jsonb_object_agg(u.key, u.total) FROM (
    SELECT e.key, sum((e.value)::numeric) AS total
    FROM tasks t CROSS JOIN LATERAL jsonb_each(t.usage) e
    WHERE t.job_id = ${j}.id AND t.usage IS NOT NULL
    GROUP BY e.key
  ) u)`;

/*
 * ListSettlements, oldest final first, keyset-paginated on (completed_at, id) through
 * jobs_unsettled_idx: its predicate is repeated word for word so the planner can use it, and the
 * index holds only unsettled final billable jobs, so a page reads its rows and no settled ones. An
 * account filter is applied while walking it (most deployments list everything; one account's
 * settlements among many accounts' walk the others' too). completed_at travels as text with
 * microseconds so the cursor is exact. $1 after completed_at ('-infinity' for the first page),
 * $2 after id, $3 limit, $4 account (null: any).
 */
type SettlementRow = JobRow & { completed_at_cursor: string; usage_total: Usage | null };
export const LIST_SETTLEMENTS = defineQuery<
  { afterCompletedAt: string; afterId: string; limit: number; account: string | null },
  SettlementRow
>(
  null,
  `
SELECT j.*, false AS run_at_ahead,
  to_char(j.completed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS completed_at_cursor,
  ${usageTotal("j")} AS usage_total
FROM jobs j
WHERE j.settled_at IS NULL AND j.status IN ${FINAL} AND ${billable("j")}
  AND (j.completed_at, j.id) > ($1::timestamptz, $2::uuid)
  AND ${accountScope("$4::text IS NULL OR j.account = $4::text")}
ORDER BY j.completed_at, j.id
LIMIT $3`,
  (p) => [p.afterCompletedAt, p.afterId, p.limit, p.account],
);

/*
 * SettleJob's one statement: records the settlement on a final billable unsettled job with the usage
 * it covers, the job's as it is now (settled_usage; and in the same transaction its 'job_settled'
 * event, and the NOTIFY of its watchers), or changes nothing
 * and answers the job as it is, so the caller can tell why (absent, not final, not billable, or
 * settled already: with the same key and units, the same answer; with others, a conflict). Run
 * under the job's lock (JOB_LOCK, as RetryJob and CancelJob), so a settle and a retry of one job
 * never interleave; the `settled_at IS NULL` test makes the record once whatever runs beside it. A
 * late result takes the same lock (late-result.ts), so its usage is either in settled_usage (it
 * committed first) or an adjustment (adjustments.ts), never both and never neither.
 * $1 job id, $2 key, $3 units, $4 the caller's account (null: any job).
 */
export const SETTLE_JOB = defineQuery<
  { jobId: string; key: string; units: number; account: string | null },
  JobRow & { recorded: boolean; usage_total: Usage | null }
>(
  null,
  `
WITH j AS (
  SELECT * FROM jobs WHERE id = $1 AND ${accountScope("$4::text IS NULL OR account = $4::text")}
), settled AS (
  UPDATE jobs s SET settlement_key = $2, settled_units = $3, settled_at = now(), updated_at = now(),
    settled_usage = coalesce(${usageTotal("s")}, '{}')
  FROM j
  WHERE s.id = j.id AND s.settled_at IS NULL AND s.status IN ${FINAL} AND ${billable("s")}
  RETURNING s.*
), event AS (
  INSERT INTO task_events (job_id, kind, settlement_key, settled_units, usage)
  SELECT id, 'job_settled', settlement_key, settled_units, settled_usage FROM settled
), watched AS (
  SELECT pg_notify('${EVENTS_CHANNEL}', s.id::text) FROM settled s
  WHERE EXISTS (SELECT 1 FROM job_watchers w WHERE w.job_id = s.id)
), answer AS (
  SELECT s.*, true AS recorded FROM settled s
  UNION ALL
  SELECT j.*, false AS recorded FROM j WHERE NOT EXISTS (SELECT 1 FROM settled)
)
SELECT a.*, false AS run_at_ahead, ${usageTotal("a")} AS usage_total, (SELECT count(*) FROM watched) AS notified FROM answer a`,
  (p) => [p.jobId, p.key, p.units, p.account],
);

const jobWithUsage = (r: JobRow & { usage_total: Usage | null }): Job => ({ ...toJob(r), usage: r.usage_total ?? {} });

export async function listSettlements(ctx: StoreContext, input: ListSettlementsInput, opts: CallOptions): Promise<ListSettlementsResult> {
  const q = validateListSettlements(input, opts);
  // One row past the page tells whether another page exists.
  const rows = await withClient(ctx.pool, opts.signal, (c) =>
    LIST_SETTLEMENTS.run(c, {
      afterCompletedAt: q.after?.completedAt ?? "-infinity",
      afterId: q.after?.id ?? "00000000-0000-0000-0000-000000000000",
      limit: q.pageSize + 1,
      account: q.account,
    }),
  );
  const page = rows.slice(0, q.pageSize);
  const last = page[page.length - 1];
  return {
    jobs: page.map(jobWithUsage),
    nextPageToken: rows.length > q.pageSize ? encodeSettlementsPageToken(last.completed_at_cursor, last.id) : "",
  };
}

export async function settleJob(ctx: StoreContext, input: SettleJobInput, opts: CallOptions): Promise<Job> {
  const s = validateSettleJob(input);
  const row = await inTransaction(ctx.pool, opts.signal, async (c) => {
    // One at a time with the job's retries and cancels (jobs.ts): a retry never reopens a job
    // being settled, and this statement's snapshot, taken after the lock, sees every settle before.
    await JOB_LOCK.run(c, { jobId: s.jobId });
    return SETTLE_JOB.maybe(c, { jobId: s.jobId, key: s.settlementKey, units: s.settledUnits, account: opts.account ?? null });
  });
  // A foreign job (a bound token's call on another account's) answers as one that does not exist.
  if (!row) throw new NotFoundError("job", s.jobId);
  const job = jobWithUsage(row);
  if (row.recorded) return job;
  const done = job.settlement;
  if (done) {
    if (done.settlementKey === s.settlementKey && done.settledUnits === s.settledUnits) return job;
    throw new SettlementConflictError(
      `job ${s.jobId} is settled already with settlement_key ${JSON.stringify(done.settlementKey)} and settled_units ${done.settledUnits}` +
        ` (at ${done.settledAt.toISOString()}); a settlement is recorded once`,
    );
  }
  if (job.status !== "completed" && job.status !== "failed" && job.status !== "cancelled")
    throw new FailedPreconditionError(`job ${s.jobId} is ${job.status}: only a final job (completed, failed or cancelled) is settled`);
  throw new FailedPreconditionError(
    `job ${s.jobId} is not billable: it has no account and no billing context, so it has nothing to settle`,
  );
}

/*
 * Metrics, at scrape time (cached there): how many final billable jobs wait for their settlement
 * and how long the oldest has waited, read through jobs_unsettled_idx (the predicate word for
 * word again), which holds exactly those jobs: nothing to read where billing is not used.
 */
export const SETTLEMENT_BACKLOG = defineQuery<NoParams, { waiting: number; oldest_seconds: number }>(
  null,
  `
SELECT count(*)::int AS waiting,
  coalesce(extract(epoch FROM now() - min(j.completed_at)), 0)::float8 AS oldest_seconds
FROM jobs j
WHERE j.settled_at IS NULL AND j.status IN ${FINAL} AND ${billable("j")}`,
);

export async function settlementBacklog(ctx: StoreContext, opts: CallOptions): Promise<SettlementBacklog> {
  const row = await withClient(ctx.pool, opts.signal, (c) => SETTLEMENT_BACKLOG.one(c));
  return { waiting: row.waiting, oldestSeconds: Math.max(0, row.oldest_seconds) };
}
