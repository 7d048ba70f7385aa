-- COMPLETE_TASK_AND_CLAIM, as the store sends it (written by test/store/sql-snapshots.test.ts: do not edit by hand).
WITH done AS (
  UPDATE tasks
  SET status = 'completed', result_uri = $4, result_sha256 = $5, metrics = $6::jsonb, usage = CASE WHEN $13::jsonb IS NULL THEN tasks.usage WHEN tasks.usage IS NULL THEN $13::jsonb ELSE (SELECT jsonb_object_agg(u.k, u.s) FROM (SELECT e.k, sum(e.v::numeric) AS s
    FROM (SELECT * FROM jsonb_each_text(tasks.usage) UNION ALL SELECT * FROM jsonb_each_text($13::jsonb)) e(k, v) GROUP BY e.k) u) END,
      completed_at = now(), lease_expires_at = NULL, version = version + 1, event_flip = NOT event_flip
  WHERE tasks.id = $1 AND tasks.status::text = 'leased' AND tasks.lease_owner = $2 AND tasks.attempt = $3 AND tasks.lease_expires_at > now()
  RETURNING *
), finished AS (
  UPDATE jobs j SET status = (CASE WHEN EXISTS (SELECT 1 FROM tasks f WHERE f.job_id = j.id AND f.status = 'failed' OFFSET j.max_failed_tasks) THEN 'failed' ELSE 'completed' END)::job_status, completed_at = now(), updated_at = now()
  WHERE j.id = (SELECT job_id FROM done) AND j.status = 'running'
    AND (SELECT o.status FROM tasks o WHERE o.job_id = (SELECT job_id FROM done) AND o.status IN ('pending', 'leased') AND o.id <> $1
    ORDER BY o.status LIMIT 1) IS NULL
  RETURNING j.id
), requested AS (
  SELECT wl.name, wl.flow, wl.lease_seconds, (h.k ->> 'p')::int AS hint_p, (h.k ->> 'r')::bigint AS hint_r,
    CASE WHEN h.k ->> 'c' = 'Infinity' THEN 'infinity'::timestamptz
      ELSE 'epoch'::timestamptz + (h.k ->> 'c')::bigint * interval '1 microsecond' END AS hint_c, (h.k ->> 'i')::int AS hint_i
  FROM workloads wl CROSS JOIN LATERAL (SELECT $12::jsonb -> wl.name AS k) h
  WHERE wl.name = ANY ($7::text[])
), expired AS (
  SELECT c.id, c.priority, c.fair_rank, c.created_at, c.chunk_index, 0 AS arm
  FROM requested w
  CROSS JOIN LATERAL (
    SELECT id, priority, fair_rank, created_at, chunk_index FROM tasks
    WHERE status = 'leased' AND workload = w.name AND lease_expires_at <= now() AND attempt < max_attempts AND EXISTS (SELECT 1 FROM done)
      AND coalesce(($12::jsonb ->> '~expired')::boolean, true)
      AND NOT w.flow AND (required_labels IS NULL OR required_labels <@ $11::jsonb)
    ORDER BY lease_expires_at
    LIMIT $8
    FOR UPDATE SKIP LOCKED
  ) c
), fresh AS (
  SELECT c.id, c.priority, c.fair_rank, c.created_at, c.chunk_index, 1 AS arm
  FROM requested w
  CROSS JOIN LATERAL (
    SELECT * FROM (
      SELECT id, priority, fair_rank, created_at, chunk_index FROM tasks
      WHERE status = 'pending' AND workload = w.name AND w.hint_p IS NULL AND run_after <= now() AND EXISTS (SELECT 1 FROM done)
        AND NOT w.flow AND (required_labels IS NULL OR required_labels <@ $11::jsonb)
      ORDER BY priority DESC, fair_rank, created_at, chunk_index
      LIMIT $8
      FOR UPDATE SKIP LOCKED) front
    UNION ALL
    SELECT * FROM (
      SELECT id, priority, fair_rank, created_at, chunk_index FROM tasks
      WHERE status = 'pending' AND workload = w.name AND priority = w.hint_p AND (fair_rank, created_at, chunk_index) >= (w.hint_r, w.hint_c, w.hint_i) AND run_after <= now() AND EXISTS (SELECT 1 FROM done)
        AND NOT w.flow AND (required_labels IS NULL OR required_labels <@ $11::jsonb)
      ORDER BY fair_rank, created_at, chunk_index
      LIMIT $8
      FOR UPDATE SKIP LOCKED) from_hint
    UNION ALL
    SELECT * FROM (
      SELECT id, priority, fair_rank, created_at, chunk_index FROM tasks
      WHERE status = 'pending' AND workload = w.name AND priority < w.hint_p AND run_after <= now() AND EXISTS (SELECT 1 FROM done)
        AND NOT w.flow AND (required_labels IS NULL OR required_labels <@ $11::jsonb)
      ORDER BY priority DESC, fair_rank, created_at, chunk_index
      LIMIT $8
      FOR UPDATE SKIP LOCKED) below_hint
    LIMIT $8
  ) c
), picked AS (
  SELECT id FROM (SELECT * FROM expired UNION ALL SELECT * FROM fresh) candidates
  ORDER BY arm, priority DESC, fair_rank, created_at, chunk_index
  LIMIT $8
), plain_claimed AS (
  UPDATE tasks t
  SET status = 'leased',
      attempt = t.attempt + 1,
      lease_owner = $9,
      lease_expires_at = now() + make_interval(secs => coalesce($10::int, (SELECT r.lease_seconds FROM requested r WHERE r.name = t.workload))),
      lease_seq = txid_current(),
      started_at = coalesce(t.started_at, now()),
      version = t.version + 1,
      event_flip = NOT t.event_flip
  WHERE t.id = ANY (ARRAY(SELECT id FROM picked))
    AND EXISTS (SELECT 1 FROM picked)
  RETURNING t.*
), flow_claimed AS (
  SELECT f.task, f.fresh, f.hint
  FROM leasehold_flow_claim_hinted(
    ARRAY(SELECT name FROM requested WHERE flow), $8::int - (SELECT count(*)::int FROM plain_claimed), $9::text,
    $10::int, $11::jsonb, NULL::text[], $12::jsonb) f
  WHERE EXISTS (SELECT 1 FROM requested WHERE flow) AND EXISTS (SELECT 1 FROM done)
), claimed AS (
  SELECT * FROM plain_claimed UNION ALL SELECT (task).* FROM flow_claimed
), running AS (
  UPDATE jobs SET status = 'running', updated_at = now()
  WHERE id = ANY (ARRAY(SELECT job_id FROM claimed)) AND status::text IN ('pending')
),
events AS (
  INSERT INTO task_events (job_id, task_id, chunk_index, kind, status, previous_status, attempt, worker_id, usage)
  SELECT d.job_id, d.id, d.chunk_index, 'task_status', 'completed', 'leased', d.attempt, d.lease_owner, $13::jsonb FROM done d
  UNION ALL
  SELECT job_id, id, chunk_index, 'task_status', 'leased',
    CASE WHEN (claimed.id = ANY (ARRAY(SELECT id FROM fresh)) OR claimed.id = ANY (ARRAY(SELECT (task).id FROM flow_claimed WHERE fresh))) THEN 'pending' ELSE 'leased' END, attempt, lease_owner, NULL::jsonb
  FROM claimed
),
watched AS (
  SELECT pg_notify('leasehold_events', r.job_id::text) FROM (SELECT job_id FROM done UNION ALL SELECT job_id FROM claimed) r
  WHERE EXISTS (SELECT 1 FROM job_watchers w WHERE w.job_id = r.job_id)
), freed AS (
  SELECT pg_notify('leasehold_tasks', w.name || ':1:freed') FROM workloads w
  WHERE w.flow AND w.name IN (SELECT workload FROM done)
    AND EXISTS (SELECT 1 FROM workload_slot_waits s WHERE s.workload = w.name AND s.wanted_at > now() - interval '1 minute')
)
SELECT 0 AS part, done.*, NOT EXISTS (SELECT 1 FROM finished)
    AND (SELECT o.status FROM tasks o WHERE o.job_id = done.job_id AND o.status IN ('pending', 'leased') ORDER BY o.status LIMIT 1)
    IS DISTINCT FROM 'pending'
    AND EXISTS (SELECT 1 FROM jobs j WHERE j.id = done.job_id AND j.status = 'running') AS recheck_job, NULL::float8 AS pickup_seconds,
  (SELECT count(*) FROM watched) + (SELECT count(*) FROM freed) AS notified, NULL AS created_us
FROM done
UNION ALL
(SELECT 1, claimed.*, false, CASE WHEN (claimed.id = ANY (ARRAY(SELECT id FROM fresh)) OR claimed.id = ANY (ARRAY(SELECT (task).id FROM flow_claimed WHERE fresh))) THEN extract(epoch FROM now() - claimed.run_after)::float8 END, 0, coalesce((SELECT fc.hint FROM flow_claimed fc WHERE (fc.task).id = claimed.id), (extract(epoch FROM claimed.created_at) * 1000000)::bigint::text) FROM claimed ORDER BY priority DESC, fair_rank, created_at, chunk_index)
