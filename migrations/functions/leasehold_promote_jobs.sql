/*
 * Promotion: the jobs named whose parents are all final (pending, waiting_on = 0) get their
 * waiting tasks made pending, in the caller's transaction. Called by leasehold_job_status_changed
 * in the statement that ends a job's last unfinished parent (so exactly once: that end happens
 * once, under the parent's row lock, and each child's count under the child's), and by the store
 * for a job created or retried with its parents final already.
 *
 * One statement for the tasks, found by job (tasks_job_chunk_idx; a waiting task is in no claim
 * index, so nothing there changes until now):
 * - status 'pending', and run_after no earlier than now: the task has been waiting, not claimable,
 *   and a run_at still ahead (a node delayed after its parents) keeps it back until then (its
 *   due-time wake-up was recorded at its CreateJob);
 * - parents: the job's parents as they are now, for the claimed task (Task.parents): each one's
 *   status, whether it is optional, its node name when both are nodes of one workflow, its task
 *   counts, and the result of a parent of exactly one completed task;
 * - fair_rank: a job of a keyed workload takes its ranks now, as CreateJob gives a new job (the
 *   head of the queue at its priority, else the workload's furthest key; docs/flow-control-claim.md),
 *   so a promoted job takes its turn among the keys rather than the turn it had when created.
 * The tasks' status events are written by the statement itself (event_flip keeps the row trigger,
 * tasks_status_events, out of it: a fan-out of a thousand children was a thousand trigger calls),
 * as the hot statements write theirs; their jobs' watchers are told. Then, when `announce`,
 * each job's own event (waiting to pending) and, for a workflow's node, the workflow's: a job
 * created or retried with its parents final was never seen waiting, and its creation or its
 * status change says what it is. And the wake-up a new job sends, per workload, which also drops
 * the claims' hints (claim-hints.ts), as a requeue does. Returns the number of tasks made pending.
 */
CREATE OR REPLACE FUNCTION leasehold_promote_jobs(job_ids uuid[], announce boolean DEFAULT true) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  ready uuid[];
  -- parent id -> what a child lists of it; child id -> its parents' list; task id -> fair rank
  pinfo jsonb;
  pmap jsonb;
  rmap jsonb := '{}';
  kj record;
  base bigint;
  promoted integer := 0;
  notified integer;
