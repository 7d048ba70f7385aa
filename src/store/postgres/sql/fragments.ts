// SQL pieces several statements share: the fenced live lease, the status events a statement writes
// itself, and the notification of watched jobs. Each statement file composes its text from these
// once, at load.

import { EVENTS_CHANNEL, NOTIFY_CHANNEL } from "./channels.js";

/*
 * Status events written by the statement that changes the status (the claim and the completions)
 * rather than by the tasks_status_events trigger, which skips every row whose update flips
 * event_flip (see migrations/1764490000000_lean_hot_path.sql): a statement that flips it must
 * insert the event of each row it changes, exactly as the trigger would have (same columns, same
 * transaction), and notify the watched jobs among them. The trigger was a plpgsql call per row,
 * with its INSERT and its job_watchers probe run through SPI; ~14% of the backends' CPU under
 * claim + complete (perf). `watched` must be read by the statement (a SELECT in a WITH runs only
 * when referenced): each of them returns its count as `notified`.
 * Measured (bench/sql-ab.ts, 3 pairs, backend CPU per task): single claim + complete 958 -> 925 us,
 * batched 240 -> 187 us.
 */
/*
 * Wakes the claims parked on a flow-controlled workload (a cap, a rate limit) when tasks of it stop
 * holding their slots, from the statement that frees them, so the NOTIFY rides on that statement's
 * commit. Sent as a statement of its own after each completion, it cost a transaction with an xid
 * and a commit flush: ~400 µs of the backend a task (one connection, claim → report chained). A
 * workload without flow control sends nothing; every statement pays a scan of the few rows of
 * `workloads`. Like `watched`, `freed` runs only when the statement reads it (in `notified`).
 * Only a caller that got nothing parks waiting for a slot, and a claim that left one so records
 * it (workload_slot_waits): the wake is sent for a minute after (a parked claim claims again
 * within 30 s and renews it). A cap the load never reaches sends none: the commit of a NOTIFY takes a
 * cluster-wide lock, and bench:flow's batched claims of a far cap ran at 0.79 of uncapped with it
 * on every completion, 0.95 without (docs/flow-control-claim.md, "A cap far away").
 */
/*
 * A freed slot names no task (its head is FREED_HEAD): it wakes parked claims, and moves no claim
 * hint. The flow claim's hints never pass a task of a key at its cap (claim-hints.ts), and a plain
 * claim does not take a flow-controlled workload's tasks. An older coordinator reads it as a wake
 * without a head, as it read the wake before.
 */
export const FREED_HEAD = "freed";
/*
 * The wake-ups of failures retried: one claimable now wakes a parked claim (count 1), one in
 * backoff wakes nobody (count 0) but says in how many milliseconds it falls due. Both name the
 * task's claim-order key as their head, so coordinators move their claim hints back to it, at once
 * or when it falls due (claim-hints.ts): a retry is claimed in order without a scan from the front.
 */
export const retriedNotify = (rows: string) => `woken AS (
  SELECT pg_notify('${NOTIFY_CHANNEL}', r.workload || ':' || CASE WHEN r.run_after <= now() THEN '1' ELSE '0' END || ':'
    || r.priority || ';' || r.fair_rank || ';' || (extract(epoch FROM r.created_at) * 1000000)::bigint || ';' || r.chunk_index
    || CASE WHEN r.run_after <= now() THEN '' ELSE ';' || ceil(extract(epoch FROM r.run_after - now()) * 1000)::bigint END)
  FROM ${rows} r WHERE r.status = 'pending'
)`;
export const freedSlotsNotify = (rows: string) => `freed AS (
  SELECT pg_notify('${NOTIFY_CHANNEL}', w.name || ':1:${FREED_HEAD}') FROM workloads w
  WHERE w.flow AND w.name IN (SELECT workload FROM ${rows})
    AND EXISTS (SELECT 1 FROM workload_slot_waits s WHERE s.workload = w.name AND s.wanted_at > now() - interval '1 minute')
)`;
export const watchedJobs = (rows: string) => `watched AS (
  SELECT pg_notify('${EVENTS_CHANNEL}', r.job_id::text) FROM ${rows} r
  WHERE EXISTS (SELECT 1 FROM job_watchers w WHERE w.job_id = r.job_id)
)`;
/*
 * The status events of a statement, from every part of it that changes a status, in one INSERT:
 * a statement that completes and claims writes both parts' events through one ModifyTable, so it
 * opens task_events and its index and builds the insert's projection once, not twice.
 * Measured (bench/sql-ab.ts, 8 pairs, backend CPU per task, one INSERT / two): chained batches
 * median 0.93, chained single tasks 0.99.
 */
