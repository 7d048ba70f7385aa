-- COALESCED_FAIL, as the store sends it (written by test/store/sql-snapshots.test.ts: do not edit by hand).
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
      usage = CASE WHEN b.usage IS NULL THEN t.usage WHEN t.usage IS NULL THEN b.usage ELSE (SELECT jsonb_object_agg(u.k, u.s) FROM (SELECT e.k, sum(e.v::numeric) AS s
    FROM (SELECT * FROM jsonb_each_text(t.usage) UNION ALL SELECT * FROM jsonb_each_text(b.usage)) e(k, v) GROUP BY e.k) u) END,
      version = t.version + 1, event_flip = NOT t.event_flip
  FROM jsonb_to_recordset($1::jsonb)
    AS b(task_id uuid, worker_id text, attempt int, error_code text, retryable boolean, error_message text, retry_after_seconds float8, usage jsonb)
  WHERE t.id = ANY($2::uuid[]) AND t.id = b.task_id AND t.status::text = 'leased' AND t.lease_owner = b.worker_id AND t.attempt = b.attempt
    AND t.lease_expires_at > now()
  RETURNING t.*, b.usage AS report_usage
), events AS (
  INSERT INTO task_events (job_id, task_id, chunk_index, kind, status, previous_status, attempt, worker_id, error_code, error_message, usage)
  SELECT job_id, id, chunk_index, 'task_status', status::text, 'leased', attempt, lease_owner, error_code,
    CASE WHEN error_code IS NOT NULL THEN error_message END, cur.report_usage FROM cur
), watched AS (
  SELECT pg_notify('leasehold_events', r.job_id::text) FROM cur r
  WHERE EXISTS (SELECT 1 FROM job_watchers w WHERE w.job_id = r.job_id)
), woken AS (
  SELECT pg_notify('leasehold_tasks', r.workload || ':' || CASE WHEN r.run_after <= now() THEN '1' ELSE '0' END || ':'
    || r.priority || ';' || r.fair_rank || ';' || (extract(epoch FROM r.created_at) * 1000000)::bigint || ';' || r.chunk_index
    || CASE WHEN r.run_after <= now() THEN '' ELSE ';' || ceil(extract(epoch FROM r.run_after - now()) * 1000)::bigint END)
  FROM cur r WHERE r.status = 'pending'
), freed AS (
  SELECT pg_notify('leasehold_tasks', w.name || ':1:freed') FROM workloads w
  WHERE w.flow AND w.name IN (SELECT workload FROM cur)
    AND EXISTS (SELECT 1 FROM workload_slot_waits s WHERE s.workload = w.name AND s.wanted_at > now() - interval '1 minute')
)
SELECT cur.*, (SELECT count(*) FROM woken) + (SELECT count(*) FROM freed) + (SELECT count(*) FROM watched) AS notified FROM cur
