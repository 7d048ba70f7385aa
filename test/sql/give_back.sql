-- GIVE_BACK, as the store sends it (written by test/store/sql-snapshots.test.ts: do not edit by hand).
WITH back AS (
  UPDATE tasks t
  SET status = 'pending', attempt = t.attempt - 1, lease_owner = NULL, lease_expires_at = NULL, version = t.version + 1
  FROM jsonb_to_recordset($1::jsonb) AS b(task_id uuid, worker_id text, attempt int)
  WHERE t.id = ANY($2::uuid[]) AND t.id = b.task_id AND t.status::text = 'leased' AND t.lease_owner = b.worker_id AND t.attempt = b.attempt
  RETURNING t.workload
)
SELECT pg_notify('leasehold_tasks', workload || ':' || count(*)) FROM back GROUP BY workload
