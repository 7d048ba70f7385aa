// Every SQL statement of the store, one place per query, each with why it is shaped the way it is.
// All parameterized; all times from the database clock (now()).
// Channel for wake-ups: payload "<workload>:<count>", the workload whose tasks became claimable and
// how many (so a coordinator wakes no more parked claims than there is work). pg_notify inside the
// writing transaction is delivered only at commit, so a woken claimer always finds the rows.

export const NOTIFY_CHANNEL = "leasehold_tasks";
// Channel of job events (payload: the job id), raised by the status-event triggers and by
// REPORT_PROGRESS, only for jobs with a row in job_watchers (see the migration for why).
export const EVENTS_CHANNEL = "leasehold_events";

export const SELECT_ALL_WORKLOADS = `SELECT * FROM workloads ORDER BY name`;

// $6..$9 flow control: max_leased, max_leased_per_key, max_leases_per_second, leases_burst (null: none).
// Paused, keyed and has_key_limits are kept: they have operations of their own.
export const UPSERT_WORKLOAD = `
INSERT INTO workloads (name, max_attempts, lease_seconds, parameters_schema, max_pending_seconds,
  max_leased, max_leased_per_key, max_leases_per_second, leases_burst)
VALUES ($1, $2, $3, $4::jsonb, $5, $6, $7, $8, $9)
ON CONFLICT (name) DO UPDATE
  SET max_attempts = EXCLUDED.max_attempts,
      lease_seconds = EXCLUDED.lease_seconds,
      parameters_schema = EXCLUDED.parameters_schema,
      max_pending_seconds = EXCLUDED.max_pending_seconds,
      max_leased = EXCLUDED.max_leased,
      max_leased_per_key = EXCLUDED.max_leased_per_key,
      max_leases_per_second = EXCLUDED.max_leases_per_second,
      leases_burst = EXCLUDED.leases_burst,
      updated_at = now()
RETURNING *`;

// With xmin, which changes whenever the row is written: CreateJob's cached copy of a workload is
// current exactly when its xmin still matches (CREATE_JOB checks that in the inserting statement).
export const SELECT_WORKLOADS_WITH_XMIN = `SELECT *, xmin::text AS row_xmin FROM workloads WHERE name = ANY($1::text[])`;
// The same, holding them unchanged until the transaction ends (PutWorkload waits).
export const SELECT_WORKLOADS_WITH_XMIN_FOR_SHARE = `${SELECT_WORKLOADS_WITH_XMIN} ORDER BY name FOR SHARE`;

/*
 * CreateJob in one statement and one round trip (it took six: SELECT workloads, BEGIN, INSERT job,
 * INSERT tasks, NOTIFY, COMMIT). One statement is one transaction, so constraint failures still
 * abort all of it, and the NOTIFY still goes out only at commit, when the tasks are visible.
 * - fresh: the workloads the caller validated against (names $10, xmins $11) are unchanged; if
 *   not, nothing is inserted and the caller tries again with them locked.
 * - ON CONFLICT DO NOTHING makes two racing submissions with one idempotency key safe: the loser
 *   gets no job row (after waiting for the winner's commit), so no tasks either, and reads the
 *   winner's job instead.
 * - The tasks travel as parallel arrays through unnest, not as one jsonb document through
 *   jsonb_to_recordset, and come back as nothing: ids are made by the caller (time-ordered,
 *   so consecutive inserts share index pages), created_at and run_after are the job's now().
 *   Measured for 10,000 tasks on 2 cores (median of 5): jsonb_to_recordset + RETURNING * 389 ms,
 *   without RETURNING 334 ms, unnest 316 ms.
 * The one row always comes back (LEFT JOIN), saying which of the three happened.
 * $1 job id, $2 workload, $3 input_uri, $4 input_sha256, $5 parameters, $6 priority,
 * $7 idempotency_key, $8 request_sha256, $9 traceparent, $10/$11 workload names/xmins,
 * $12.. task arrays (id, chunk_index, workload, input_uri, input_sha256, parameters, max_attempts),
 * $19/$20 wake-ups (workload, count), then the flow-control parameters (FlowParams).
 */
interface FlowParams {
  /** the job's concurrency key ('' for none) */
  key: string;
  /** the job's required labels (jsonb, null for none) */
  labels: string;
  /** whether the job's tasks get fair ranks (its workload is keyed) */
  ranked: string;
  /** the number of tasks */
  count: string;
}
/*
 * Fair ranks (flow-control.md, "Fair share"): a job of a keyed workload takes `count` ranks from
 * its key's next_rank, starting no earlier than the head of the queue at the job's priority (or,
 * with nothing pending, the furthest any key has got). One upsert per job; its row lock orders
 * two jobs of one key. Nothing happens for a workload that never saw a key ($ranked false).
 */
const createJobCtes = (f: FlowParams) => `fresh AS (
  SELECT count(*) = cardinality($10::text[]) AS ok
  FROM workloads w JOIN unnest($10::text[], $11::text[]) AS v(name, x) ON w.name = v.name AND w.xmin::text = v.x
), job AS (
  INSERT INTO jobs (id, workload, input_uri, input_sha256, parameters, priority, idempotency_key, request_sha256, traceparent,
    concurrency_key, required_labels)
  SELECT $1, $2, $3, $4, $5::jsonb, $6, $7, $8, $9, ${f.key}, ${f.labels}::jsonb FROM fresh WHERE fresh.ok
  ON CONFLICT (idempotency_key) DO NOTHING
  RETURNING *
), rank_base AS (
  INSERT INTO flow_keys AS k (workload, key, next_rank)
  SELECT job.workload, job.concurrency_key, coalesce(
      (SELECT t.fair_rank FROM tasks t WHERE t.status = 'pending' AND t.workload = job.workload AND t.priority = job.priority
       ORDER BY t.priority DESC, t.fair_rank LIMIT 1),
      (SELECT max(o.next_rank) FROM flow_keys o WHERE o.workload = job.workload),
      0) + ${f.count}::bigint
  FROM job WHERE ${f.ranked}::boolean
  ON CONFLICT (workload, key) DO UPDATE SET next_rank = greatest(k.next_rank, EXCLUDED.next_rank - ${f.count}::bigint) + ${f.count}::bigint
  RETURNING k.next_rank - ${f.count}::bigint AS base
)`;
const createJobAnswer = `SELECT (SELECT ok FROM fresh) AS fresh, (SELECT count(*) FROM woken) AS notified,
  coalesce((SELECT base FROM rank_base), 0) AS rank_base, job.*
FROM (SELECT 1) one LEFT JOIN job ON true`;
const wokenBy = (workloads: string, counts: string) => `woken AS (
  SELECT pg_notify('${NOTIFY_CHANNEL}', x.w || ':' || x.n) FROM job, unnest(${workloads}::text[], ${counts}::int[]) AS x(w, n)
)`;

