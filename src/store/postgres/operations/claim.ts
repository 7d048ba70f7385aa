// ClaimTasks: one statement chooses and leases tasks (CLAIM_TASKS). Its CTEs are also the claim
// half of a result report with claim_next (complete.ts).

import type pg from "pg";
import type { CallOptions, ClaimOutcome, ClaimTasksInput, Task } from "../../../queue/types.js";
import { validateClaim, type NormalizedClaim } from "../../../queue/validation.js";
import type { StoreContext } from "../state/context.js";
import { withClient } from "../sql/db.js";
import { explainRefusal } from "./flow-control.js";
import { jobStatusIn, statusEvents, watchedJobs } from "../sql/fragments.js";
import { namedQuery } from "../sql/query.js";
import { toTask, type TaskRow } from "../sql/rows.js";

/**
 * The claim's parameters as its statement names them (namedQuery, sql/query.ts), or expressions of
 * them: the claim alone, the claim of a result report and the coalesced claims pass their own.
 */
export interface ClaimParams {
  workloads: string;
  limit: string;
  worker: string;
  leaseSeconds: string;
  /** the worker's labels, jsonb ('{}' for none) */
  labels: string;
  /** where each workload's scan of pending tasks starts (claim-hints.ts), jsonb ('{}': at the front) */
  hints: string;
}

/** The claim alone's parameters, each by its own name. */
const CLAIM_NAMES: ClaimParams = {
  workloads: "@workloads",
  limit: "@maxTasks",
  worker: "@workerId",
  leaseSeconds: "@leaseSeconds",
  labels: "@labels",
  hints: "@hints",
};

/**
 * A claim for several callers at once (coalescing.ts): the statement leases up to `limit` tasks
 * and gives the rn-th of them to `owner(rn)`, where `owners` is the whole list (a text[]
 * expression). The plain arms take slots 1..k in claim order; leasehold_flow_claim, called with
 * the slots after k, gives its n-th task to the (k + n)-th slot and says which it was, so a
 * flow-controlled workload's caps, rate and fair share are counted once for the whole batch.
 */
export interface ClaimAssignment {
  owner(rn: string): string;
  owners: string;
}

/**
 * Which arms a claim statement carries. The full claim has all; a lean one (coalesced statements
 * only, coalesced-statements.ts) leaves out the arm of expired leases and the flow claim when the
 * coordinator knows neither can take anything: the lease reaper's last probe found no expired
 * lease (claim hints' "~expired": false) and no requested workload is flow-controlled. Every plan
 * node costs each execution its set-up and tear-down whether it runs or not, and those two arms
 * with what reads them are about a third of the statement's plan.
 */
export interface ClaimArms {
  expired: boolean;
  flow: boolean;
}
export const FULL_ARMS: ClaimArms = { expired: true, flow: true };
export const LEAN_ARMS: ClaimArms = { expired: false, flow: false };

const candidates = (arms: ClaimArms) => (arms.expired ? "(SELECT * FROM expired UNION ALL SELECT * FROM fresh)" : "fresh");
const plainPick = (limit: string, arms: ClaimArms) => `picked AS (
  SELECT id FROM ${candidates(arms)} candidates
  ORDER BY arm, priority DESC, fair_rank, created_at, chunk_index
  LIMIT ${limit}
)`;
// The same choice, numbered in claim order so each task can be given to its caller's slot.
const assignedPick = (limit: string, arms: ClaimArms) => `picked AS (
  SELECT id, row_number() OVER (ORDER BY arm, priority DESC, fair_rank, created_at, chunk_index) AS rn
  FROM ${candidates(arms)} candidates
  ORDER BY rn
  LIMIT ${limit}
)`;
/*
 * leasehold_flow_claim_hinted (migrations/functions/) takes the claim hints too: where each flow lane
 * starts its scan of pending tasks ("~f"), whether the arm of expired leases may be left out
 * ("~expired"), and "~flow": "off" for the claim as it was (FLOW_CLAIM_HINTS=false). Its `hint` is
 * where the lane's next claim starts, which the answer carries in created_us (createdUs, below).
 */