BEGIN
  -- Only jobs that still have waiting tasks: a job made pending already (a workflow's first nodes,
  -- inserted pending) has nothing to promote, and no event to write.
  SELECT array_agg(j.id ORDER BY j.id) INTO ready FROM jobs j
  WHERE j.id = ANY (job_ids) AND j.status = 'pending' AND j.waiting_on = 0
    AND EXISTS (SELECT 1 FROM tasks t WHERE t.job_id = j.id AND t.status = 'waiting');
  IF ready IS NULL THEN
    RETURN 0;
  END IF;
  FOR kj IN
    SELECT jb.id, jb.workload, jb.concurrency_key, jb.priority,
      (SELECT count(*) FROM tasks t WHERE t.job_id = jb.id AND t.status = 'waiting') AS n
    FROM jobs jb
    WHERE jb.id = ANY (ready) AND (SELECT w.keyed FROM workloads w WHERE w.name = jb.workload)
    ORDER BY jb.id
  LOOP
    CONTINUE WHEN kj.n = 0;
    INSERT INTO flow_keys AS k (workload, key, next_rank)
    SELECT kj.workload, kj.concurrency_key, coalesce(
        (SELECT t.fair_rank FROM tasks t WHERE t.status = 'pending' AND t.workload = kj.workload AND t.priority = kj.priority
         ORDER BY t.priority DESC, t.fair_rank LIMIT 1),
        (SELECT max(o.next_rank) FROM flow_keys o WHERE o.workload = kj.workload),
        0) + kj.n
    ON CONFLICT (workload, key) DO UPDATE SET next_rank = greatest(k.next_rank, EXCLUDED.next_rank - kj.n) + kj.n
    RETURNING k.next_rank - kj.n INTO base;
    rmap := rmap || coalesce((
      SELECT jsonb_object_agg(x.id::text, base + x.rn - 1)
      FROM (SELECT t.id, row_number() OVER (ORDER BY t.chunk_index) AS rn FROM tasks t WHERE t.job_id = kj.id AND t.status = 'waiting') x
    ), '{}');
  END LOOP;

  /*
   * No join on the way: each parent once, by primary key (a fan-out's one parent is not read again
   * per child), as one object keyed by id; then each child's list from its edges, looking its
   * parents up in that object; then the tasks, looking their job's list up. Joins here were planned
   * as nested loops over the other side's every row while the tables' statistics were those of an
   * empty database (a 998-child fan-out: 996,004 rows compared, half a second).
   */
  SELECT coalesce(jsonb_object_agg(p.id::text, jsonb_build_object(
      'job_id', p.id, 'status', p.status, 'workflow_id', p.workflow_id, 'node', p.workflow_node,
      'total_tasks', n.total, 'completed_tasks', n.completed,
      'result', CASE WHEN n.total = 1 AND n.completed = 1 THEN (
        SELECT jsonb_build_object('chunk_index', r.chunk_index, 'task_id', r.id, 'result_uri', r.result_uri,
          'result_sha256', r.result_sha256, 'metrics', r.metrics, 'completed_at', r.completed_at)
        FROM tasks r WHERE r.job_id = p.id AND r.status = 'completed') END)), '{}')
  INTO pinfo
  FROM jobs p
  CROSS JOIN LATERAL (
    SELECT count(*) AS total, count(*) FILTER (WHERE t.status = 'completed') AS completed FROM tasks t WHERE t.job_id = p.id
  ) n
  WHERE p.id = ANY (ARRAY(SELECT DISTINCT d.parent_id FROM job_dependencies d WHERE d.child_id = ANY (ready)));

  SELECT coalesce(jsonb_object_agg(x.child_id::text, x.parents), '{}') INTO pmap
  FROM (
    SELECT d.child_id, jsonb_agg(
        (pinfo -> d.parent_id::text) - 'workflow_id' - 'node' || jsonb_build_object(
          'optional', d.optional,
          'node', CASE WHEN (pinfo -> d.parent_id::text ->> 'workflow_id') = (SELECT c.workflow_id::text FROM jobs c WHERE c.id = d.child_id)
                  THEN pinfo -> d.parent_id::text -> 'node' END)
        ORDER BY d.parent_id) AS parents
    FROM job_dependencies d WHERE d.child_id = ANY (ready)
    GROUP BY d.child_id
  ) x;

  WITH made AS (
    UPDATE tasks t
    SET status = 'pending', run_after = greatest(t.run_after, now()), parents = pmap -> t.job_id::text, version = t.version + 1,
        fair_rank = coalesce((rmap ->> t.id::text)::bigint, t.fair_rank), event_flip = NOT t.event_flip
    WHERE t.job_id = ANY (ready) AND t.status = 'waiting'
    RETURNING t.workload, t.job_id, t.id, t.chunk_index, t.attempt, t.lease_owner
  ), events AS (
    INSERT INTO task_events (job_id, task_id, chunk_index, kind, status, previous_status, attempt, worker_id)
    SELECT m.job_id, m.id, m.chunk_index, 'task_status', 'pending', 'waiting', m.attempt, m.lease_owner FROM made m
  ), woken AS (
    SELECT pg_notify('leasehold_tasks', m.workload || ':' || count(*)) FROM made m GROUP BY m.workload
  )
  SELECT (SELECT count(*) FROM made), (SELECT count(*) FROM woken) INTO promoted, notified;
  -- Watchers of the jobs (or of their workflows) read the events now.
  PERFORM pg_notify('leasehold_events', w.job_id::text)
  FROM job_watchers w WHERE w.job_id = ANY (ready)
    OR w.job_id IN (SELECT jb.workflow_id FROM jobs jb WHERE jb.id = ANY (ready) AND jb.workflow_id IS NOT NULL);

  IF NOT announce THEN
    RETURN promoted;
  END IF;
  INSERT INTO task_events (job_id, kind, status, previous_status)
  SELECT id, 'job_status', 'pending', 'waiting' FROM unnest(ready) AS r(id);
  INSERT INTO task_events (job_id, task_id, kind, status, previous_status, message)
  SELECT jb.workflow_id, jb.id, 'node_status', CASE WHEN jb.run_at > now() THEN 'scheduled' ELSE 'pending' END, 'waiting', jb.workflow_node
  FROM jobs jb WHERE jb.id = ANY (ready) AND jb.workflow_id IS NOT NULL;
  RETURN promoted;
END $$;
