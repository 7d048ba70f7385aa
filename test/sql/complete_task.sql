-- COMPLETE_TASK, as the store sends it (written by test/store/sql-snapshots.test.ts: do not edit by hand).
WITH done AS (
  UPDATE tasks
  SET status = 'completed', result_uri = $4, result_sha256 = $5, metrics = $6::jsonb, usage = CASE WHEN $7::jsonb IS NULL THEN tasks.usage WHEN tasks.usage IS NULL THEN $7::jsonb ELSE (SELECT jsonb_object_agg(u.k, u.s) FROM (SELECT e.k, sum(e.v::numeric) AS s
    FROM (SELECT * FROM jsonb_each_text(tasks.usage) UNION ALL SELECT * FROM jsonb_each_text($7::jsonb)) e(k, v) GROUP BY e.k) u) END,
      completed_at = now(), lease_expires_at = NULL, version = version + 1, event_flip = NOT event_flip
  WHERE tasks.id = $1 AND tasks.status::text = 'leased' AND tasks.lease_owner = $2 AND tasks.attempt = $3 AND tasks.lease_expires_at > now()
  RETURNING *
), finished AS (
  UPDATE jobs j SET status = (CASE WHEN EXISTS (SELECT 1 FROM tasks f WHERE f.job_id = j.id AND f.status = 'failed' OFFSET j.max_failed_tasks) THEN 'failed' ELSE 'completed' END)::job_status, completed_at = now(), updated_at = now()
  WHERE j.id = (SELECT job_id FROM done) AND j.status = 'running'
    AND (SELECT o.status FROM tasks o WHERE o.job_id = (SELECT job_id FROM done) AND o.status IN ('pending', 'leased') AND o.id <> $1
    ORDER BY o.status LIMIT 1) IS NULL
  RETURNING j.id
), events AS (
  INSERT INTO task_events (job_id, task_id, chunk_index, kind, status, previous_status, attempt, worker_id, usage)
  SELECT d.job_id, d.id, d.chunk_index, 'task_status', 'completed', 'leased', d.attempt, d.lease_owner, $7::jsonb FROM done d
), watched AS (
  SELECT pg_notify('leasehold_events', r.job_id::text) FROM done r
  WHERE EXISTS (SELECT 1 FROM job_watchers w WHERE w.job_id = r.job_id)
), freed AS (
  SELECT pg_notify('leasehold_tasks', w.name || ':1:freed') FROM workloads w
  WHERE w.flow AND w.name IN (SELECT workload FROM done)
    AND EXISTS (SELECT 1 FROM workload_slot_waits s WHERE s.workload = w.name AND s.wanted_at > now() - interval '1 minute')
)
SELECT done.*, NOT EXISTS (SELECT 1 FROM finished)
    AND (SELECT o.status FROM tasks o WHERE o.job_id = done.job_id AND o.status IN ('pending', 'leased') ORDER BY o.status LIMIT 1)
    IS DISTINCT FROM 'pending'
    AND EXISTS (SELECT 1 FROM jobs j WHERE j.id = done.job_id AND j.status = 'running') AS recheck_job, (SELECT count(*) FROM watched) + (SELECT count(*) FROM freed) AS notified
FROM done
