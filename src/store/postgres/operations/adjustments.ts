// Usage adjustments: usage accepted after its job was settled. The only report a final job still
// accepts is a late result (a task cancelled while its lease ran: late-result.ts); when its job is
// settled already, its usage is recorded here, as an adjustment a billing service lists
// (ListAdjustments) and settles once (SettleAdjustment), never as a silent change to a closed
// settlement (the way Stripe invoices late usage). So a job's usage is, for good, its settlement's
// usage plus its adjustments', and every unit a worker reported and the coordinator accepted is in
// exactly one thing a billing service settles.

import type pg from "pg";
import { NotFoundError, SettlementConflictError } from "../../../queue/errors.js";
import { encodeAdjustmentsPageToken, validateListAdjustments, validateSettleAdjustment } from "../../../queue/settlement-validation.js";
import type {
  CallOptions,
  ListAdjustmentsInput,
  ListAdjustmentsResult,
  SettleAdjustmentInput,
  Usage,
  UsageAdjustment,
} from "../../../queue/types.js";
import type { StoreContext } from "../state/context.js";
import { withClient } from "../sql/db.js";
import { defineQuery } from "../sql/query.js";
import { accountScope } from "../sql/scope.js";
import { uuidv7 } from "../sql/uuidv7.js";

interface AdjustmentRow {
  id: string;
  job_id: string;
  task_id: string;
  attempt: number;
  account: string | null;
  workload: string;
  usage: Usage;
  created_at: Date;
  settlement_key: string | null;
  /** bigint, as text */
  settled_units: string | null;
  settled_at: Date | null;
}

/*
 * What a late result changes of its job, in the late result's transaction, after its completion
 * (COMPLETE_CANCELLED_TASK) and under the job's lock (JOB_LOCK, which SettleJob and RetryJob take
 * too): the job is counted again by the usage rollup (rolled_up_at cleared, so the next pass adds
 * the difference: usage-rollup.ts), and, when the job is settled and the report carried usage,
 * that usage is an adjustment. The job's row is updated whatever it holds, so that the rollup,
 * which takes its jobs with SKIP LOCKED, never counts this job while this transaction runs.
 * $1 job id, $2 adjustment id, $3 task id, $4 attempt, $5 the report's usage (jsonb, null: none).
 */
export const RECORD_LATE_USAGE = defineQuery<
  { jobId: string; adjustmentId: string; taskId: string; attempt: number; usage: string | null },
  { adjusted: number }
>(
  null,
  `
WITH j AS (
  UPDATE jobs SET rolled_up_at = NULL WHERE id = $1 RETURNING id, account, workload, settled_at
), adjustment AS (
  INSERT INTO usage_adjustments (id, job_id, task_id, attempt, account, workload, usage)
  SELECT $2, j.id, $3, $4, j.account, j.workload, $5::jsonb FROM j WHERE j.settled_at IS NOT NULL AND $5::jsonb IS NOT NULL
  ON CONFLICT (task_id, attempt) DO NOTHING
  RETURNING id
)
SELECT (SELECT count(*) FROM adjustment)::int AS adjusted`,
  (p) => [p.jobId, p.adjustmentId, p.taskId, p.attempt, p.usage],
);

/** RECORD_LATE_USAGE on `c`, inside the late result's transaction; whether an adjustment was recorded. */
export async function recordLateUsage(
  c: pg.PoolClient,
  late: { jobId: string; taskId: string; attempt: number; usage: Usage | undefined },
): Promise<boolean> {
  const usage = late.usage === undefined || Object.keys(late.usage).length === 0 ? null : JSON.stringify(late.usage);
  const { adjusted } = await RECORD_LATE_USAGE.one(c, { ...late, adjustmentId: uuidv7(), usage });
  return adjusted > 0;
}

/*
 * ListAdjustments, oldest first, keyset-paginated on (created_at, id) through
 * usage_adjustments_unsettled_idx (its predicate repeated so the planner can use it). $1 after
 * created_at ('-infinity' for the first page), $2 after id, $3 limit, $4 account (null: any).
 */
export const LIST_ADJUSTMENTS = defineQuery<
  { afterCreatedAt: string; afterId: string; limit: number; account: string | null },
  AdjustmentRow & { created_at_cursor: string }