// $21 concurrency key, $22 job labels, $23 ranked, $24 task count (FlowParams), $25 each task's labels (text[] of jsonb, or null).
export const CREATE_JOB = `
WITH ${createJobCtes({ key: "$21", labels: "$22", ranked: "$23", count: "$24" })}, tasks_in AS (
  INSERT INTO tasks (id, job_id, chunk_index, workload, input_uri, input_sha256, parameters, max_attempts, priority, traceparent,
    concurrency_key, required_labels, fair_rank)
  SELECT u.id, job.id, u.chunk_index, u.workload, u.input_uri, u.input_sha256, u.parameters::jsonb, u.max_attempts, job.priority, job.traceparent,
    job.concurrency_key, coalesce(u.required_labels::jsonb, job.required_labels), coalesce((SELECT base FROM rank_base) + u.n - 1, 0)
  FROM job, unnest($12::uuid[], $13::int[], $14::text[], $15::text[], $16::text[], $17::text[], $18::int[], $25::text[])
    WITH ORDINALITY AS u(id, chunk_index, workload, input_uri, input_sha256, parameters, max_attempts, required_labels, n)
), ${wokenBy("$19", "$20")}
${createJobAnswer}`;

/*
 * A large CreateJob (store.ts: COPY_MIN_TASKS and up) in a transaction of its own: CREATE_JOB's
 * job row, freshness check, idempotency and wake-ups with $12/$13 as the wake-ups, then the tasks
 * by COPY_TASKS (copy-in.ts) when the job row was inserted, then COMMIT. The NOTIFY still goes out
 * at the commit, when the tasks are visible; a failure rolls all of it back. COPY inserts the rows
 * in batches (one WAL record per heap page, not per row) and reads them as text, with no arrays
 * to parse and unnest: for 10,000 tasks the backends' CPU fell by ~15% (scratch measurement,
 * 16 alternating runs each, 88 against 74 ms per job).
 */
// $14 concurrency key, $15 job labels, $16 ranked, $17 task count (FlowParams); the answer's rank_base is the first task's fair rank.
export const CREATE_JOB_ALONE = `
WITH ${createJobCtes({ key: "$14", labels: "$15", ranked: "$16", count: "$17" })}, ${wokenBy("$12", "$13")}
${createJobAnswer}`;

/** The tasks of a CREATE_JOB_ALONE, in COPY's text format (copy-text.ts), columns in this order; the rest are their defaults. */
export const COPY_TASKS = `COPY tasks (id, job_id, chunk_index, workload, input_uri, input_sha256, parameters, max_attempts, priority, traceparent) FROM STDIN`;
/** COPY_TASKS for a job with a concurrency key, required labels or fair ranks: those three columns as well. */
export const COPY_FLOW_TASKS = `COPY tasks (id, job_id, chunk_index, workload, input_uri, input_sha256, parameters, max_attempts, priority, traceparent,
  concurrency_key, required_labels, fair_rank) FROM STDIN`;

export const SELECT_JOB_BY_IDEMPOTENCY_KEY = `SELECT * FROM jobs WHERE idempotency_key = $1`;

export const NOTIFY_WORKLOADS = `SELECT pg_notify('${NOTIFY_CHANNEL}', w || ':' || n) FROM unnest($1::text[], $2::int[]) AS x(w, n)`;

