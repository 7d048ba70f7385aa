-- Up Migration

/*
 * The claim, as a function: every claim statement (CLAIM_TASKS, and the result reports with
 * claim_next, COMPLETE_TASK_AND_CLAIM and COMPLETE_TASKS_AND_CLAIM in queries.ts) calls it instead
 * of carrying the claim's CTEs itself.
 *
 * Why a function. A claimer sometimes locks a task whose claim by another worker committed after
 * the claimer's statement took its snapshot. FOR UPDATE then follows the row to its newest version
 * and rechecks it (EvalPlanQual), and setting up that recheck initialises every subplan of the
 * statement: with the completion and the claim in one statement, ~18 of them. A perf profile of
 * the backends under 16 chained workers put ~6% of their CPU there. The recheck fails (the task is
 * leased now), but the row stays locked until the claimer commits, so the worker holding that lease
 * waited for it when it completed (another ~3.6%). A plpgsql function runs its query with a
 * snapshot of its own, taken when the claim starts, not before the completion's work, and
 * initialises only the claim's plan for a recheck. Its plan is cached per connection like a
 * prepared statement's. Measured (bench:sql-ab, backend CPU per task, medians of alternating
 * pairs against the statements with the claim inline): completion + claim_next 953 -> 802 us
 * (6 pairs; another 6: 958 -> 823), chained batches of ten 177.5 -> 162.4 us, claim 10 then
 * CompleteTasks 190.6 -> 176.9 us, claim then complete as two statements 972.5 -> 962.8 us
 * (4 pairs each).
 *
 * The claim itself, one statement, so there is no window between choosing and taking:
 * - Two arms, each an index-ordered top-N per requested workload (LATERAL over the workload list,
 *   because `workload = ANY(...)` cannot return one ordered index scan across several workloads):
 *     expired: leases whose holder went silent, with attempts left (tasks_lease_expiry_idx),
 *     fresh:   pending work whose backoff has passed (tasks_claim_pending_idx, whose last key column
 *              is run_after: a task in backoff is passed over inside the index, its row never read).
 * - FOR UPDATE SKIP LOCKED: concurrent claimers skip each other's candidates instead of queueing.
 * - Reclaimed work goes first (a zombie holds a slot the job is waiting on), then priority, age, chunk.
 * - The job moves to running here; `status = 'pending'` keeps that a no-op (and lock-free) for jobs
 *   already running.
 * - Rows are written through `id = ANY(ARRAY(...))`: a primary-key lookup whatever the plan cache
 *   guesses about the size of `picked` (a joined CTE once got a generic plan with a seq scan).
 * - The status events are written here (`claim_events`; the update flips event_flip, so the
 *   tasks_status_events trigger skips these rows, see 1764490000000_lean_hot_path.sql), previous
 *   status from the arm: pending for fresh work, leased for a reclaimed lease.
 * - "Was it fresh" is `= ANY (ARRAY(SELECT id FROM fresh))`, not `IN (SELECT id FROM fresh)`: the
 *   IN became a hashed subplan, whose hash table set up per statement was ~5% of the backends' CPU
 *   under claim + complete (perf).
 * - p_gate false claims nothing: a result report claims only when its result was accepted.
 * Returns each claimed task (its row after the claim) and whether it was fresh (taken from pending)
 * rather than a reclaimed lease. The caller notifies the watched jobs and orders the answer.
 */
CREATE FUNCTION leasehold_claim(p_workloads text[], p_limit int, p_worker text, p_lease_seconds int, p_gate boolean)
RETURNS TABLE (task tasks, fresh boolean) LANGUAGE plpgsql VOLATILE AS $fn$
#variable_conflict use_column
BEGIN
  IF NOT p_gate THEN
    RETURN;
  END IF;
  RETURN QUERY
  WITH expired AS (
    SELECT c.id, c.priority, c.created_at, c.chunk_index, 0 AS arm
    FROM unnest(p_workloads) AS w(name)
    CROSS JOIN LATERAL (
      SELECT id, priority, created_at, chunk_index FROM tasks
      WHERE status = 'leased' AND workload = w.name AND lease_expires_at <= now() AND attempt < max_attempts
      ORDER BY lease_expires_at
      LIMIT p_limit
      FOR UPDATE SKIP LOCKED
    ) c
  ), fresh AS (
    SELECT c.id, c.priority, c.created_at, c.chunk_index, 1 AS arm
    FROM unnest(p_workloads) AS w(name)
    CROSS JOIN LATERAL (
      SELECT id, priority, created_at, chunk_index FROM tasks
      WHERE status = 'pending' AND workload = w.name AND run_after <= now()
      ORDER BY priority DESC, created_at, chunk_index
      LIMIT p_limit
      FOR UPDATE SKIP LOCKED
    ) c
  ), picked AS (
    SELECT id FROM (SELECT * FROM expired UNION ALL SELECT * FROM fresh) candidates
    ORDER BY arm, priority DESC, created_at, chunk_index
    LIMIT p_limit
  ), claimed AS (
    UPDATE tasks t
    SET status = 'leased',
        attempt = t.attempt + 1,
        lease_owner = p_worker,
        lease_expires_at = now() + make_interval(secs => coalesce(p_lease_seconds, (SELECT lease_seconds FROM workloads WHERE name = t.workload))),
        started_at = coalesce(t.started_at, now()),
        version = t.version + 1,
        event_flip = NOT t.event_flip
    WHERE t.id = ANY (ARRAY(SELECT id FROM picked))
    RETURNING t.*
  ), running AS (
    UPDATE jobs SET status = 'running', updated_at = now()
    WHERE id = ANY (ARRAY(SELECT job_id FROM claimed)) AND status = 'pending'
  ), claim_events AS (
    INSERT INTO task_events (job_id, task_id, chunk_index, kind, status, previous_status, attempt, worker_id)
    SELECT job_id, id, chunk_index, 'task_status', 'leased',
      CASE WHEN id = ANY (ARRAY(SELECT id FROM fresh)) THEN 'pending' ELSE 'leased' END, attempt, lease_owner
    FROM claimed
  )
  SELECT c::tasks, c.id = ANY (ARRAY(SELECT id FROM fresh)) FROM claimed c;
END
$fn$;

-- Down Migration

DROP FUNCTION leasehold_claim(text[], int, text, int, boolean);
