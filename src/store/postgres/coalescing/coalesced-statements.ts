// The statements of coalesced calls (coalescing.ts): one statement for the single-task calls of
// many workers that arrived together. Each is the batched form of a one-caller statement, and each
// item keeps the fence of that statement: its own worker, attempt and live lease.

import { EVENTS_CHANNEL, NOTIFY_CHANNEL } from "../sql/channels.js";
import {
  claimCtes,
  claimedEventRows,
  claimedEventRowsBesideUsage,
  claimOutputs,
  createdUs,
  FULL_ARMS,
  LEAN_ARMS,
  pickupSeconds,
  type ClaimArms,
} from "../operations/claim.js";
import { batchCompletedEvents, completeMany } from "../operations/complete.js";
import {
  completedUsageEventRows,
  failedEvents,
  freedSlotsNotify,
  mayBeDone,
  mayBeDoneJobs,
  retriedNotify,
  statusEvents,
  statusEventsWithUsage,
  usageSum,
  watchedJobs,
} from "../sql/fragments.js";
import { defineQuery, namedQuery } from "../sql/query.js";
import type { TaskRow } from "../sql/rows.js";

/** The claim's parameters shared by a batch: its lane's key. */
interface ClaimShape {
  workloads: string[];
  leaseSeconds: number | null;
  /** jsonb text */
  labels: string;
  /** jsonb text (claim-hints.ts) */
  hints: string;
}
/** A row a claim leased: which caller of the batch it is for, and its place in claim order. */
export type CoalescedClaimRow = TaskRow & { caller: number; rn: string; pickup_seconds: number | null; created_us: string | null };
/**
 * The requested workloads the database says are flow-controlled: callers left empty there learn
 * why (a cap, a rate limit's next token), and the coordinator's view of them is brought up to date.
 */
type FlowWorkloads = { flow_workloads: string[] | null };
/** Items as one jsonb recordset (JSON text) and their task ids, so rows are found through the primary key. */
interface Items {
  items: string;
  taskIds: string[];
}

/*
 * Claims of several callers (same workloads, labels and lease length) in one statement: CLAIM_TASKS
 * with as many slots as the callers asked for in all, the rn-th task in claim order leased to the
 * rn-th slot's worker. Slots are laid out caller by caller in arrival order, so the first caller
 * gets the best tasks, as it would have claimed first. Every arm, lock and event is CLAIM_TASKS'.
 * @owners are the slots' worker ids (text[]), @callers each slot's caller (its index in the batch,
 * int[]); @leaseSeconds null: the workload's. Always one row at least
 * (the claimed ones, or one of nulls), each with the requested workloads that are flow-controlled.
 */
const COALESCED_CLAIM_TEXT = `
WITH ${claimCtes(
  {
    workloads: "@workloads",
    limit: "cardinality(@owners::text[])",
    worker: "NULL",
    leaseSeconds: "@leaseSeconds",
    labels: "@labels",
    hints: "@hints",
  },
  "true",
  {
    owner: (rn) => `(@owners::text[])[${rn}]`,
    owners: "@owners::text[]",
  },
)}, ${statusEvents(claimedEventRows)},
${watchedJobs("claimed")}
SELECT claimed.*, (@callers::int[])[claimed.rn] AS caller, ${pickupSeconds} AS pickup_seconds, (SELECT count(*) FROM watched) AS notified,
  f.flow_workloads, ${createdUs("claimed")} AS created_us
FROM (SELECT ARRAY(SELECT name FROM requested WHERE flow) AS flow_workloads) f LEFT JOIN claimed ON true`;

/*
 * Results with claim_next of several callers in one statement. The results are COMPLETE_TASKS'
 * (each fenced on its own; a stale one is left alone and explained by the caller afterwards). A
 * caller of one result (CompleteTask) claims only when its result was accepted, with as many slots
 * as its claim_next asked for, as COMPLETE_TASK_AND_CLAIM gates its claim on its result; a caller
 * of several (CompleteTasks) claims whatever its results' outcomes, as COMPLETE_TASKS_AND_CLAIM
 * does: its first item carries its claim_n and claim_always, the others claim_n 0. A batch never
 * holds one task twice (the group commit keeps the later one for the next statement), so a task id
 * names its caller. Rows: part 0 the completed tasks (with recheck_job, the jobs the claim took
 * nothing of), part 1 the claimed ones with their caller and rn (claim order).
 * @items: the results (jsonb recordset with the caller's index, claim_n and claim_always), @taskIds
 * their task ids. `arms`: the full claim, or the lean one (claim.ts ClaimArms) when the coordinator
 * knows no expired lease and no flow-controlled workload can be taken.
 */