const flowClaim = (p: ClaimParams, gate: string) => `flow_claimed AS (
  SELECT f.task, f.fresh, f.hint
  FROM leasehold_flow_claim_hinted(
    ARRAY(SELECT name FROM requested WHERE flow), ${p.limit}::int - (SELECT count(*)::int FROM plain_claimed), ${p.worker}::text,
    ${p.leaseSeconds}::int, ${p.labels}::jsonb, NULL::text[], ${p.hints}::jsonb) f
  WHERE EXISTS (SELECT 1 FROM requested WHERE flow) AND ${gate}
)`;
// The flow arm of a claim for several callers: the slots the plain arms left, each with its owner.
const assignedFlowClaim = (p: ClaimParams, gate: string, owners: string) => `flow_claimed AS (
  SELECT f.task, f.fresh, f.slot, f.hint
  FROM leasehold_flow_claim_hinted(
    ARRAY(SELECT name FROM requested WHERE flow), ${p.limit}::int - (SELECT count(*)::int FROM plain_claimed), NULL::text,
    ${p.leaseSeconds}::int, ${p.labels}::jsonb, (${owners})[(SELECT count(*)::int FROM plain_claimed) + 1:], ${p.hints}::jsonb) f
  WHERE EXISTS (SELECT 1 FROM requested WHERE flow) AND ${gate}
)`;

/*
 * One scan of a workload's pending tasks for the fresh arm, in claim order from where `from` says.
 * Without a hint (claim-hints.ts) the claim runs the first of three: from the front. With one, the
 * second reads the hint's priority from the hint on, and the third the lower priorities, only if
 * the second left part of the limit (Append runs its arms in turn and LIMIT stops it). A higher
 * priority has no arm: a hint never lies below a pending task (its announcement moved it back).
 */
const freshScan = (p: ClaimParams, gate: string, from: string, order: string) => `
      SELECT id, priority, fair_rank, created_at, chunk_index FROM tasks
      WHERE status = 'pending' AND workload = w.name AND ${from} AND run_after <= now() AND ${gate}
        AND NOT w.flow AND (required_labels IS NULL OR required_labels <@ ${p.labels}::jsonb)
      ORDER BY ${order}
      LIMIT ${p.limit}
      FOR UPDATE SKIP LOCKED`;

// The arm of expired leases (see claimCtes), a CTE ending in a comma.
const expiredArm = (p: ClaimParams, gate: string) => `expired AS (
  SELECT c.id, c.priority, c.fair_rank, c.created_at, c.chunk_index, 0 AS arm
  FROM requested w
  CROSS JOIN LATERAL (
    SELECT id, priority, fair_rank, created_at, chunk_index FROM tasks
    WHERE status = 'leased' AND workload = w.name AND lease_expires_at <= now() AND attempt < max_attempts AND ${gate}
      AND coalesce((${p.hints}::jsonb ->> '~expired')::boolean, true)
      AND NOT w.flow AND (required_labels IS NULL OR required_labels <@ ${p.labels}::jsonb)
    ORDER BY lease_expires_at
    LIMIT ${p.limit}
    FOR UPDATE SKIP LOCKED
  ) c
), `;