export const statusEvents = (...rows: string[]) => `events AS (
  INSERT INTO task_events (job_id, task_id, chunk_index, kind, status, previous_status, attempt, worker_id)
  ${rows.join("\n  UNION ALL\n  ")}
)`;
export const completedEventRows = (rows: string) =>
  `SELECT job_id, id, chunk_index, 'task_status', 'completed', 'leased', attempt, lease_owner FROM ${rows}`;

/*
 * Usage: what a report says its attempt used rides on the event that ends the attempt (its usage
 * column), and is added into tasks.usage by the statement that accepts the report. The completions'
 * status events, with that column: statusEventsWithUsage takes rows of nine columns, the ninth the
 * report's usage (jsonb, NULL for none); a claim beside a completion writes NULL there
 * (claim.ts, claimedEventRowsBesideUsage).
 */
export const statusEventsWithUsage = (...rows: string[]) => `events AS (
  INSERT INTO task_events (job_id, task_id, chunk_index, kind, status, previous_status, attempt, worker_id, usage)
  ${rows.join("\n  UNION ALL\n  ")}
)`;
/** The completed rows' events with the report's usage: `usage` an expression over the rows (`d`) and whatever `join` adds. */
export const completedUsageEventRows = (rows: string, usage: string, join = "") =>
  `SELECT d.job_id, d.id, d.chunk_index, 'task_status', 'completed', 'leased', d.attempt, d.lease_owner, ${usage} FROM ${rows} d${join}`;
/**
 * The event of a failure report (`cur`: the failed or retried rows, event_flip flipped), written by
 * the statement so that it carries the report's usage (`usage`, an expression over `cur`); the
 * columns are those the tasks_status_events trigger writes for it (a failure always carries its
 * error). Read through `watched` (watchedJobs("cur")) for the watchers' wake-up, as the trigger did.
 */
export const failedEvents = (usage: string) => `events AS (
  INSERT INTO task_events (job_id, task_id, chunk_index, kind, status, previous_status, attempt, worker_id, error_code, error_message, usage)
  SELECT job_id, id, chunk_index, 'task_status', status::text, 'leased', attempt, lease_owner, error_code,
    CASE WHEN error_code IS NOT NULL THEN error_message END, ${usage} FROM cur
)`;
/**
 * `current` plus a report's usage (jsonb, NULL for none), per counter. A report without usage
 * leaves the column as it is, and the first report of a task (most tasks have one) is taken as it
 * is: only a second report runs the sum. Measured (bench:usage, PostgreSQL CPU per task, usage /
 * plain): with the sum on every report 1.099.
 */
export const usageSum = (current: string, report: string) =>
  `CASE WHEN ${report} IS NULL THEN ${current} WHEN ${current} IS NULL THEN ${report} ELSE (SELECT jsonb_object_agg(u.k, u.s) FROM (SELECT e.k, sum(e.v::numeric) AS s
    FROM (SELECT * FROM jsonb_each_text(${current}) UNION ALL SELECT * FROM jsonb_each_text(${report})) e(k, v) GROUP BY e.k) u) END`;