const completeAndClaimText = (arms: ClaimArms, out = claimOutputs(arms)) => `
WITH input AS MATERIALIZED (
  SELECT * FROM jsonb_to_recordset(@items::jsonb)
    AS b(caller int, task_id uuid, worker_id text, attempt int, result_uri text, result_sha256 text, metrics jsonb, usage jsonb, claim_worker text, claim_n int,
      claim_always boolean)
), done AS (
  UPDATE tasks t
  SET status = 'completed', result_uri = b.result_uri, result_sha256 = b.result_sha256, metrics = b.metrics,
      usage = ${usageSum("t.usage", "b.usage")},
      completed_at = now(), lease_expires_at = NULL, version = t.version + 1, event_flip = NOT t.event_flip
  FROM input b
  WHERE t.id = ANY(@taskIds::uuid[]) AND t.id = b.task_id AND t.status::text = 'leased' AND t.lease_owner = b.worker_id AND t.attempt = b.attempt
    AND t.lease_expires_at > now()
  RETURNING t.*
), slots AS (
  SELECT b.caller, b.claim_worker AS worker_id, row_number() OVER (ORDER BY b.caller, g) AS rn
  FROM input b CROSS JOIN generate_series(1, b.claim_n) g
  WHERE b.claim_always OR b.task_id = ANY (ARRAY(SELECT id FROM done))
), slot_list AS (
  SELECT array_agg(worker_id ORDER BY rn) AS owners, array_agg(caller ORDER BY rn) AS callers FROM slots
), ${claimCtes(
  {
    workloads: "@workloads",
    limit: "(SELECT count(*) FROM slots)",
    worker: "NULL",
    leaseSeconds: "@leaseSeconds",
    labels: "@labels",
    hints: "@hints",
  },
  "EXISTS (SELECT 1 FROM slots)",
  {
    owner: (rn) => `((SELECT owners FROM slot_list))[${rn}]`,
    owners: "(SELECT owners FROM slot_list)",
  },
  arms,
)},
${statusEventsWithUsage(completedUsageEventRows("done", "r.usage", " JOIN input r ON r.task_id = d.id"), out.eventRowsBesideUsage)},
watched AS (
  SELECT pg_notify('${EVENTS_CHANNEL}', r.job_id::text) FROM (SELECT job_id FROM done UNION SELECT job_id FROM claimed) r
  WHERE EXISTS (SELECT 1 FROM job_watchers w WHERE w.job_id = r.job_id)
), ${freedSlotsNotify("done")}, ${mayBeDoneJobs("done", "claimed")}
SELECT 0 AS part, NULL::int AS caller, done.*, NULL::bigint AS rn, NULL::float8 AS pickup_seconds,
  (SELECT count(*) FROM watched) + (SELECT count(*) FROM freed) AS notified,
  ARRAY(SELECT name FROM requested WHERE flow) AS flow_workloads, ${mayBeDone("done")} AS recheck_job, NULL AS created_us
FROM done
UNION ALL
SELECT 1, ((SELECT callers FROM slot_list))[claimed.rn], claimed.*, ${out.pickupSeconds}, 0, NULL, false, ${out.createdUs("claimed")} FROM claimed`;

/*
 * Results without claim_next and claims of other callers, in one statement: what arrived while a
 * claim lane was busy (group-commit.ts, riders). The results are COMPLETE_TASKS' (each fenced on
 * its own; one refused is left alone and explained by its caller afterwards); the claims are
 * COALESCED_CLAIM's (same workloads, labels and lease length, slots laid out caller by caller).
 * The claim does not wait on the results, which are other callers': as in COMPLETE_TASKS_AND_CLAIM
 * the two updates never meet one row (a completion needs a live lease, which neither claim arm
 * takes). Rows: part 0 the completed tasks (recheck_job: jobs no claim of this statement gave
 * work), part 1 the claimed ones with their caller and rn (claim order), or one row of nulls when
 * there are neither; each with the requested workloads that are flow-controlled. The wake-ups
 * (`watched`, `freed`) are counted once, in that first subquery, so they run whichever parts have rows.
 * @results and @taskIds as COMPLETE_TASKS'; @owners and @callers the claims' slots as COALESCED_CLAIM's.
 */
