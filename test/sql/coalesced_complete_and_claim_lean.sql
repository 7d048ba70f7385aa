-- COALESCED_COMPLETE_AND_CLAIM_LEAN, as the store sends it (written by test/store/sql-snapshots.test.ts: do not edit by hand).
WITH input AS MATERIALIZED (
  SELECT * FROM jsonb_to_recordset($1::jsonb)
    AS b(caller int, task_id uuid, worker_id text, attempt int, result_uri text, result_sha256 text, metrics jsonb, usage jsonb, claim_worker text, claim_n int,
      claim_always boolean)
), done AS (
  UPDATE tasks t
  SET status = 'completed', result_uri = b.result_uri, result_sha256 = b.result_sha256, metrics = b.metrics,
      usage = CASE WHEN b.usage IS NULL THEN t.usage WHEN t.usage IS NULL THEN b.usage ELSE (SELECT jsonb_object_agg(u.k, u.s) FROM (SELECT e.k, sum(e.v::numeric) AS s
    FROM (SELECT * FROM jsonb_each_text(t.usage) UNION ALL SELECT * FROM jsonb_each_text(b.usage)) e(k, v) GROUP BY e.k) u) END,
      completed_at = now(), lease_expires_at = NULL, version = t.version + 1, event_flip = NOT t.event_flip
  FROM input b
  WHERE t.id = ANY($2::uuid[]) AND t.id = b.task_id AND t.status::text = 'leased' AND t.lease_owner = b.worker_id AND t.attempt = b.attempt
    AND t.lease_expires_at > now()
  RETURNING t.*
), slots AS (
  SELECT b.caller, b.claim_worker AS worker_id, row_number() OVER (ORDER BY b.caller, g) AS rn
  FROM input b CROSS JOIN generate_series(1, b.claim_n) g
  WHERE b.claim_always OR b.task_id = ANY (ARRAY(SELECT id FROM done))
), slot_list AS (
  SELECT array_agg(worker_id ORDER BY rn) AS owners, array_agg(caller ORDER BY rn) AS callers FROM slots
), requested AS (
  SELECT wl.name, wl.flow, wl.lease_seconds, (h.k ->> 'p')::int AS hint_p, (h.k ->> 'r')::bigint AS hint_r,
    CASE WHEN h.k ->> 'c' = 'Infinity' THEN 'infinity'::timestamptz
      ELSE 'epoch'::timestamptz + (h.k ->> 'c')::bigint * interval '1 microsecond' END AS hint_c, (h.k ->> 'i')::int AS hint_i
  FROM workloads wl CROSS JOIN LATERAL (SELECT $6::jsonb -> wl.name AS k) h
  WHERE wl.name = ANY ($3::text[])
), fresh AS (
  SELECT c.id, c.priority, c.fair_rank, c.created_at, c.chunk_index, 1 AS arm
  FROM requested w
  CROSS JOIN LATERAL (
    SELECT * FROM (
      SELECT id, priority, fair_rank, created_at, chunk_index FROM tasks
      WHERE status = 'pending' AND workload = w.name AND w.hint_p IS NULL AND run_after <= now() AND EXISTS (SELECT 1 FROM slots)
        AND NOT w.flow AND (required_labels IS NULL OR required_labels <@ $5::jsonb)
      ORDER BY priority DESC, fair_rank, created_at, chunk_index
      LIMIT (SELECT count(*) FROM slots)
      FOR UPDATE SKIP LOCKED) front
    UNION ALL
    SELECT * FROM (
      SELECT id, priority, fair_rank, created_at, chunk_index FROM tasks
      WHERE status = 'pending' AND workload = w.name AND priority = w.hint_p AND (fair_rank, created_at, chunk_index) >= (w.hint_r, w.hint_c, w.hint_i) AND run_after <= now() AND EXISTS (SELECT 1 FROM slots)
        AND NOT w.flow AND (required_labels IS NULL OR required_labels <@ $5::jsonb)
      ORDER BY fair_rank, created_at, chunk_index
      LIMIT (SELECT count(*) FROM slots)
      FOR UPDATE SKIP LOCKED) from_hint
    UNION ALL
    SELECT * FROM (
      SELECT id, priority, fair_rank, created_at, chunk_index FROM tasks
      WHERE status = 'pending' AND workload = w.name AND priority < w.hint_p AND run_after <= now() AND EXISTS (SELECT 1 FROM slots)
        AND NOT w.flow AND (required_labels IS NULL OR required_labels <@ $5::jsonb)
      ORDER BY priority DESC, fair_rank, created_at, chunk_index
      LIMIT (SELECT count(*) FROM slots)
      FOR UPDATE SKIP LOCKED) below_hint
    LIMIT (SELECT count(*) FROM slots)
  ) c
), picked AS (
  SELECT id, row_number() OVER (ORDER BY arm, priority DESC, fair_rank, created_at, chunk_index) AS rn
  FROM fresh candidates
  ORDER BY rn
  LIMIT (SELECT count(*) FROM slots)
), plain_claimed AS (
  UPDATE tasks t
  SET status = 'leased',
      attempt = t.attempt + 1,
      lease_owner = ((SELECT owners FROM slot_list))[p.rn],
      lease_expires_at = now() + make_interval(secs => coalesce($4::int, (SELECT r.lease_seconds FROM requested r WHERE r.name = t.workload))),
      lease_seq = txid_current(),
      started_at = coalesce(t.started_at, now()),
      version = t.version + 1,
      event_flip = NOT t.event_flip
  FROM picked p WHERE t.id = ANY (ARRAY(SELECT id FROM picked)) AND t.id = p.id
    AND EXISTS (SELECT 1 FROM picked)
  RETURNING t.*, p.rn
), claimed AS (SELECT * FROM plain_claimed), running AS (
  UPDATE jobs SET status = 'running', updated_at = now()
  WHERE id = ANY (ARRAY(SELECT job_id FROM claimed)) AND status::text IN ('pending')
),
events AS (
  INSERT INTO task_events (job_id, task_id, chunk_index, kind, status, previous_status, attempt, worker_id, usage)
  SELECT d.job_id, d.id, d.chunk_index, 'task_status', 'completed', 'leased', d.attempt, d.lease_owner, r.usage FROM done d JOIN input r ON r.task_id = d.id
  UNION ALL
  SELECT job_id, id, chunk_index, 'task_status', 'leased',
    CASE WHEN true THEN 'pending' ELSE 'leased' END, attempt, lease_owner, NULL::jsonb
  FROM claimed
),
watched AS (
  SELECT pg_notify('leasehold_events', r.job_id::text) FROM (SELECT job_id FROM done UNION SELECT job_id FROM claimed) r
  WHERE EXISTS (SELECT 1 FROM job_watchers w WHERE w.job_id = r.job_id)
), freed AS (
  SELECT pg_notify('leasehold_tasks', w.name || ':1:freed') FROM workloads w
  WHERE w.flow AND w.name IN (SELECT workload FROM done)
    AND EXISTS (SELECT 1 FROM workload_slot_waits s WHERE s.workload = w.name AND s.wanted_at > now() - interval '1 minute')
), maybe_done AS (
  SELECT d.job_id FROM (SELECT DISTINCT r.job_id FROM done r WHERE r.job_id NOT IN (SELECT b.job_id FROM claimed b)) d
  WHERE (SELECT o.status FROM tasks o WHERE o.job_id = d.job_id AND o.status IN ('pending', 'leased') ORDER BY o.status LIMIT 1)
    IS DISTINCT FROM 'pending'
)
SELECT 0 AS part, NULL::int AS caller, done.*, NULL::bigint AS rn, NULL::float8 AS pickup_seconds,
  (SELECT count(*) FROM watched) + (SELECT count(*) FROM freed) AS notified,
  ARRAY(SELECT name FROM requested WHERE flow) AS flow_workloads, done.job_id = ANY (ARRAY(SELECT job_id FROM maybe_done)) AS recheck_job, NULL AS created_us
FROM done
UNION ALL
SELECT 1, ((SELECT callers FROM slot_list))[claimed.rn], claimed.*, CASE WHEN true THEN extract(epoch FROM now() - claimed.run_after)::float8 END, 0, NULL, false, (extract(epoch FROM claimed.created_at) * 1000000)::bigint::text FROM claimed