/*
 * A job row's status test where the rows are named by id (`id = ANY (...)`): as text, so only the
 * primary key finds them. With the status itself, statistics that had seen no pending job made the
 * generic plans go through an index of statuses (jobs_status_created_idx, jobs_unfinished_idx) and
 * filter on id: every job pending since the oldest snapshot leaves a dead entry there (its row
 * moved on to running), and under a held snapshot the claim's `running` update read 850 buffers a
 * claim after five minutes (bench:horizon's keyed shape, auto_explain), growing by ~4 a second.
 */
export const jobStatusIn = (column: string, ...statuses: string[]) => `${column}::text IN (${statuses.map((s) => `'${s}'`).join(", ")})`;

// Fencing: every write by a worker names (task, worker, attempt) and needs a live lease, so a
// worker that lost its lease (expired and reclaimed by another) can never overwrite anything.
// `status::text`: with `status = 'leased'` the generic plan of the completion found the row through
// the lease index (then tasks_status_lease_created_idx; `status = 'leased' AND lease_expires_at > now()`, filtering on
// id), which walks every leased entry, dead ones included: each completed task leaves one there
// whose lease_expires_at stays in the future for a lease length. The cast keeps the partial
// indexes' predicates unprovable, so the primary key is the only way in.
export const liveLease = (t: string) =>
  `${t}.id = @taskId AND ${t}.status::text = 'leased' AND ${t}.lease_owner = @workerId AND ${t}.attempt = @attempt AND ${t}.lease_expires_at > now()`;

/*
 * The jobs a batch of completions (`rows`) may have finished: those with no pending task in the
 * statement's snapshot, less any of whose tasks the statement leased (`busy`, the claim of a report
 * with claim_next: that task keeps its job unfinished, and its own completion checks). Only these
 * are checked after the commit (FINISH_JOBS_IF_DONE), as COMPLETE_TASK's recheck_job does for one
 * task: a job with pending work is finished by a later completion. One probe of
 * tasks_job_unfinished_idx per job, where the check after the commit was a statement of its own
 * with two probes per job: a workload over many jobs (fair share between keys) reports tasks of a
 * different job each time, so nearly every report paid it (bench:flow's 100 keys: ~1,450 such
 * statements in 5 s, a tenth of PostgreSQL's time). A pending task seen here that is claimed and
 * completed before this statement commits is the narrow case left over, as for COMPLETE_TASK:
 * that completion's own check finds this statement's tasks still leased, and the job is settled
 * by the lease reaper's pass over stalled jobs (every REAPER_INTERVAL_MS) instead.
 * Why the probe (nothingPending, below; COMPLETE_TASK's recheck_job uses it too) reads the job's
 * first unfinished status rather than asking for a pending task:
 * `status = 'pending'` also matches tasks_claim_pending_idx (every workload's pending tasks), and a
 * generic plan made while the table's statistics were empty walked it filtering on job_id, every
 * report; as a NOT EXISTS it became an anti-join over it, which bench:flow's 100-key workload paid
 * at ~750 buffers a report. `status IN ('pending', 'leased')` ordered by status (pending comes
 * first in the enum) can only be answered by tasks_job_unfinished_idx, one descent per job.
 */
export const mayBeDoneJobs = (rows: string, busy?: string) => `maybe_done AS (
  SELECT d.job_id FROM (SELECT DISTINCT r.job_id FROM ${rows} r${busy ? ` WHERE r.job_id NOT IN (SELECT b.job_id FROM ${busy} b)` : ""}) d
  WHERE ${nothingPending("d.job_id")}
)`;
/** Job `job` (an expression) has no pending task, read as the probe above says. */
export const nothingPending = (job: string) =>
  `(SELECT o.status FROM tasks o WHERE o.job_id = ${job} AND o.status IN ('pending', 'leased') ORDER BY o.status LIMIT 1)
    IS DISTINCT FROM 'pending'`;
/** Per completed row (`done`): whether its job is among `maybe_done`. */
export const mayBeDone = (done: string) => `${done}.job_id = ANY (ARRAY(SELECT job_id FROM maybe_done))`;
