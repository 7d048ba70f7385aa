// Result reports: CompleteTask and CompleteTasks, each alone or with claim_next (the completion and
// the claim in one statement). A job whose last task completes is finished by the completion, or
// by FINISH_JOBS_IF_DONE (job-end.ts) after it commits when the statement could not tell; it ends
// completed, or failed when more of its tasks failed than its max_failed_tasks. A result for a task
// cancelled while its lease ran is taken by late-result.ts.

import type pg from "pg";
import type { Usage } from "../../../queue/types.js";
import { QueueError } from "../../../queue/errors.js";
import { replayOrConflict } from "../../../queue/fencing.js";
import type {
  BatchCompletedAndClaimed,
  CallOptions,
  ClaimTasksInput,
  CompletedAndClaimed,
  CompleteOutcome,
  CompleteTaskInput,
  Task,
} from "../../../queue/types.js";
import { validateBatch, validateClaimNext, validateComplete, type NormalizedClaim } from "../../../queue/validation.js";
import {
  CLAIM_ORDER,
  claimCtes,
  claimed,
  claimedEventRowsBesideUsage,
  claimWith,
  createdUs,
  pickupSeconds,
  type ClaimedRow,
  type ClaimParams,
} from "./claim.js";
import { EVENTS_CHANNEL } from "../sql/channels.js";
import type { StoreContext } from "../state/context.js";
import { withClient } from "../sql/db.js";
import {
  completedUsageEventRows,
  freedSlotsNotify,
  liveLease,
  mayBeDone,
  mayBeDoneJobs,
  nothingPending,
  statusEventsWithUsage,
  usageSum,
  watchedJobs,
} from "../sql/fragments.js";
import { loadTask } from "./inspection.js";
import { acceptLateResult } from "./late-result.js";
import { defineQuery, namedQuery } from "../sql/query.js";
import { RESULT_PARAMS, resultParams, resultRecord, type ResultParams } from "../sql/result-params.js";
import { finalStatus, finishJobsAfterCommit, nothingUnfinished } from "./job-end.js";
import { toTask, type TaskRow } from "../sql/rows.js";

/*
 * Complete one task and, when it was the job's last unfinished one, the job, in one statement.
 * Two completions racing for a job's last two tasks each see the other still leased (snapshot),
 * so neither finishes the job here; `recheck_job` says so, and the caller re-checks after commit
 * (see finishJobIfDone). Mid-job completions see pending work and skip all of that cheaply
 * (tasks_job_unfinished_idx).
 */
const completeOne = `done AS (
  UPDATE tasks
  SET status = 'completed', result_uri = @resultUri, result_sha256 = @resultSha256, metrics = @metrics::jsonb, usage = ${usageSum("tasks.usage", "@usage::jsonb")},
      completed_at = now(), lease_expires_at = NULL, version = version + 1, event_flip = NOT event_flip
  WHERE ${liveLease("tasks")}
  RETURNING *
), finished AS (
  UPDATE jobs j SET status = ${finalStatus("j")}, completed_at = now(), updated_at = now()
  WHERE j.id = (SELECT job_id FROM done) AND j.status = 'running'
    AND ${nothingUnfinished("(SELECT job_id FROM done)", "@taskId")}
  RETURNING j.id
)`;
const recheckJob = `NOT EXISTS (SELECT 1 FROM finished)
    AND ${nothingPending("done.job_id")}
    AND EXISTS (SELECT 1 FROM jobs j WHERE j.id = done.job_id AND j.status = 'running')`;

// ResultParams' names; @usage jsonb, NULL for none.
const COMPLETE_TASK_TEXT = `
WITH ${completeOne}, ${statusEventsWithUsage(completedUsageEventRows("done", "@usage::jsonb"))}, ${watchedJobs("done")}, ${freedSlotsNotify("done")}
SELECT done.*, ${recheckJob} AS recheck_job, (SELECT count(*) FROM watched) + (SELECT count(*) FROM freed) AS notified
FROM done`;

/** claim_next's claim, by the names NextParams gives its parameters (the worker's is claimWorkerId). */
const NEXT_NAMES: ClaimParams = {
  workloads: "@workloads",
  limit: "@maxTasks",
  worker: "@claimWorkerId",
  leaseSeconds: "@leaseSeconds",
  labels: "@labels",
  hints: "@hints",
};