const COALESCED_COMPLETE_THEN_CLAIM_TEXT = `
WITH ${completeMany}, ${claimCtes(
  {
    workloads: "@workloads",
    limit: "cardinality(@owners::text[])",
    worker: "NULL",
    leaseSeconds: "@leaseSeconds",
    labels: "@labels",
    hints: "@hints",
  },
  "true",
  {
    owner: (rn) => `(@owners::text[])[${rn}]`,
    owners: "@owners::text[]",
  },
)},
${statusEventsWithUsage(batchCompletedEvents, claimedEventRowsBesideUsage)},
watched AS (
  SELECT pg_notify('${EVENTS_CHANNEL}', r.job_id::text) FROM (SELECT job_id FROM done UNION SELECT job_id FROM claimed) r
  WHERE EXISTS (SELECT 1 FROM job_watchers w WHERE w.job_id = r.job_id)
), ${freedSlotsNotify("done")}, ${mayBeDoneJobs("done", "claimed")}
SELECT u.*, f.notified, f.flow_workloads
FROM (
  SELECT ARRAY(SELECT name FROM requested WHERE flow) AS flow_workloads,
    (SELECT count(*) FROM watched) + (SELECT count(*) FROM freed) AS notified
) f
LEFT JOIN (
  SELECT 0 AS part, NULL::int AS caller, done.*, NULL::bigint AS rn, NULL::float8 AS pickup_seconds,
    ${mayBeDone("done")} AS recheck_job, NULL AS created_us
  FROM done
  UNION ALL
  SELECT 1, (@callers::int[])[claimed.rn], claimed.*, ${pickupSeconds}, false, ${createdUs("claimed")} FROM claimed
) u ON true`;

/*
 * Lease renewals of several workers: RENEW_LEASE per item. $1 items (jsonb recordset), $2 their task ids.
 */
const COALESCED_RENEW_TEXT = `
UPDATE tasks t
SET lease_expires_at = now() + make_interval(secs => coalesce(b.lease_seconds, wl.lease_seconds)),
    version = t.version + 1
FROM jsonb_to_recordset($1::jsonb) AS b(task_id uuid, worker_id text, attempt int, lease_seconds int), workloads wl
WHERE t.id = ANY($2::uuid[]) AND t.id = b.task_id AND t.status::text = 'leased' AND t.lease_owner = b.worker_id AND t.attempt = b.attempt
  AND t.lease_expires_at > now() AND wl.name = t.workload
RETURNING t.*`;

/*
 * Failure reports of several workers: FAIL_TASK per item (retry after a backoff while attempts
 * remain and the worker calls it retryable, else failed for good), its event written inline with the
 * report's usage as FAIL_TASK's. $1 items, $2 their task ids.
 */
const COALESCED_FAIL_TEXT = `
WITH cur AS (
  UPDATE tasks t
  SET status = CASE WHEN b.retryable AND t.attempt < t.max_attempts THEN 'pending' ELSE 'failed' END::task_status,
      run_after = CASE WHEN b.retryable AND t.attempt < t.max_attempts
        THEN now() + make_interval(secs => coalesce(b.retry_after_seconds, least(300, power(2, t.attempt)) * (0.75 + random() * 0.5)))
        ELSE t.run_after END,
      completed_at = CASE WHEN b.retryable AND t.attempt < t.max_attempts THEN NULL ELSE now() END,
      lease_expires_at = NULL,
      error_code = b.error_code,
      error_message = b.error_message,
      usage = ${usageSum("t.usage", "b.usage")},
      version = t.version + 1, event_flip = NOT t.event_flip
  FROM jsonb_to_recordset($1::jsonb)
    AS b(task_id uuid, worker_id text, attempt int, error_code text, retryable boolean, error_message text, retry_after_seconds float8, usage jsonb)
  WHERE t.id = ANY($2::uuid[]) AND t.id = b.task_id AND t.status::text = 'leased' AND t.lease_owner = b.worker_id AND t.attempt = b.attempt
    AND t.lease_expires_at > now()
  RETURNING t.*, b.usage AS report_usage
), ${failedEvents("cur.report_usage")}, ${watchedJobs("cur")}, ${retriedNotify("cur")}, ${freedSlotsNotify("cur")}
SELECT cur.*, (SELECT count(*) FROM woken) + (SELECT count(*) FROM freed) + (SELECT count(*) FROM watched) AS notified FROM cur`;