export const SELECT_JOB = `SELECT * FROM jobs WHERE id = $1`;
export const SELECT_JOB_TASKS = `SELECT * FROM tasks WHERE job_id = $1 ORDER BY chunk_index`;
export const SELECT_TASK = `SELECT * FROM tasks WHERE id = $1`;

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
const watchedJobs = (rows: string) => `watched AS (
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
const statusEvents = (...rows: string[]) => `events AS (
  INSERT INTO task_events (job_id, task_id, chunk_index, kind, status, previous_status, attempt, worker_id)
  ${rows.join("\n  UNION ALL\n  ")}
)`;
const completedEventRows = (rows: string) =>
  `SELECT job_id, id, chunk_index, 'task_status', 'completed', 'leased', attempt, lease_owner FROM ${rows}`;

/** The claim's parameters, by number: the claim alone and the claim of a result report number them differently. */
interface ClaimParams {
  workloads: string;
  limit: string;
  worker: string;
  leaseSeconds: string;
  /** the worker's labels, jsonb ('{}' for none) */
  labels: string;
}

/*
 * The claim: one statement, so there is no window between choosing and taking.
 * - Two arms, each an index-ordered top-N per requested workload (LATERAL over the workload list,
 *   because `workload = ANY(...)` cannot return one ordered index scan across several workloads):
 *     expired: leases whose holder went silent, with attempts left (tasks_lease_expiry_idx),
 *     fresh:   pending work whose backoff has passed (tasks_claim_pending_idx, whose last key column
 *              is run_after: a task in backoff is passed over inside the index, its row never read).
 * - FOR UPDATE SKIP LOCKED: concurrent claimers skip each other's candidates instead of queueing.
 * - Reclaimed work goes first (a zombie holds a slot the job is waiting on), then priority, age, chunk.
 * - The job moves to running in the same statement; `status = 'pending'` keeps that a no-op
 *   (and lock-free) for jobs already running.
 * - Rows are written through `id = ANY(ARRAY(...))`: a primary-key lookup whatever the plan cache
 *   guesses about the size of `picked` (a joined CTE once got a generic plan with a seq scan).
 * - The status events are written by the statement (claimedEventRows, see watchedJobs above), previous
 *   status from the arm: pending for fresh work, leased for a reclaimed lease.
 * - "Was it fresh" is `= ANY (ARRAY(SELECT id FROM fresh))`, not `IN (SELECT id FROM fresh)`: the
 *   IN became a hashed subplan, whose hash table set up per statement was ~5% of the backends' CPU
 *   under claim + complete (perf).
 * - Flow control (src/store/postgres/flow-control.md): each requested workload's row says whether
 *   it has caps, a rate limit or is paused (`flow`). The two arms take only workloads without
 *   (`NOT w.flow`, a one-time filter: no row of a flow workload is read); flow workloads are
 *   claimed by leasehold_flow_claim (the migration), under their advisory lock, for whatever
 *   this statement's arms left of the limit. Both honour the worker's labels and order by
 *   fair_rank after priority (0 in a workload that never saw a concurrency key).
 * These are the claim's CTEs, from the two arms to the job's move to running (everything but the
 * events, the watcher probe and the answer). `gate` is a condition every arm adds: the claim of a
 * result report takes nothing unless the report's result was accepted.
 */
const claimCtes = (p: ClaimParams, gate = "true") => `requested AS (
  SELECT wl.name, wl.flow FROM workloads wl WHERE wl.name = ANY (${p.workloads}::text[])
), expired AS (
  SELECT c.id, c.priority, c.fair_rank, c.created_at, c.chunk_index, 0 AS arm
  FROM requested w
  CROSS JOIN LATERAL (
    SELECT id, priority, fair_rank, created_at, chunk_index FROM tasks
    WHERE status = 'leased' AND workload = w.name AND lease_expires_at <= now() AND attempt < max_attempts AND ${gate}
      AND NOT w.flow AND (required_labels IS NULL OR required_labels <@ ${p.labels}::jsonb)
    ORDER BY lease_expires_at
    LIMIT ${p.limit}
    FOR UPDATE SKIP LOCKED
  ) c
), fresh AS (
  SELECT c.id, c.priority, c.fair_rank, c.created_at, c.chunk_index, 1 AS arm
  FROM requested w
  CROSS JOIN LATERAL (
    SELECT id, priority, fair_rank, created_at, chunk_index FROM tasks
    WHERE status = 'pending' AND workload = w.name AND run_after <= now() AND ${gate}
      AND NOT w.flow AND (required_labels IS NULL OR required_labels <@ ${p.labels}::jsonb)
    ORDER BY priority DESC, fair_rank, created_at, chunk_index
    LIMIT ${p.limit}
    FOR UPDATE SKIP LOCKED
  ) c
), picked AS (
  SELECT id FROM (SELECT * FROM expired UNION ALL SELECT * FROM fresh) candidates
  ORDER BY arm, priority DESC, fair_rank, created_at, chunk_index
  LIMIT ${p.limit}
), plain_claimed AS (
  UPDATE tasks t
  SET status = 'leased',
      attempt = t.attempt + 1,
      lease_owner = ${p.worker},
      lease_expires_at = now() + make_interval(secs => coalesce(${p.leaseSeconds}::int, (SELECT lease_seconds FROM workloads WHERE name = t.workload))),
      started_at = coalesce(t.started_at, now()),
      version = t.version + 1,
      event_flip = NOT t.event_flip
  WHERE t.id = ANY (ARRAY(SELECT id FROM picked))
  RETURNING t.*
), flow_claimed AS (
  SELECT f.task, f.fresh
  FROM leasehold_flow_claim(
    ARRAY(SELECT name FROM requested WHERE flow), ${p.limit}::int - (SELECT count(*)::int FROM plain_claimed), ${p.worker}::text,
    ${p.leaseSeconds}::int, ${p.labels}::jsonb) f
  WHERE EXISTS (SELECT 1 FROM requested WHERE flow) AND ${gate}
), claimed AS (
  SELECT * FROM plain_claimed UNION ALL SELECT (task).* FROM flow_claimed
), running AS (
  UPDATE jobs SET status = 'running', updated_at = now()
  WHERE id = ANY (ARRAY(SELECT job_id FROM claimed)) AND status = 'pending'
)`;
// A claimed task came from pending (not a reclaimed lease): taken by the fresh arm, or by the flow claim from pending.
const wasFresh = (t: string) =>
  `(${t}.id = ANY (ARRAY(SELECT id FROM fresh)) OR ${t}.id = ANY (ARRAY(SELECT (task).id FROM flow_claimed WHERE fresh)))`;
// The claim's status events, for statusEvents: previous status pending for fresh work, leased for a reclaimed lease.
const claimedEventRows = `SELECT job_id, id, chunk_index, 'task_status', 'leased',
    CASE WHEN ${wasFresh("claimed")} THEN 'pending' ELSE 'leased' END, attempt, lease_owner
  FROM claimed`;

// pickup_seconds (metrics): how long a task taken from pending had been claimable; NULL for a reclaimed lease.
const pickupSeconds = `CASE WHEN ${wasFresh("claimed")} THEN extract(epoch FROM now() - claimed.run_after)::float8 END`;

// $1 workloads, $2 limit, $3 worker id, $4 lease seconds (null: the workload's), $5 labels (jsonb).
const claimTasks = (claimOrder: string) => `
WITH ${claimCtes({ workloads: "$1", limit: "$2", worker: "$3", leaseSeconds: "$4", labels: "$5" })}, ${statusEvents(claimedEventRows)},
${watchedJobs("claimed")}
SELECT claimed.*, ${pickupSeconds} AS pickup_seconds, (SELECT count(*) FROM watched) AS notified
FROM claimed ${claimOrder}`;
const CLAIM_ORDER = "ORDER BY priority DESC, fair_rank, created_at, chunk_index";
export const CLAIM_TASKS = claimTasks(CLAIM_ORDER);
/** CLAIM_TASKS for one task ($2 = 1): one row needs no sort (see COMPLETE_TASK_AND_CLAIM_ONE). */
export const CLAIM_TASK = claimTasks("");

// Fencing: every write by a worker names (task, worker, attempt) and needs a live lease, so a
// worker that lost its lease (expired and reclaimed by another) can never overwrite anything.
// `status::text`: with `status = 'leased'` the generic plan of the completion found the row through
// the lease index (then tasks_status_lease_created_idx; `status = 'leased' AND lease_expires_at > now()`, filtering on
// id), which walks every leased entry, dead ones included: each completed task leaves one there
// whose lease_expires_at stays in the future for a lease length. The cast keeps the partial
// indexes' predicates unprovable, so the primary key is the only way in.
const liveLease = (t: string) =>
  `${t}.id = $1 AND ${t}.status::text = 'leased' AND ${t}.lease_owner = $2 AND ${t}.attempt = $3 AND ${t}.lease_expires_at > now()`;

export const RENEW_LEASE = `
UPDATE tasks t
SET lease_expires_at = now() + make_interval(secs => coalesce($4::int, wl.lease_seconds)),
    version = t.version + 1