>(
  null,
  `
SELECT a.*, to_char(a.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS created_at_cursor
FROM usage_adjustments a
WHERE a.settled_at IS NULL AND (a.created_at, a.id) > ($1::timestamptz, $2::uuid)
  AND ${accountScope("$4::text IS NULL OR a.account = $4::text")}
ORDER BY a.created_at, a.id
LIMIT $3`,
  (p) => [p.afterCreatedAt, p.afterId, p.limit, p.account],
);

/*
 * SettleAdjustment: records the settlement once (`settled_at IS NULL`, re-checked under the row's
 * lock, so settlers racing on several coordinators record one), or changes nothing and answers the
 * adjustment as it is, so the caller can tell why. $1 id, $2 key, $3 units, $4 the caller's
 * account (null: any).
 */
export const SETTLE_ADJUSTMENT = defineQuery<
  { adjustmentId: string; key: string; units: number; account: string | null },
  AdjustmentRow & { recorded: boolean }
>(
  null,
  `
WITH a AS (
  SELECT * FROM usage_adjustments WHERE id = $1 AND ${accountScope("$4::text IS NULL OR account = $4::text")}
), settled AS (
  UPDATE usage_adjustments s SET settlement_key = $2, settled_units = $3, settled_at = now()
  FROM a WHERE s.id = a.id AND s.settled_at IS NULL
  RETURNING s.*
)
SELECT s.*, true AS recorded FROM settled s
UNION ALL
SELECT a.*, false AS recorded FROM a WHERE NOT EXISTS (SELECT 1 FROM settled)`,
  (p) => [p.adjustmentId, p.key, p.units, p.account],
);

function toAdjustment(r: AdjustmentRow): UsageAdjustment {
  return {
    id: r.id,
    jobId: r.job_id,
    taskId: r.task_id,
    attempt: r.attempt,
    account: r.account,
    workload: r.workload,
    usage: r.usage,
    createdAt: r.created_at,
    settlement: r.settled_at
      ? { settlementKey: r.settlement_key ?? "", settledUnits: Number(r.settled_units ?? 0), settledAt: r.settled_at, usage: r.usage }
      : null,
  };
}

export async function listAdjustments(ctx: StoreContext, input: ListAdjustmentsInput, opts: CallOptions): Promise<ListAdjustmentsResult> {
  const q = validateListAdjustments(input, opts);
  // One row past the page tells whether another page exists.
  const rows = await withClient(ctx.pool, opts.signal, (c) =>
    LIST_ADJUSTMENTS.run(c, {
      afterCreatedAt: q.after?.createdAt ?? "-infinity",
      afterId: q.after?.id ?? "00000000-0000-0000-0000-000000000000",
      limit: q.pageSize + 1,
      account: q.account,
    }),
  );
  const page = rows.slice(0, q.pageSize);
  const last = page[page.length - 1];
  return {
    adjustments: page.map(toAdjustment),
    nextPageToken: rows.length > q.pageSize ? encodeAdjustmentsPageToken(last.created_at_cursor, last.id) : "",
  };
}

export async function settleAdjustment(ctx: StoreContext, input: SettleAdjustmentInput, opts: CallOptions): Promise<UsageAdjustment> {
  const s = validateSettleAdjustment(input);
  const row = await withClient(ctx.pool, opts.signal, (c) =>
    SETTLE_ADJUSTMENT.maybe(c, {
      adjustmentId: s.adjustmentId,
      key: s.settlementKey,
      units: s.settledUnits,
      account: opts.account ?? null,
    }),
  );
  if (!row) throw new NotFoundError("adjustment", s.adjustmentId, "adjustment_id");
  const adjustment = toAdjustment(row);
  const done = adjustment.settlement;
  if (row.recorded || !done) return adjustment;
  if (done.settlementKey === s.settlementKey && done.settledUnits === s.settledUnits) return adjustment;
  throw new SettlementConflictError(
    `adjustment ${s.adjustmentId} is settled already with settlement_key ${JSON.stringify(done.settlementKey)} and settled_units ${done.settledUnits}` +
      ` (at ${done.settledAt.toISOString()}); a settlement is recorded once`,
  );
}