/*
 * A result report with claim_next: COMPLETE_TASK and CLAIM_TASKS in one statement, so a worker's
 * task costs one statement, one transaction and one round trip instead of two of each. The claim
 * takes nothing unless the result was accepted (its arms are gated on `done`), so a refused or
 * replayed result leaves the claim to the caller, which claims again only for a replay. The two
 * updates never meet one row: `done` needs a live lease, which neither arm takes. Nor do the two
 * job updates: `running` moves pending jobs, `finished` running ones, as the snapshot has them.
 * Rows: part 0 the completed task (with recheck_job), part 1 the claimed ones in claim order.
 * The result's parameters as COMPLETE_TASK's, the claim's as CLAIM_TASKS' (NEXT_NAMES).
 */
const completeAndClaimStatement = (claimOrder: string) => `
WITH ${completeOne}, ${claimCtes(NEXT_NAMES, "EXISTS (SELECT 1 FROM done)")},
${statusEventsWithUsage(completedUsageEventRows("done", "@usage::jsonb"), claimedEventRowsBesideUsage)},
watched AS (
  SELECT pg_notify('${EVENTS_CHANNEL}', r.job_id::text) FROM (SELECT job_id FROM done UNION ALL SELECT job_id FROM claimed) r
  WHERE EXISTS (SELECT 1 FROM job_watchers w WHERE w.job_id = r.job_id)
), ${freedSlotsNotify("done")}
SELECT 0 AS part, done.*, ${recheckJob} AS recheck_job, NULL::float8 AS pickup_seconds,
  (SELECT count(*) FROM watched) + (SELECT count(*) FROM freed) AS notified, NULL AS created_us
FROM done
UNION ALL
(SELECT 1, claimed.*, false, ${pickupSeconds}, 0, ${createdUs("claimed")} FROM claimed ${claimOrder})`;

/** COMPLETE_TASKS' completion: `done`, the rows of @results (jsonb recordset) with @taskIds that held a live lease. */
export const completeMany = `done AS (
  UPDATE tasks t
  SET status = 'completed', result_uri = b.result_uri, result_sha256 = b.result_sha256, metrics = b.metrics,
      usage = ${usageSum("t.usage", "b.usage")},
      completed_at = now(), lease_expires_at = NULL, version = t.version + 1, event_flip = NOT t.event_flip
  FROM jsonb_to_recordset(@results::jsonb) AS b(task_id uuid, worker_id text, attempt int, result_uri text, result_sha256 text, metrics jsonb, usage jsonb)
  WHERE t.id = ANY(@taskIds::uuid[]) AND t.id = b.task_id AND t.status::text = 'leased' AND t.lease_owner = b.worker_id AND t.attempt = b.attempt
    AND t.lease_expires_at > now()
  RETURNING t.*
)`;
/** A batch's completed rows' events, each with its result's usage from the recordset (@results). */
export const batchCompletedEvents = completedUsageEventRows(
  "done",
  "r.usage",
  " JOIN jsonb_to_recordset(@results::jsonb) AS r(task_id uuid, usage jsonb) ON r.task_id = d.id",
);

/*
 * Complete a batch of leased tasks in one statement, each fenced by its own (worker, attempt,
 * live lease) exactly as COMPLETE_TASK. Rows that do not match are left alone and explained
 * one by one by the caller. The ids also come as a uuid[] (@taskIds) so the rows are found through the
 * primary key whatever the planner guesses about the recordset, and the status is compared as
 * text for the reason given at liveLease: with `t.status = 'leased'` the generic plan walked the
 * whole lease index (every live lease and every lease completed within a lease length) and
 * hash-joined it with the recordset. Measured (bench:sql-ab, 4 pairs, backend CPU per task):
 * chained batches of ten 184 -> 150 us, claim then CompleteTasks 208 -> 158 us.
 * Jobs that may be done (recheck_job: no pending task left) are finished by FINISH_JOBS_IF_DONE
 * after this commits.
 */
const COMPLETE_TASKS_TEXT = `
WITH ${completeMany}, ${statusEventsWithUsage(batchCompletedEvents)}, ${watchedJobs("done")}, ${freedSlotsNotify("done")},
${mayBeDoneJobs("done")}
SELECT done.*, (SELECT count(*) FROM watched) + (SELECT count(*) FROM freed) AS notified, ${mayBeDone("done")} AS recheck_job FROM done`;