FROM workloads wl
WHERE ${liveLease("t")} AND wl.name = t.workload
RETURNING t.*`;

/*
 * Complete one task and, when it was the job's last unfinished one, the job, in one statement.
 * Two completions racing for a job's last two tasks each see the other still leased (snapshot),
 * so neither finishes the job here; `recheck_job` says so, and the caller re-checks after commit
 * (see finishJobIfDone). Mid-job completions see pending work and skip all of that cheaply
 * (tasks_job_unfinished_idx).
 */
const completeOne = `done AS (
  UPDATE tasks
  SET status = 'completed', result_uri = $4, result_sha256 = $5, metrics = $6::jsonb,
      completed_at = now(), lease_expires_at = NULL, version = version + 1, event_flip = NOT event_flip
  WHERE ${liveLease("tasks")}
  RETURNING *
), finished AS (
  UPDATE jobs j SET status = 'completed', completed_at = now(), updated_at = now()
  WHERE j.id = (SELECT job_id FROM done) AND j.status = 'running'
    AND NOT EXISTS (
      SELECT 1 FROM tasks o
      WHERE o.job_id = (SELECT job_id FROM done) AND o.status IN ('pending', 'leased') AND o.id <> $1
    )
  RETURNING j.id
)`;
const recheckJob = `NOT EXISTS (SELECT 1 FROM finished)
    AND NOT EXISTS (SELECT 1 FROM tasks o WHERE o.job_id = done.job_id AND o.status = 'pending')
    AND EXISTS (SELECT 1 FROM jobs j WHERE j.id = done.job_id AND j.status = 'running')`;

// $1 task id, $2 worker id, $3 attempt, $4 result_uri, $5 result_sha256, $6 metrics.
export const COMPLETE_TASK = `
WITH ${completeOne}, ${statusEvents(completedEventRows("done"))}, ${watchedJobs("done")}
SELECT done.*, ${recheckJob} AS recheck_job, (SELECT count(*) FROM watched) AS notified
FROM done`;

/*
 * A result report with claim_next: COMPLETE_TASK and CLAIM_TASKS in one statement, so a worker's
 * task costs one statement, one transaction and one round trip instead of two of each. The claim
 * takes nothing unless the result was accepted (its arms are gated on `done`), so a refused or
 * replayed result leaves the claim to the caller, which claims again only for a replay. The two
 * updates never meet one row: `done` needs a live lease, which neither arm takes. Nor do the two
 * job updates: `running` moves pending jobs, `finished` running ones, as the snapshot has them.
 * Rows: part 0 the completed task (with recheck_job), part 1 the claimed ones in claim order.
 * $1..$6 as COMPLETE_TASK; $7 workloads, $8 limit, $9 worker id, $10 lease seconds, $11 labels, as CLAIM_TASKS.
 */
const completeTaskAndClaim = (claimOrder: string) => `
WITH ${completeOne}, ${claimCtes({ workloads: "$7", limit: "$8", worker: "$9", leaseSeconds: "$10", labels: "$11" }, "EXISTS (SELECT 1 FROM done)")},
${statusEvents(completedEventRows("done"), claimedEventRows)},
watched AS (
  SELECT pg_notify('${EVENTS_CHANNEL}', r.job_id::text) FROM (SELECT job_id FROM done UNION ALL SELECT job_id FROM claimed) r
  WHERE EXISTS (SELECT 1 FROM job_watchers w WHERE w.job_id = r.job_id)
)
SELECT 0 AS part, done.*, ${recheckJob} AS recheck_job, NULL::float8 AS pickup_seconds, (SELECT count(*) FROM watched) AS notified
FROM done
UNION ALL
(SELECT 1, claimed.*, false, ${pickupSeconds}, 0 FROM claimed ${claimOrder})`;
export const COMPLETE_TASK_AND_CLAIM = completeTaskAndClaim(CLAIM_ORDER);
/**
 * COMPLETE_TASK_AND_CLAIM for a claim_next of one task ($8 = 1), the Python worker's default:
 * one row needs no order, and the sort and its 29-column tuple descriptor were set up on every
 * execution all the same.
 */
export const COMPLETE_TASK_AND_CLAIM_ONE = completeTaskAndClaim("");

/*
 * Fail one task: back to pending after a backoff while attempts remain and the worker calls it
 * retryable, else failed for good, which fails the job and cancels its unfinished tasks (their
 * holders learn it at their next heartbeat). Backoff: the worker's retry_after_seconds, else
 * 2^attempt seconds, ±25% jitter, capped at 5 minutes.
 * $4 error_code, $5 retryable, $6 error_message, $7 retry_after_seconds.
 */
export const FAIL_TASK = `
WITH cur AS (
  UPDATE tasks t
  SET status = CASE WHEN $5::boolean AND t.attempt < t.max_attempts THEN 'pending' ELSE 'failed' END::task_status,
      run_after = CASE WHEN $5::boolean AND t.attempt < t.max_attempts
        THEN now() + make_interval(secs => coalesce($7::float8, least(300, power(2, t.attempt)) * (0.75 + random() * 0.5)))
        ELSE t.run_after END,
      completed_at = CASE WHEN $5::boolean AND t.attempt < t.max_attempts THEN NULL ELSE now() END,
      lease_expires_at = NULL,
      error_code = $4,
      error_message = $6,
      version = t.version + 1
  WHERE ${liveLease("t")}
  RETURNING t.*
), failed_job AS (
  UPDATE jobs j SET status = 'failed', completed_at = now(), updated_at = now()
  WHERE j.id = (SELECT job_id FROM cur WHERE cur.status = 'failed') AND j.status IN ('pending', 'running')
  RETURNING j.id
), cancelled AS (
  UPDATE tasks o SET status = 'cancelled', completed_at = now(), lease_expires_at = NULL, version = o.version + 1
  WHERE o.job_id = (SELECT id FROM failed_job) AND o.status IN ('pending', 'leased') AND o.id <> $1
), woken AS (
  -- Only a retry claimable now wakes anyone; one in backoff is found by polling later.
  SELECT pg_notify('${NOTIFY_CHANNEL}', cur.workload || ':1') FROM cur WHERE cur.status = 'pending' AND cur.run_after <= now()
)
SELECT cur.*, (SELECT count(*) FROM woken) AS notified FROM cur`;

/*
 * The reaper, first half: expired leases back to pending while attempts remain, else failed with
 * lease_expired. SKIP LOCKED lets every coordinator run it at once without waiting on or
 * double-counting each other; the batch bound keeps each transaction short.
 */
export const EXPIRE_LEASES = `
WITH expired AS (
  SELECT id FROM tasks
  WHERE status = 'leased' AND lease_expires_at <= now()
  ORDER BY lease_expires_at
  LIMIT $1
  FOR UPDATE SKIP LOCKED
)
UPDATE tasks t
SET status = CASE WHEN t.attempt < t.max_attempts THEN 'pending' ELSE 'failed' END::task_status,
    completed_at = CASE WHEN t.attempt < t.max_attempts THEN NULL ELSE now() END,
    run_after = now(),
    lease_expires_at = NULL,
    error_code = 'lease_expired',
    error_message = 'the lease expired before the worker reported a result',
    version = t.version + 1
