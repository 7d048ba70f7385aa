-- CLAIM_TASK, as the store sends it (written by test/store/sql-snapshots.test.ts: do not edit by hand).
WITH requested AS (
  SELECT wl.name, wl.flow, wl.lease_seconds, (h.k ->> 'p')::int AS hint_p, (h.k ->> 'r')::bigint AS hint_r,
    CASE WHEN h.k ->> 'c' = 'Infinity' THEN 'infinity'::timestamptz
      ELSE 'epoch'::timestamptz + (h.k ->> 'c')::bigint * interval '1 microsecond' END AS hint_c, (h.k ->> 'i')::int AS hint_i
  FROM workloads wl CROSS JOIN LATERAL (SELECT $6::jsonb -> wl.name AS k) h
  WHERE wl.name = ANY ($1::text[])
), expired AS (
  SELECT c.id, c.priority, c.fair_rank, c.created_at, c.chunk_index, 0 AS arm
  FROM requested w
  CROSS JOIN LATERAL (
    SELECT id, priority, fair_rank, created_at, chunk_index FROM tasks
    WHERE status = 'leased' AND workload = w.name AND lease_expires_at <= now() AND attempt < max_attempts AND true
      AND coalesce(($6::jsonb ->> '~expired')::boolean, true)
      AND NOT w.flow AND (required_labels IS NULL OR required_labels <@ $5::jsonb)
    ORDER BY lease_expires_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
  ) c
), fresh AS (
  SELECT c.id, c.priority, c.fair_rank, c.created_at, c.chunk_index, 1 AS arm
  FROM requested w
  CROSS JOIN LATERAL (
    SELECT * FROM (
      SELECT id, priority, fair_rank, created_at, chunk_index FROM tasks
      WHERE status = 'pending' AND workload = w.name AND w.hint_p IS NULL AND run_after <= now() AND true
        AND NOT w.flow AND (required_labels IS NULL OR required_labels <@ $5::jsonb)
      ORDER BY priority DESC, fair_rank, created_at, chunk_index
      LIMIT $2
      FOR UPDATE SKIP LOCKED) front
    UNION ALL
    SELECT * FROM (
      SELECT id, priority, fair_rank, created_at, chunk_index FROM tasks
      WHERE status = 'pending' AND workload = w.name AND priority = w.hint_p AND (fair_rank, created_at, chunk_index) >= (w.hint_r, w.hint_c, w.hint_i) AND run_after <= now() AND true
        AND NOT w.flow AND (required_labels IS NULL OR required_labels <@ $5::jsonb)
      ORDER BY fair_rank, created_at, chunk_index
      LIMIT $2
      FOR UPDATE SKIP LOCKED) from_hint
    UNION ALL
    SELECT * FROM (
      SELECT id, priority, fair_rank, created_at, chunk_index FROM tasks
      WHERE status = 'pending' AND workload = w.name AND priority < w.hint_p AND run_after <= now() AND true
        AND NOT w.flow AND (required_labels IS NULL OR required_labels <@ $5::jsonb)
      ORDER BY priority DESC, fair_rank, created_at, chunk_index
      LIMIT $2
      FOR UPDATE SKIP LOCKED) below_hint
    LIMIT $2
  ) c
), picked AS (
  SELECT id FROM (SELECT * FROM expired UNION ALL SELECT * FROM fresh) candidates
  ORDER BY arm, priority DESC, fair_rank, created_at, chunk_index
  LIMIT $2
), plain_claimed AS (
  UPDATE tasks t
  SET status = 'leased',
      attempt = t.attempt + 1,
      lease_owner = $3,
      lease_expires_at = now() + make_interval(secs => coalesce($4::int, (SELECT r.lease_seconds FROM requested r WHERE r.name = t.workload))),
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
    ARRAY(SELECT name FROM requested WHERE flow), $2::int - (SELECT count(*)::int FROM plain_claimed), $3::text,
    $4::int, $5::jsonb, NULL::text[], $6::jsonb) f
  WHERE EXISTS (SELECT 1 FROM requested WHERE flow) AND true
), claimed AS (
  SELECT * FROM plain_claimed UNION ALL SELECT (task).* FROM flow_claimed
), running AS (
  UPDATE jobs SET status = 'running', updated_at = now()
  WHERE id = ANY (ARRAY(SELECT job_id FROM claimed)) AND status::text IN ('pending')
), events AS (
  INSERT INTO task_events (job_id, task_id, chunk_index, kind, status, previous_status, attempt, worker_id)
  SELECT job_id, id, chunk_index, 'task_status', 'leased',
    CASE WHEN (claimed.id = ANY (ARRAY(SELECT id FROM fresh)) OR claimed.id = ANY (ARRAY(SELECT (task).id FROM flow_claimed WHERE fresh))) THEN 'pending' ELSE 'leased' END, attempt, lease_owner
  FROM claimed
),
watched AS (
  SELECT pg_notify('leasehold_events', r.job_id::text) FROM claimed r
  WHERE EXISTS (SELECT 1 FROM job_watchers w WHERE w.job_id = r.job_id)
)
SELECT claimed.*, CASE WHEN (claimed.id = ANY (ARRAY(SELECT id FROM fresh)) OR claimed.id = ANY (ARRAY(SELECT (task).id FROM flow_claimed WHERE fresh))) THEN extract(epoch FROM now() - claimed.run_after)::float8 END AS pickup_seconds, (SELECT count(*) FROM watched) AS notified, coalesce((SELECT fc.hint FROM flow_claimed fc WHERE (fc.task).id = claimed.id), (extract(epoch FROM claimed.created_at) * 1000000)::bigint::text) AS created_us
FROM claimed