/*
 * A batch's report with claim_next: COMPLETE_TASKS and CLAIM_TASKS in one statement. The claim
 * runs whatever each result's outcome; as in COMPLETE_TASK_AND_CLAIM the updates never meet one
 * row (a completion needs a live lease, which neither arm takes). Rows: part 0 the completed
 * tasks (with recheck_job, the jobs the claim took nothing of), part 1 the claimed ones in claim
 * order.
 * The results as COMPLETE_TASKS', the claim's parameters as CLAIM_TASKS' (NEXT_NAMES).
 */
const COMPLETE_TASKS_AND_CLAIM_TEXT = `
WITH ${completeMany}, ${claimCtes(NEXT_NAMES)},
${statusEventsWithUsage(batchCompletedEvents, claimedEventRowsBesideUsage)},
watched AS (
  SELECT pg_notify('${EVENTS_CHANNEL}', r.job_id::text) FROM (SELECT job_id FROM done UNION SELECT job_id FROM claimed) r
  WHERE EXISTS (SELECT 1 FROM job_watchers w WHERE w.job_id = r.job_id)
), ${freedSlotsNotify("done")}, ${mayBeDoneJobs("done", "claimed")}
SELECT 0 AS part, done.*, NULL::float8 AS pickup_seconds, (SELECT count(*) FROM watched) + (SELECT count(*) FROM freed) AS notified,
  ${mayBeDone("done")} AS recheck_job, NULL AS created_us
FROM done
UNION ALL
(SELECT 1, claimed.*, ${pickupSeconds}, 0, false, ${createdUs("claimed")} FROM claimed ${CLAIM_ORDER})`;

/** A batch of results as one jsonb recordset (JSON text) and their task ids. */
interface BatchParams {
  results: string;
  taskIds: string[];
}
/** claim_next's parameters, as CLAIM_TASKS takes them. */
interface NextParams {
  workloads: string[];
  maxTasks: number;
  claimWorkerId: string;
  leaseSeconds: number | null;
  labels: string;
  /** jsonb text (claim-hints.ts) */
  hints: string;
}
export type CompletedRow = TaskRow & { recheck_job: boolean };
/** Rows of a statement that completes and claims: part 0 the completed task(s), part 1 the claimed. */
type PartRow = ClaimedRow & { part: number; recheck_job: boolean };
// Each statement's parameters in the order of its $1..$N, kept as they were numbered by hand so
// plans, snapshots (test/sql/) and benchmarks see the same text.
const NEXT_PARAMS = [
  "workloads",
  "maxTasks",
  "claimWorkerId",
  "leaseSeconds",
  "labels",
  "hints",
] as const satisfies readonly (keyof NextParams)[];
const completeTaskQuery = namedQuery<ResultParams, CompletedRow>("leasehold_complete_task", COMPLETE_TASK_TEXT, [
  ...RESULT_PARAMS,
  "usage",
]);
const completeTaskAndClaimQuery = namedQuery<ResultParams & NextParams, PartRow>(
  "leasehold_complete_task_and_claim",
  completeAndClaimStatement(CLAIM_ORDER),
  [...RESULT_PARAMS, ...NEXT_PARAMS, "usage"],
);
/**
 * COMPLETE_TASK_AND_CLAIM for a claim_next of one task (maxTasks 1), the Python worker's default:
 * one row needs no order, and the sort and its 29-column tuple descriptor were set up on every
 * execution all the same.
 */
const completeTaskAndClaimOneQuery = namedQuery<ResultParams & NextParams, PartRow>(
  "leasehold_complete_task_and_claim_one",
  completeAndClaimStatement(""),
  [...RESULT_PARAMS, ...NEXT_PARAMS, "usage"],
);
const completeTasksQuery = namedQuery<BatchParams, CompletedRow>("leasehold_complete_tasks", COMPLETE_TASKS_TEXT, ["results", "taskIds"]);
const completeTasksAndClaimQuery = namedQuery<BatchParams & NextParams, PartRow>(
  "leasehold_complete_tasks_and_claim",
  COMPLETE_TASKS_AND_CLAIM_TEXT,
  ["results", "taskIds", ...NEXT_PARAMS],
);
/** The statements' text as PostgreSQL runs them, for plans, snapshots and benchmarks. */
export const COMPLETE_TASK = completeTaskQuery.text;
export const COMPLETE_TASK_AND_CLAIM = completeTaskAndClaimQuery.text;
export const COMPLETE_TASK_AND_CLAIM_ONE = completeTaskAndClaimOneQuery.text;
export const COMPLETE_TASKS = completeTasksQuery.text;
export const COMPLETE_TASKS_AND_CLAIM = completeTasksAndClaimQuery.text;