WHERE t.id = ANY (ARRAY(SELECT id FROM expired))
RETURNING t.id, t.job_id, t.workload, t.status`;

// The reaper, second half, in the same transaction so it sees the first half's rows: jobs that
// just lost a task for good fail, and their unfinished tasks are cancelled.
export const FAIL_JOBS_AND_CANCEL_REST = `
WITH failed_jobs AS (
  UPDATE jobs SET status = 'failed', completed_at = now(), updated_at = now()
  WHERE id = ANY($1::uuid[]) AND status IN ('pending', 'running')
  RETURNING id
)
UPDATE tasks t SET status = 'cancelled', completed_at = now(), lease_expires_at = NULL, version = t.version + 1
WHERE t.job_id = ANY (ARRAY(SELECT id FROM failed_jobs)) AND t.status IN ('pending', 'leased')`;

// Safety net for a coordinator that died between a completion's commit and its re-check:
// running jobs with nothing unfinished are completed. One partial-index probe per running job.
export const FINISH_STALLED_JOBS = `
UPDATE jobs j SET status = 'completed', completed_at = now(), updated_at = now()
WHERE j.status = 'running'
  AND NOT EXISTS (SELECT 1 FROM tasks o WHERE o.job_id = j.id AND o.status IN ('pending', 'leased'))`;

const completeMany = `done AS (
  UPDATE tasks t
  SET status = 'completed', result_uri = b.result_uri, result_sha256 = b.result_sha256, metrics = b.metrics,
      completed_at = now(), lease_expires_at = NULL, version = t.version + 1, event_flip = NOT t.event_flip
  FROM jsonb_to_recordset($1::jsonb) AS b(task_id uuid, worker_id text, attempt int, result_uri text, result_sha256 text, metrics jsonb)
  WHERE t.id = ANY($2::uuid[]) AND t.id = b.task_id AND t.status::text = 'leased' AND t.lease_owner = b.worker_id AND t.attempt = b.attempt
    AND t.lease_expires_at > now()
  RETURNING t.*
)`;

/*
 * Complete a batch of leased tasks in one statement, each fenced by its own (worker, attempt,
 * live lease) exactly as COMPLETE_TASK. Rows that do not match are left alone and explained
 * one by one by the caller. The ids also come as a uuid[] ($2) so the rows are found through the
 * primary key whatever the planner guesses about the recordset, and the status is compared as
 * text for the reason given at liveLease: with `t.status = 'leased'` the generic plan walked the
 * whole lease index (every live lease and every lease completed within a lease length) and
 * hash-joined it with the recordset. Measured (bench:sql-ab, 4 pairs, backend CPU per task):
 * chained batches of ten 184 -> 150 us, claim then CompleteTasks 208 -> 158 us.
 * Jobs are finished by FINISH_JOBS_IF_DONE after this commits.
 */
export const COMPLETE_TASKS = `
WITH ${completeMany}, ${statusEvents(completedEventRows("done"))}, ${watchedJobs("done")}
SELECT done.*, (SELECT count(*) FROM watched) AS notified FROM done`;

/*
 * A batch's report with claim_next: COMPLETE_TASKS and CLAIM_TASKS in one statement. The claim
 * runs whatever each result's outcome; as in COMPLETE_TASK_AND_CLAIM the updates never meet one
 * row (a completion needs a live lease, which neither arm takes). Rows: part 0 the completed
 * tasks, part 1 the claimed ones in claim order.
 * $1, $2 as COMPLETE_TASKS; $3 workloads, $4 limit, $5 worker id, $6 lease seconds, $7 labels, as CLAIM_TASKS.
 */
export const COMPLETE_TASKS_AND_CLAIM = `
WITH ${completeMany}, ${claimCtes({ workloads: "$3", limit: "$4", worker: "$5", leaseSeconds: "$6", labels: "$7" })},
${statusEvents(completedEventRows("done"), claimedEventRows)},
watched AS (
  SELECT pg_notify('${EVENTS_CHANNEL}', r.job_id::text) FROM (SELECT job_id FROM done UNION SELECT job_id FROM claimed) r
  WHERE EXISTS (SELECT 1 FROM job_watchers w WHERE w.job_id = r.job_id)
)
SELECT 0 AS part, done.*, NULL::float8 AS pickup_seconds, (SELECT count(*) FROM watched) AS notified FROM done
UNION ALL
(SELECT 1, claimed.*, ${pickupSeconds}, 0 FROM claimed ${CLAIM_ORDER})`;

// Runs in its own statement after completions commit, so its snapshot sees every commit that
// came before; the last of several racing completers always finds the job done.
export const FINISH_JOBS_IF_DONE = `
UPDATE jobs j SET status = 'completed', completed_at = now(), updated_at = now()
WHERE j.id = ANY($1::uuid[]) AND j.status = 'running'
  AND NOT EXISTS (SELECT 1 FROM tasks o WHERE o.job_id = j.id AND o.status IN ('pending', 'leased'))`;

export const COUNT_JOB_TASKS = `SELECT status, count(*)::int AS n FROM tasks WHERE job_id = $1 GROUP BY status`;

// Keyset pagination on (job_id, chunk_index): the unique index returns each page in chunk order.
export const LIST_COMPLETED_RESULTS = `
SELECT chunk_index, id, result_uri, result_sha256, metrics, completed_at
FROM tasks
WHERE job_id = $1 AND chunk_index > $2 AND status = 'completed'
ORDER BY chunk_index
LIMIT $3`;

export const JOB_EXISTS = `SELECT EXISTS (SELECT 1 FROM jobs WHERE id = $1) AS found`;

// Cancel: tasks first, then the job, the same lock order as the claim (tasks, then job), so a
// cancel racing a claim cannot deadlock.
export const CANCEL_JOB_TASKS = `
UPDATE tasks SET status = 'cancelled', completed_at = now(), lease_expires_at = NULL, version = version + 1
WHERE job_id = $1 AND status IN ('pending', 'leased')`;

export const CANCEL_JOB = `
UPDATE jobs SET status = 'cancelled', cancel_reason = $2, completed_at = now(), updated_at = now()
WHERE id = $1 AND status IN ('pending', 'running')
RETURNING *`;

/*
 * A progress report: the same fenced lease extension as RENEW_LEASE plus one task_events row, in
 * one statement, so a report from a worker that lost its lease records nothing.
 * $5 progress, $6 message, $7 partial_result_uri.
 */
export const REPORT_PROGRESS = `
WITH renewed AS (
  UPDATE tasks t
  SET lease_expires_at = now() + make_interval(secs => coalesce($4::int, wl.lease_seconds)),
      version = t.version + 1
  FROM workloads wl
  WHERE ${liveLease("t")} AND wl.name = t.workload
  RETURNING t.*
), event AS (
  INSERT INTO task_events (job_id, task_id, chunk_index, kind, status, attempt, worker_id, progress, message, partial_result_uri)
  SELECT job_id, id, chunk_index, 'task_progress', status::text, attempt, lease_owner, $5, $6, $7 FROM renewed
), woken AS (
  -- As the status-event triggers do: only a watched job is notified.
  SELECT pg_notify('${EVENTS_CHANNEL}', renewed.job_id::text) FROM renewed
  WHERE EXISTS (SELECT 1 FROM job_watchers w WHERE w.job_id = renewed.job_id)
)
SELECT renewed.*, (SELECT count(*) FROM woken) AS notified FROM renewed`;

/*
 * RetryJob: a failed or cancelled job's failed and cancelled tasks go back to pending with a fresh
 * attempt budget on top of the attempts used (attempt stays the fencing token, so it never goes
 * back: a worker still holding an old attempt can never match a new lease), capped at $3. Tasks
 * first, then the job, the lock order of the claim and of CancelJob. The job is pending again,
 * or running when some of its tasks have run. Claimable work wakes long polls.
 * $1 job id, $2 fresh attempts (null: the workload's max_attempts), $3 attempt cap.
 */
export const RETRY_JOB = `
WITH retried AS (
  UPDATE tasks t
  SET status = 'pending',
      max_attempts = least(t.attempt + coalesce($2::int, wl.max_attempts), $3::int),
      run_after = now(), completed_at = NULL, lease_expires_at = NULL,
      error_code = NULL, error_message = NULL, version = t.version + 1
  FROM workloads wl
  WHERE t.job_id = $1 AND t.status IN ('failed', 'cancelled') AND wl.name = t.workload AND t.attempt < $3::int
    AND EXISTS (SELECT 1 FROM jobs j WHERE j.id = $1 AND j.status IN ('failed', 'cancelled'))
  RETURNING t.workload
), job AS (
  UPDATE jobs j
  SET status = CASE WHEN EXISTS (SELECT 1 FROM tasks o WHERE o.job_id = $1 AND o.started_at IS NOT NULL)
                 THEN 'running' ELSE 'pending' END::job_status,
      completed_at = NULL, cancel_reason = NULL, updated_at = now()
  WHERE j.id = $1 AND j.status IN ('failed', 'cancelled') AND EXISTS (SELECT 1 FROM retried)
  RETURNING j.*
), woken AS (
  SELECT pg_notify('${NOTIFY_CHANNEL}', workload || ':' || count(*)) FROM retried GROUP BY workload
)
SELECT job.*, (SELECT count(*) FROM retried)::int AS retried_tasks, (SELECT count(*) FROM woken) AS notified FROM job`;

/*
 * ListJobs, newest first, keyset-paginated on (created_at, id): one variant per index
 * (jobs_created_idx, jobs_status_created_idx) because generic plans (plan_cache_mode) cannot pick
 * an index by whether a parameter is null. created_at travels as text with microseconds so the
 * cursor is exact. $1 after created_at ('infinity' for the first page), $2 after id, $3 limit,
 * $4 workload ('' for any) [, $5 status].
 */
const jobsPage = (statusFilter: string) => `
SELECT *, to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS created_at_cursor
FROM jobs
WHERE ${statusFilter} (created_at, id) < ($1::timestamptz, $2::uuid) AND ($4::text = '' OR workload = $4)
ORDER BY created_at DESC, id DESC
LIMIT $3`;
export const LIST_JOBS = jobsPage("");
export const LIST_JOBS_BY_STATUS = jobsPage("status = $5::job_status AND");

// WatchJob registers its stream so the task_events trigger notifies for the job (see migration).
export const INSERT_JOB_WATCHER = `INSERT INTO job_watchers (job_id, expires_at) VALUES ($1, now() + make_interval(secs => $2)) RETURNING id`;
// Every stream of a coordinator at once (WatchHub), so open streams cost one statement per refresh, not one each.
export const REFRESH_JOB_WATCHERS = `UPDATE job_watchers SET expires_at = now() + make_interval(secs => $2) WHERE id = ANY($1::uuid[])`;
export const DELETE_JOB_WATCHER = `DELETE FROM job_watchers WHERE id = $1`;
// Streams of a coordinator that died without deregistering.
export const DELETE_EXPIRED_JOB_WATCHERS = `DELETE FROM job_watchers WHERE expires_at < now()`;

export const CURRENT_SNAPSHOT = `SELECT pg_current_snapshot()::text AS snapshot`;

/*
 * The job's events committed since snapshot $2 and not before: visible now but not in $2. Every
 * transaction older than $2's xmin had ended by then (so its rows were visible in $2 already),
 * which bounds the index range. Returns the statement's own snapshot for the next call, and the
 * events as one json array so there is always exactly one row.
 */
export const JOB_EVENTS_SINCE = `
SELECT pg_current_snapshot()::text AS snapshot,
  coalesce((
    SELECT json_agg(e ORDER BY e.id) FROM task_events e
    WHERE e.job_id = $1 AND e.xid >= pg_snapshot_xmin($2::pg_snapshot) AND NOT pg_visible_in_snapshot(e.xid, $2::pg_snapshot)
  ), '[]'::json) AS events`;

/*
 * The floor under lost notifications for all of a coordinator's watch streams in one statement:
 * which streams (by position in the arrays: job $1[i], the stream's last snapshot $2[i]) have
 * events committed since their snapshot. One probe of task_events_job_xid_idx per stream, the same
 * bounds as JOB_EVENTS_SINCE; the streams named then read their events themselves.
 * Measured (bench:watchers, 1,000 idle SSE streams, 1 s interval): 3.1 database transactions/s in
 * all, the reaper's two probes included; with a poll per stream, 300 streams had made 328/s (plus one
 * watcher refresh per stream every 20 s, now REFRESH_JOB_WATCHERS once for all).
 */
export const WATCHED_JOBS_WITH_EVENTS = `
SELECT w.i::int AS i
FROM unnest($1::uuid[], $2::text[]) WITH ORDINALITY AS w(job_id, since, i)
WHERE EXISTS (
  SELECT 1 FROM task_events e
  WHERE e.job_id = w.job_id AND e.xid >= pg_snapshot_xmin(w.since::pg_snapshot) AND NOT pg_visible_in_snapshot(e.xid, w.since::pg_snapshot)
)`;

/*
 * Abandoned work: claimable tasks of workloads with max_pending_seconds that nobody claimed in
 * that long fail with 'expired'. Read through the claim index (tasks_claim_pending_idx: workload,
 * priority, created_at), where the created_at bound is an index condition: PostgreSQL 18 skips
 * from one priority to the next ("Index Searches" = the workload's distinct priorities + 1); older
 * servers check the bound on each of the workload's pending index entries without reading the heap.
 * Pending tasks are no longer in the lease index, which every task insert paid for (see
 * migrations/1764490000000_lean_hot_path.sql). No order needed: the caller repeats while batches
 * come back full. $1 batch.
 */
export const EXPIRE_PENDING = `
WITH stale AS (
  SELECT c.id
  FROM workloads w
  CROSS JOIN LATERAL (
    SELECT id FROM tasks
    WHERE status = 'pending' AND workload = w.name
      AND created_at <= now() - make_interval(secs => w.max_pending_seconds)
      AND run_after <= now() - make_interval(secs => w.max_pending_seconds)
    LIMIT $1
    FOR UPDATE SKIP LOCKED
  ) c
  WHERE w.max_pending_seconds IS NOT NULL
)
UPDATE tasks t
SET status = 'failed', completed_at = now(), error_code = 'expired',
    error_message = 'no worker claimed the task within its workload''s max_pending_seconds',
    version = t.version + 1