/*
 * The claim: one statement, so there is no window between choosing and taking.
 * - Two arms, each an index-ordered top-N per requested workload (LATERAL over the workload list,
 *   because `workload = ANY(...)` cannot return one ordered index scan across several workloads):
 *     expired: leases whose holder went silent, with attempts left (tasks_lease_expiry_idx), left
 *              out while the lease reaper's last probe found none (hints' "~expired", claim-hints.ts),
 *     fresh:   pending work whose backoff has passed (tasks_claim_pending_idx, whose last key column
 *              is run_after: a task in backoff is passed over inside the index, its row never read),
 *              from where the workload's claim hint says (freshScan, above).
 * - FOR UPDATE SKIP LOCKED: concurrent claimers skip each other's candidates instead of queueing.
 * - Reclaimed work goes first (a zombie holds a slot the job is waiting on), then priority, age, chunk.
 * - The job moves to running in the same statement; `status = 'pending'` keeps that a no-op
 *   (and lock-free) for jobs already running.
 * - Each lease carries lease_seq, the id of the transaction that wrote it: the flow claim counts a
 *   workload's live leases from a floor of these (leasehold_flow_live), so every lease has one.
 * - Rows are written through `id = ANY(ARRAY(...))`: a primary-key lookup whatever the plan cache
 *   guesses about the size of `picked` (a joined CTE once got a generic plan with a seq scan).
 * - The status events are written by the statement (claimedEventRows, see watchedJobs above), previous
 *   status from the arm: pending for fresh work, leased for a reclaimed lease.
 * - "Was it fresh" is `= ANY (ARRAY(SELECT id FROM fresh))`, not `IN (SELECT id FROM fresh)`: the
 *   IN became a hashed subplan, whose hash table set up per statement was ~5% of the backends' CPU
 *   under claim + complete (perf).
 * - Flow control (docs/flow-control-claim.md): each requested workload's row says whether
 *   it has caps, a rate limit or is paused (`flow`). The two arms take only workloads without
 *   (`NOT w.flow`, a one-time filter: no row of a flow workload is read); flow workloads are
 *   claimed by leasehold_flow_claim (migrations/functions/), under their advisory lock, for
 *   whatever this statement's arms left of the limit. Both honour the worker's labels and order by
 *   fair_rank after priority (0 in a workload that never saw a concurrency key).
 * - A lease's length, when the worker names none, is its workload's, from `requested` (a scan of
 *   the few rows already read) rather than a lookup of workloads per leased row.
 * - The plain update waits on `EXISTS (SELECT 1 FROM picked)`, a one-time filter: with nothing
 *   picked (a flow workload's claim, leased in its function) it reads nothing. A generic plan made
 *   while tasks was small scanned the heap for the picked ids (a hash join over a sequential
 *   scan), every page a claim, more every minute under a held horizon (bench:horizon --keyed).
 * These are the claim's CTEs, from the two arms to the job's move to running (everything but the
 * events, the watcher probe and the answer). `gate` is a condition every arm adds: the claim of a
 * result report takes nothing unless the report's result was accepted.
 */
