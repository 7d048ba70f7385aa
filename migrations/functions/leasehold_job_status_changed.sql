/*
 * A job that others wait on (jobs.dependents), or a workflow's node, changed status: called by the
 * trigger jobs_status_wake_dependents (the dependencies migration) in the statement that changed it,
 * whichever that is (the last completion, a failure's end, CancelJob, pending expiry, the lease
 * reaper, a cascade below, RetryJob), so the jobs after it move in the same transaction.
 *
 * - A workflow's node: the change is also an event of the workflow (kind node_status, job_id the
 *   workflow's id, task_id the node's job, message the node's name), which WatchWorkflow streams.
 *   A pending job with parents not final shows as waiting.
 * - Final now: each edge from it not yet counted (resolved) is counted, and each child still waiting
 *   has one parent less to wait for, in one statement through the edges' primary key (parent_id
 *   first). The child's row lock orders two parents ending at once on two coordinators: the second
 *   re-reads the child's count after the first commits, so exactly one of them takes it to 0, and
 *   that one promotes it (leasehold_promote_jobs). A required parent (not optional, under
 *   all_completed) that did not complete makes the child's policy unmeetable: the child is cancelled
 *   at once, with a reason naming the parent, and so is every job after it that the cancel makes
 *   unmeetable in turn (one recursive read and one update for the whole cascade, not a trigger
 *   level per generation: a chain of a thousand jobs would otherwise nest a thousand triggers). The
 *   cancels fire this function again for each cancelled job, which counts its other children
 *   (all_final, or optional edges) and may promote them.
 * - Unfinished again (RetryJob reopened it): the children still waiting count it again. Their rows
 *   are locked first, so the next statement, with a fresh snapshot, sees whether a concurrent end
 *   promoted them meanwhile (a promoted child has run, or is running, on the parent's first end).
 */
CREATE OR REPLACE FUNCTION leasehold_job_status_changed(o jobs, n jobs) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  was_open boolean := o.status IN ('pending', 'running');
  is_open boolean := n.status IN ('pending', 'running');
  doomed uuid[];
  ready uuid[];
  cancel_ids uuid[];
  cancel_reasons text[];
  label text := coalesce('"' || n.workflow_node || '" (' || n.id::text || ')', n.id::text);
BEGIN
  IF n.workflow_id IS NOT NULL THEN
    INSERT INTO task_events (job_id, task_id, kind, status, previous_status, message)
    VALUES (n.workflow_id, n.id, 'node_status',
      CASE WHEN n.status = 'pending' AND n.waiting_on > 0 THEN 'waiting' ELSE n.status::text END,
      CASE WHEN o.status = 'pending' AND o.waiting_on > 0 THEN 'waiting' ELSE o.status::text END,
      n.workflow_node);
    IF EXISTS (SELECT 1 FROM job_watchers w WHERE w.job_id = n.workflow_id) THEN
      PERFORM pg_notify('leasehold_events', n.workflow_id::text);
    END IF;
  END IF;
  IF NOT n.dependents OR was_open = is_open THEN
    RETURN;
  END IF;

  IF is_open THEN
    PERFORM 1 FROM jobs c
    WHERE c.id IN (SELECT d.child_id FROM job_dependencies d WHERE d.parent_id = n.id AND d.resolved)
    ORDER BY c.id FOR NO KEY UPDATE;
    WITH edges AS (
      UPDATE job_dependencies d SET resolved = false
      WHERE d.parent_id = n.id AND d.resolved
        AND EXISTS (SELECT 1 FROM jobs c WHERE c.id = d.child_id AND c.status = 'pending' AND c.waiting_on > 0)
      RETURNING d.child_id
    )
    UPDATE jobs c SET waiting_on = c.waiting_on + 1, updated_at = now() WHERE c.id = ANY (ARRAY(SELECT child_id FROM edges));
    RETURN;
  END IF;

  -- The children by primary key (id = ANY (ARRAY(...)), not a join with the edges: with an empty
  -- database's statistics that join was a nested loop over every edge per child).
  WITH edges AS (
    UPDATE job_dependencies d SET resolved = true
    WHERE d.parent_id = n.id AND NOT d.resolved
    RETURNING d.child_id, d.optional
  ), counted AS (
    UPDATE jobs c SET waiting_on = c.waiting_on - 1, updated_at = now()
    WHERE c.id = ANY (ARRAY(SELECT child_id FROM edges)) AND c.status = 'pending' AND c.waiting_on > 0
    RETURNING c.id, c.waiting_on,
      c.dependency_policy = 'all_completed' AND n.status <> 'completed' AND c.id NOT IN (SELECT child_id FROM edges WHERE optional) AS blocked
  )
  SELECT array_agg(id) FILTER (WHERE blocked), array_agg(id) FILTER (WHERE waiting_on = 0 AND NOT blocked)
  INTO doomed, ready
  FROM counted;

  IF doomed IS NOT NULL THEN
    WITH RECURSIVE cascade(id, reason) AS (
      SELECT d.id, 'parent ' || label || ' ended ' || n.status::text FROM unnest(doomed) AS d(id)
      UNION
      SELECT e.child_id, 'parent ' || coalesce('"' || p.workflow_node || '" (' || p.id::text || ')', p.id::text) || ' was cancelled'
      FROM cascade x
      JOIN job_dependencies e ON e.parent_id = x.id AND NOT e.optional
      JOIN jobs p ON p.id = x.id
      JOIN jobs c ON c.id = e.child_id AND c.status = 'pending' AND c.waiting_on > 0 AND c.dependency_policy = 'all_completed'
    )
    SELECT array_agg(id ORDER BY id), array_agg(reason ORDER BY id) INTO cancel_ids, cancel_reasons
    FROM (SELECT DISTINCT ON (id) id, reason FROM cascade ORDER BY id, reason) x;
    -- Tasks first, then the jobs: the lock order of the claim and of CancelJob.
    UPDATE tasks t SET status = 'cancelled', completed_at = now(), version = t.version + 1
    WHERE t.job_id = ANY (cancel_ids) AND t.status = 'waiting';
    -- The direct children may have counted this parent as their last (waiting_on 0 now); the rest
    -- are cancelled only while they still wait (a fresh read of each row under its lock).
    UPDATE jobs c SET status = 'cancelled', cancel_reason = x.reason, completed_at = now(), updated_at = now()
    FROM unnest(cancel_ids, cancel_reasons) AS x(id, reason)
    WHERE c.id = x.id AND c.status = 'pending' AND (c.waiting_on > 0 OR c.id = ANY (doomed));
  END IF;
  IF ready IS NOT NULL THEN
    PERFORM leasehold_promote_jobs(ready);
  END IF;
END $$;