WHERE t.id = ANY (ARRAY(SELECT id FROM stale))
RETURNING t.id, t.job_id`;

/*
 * Retention: a few old finished jobs per statement (each may hold thousands of tasks), with their
 * events and their tasks (no foreign key cascades them: see migrations/1764490000000_lean_hot_path.sql;
 * tasks_job_chunk_idx finds a job's tasks). SKIP LOCKED keeps coordinators apart.
 * $1 days, $2 jobs per batch.
 */
export const DELETE_OLD_JOBS = `
WITH old AS (
  SELECT id FROM jobs
  WHERE status IN ('completed', 'failed', 'cancelled') AND completed_at < now() - make_interval(days => $1)
  ORDER BY completed_at
  LIMIT $2
  FOR UPDATE SKIP LOCKED
), events AS (
  DELETE FROM task_events WHERE job_id = ANY (ARRAY(SELECT id FROM old))
), job_tasks AS (
  DELETE FROM tasks WHERE job_id = ANY (ARRAY(SELECT id FROM old))
)
DELETE FROM jobs WHERE id = ANY (ARRAY(SELECT id FROM old)) RETURNING id`;

// Metrics: unfinished tasks by workload and status, read through a partial index that holds
// exactly them (tasks_job_unfinished_idx), and the oldest claimable one per workload.
export const UNFINISHED_TASK_STATS = `
SELECT workload, status::text AS status, count(*)::int AS n,
  coalesce(extract(epoch FROM now() - min(run_after) FILTER (WHERE status = 'pending' AND run_after <= now())), 0)::float8 AS oldest_pending_seconds