export const claimCtes = (p: ClaimParams, gate = "true", assign?: ClaimAssignment, arms: ClaimArms = FULL_ARMS) => `requested AS (
  SELECT wl.name, wl.flow, wl.lease_seconds, (h.k ->> 'p')::int AS hint_p, (h.k ->> 'r')::bigint AS hint_r,
    CASE WHEN h.k ->> 'c' = 'Infinity' THEN 'infinity'::timestamptz
      ELSE 'epoch'::timestamptz + (h.k ->> 'c')::bigint * interval '1 microsecond' END AS hint_c, (h.k ->> 'i')::int AS hint_i
  FROM workloads wl CROSS JOIN LATERAL (SELECT ${p.hints}::jsonb -> wl.name AS k) h
  WHERE wl.name = ANY (${p.workloads}::text[])
), ${arms.expired ? expiredArm(p, gate) : ""}fresh AS (
  SELECT c.id, c.priority, c.fair_rank, c.created_at, c.chunk_index, 1 AS arm
  FROM requested w
  CROSS JOIN LATERAL (
    SELECT * FROM (${freshScan(p, gate, "w.hint_p IS NULL", "priority DESC, fair_rank, created_at, chunk_index")}) front
    UNION ALL
    SELECT * FROM (${freshScan(
      p,
      gate,
      "priority = w.hint_p AND (fair_rank, created_at, chunk_index) >= (w.hint_r, w.hint_c, w.hint_i)",
      "fair_rank, created_at, chunk_index",
    )}) from_hint
    UNION ALL
    SELECT * FROM (${freshScan(p, gate, "priority < w.hint_p", "priority DESC, fair_rank, created_at, chunk_index")}) below_hint
    LIMIT ${p.limit}
  ) c
), ${assign ? assignedPick(p.limit, arms) : plainPick(p.limit, arms)}, plain_claimed AS (
  UPDATE tasks t
  SET status = 'leased',
      attempt = t.attempt + 1,
      lease_owner = ${assign ? assign.owner("p.rn") : p.worker},
      lease_expires_at = now() + make_interval(secs => coalesce(${p.leaseSeconds}::int, (SELECT r.lease_seconds FROM requested r WHERE r.name = t.workload))),
      lease_seq = txid_current(),
      started_at = coalesce(t.started_at, now()),
      version = t.version + 1,
      event_flip = NOT t.event_flip
  ${assign ? "FROM picked p WHERE t.id = ANY (ARRAY(SELECT id FROM picked)) AND t.id = p.id" : "WHERE t.id = ANY (ARRAY(SELECT id FROM picked))"}
    AND EXISTS (SELECT 1 FROM picked)
  RETURNING t.*${assign ? ", p.rn" : ""}
), ${
  arms.flow
    ? `${assign ? assignedFlowClaim(p, gate, assign.owners) : flowClaim(p, gate)}, claimed AS (
  SELECT * FROM plain_claimed UNION ALL SELECT (task).*${assign ? ", (SELECT count(*) FROM plain_claimed) + slot" : ""} FROM flow_claimed
)`
    : "claimed AS (SELECT * FROM plain_claimed)"
}, running AS (
  UPDATE jobs SET status = 'running', updated_at = now()
  WHERE id = ANY (ARRAY(SELECT job_id FROM claimed)) AND ${jobStatusIn("status", "pending")}
)`;
/** The parts of a claim statement that read its arms: its events, pickup_seconds and created_us. */
export interface ClaimOutputs {
  /** The claim's status events, for statusEvents: previous status pending for fresh work, leased for a reclaimed lease. */
  eventRows: string;
  /** The same beside a completion's events, which carry the report's usage (fragments.ts statusEventsWithUsage): a claim reports none. */
  eventRowsBesideUsage: string;
  /** pickup_seconds (metrics): how long a task taken from pending had been claimable; NULL for a reclaimed lease. */
  pickupSeconds: string;
  /**
   * created_us: a claimed task's created_at in whole microseconds since the epoch, where claim hints
   * (claim-hints.ts) put the next scan's start; a Date would round it to the millisecond. A task the
   * flow claim leased carries instead where its lane's next claim starts (`priority;fair_rank;us;chunk`,
   * leasehold_flow_claim_hinted's hint), when it says.
   */
  createdUs(t: string): string;
}

export function claimOutputs(arms: ClaimArms): ClaimOutputs {
  // A claimed task came from pending (not a reclaimed lease): taken by the fresh arm, or by the flow
  // claim from pending. Without those two arms every claimed task is the fresh arm's.
  const wasFresh = (t: string) =>
    arms.expired || arms.flow
      ? `(${t}.id = ANY (ARRAY(SELECT id FROM fresh))${arms.flow ? ` OR ${t}.id = ANY (ARRAY(SELECT (task).id FROM flow_claimed WHERE fresh))` : ""})`
      : "true";
  const events = (extra: string) => `SELECT job_id, id, chunk_index, 'task_status', 'leased',
    CASE WHEN ${wasFresh("claimed")} THEN 'pending' ELSE 'leased' END, attempt, lease_owner${extra}
  FROM claimed`;
  const ownUs = (t: string) => `(extract(epoch FROM ${t}.created_at) * 1000000)::bigint::text`;
  return {
    eventRows: events(""),
    eventRowsBesideUsage: events(", NULL::jsonb"),
    pickupSeconds: `CASE WHEN ${wasFresh("claimed")} THEN extract(epoch FROM now() - claimed.run_after)::float8 END`,
    createdUs: (t) => (arms.flow ? `coalesce((SELECT fc.hint FROM flow_claimed fc WHERE (fc.task).id = ${t}.id), ${ownUs(t)})` : ownUs(t)),
  };
}
const FULL_OUTPUTS = claimOutputs(FULL_ARMS);
export const claimedEventRows = FULL_OUTPUTS.eventRows;
export const claimedEventRowsBesideUsage = FULL_OUTPUTS.eventRowsBesideUsage;
export const createdUs = FULL_OUTPUTS.createdUs;
export const pickupSeconds = FULL_OUTPUTS.pickupSeconds;