export async function completeTask(ctx: StoreContext, input: CompleteTaskInput, opts: CallOptions): Promise<Task> {
  const done = validateComplete(input);
  if (ctx.coalescer) return ctx.coalescer.complete(done, opts.signal);
  return withClient(ctx.pool, opts.signal, (c) => completeWith(ctx, c, done));
}

// One statement completes and claims (COMPLETE_TASK_AND_CLAIM). When it accepted nothing, the
// result was refused (thrown, nothing claimed) or is a replay, which claims on its own.
export async function completeTaskAndClaim(
  ctx: StoreContext,
  input: CompleteTaskInput,
  next: ClaimTasksInput,
  opts: CallOptions,
): Promise<CompletedAndClaimed> {
  const done = validateComplete(input);
  const claim = validateClaimNext(next);
  if (ctx.coalescer) return ctx.coalescer.completeAndClaim(done, claim, opts.signal);
  return withClient(ctx.pool, opts.signal, async (c) => {
    await ctx.workloads.require(c, claim.workloads, "claim_next.workloads");
    const query = claim.maxTasks === 1 ? completeTaskAndClaimOneQuery : completeTaskAndClaimQuery;
    const hinted = ctx.claimHints.begin(claim.workloads, claim.labels);
    const rows = await query.run(c, { ...resultParams(done), ...nextParams(claim, hinted.json) });
    const accepted = rows.find((r) => r.part === 0);
    if (!accepted) {
      const task = await refusedOrLate(ctx, c, done);
      return { task, next: (await claimWith(ctx, c, claim, "claim_next.workloads")).tasks };
    }
    const next = rows.filter((r) => r.part === 1);
    // The claim ran (its gate is the accepted result).
    hinted.learn(next, next.length < claim.maxTasks);
    const task = await completed(ctx, c, accepted);
    return { task, next: claimed(ctx, next) };
  });
}

async function completeWith(ctx: StoreContext, c: pg.PoolClient, done: CompleteTaskInput): Promise<Task> {
  const row = await completeTaskQuery.maybe(c, resultParams(done));
  if (row) return completed(ctx, c, row);
  return refusedOrLate(ctx, c, done);
}

/**
 * A result the completion did not take: a late result of a task cancelled within its lease (kept),
 * a replay (the task as it is), or a conflict (thrown).
 */
export async function refusedOrLate(ctx: StoreContext, c: pg.PoolClient, done: CompleteTaskInput): Promise<Task> {
  const task = await loadTask(c, done.taskId);
  const late = await acceptLateResult(ctx, c, task, done);
  if (late) return late;
  // A replay is compared with the usage its attempt's accepted report recorded (on the completion's event).
  const replay = task.status === "completed" && task.attempt === done.attempt && task.leaseOwner === done.workerId;
  const recorded = replay ? (await COMPLETION_USAGE.maybe(c, { jobId: task.jobId, taskId: task.id, attempt: task.attempt }))?.usage : null;
  return replayOrConflict(task, done, recorded ?? undefined);
}

/** The usage the accepted report of a task's attempt recorded (the completion's event; not on the hot path: replays only). */
const COMPLETION_USAGE = defineQuery<{ jobId: string; taskId: string; attempt: number }, { usage: Usage | null }>(
  null,
  `SELECT usage FROM task_events
   WHERE job_id = $1 AND task_id = $2 AND kind = 'task_status' AND status = 'completed' AND attempt = $3
   ORDER BY id DESC LIMIT 1`,
  (p) => [p.jobId, p.taskId, p.attempt],
);

/** A task the completion accepted; its job is re-checked after commit when the statement could not decide. */
async function completed(ctx: StoreContext, c: pg.PoolClient, row: CompletedRow): Promise<Task> {
  ctx.options.observer?.tasksCompleted(1);
  if (row.recheck_job) await finishJobsAfterCommit(c, [row.job_id]);
  return toTask(row);
}

