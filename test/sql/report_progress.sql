-- REPORT_PROGRESS, as the store sends it (written by test/store/sql-snapshots.test.ts: do not edit by hand).
WITH renewed AS (
  UPDATE tasks t
  SET lease_expires_at = now() + make_interval(secs => coalesce($4::int, wl.lease_seconds)),
      version = t.version + 1
  FROM workloads wl
  WHERE t.id = $1 AND t.status::text = 'leased' AND t.lease_owner = $2 AND t.attempt = $3 AND t.lease_expires_at > now() AND wl.name = t.workload
  RETURNING t.*
), event AS (
  INSERT INTO task_events (job_id, task_id, chunk_index, kind, status, attempt, worker_id, progress, message, partial_result_uri)
  SELECT job_id, id, chunk_index, 'task_progress', status::text, attempt, lease_owner, $5, $6, $7 FROM renewed
), woken AS (
  -- As the status-event triggers do: only a watched job is notified.
  SELECT pg_notify('leasehold_events', renewed.job_id::text) FROM renewed
  WHERE EXISTS (SELECT 1 FROM job_watchers w WHERE w.job_id = renewed.job_id)
)
SELECT renewed.*, (SELECT count(*) FROM woken) AS notified FROM renewed