// @leaseSeconds null: the workload's; @labels and @hints jsonb.
const claimStatement = (claimOrder: string) => `
WITH ${claimCtes(CLAIM_NAMES)}, ${statusEvents(claimedEventRows)},
${watchedJobs("claimed")}
SELECT claimed.*, ${pickupSeconds} AS pickup_seconds, (SELECT count(*) FROM watched) AS notified, ${createdUs("claimed")} AS created_us
FROM claimed ${claimOrder}`;
export const CLAIM_ORDER = "ORDER BY priority DESC, fair_rank, created_at, chunk_index";

interface ClaimQueryParams {
  workloads: string[];
  maxTasks: number;
  workerId: string;
  leaseSeconds: number | null;
  /** jsonb text */
  labels: string;
  /** jsonb text (claim-hints.ts) */
  hints: string;
}
/** A claimed row: the task, and how long it had been claimable (NULL for a reclaimed lease). */
export type ClaimedRow = TaskRow & { pickup_seconds: number | null; created_us?: string | null };
const CLAIM_PARAMS = [
  "workloads",
  "maxTasks",
  "workerId",
  "leaseSeconds",
  "labels",
  "hints",
] as const satisfies readonly (keyof ClaimQueryParams)[];
/** CLAIM_TASKS for one task (maxTasks 1): one row needs no sort (see COMPLETE_TASK_AND_CLAIM_ONE). */
const claimTaskQuery = namedQuery<ClaimQueryParams, ClaimedRow>("leasehold_claim_task", claimStatement(""), CLAIM_PARAMS);
const claimTasksQuery = namedQuery<ClaimQueryParams, ClaimedRow>("leasehold_claim_tasks", claimStatement(CLAIM_ORDER), CLAIM_PARAMS);
/** The claim's text as PostgreSQL runs it ($1..$6 in CLAIM_PARAMS' order), for plans and benchmarks. */
export const CLAIM_TASKS = claimTasksQuery.text;
export const CLAIM_TASK = claimTaskQuery.text;

export async function claimTasks(ctx: StoreContext, input: ClaimTasksInput, opts: CallOptions): Promise<ClaimOutcome> {
  const claim = validateClaim(input);
  if (ctx.coalescer) return ctx.coalescer.claim(claim, opts.signal);
  return withClient(ctx.pool, opts.signal, (c) => claimWith(ctx, c, claim, "workloads"));
}

export async function claimWith(ctx: StoreContext, c: pg.PoolClient, claim: NormalizedClaim, field: string): Promise<ClaimOutcome> {
  const hinted = ctx.claimHints.begin(claim.workloads, claim.labels);
  const rows = await (claim.maxTasks === 1 ? claimTaskQuery : claimTasksQuery).run(c, {
    ...claim,
    leaseSeconds: claim.leaseSeconds ?? null,
    hints: hinted.json,
  });
  hinted.learn(rows, rows.length < claim.maxTasks);
  await ctx.flow.sightings.seen(c, claim.workloads, claim.labels);
  if (rows.length === 0) {
    // Only an empty answer pays for this check, so the hot path stays one statement.
    await ctx.workloads.require(c, claim.workloads, field);
    const retryAfterMs = ctx.flow.workloads.any(claim.workloads) ? await explainRefusal(ctx, c, claim.workloads) : undefined;
    return retryAfterMs === undefined ? { tasks: [] } : { tasks: [], retryAfterMs };
  }
  return { tasks: claimed(ctx, rows) };
}

export function claimed(ctx: StoreContext, rows: ClaimedRow[]): Task[] {
  if (rows.length === 0) return [];
  ctx.options.observer?.tasksClaimed(
    rows.length,
    rows.flatMap((r) => (r.pickup_seconds === null ? [] : [r.pickup_seconds])),
  );
  return rows.map(toTask);
}