FROM tasks
WHERE status IN ('pending', 'leased')
GROUP BY workload, status`;

// Metrics, rarely: every task by workload and status, a full scan (run with seqscan allowed).
export const ALL_TASK_STATS = `SELECT workload, status::text AS status, count(*)::int AS n, 0::float8 AS oldest_pending_seconds FROM tasks GROUP BY workload, status`;

// ---------------------------------------------------------------------------------------------
// Task inspection (ListTasks, GetTask, the failure of a failed job). Reads only: none of these
// runs on the claim/complete path.

/*
 * ListTasks, keyset-paginated on chunk_index. One variant per index, as for ListJobs (generic
 * plans cannot choose by a parameter's value): every task or one status through tasks_job_chunk_idx
 * (the job's chunks in order, others filtered out), and failed tasks through the partial
 * tasks_job_failed_idx, so "why did it fail" does not walk a 10,000-chunk job's completed chunks.
 * $1 job id, $2 after chunk_index (-1 for the first page), $3 limit [, $4 status].
 */
const tasksPage = (statusFilter: string) => `
SELECT * FROM tasks
WHERE job_id = $1 AND chunk_index > $2 ${statusFilter}
ORDER BY chunk_index
LIMIT $3`;
export const LIST_TASKS = tasksPage("");
export const LIST_TASKS_BY_STATUS = tasksPage("AND status = $4::task_status");
export const LIST_FAILED_TASKS = tasksPage("AND status = 'failed'");

/*
 * The events the attempts of some of a job's tasks are told from: every status change, and the
 * last progress report of each attempt (a chatty worker may have sent thousands). Through the
 * (job_id, xid) index, so it reads the job's events and keeps those of the tasks asked for: an
 * index on task_id would serve it better but cost every claim and completion a second index
 * write (the primary key on id measured ~8% of throughput). $1 job id, $2 task ids.
 */
export const TASK_ATTEMPT_EVENTS = `
SELECT * FROM (
  (SELECT * FROM task_events
   WHERE job_id = $1 AND task_id = ANY($2::uuid[]) AND kind = 'task_status')
  UNION ALL
  (SELECT DISTINCT ON (task_id, attempt) * FROM task_events
   WHERE job_id = $1 AND task_id = ANY($2::uuid[]) AND kind = 'task_progress'
   ORDER BY task_id, attempt, id DESC)
) e
ORDER BY id`;

/*
 * The task that failed a failed job: its failed task (the first to fail, should two have failed in
 * concurrent transactions), through tasks_job_failed_idx. lease_owner is kept when a task fails,
 * so it names the worker of the last attempt.
 */
export const JOB_FAILURE = `
SELECT id, chunk_index, error_code, error_message, attempt, lease_owner, completed_at
FROM tasks
WHERE job_id = $1 AND status = 'failed'
ORDER BY completed_at, chunk_index
LIMIT 1`;

/*
 * A resumed WatchJob stream: the job's events written after the last one the client saw, read in
 * the snapshot's transaction so the live part continues from exactly there. In id (write) order:
 * an event of a transaction that committed after a later-numbered one was streamed after it and
 * has a lower id, so resuming right between the two would skip it; the window is one commit race
 * wide and only matters to a client that disconnected inside it. $1 job id, $2 after event id.
 */
export const JOB_EVENTS_AFTER = `SELECT * FROM task_events WHERE job_id = $1 AND id > $2::bigint ORDER BY id`;

/*
 * Is there anything for the reaper to do? One read-only statement, so an idle database costs one
 * transaction per reaper pass instead of three (a BEGIN … COMMIT around an EXPIRE_LEASES that
 * finds nothing, and a FINISH_STALLED_JOBS that updates nothing). Its two probes are the
 * predicates of those statements, through the same indexes; the work itself still runs with
 * SKIP LOCKED, so a probe that is stale by the time the work runs costs nothing but that statement.
 */
export const REAPER_DUE = `
SELECT
  EXISTS (SELECT 1 FROM tasks WHERE status = 'leased' AND lease_expires_at <= now()) AS leases,
  EXISTS (
    SELECT 1 FROM jobs j
    WHERE j.status = 'running' AND NOT EXISTS (SELECT 1 FROM tasks o WHERE o.job_id = j.id AND o.status IN ('pending', 'leased'))
  ) AS stalled_jobs`;

/*
 * The same for the rest of maintenance (pending-task expiry, dead watch registrations, retention):
 * one read-only statement per pass on an idle database instead of three or four transactions.
 * The pending probe is EXPIRE_PENDING's predicate; $1 is the retention in days (null: none).
 */
export const MAINTENANCE_DUE = `
SELECT
  EXISTS (
    SELECT 1 FROM workloads w
    WHERE w.max_pending_seconds IS NOT NULL AND EXISTS (
      SELECT 1 FROM tasks
      WHERE status = 'pending' AND workload = w.name
        AND created_at <= now() - make_interval(secs => w.max_pending_seconds)
        AND run_after <= now() - make_interval(secs => w.max_pending_seconds))
  ) AS pending,
  EXISTS (SELECT 1 FROM job_watchers WHERE expires_at < now()) AS watchers,
  ($1::int IS NOT NULL AND EXISTS (
    SELECT 1 FROM jobs
    WHERE status IN ('completed', 'failed', 'cancelled') AND completed_at < now() - make_interval(days => $1::int)
  )) AS retention`;