export async function completeTasks(ctx: StoreContext, inputs: CompleteTaskInput[], opts: CallOptions): Promise<CompleteOutcome[]> {
  const batch = validateBatch(inputs);
  return withClient(ctx.pool, opts.signal, (c) => completeBatchWith(ctx, c, batch));
}

export async function completeTasksAndClaim(
  ctx: StoreContext,
  inputs: CompleteTaskInput[],
  next: ClaimTasksInput,
  opts: CallOptions,
): Promise<BatchCompletedAndClaimed> {
  const batch = validateBatch(inputs);
  const claim = validateClaimNext(next);
  if (ctx.coalescer) return ctx.coalescer.completeBatchAndClaim(batch, claim, opts.signal);
  return withClient(ctx.pool, opts.signal, async (c) => {
    await ctx.workloads.require(c, claim.workloads, "claim_next.workloads");
    const hinted = ctx.claimHints.begin(claim.workloads, claim.labels);
    const rows = await completeTasksAndClaimQuery.run(c, { ...batchParams(batch), ...nextParams(claim, hinted.json) });
    const next = rows.filter((r) => r.part === 1);
    hinted.learn(next, next.length < claim.maxTasks);
    // A job one of whose tasks this statement claimed has unfinished work (that task), so it
    // cannot be done and is not rechecked (mayBeDoneJobs); its last completion will check. A
    // worker chained through one large job thus never pays for FINISH_JOBS_IF_DONE.
    const outcomes = await batchOutcomes(
      ctx,
      c,
      batch,
      rows.filter((r) => r.part === 0),
    );
    return {
      outcomes,
      next: claimed(
        ctx,
        rows.filter((r) => r.part === 1),
      ),
    };
  });
}

export async function completeBatchWith(ctx: StoreContext, c: pg.PoolClient, batch: CompleteTaskInput[]): Promise<CompleteOutcome[]> {
  const rows = await completeTasksQuery.run(c, batchParams(batch));
  return batchOutcomes(ctx, c, batch, rows);
}

/**
 * Each result's outcome, from the rows the completion accepted; the others are replays or
 * refusals. The jobs the statement saw with no pending task left (recheck_job) are finished if
 * done, now that it has committed.
 */
export async function batchOutcomes(
  ctx: StoreContext,
  c: pg.PoolClient,
  batch: CompleteTaskInput[],
  rows: CompletedRow[],
): Promise<CompleteOutcome[]> {
  const completed = new Map(rows.map((r) => [r.id, toTask(r)]));
  if (completed.size > 0) ctx.options.observer?.tasksCompleted(completed.size);
  const jobs = [...new Set(rows.filter((r) => r.recheck_job).map((r) => r.job_id))];
  await finishJobsAfterCommit(c, jobs);
  return outcomesOf(ctx, c, batch, completed);
}

/** Each result's outcome: the task its statement completed (`completed`), or a replay's task, or why it was refused. */
export async function outcomesOf(
  ctx: StoreContext,
  c: pg.PoolClient,
  batch: CompleteTaskInput[],
  completed: ReadonlyMap<string, Task>,
): Promise<CompleteOutcome[]> {
  const outcomes: CompleteOutcome[] = [];
  for (const b of batch) {
    const task = completed.get(b.taskId);
    if (task) {
      outcomes.push({ task });
      continue;
    }
    try {
      outcomes.push({ task: await refusedOrLate(ctx, c, b) });
    } catch (err) {
      if (!(err instanceof QueueError)) throw err;
      outcomes.push({ error: err });
    }
  }
  return outcomes;
}

/** claim_next's parameters (its worker may differ from the results'). */
function nextParams(claim: NormalizedClaim, hints: string): NextParams {
  return {
    workloads: claim.workloads,
    maxTasks: claim.maxTasks,
    claimWorkerId: claim.workerId,
    leaseSeconds: claim.leaseSeconds ?? null,
    labels: claim.labels,
    hints,
  };
}

/** COMPLETE_TASKS' parameters: the results as one jsonb recordset, and their ids. */
function batchParams(batch: CompleteTaskInput[]): BatchParams {
  return { results: JSON.stringify(batch.map(resultRecord)), taskIds: batch.map((b) => b.taskId) };
}
