-- COMPLETE_TASKS, as the store sends it (written by test/store/sql-snapshots.test.ts: do not edit by hand).
WITH done AS (
  UPDATE tasks t
  SET status = 'completed', result_uri = b.result_uri, result_sha256 = b.result_sha256, metrics = b.metrics,
      usage = CASE WHEN b.usage IS NULL THEN t.usage WHEN t.usage IS NULL THEN b.usage ELSE (SELECT jsonb_object_agg(u.k, u.s) FROM (SELECT e.k, sum(e.v::numeric) AS s
    FROM (SELECT * FROM jsonb_each_text(t.usage) UNION ALL SELECT * FROM jsonb_each_text(b.usage)) e(k, v) GROUP BY e.k) u) END,
      completed_at = now(), lease_expires_at = NULL, version = t.version + 1, event_flip = NOT t.event_flip
  FROM jsonb_to_recordset($1::jsonb) AS b(task_id uuid, worker_id text, attempt int, result_uri text, result_sha256 text, metrics jsonb, usage jsonb)
  WHERE t.id = ANY($2::uuid[]) AND t.id = b.task_id AND t.status::text = 'leased' AND t.lease_owner = b.worker_id AND t.attempt = b.attempt
    AND t.lease_expires_at > now()
  RETURNING t.*
), events AS (
  INSERT INTO task_events (job_id, task_id, chunk_index, kind, status, previous_status, attempt, worker_id, usage)
  SELECT d.job_id, d.id, d.chunk_index, 'task_status', 'completed', 'leased', d.attempt, d.lease_owner, r.usage FROM done d JOIN jsonb_to_recordset($1::jsonb) AS r(task_id uuid, usage jsonb) ON r.task_id = d.id
), watched AS (
  SELECT pg_notify('leasehold_events', r.job_id::text) FROM done r
  WHERE EXISTS (SELECT 1 FROM job_watchers w WHERE w.job_id = r.job_id)
), freed AS (
  SELECT pg_notify('leasehold_tasks', w.name || ':1:freed') FROM workloads w
  WHERE w.flow AND w.name IN (SELECT workload FROM done)
    AND EXISTS (SELECT 1 FROM workload_slot_waits s WHERE s.workload = w.name AND s.wanted_at > now() - interval '1 minute')
),
maybe_done AS (
  SELECT d.job_id FROM (SELECT DISTINCT r.job_id FROM done r) d
  WHERE (SELECT o.status FROM tasks o WHERE o.job_id = d.job_id AND o.status IN ('pending', 'leased') ORDER BY o.status LIMIT 1)
    IS DISTINCT FROM 'pending'
)
SELECT done.*, (SELECT count(*) FROM watched) + (SELECT count(*) FROM freed) AS notified, done.job_id = ANY (ARRAY(SELECT job_id FROM maybe_done)) AS recheck_job FROM done