/*
 * Tasks leased for a caller whose deadline passed while its coalesced claim ran: given back as if
 * never claimed (pending, the attempt not spent), fenced by owner and attempt so a lease that has
 * moved on is left alone. The status trigger writes the leased -> pending event. $1 items
 * (task_id, worker_id, attempt), $2 their task ids. The wake-up names the first of them in claim
 * order as its head, so claim hints move back to it (claim-hints.ts), as a retry's does: without
 * one every hint of the workload was dropped, and under a held MVCC horizon the next claims walked
 * from the front (give-backs come when claims run slow, which made them slower still).
 */
const GIVE_BACK_TEXT = `
WITH back AS (
  UPDATE tasks t
  SET status = 'pending', attempt = t.attempt - 1, lease_owner = NULL, lease_expires_at = NULL, version = t.version + 1
  FROM jsonb_to_recordset($1::jsonb) AS b(task_id uuid, worker_id text, attempt int)
  WHERE t.id = ANY($2::uuid[]) AND t.id = b.task_id AND t.status::text = 'leased' AND t.lease_owner = b.worker_id AND t.attempt = b.attempt
  RETURNING t.workload, t.priority, t.fair_rank, t.created_at, t.chunk_index
)
SELECT pg_notify('${NOTIFY_CHANNEL}', workload || ':' || count(*) || ':' || (array_agg(
    priority || ';' || fair_rank || ';' || (extract(epoch FROM created_at) * 1000000)::bigint || ';' || chunk_index
    ORDER BY priority DESC, fair_rank, created_at, chunk_index))[1])
FROM back GROUP BY workload`;

// The composed statements' parameters in the order of their $1..$N, as they were numbered by hand.
const COMPLETE_AND_CLAIM_PARAMS = ["items", "taskIds", "workloads", "leaseSeconds", "labels", "hints"] as const;
export const COALESCED_CLAIM = namedQuery<
  ClaimShape & { owners: string[]; callers: number[] },
  (CoalescedClaimRow | { [K in keyof CoalescedClaimRow]: null }) & FlowWorkloads
>("leasehold_coalesced_claim", COALESCED_CLAIM_TEXT, ["workloads", "owners", "callers", "leaseSeconds", "labels", "hints"]);
export const COALESCED_COMPLETE_AND_CLAIM = namedQuery<
  ClaimShape & Items,
  CoalescedClaimRow & { part: number; recheck_job: boolean } & FlowWorkloads
>("leasehold_coalesced_complete_and_claim", completeAndClaimText(FULL_ARMS), COMPLETE_AND_CLAIM_PARAMS);
/**
 * The same without the arm of expired leases and the flow claim (ClaimArms): sent while the lease
 * reaper's last probe found no expired lease and no requested workload is flow-controlled, as the
 * coordinator knows. Its plain arms still take nothing of a workload the database says is
 * flow-controlled (`NOT w.flow`), and the answer says which, so a view gone stale costs a claim
 * (its callers are topped up by the full claim, coalescing.ts), never a cap.
 */
export const COALESCED_COMPLETE_AND_CLAIM_LEAN = namedQuery<
  ClaimShape & Items,
  CoalescedClaimRow & { part: number; recheck_job: boolean } & FlowWorkloads
>("leasehold_coalesced_complete_and_claim_lean", completeAndClaimText(LEAN_ARMS), COMPLETE_AND_CLAIM_PARAMS);
/** A row of COALESCED_COMPLETE_THEN_CLAIM: `part` null on the row of nulls. */
export type CompleteThenClaimRow = CoalescedClaimRow & { part: number | null; recheck_job: boolean | null } & FlowWorkloads;
export const COALESCED_COMPLETE_THEN_CLAIM = namedQuery<
  ClaimShape & { results: string; taskIds: string[]; owners: string[]; callers: number[] },
  CompleteThenClaimRow
>("leasehold_coalesced_complete_then_claim", COALESCED_COMPLETE_THEN_CLAIM_TEXT, [
  "results",
  "taskIds",
  "workloads",
  "owners",
  "callers",
  "leaseSeconds",
  "labels",
  "hints",
]);
export const COALESCED_RENEW = defineQuery<Items, TaskRow>("leasehold_coalesced_renew", COALESCED_RENEW_TEXT, (p) => [p.items, p.taskIds]);
export const COALESCED_FAIL = defineQuery<Items, TaskRow>("leasehold_coalesced_fail", COALESCED_FAIL_TEXT, (p) => [p.items, p.taskIds]);
// Rare (a caller gone mid-statement): sent unnamed, no plan kept on every connection for it.
export const GIVE_BACK = defineQuery<Items, { pg_notify: string }>(null, GIVE_BACK_TEXT, (p) => [p.items, p.taskIds]);
