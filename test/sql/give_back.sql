-- GIVE_BACK, as the store sends it (written by test/store/sql-snapshots.test.ts: do not edit by hand).
WITH back AS (
  UPDATE tasks t
  SET status = 'pending', attempt = t.attempt - 1, lease_owner = NULL, lease_expires_at = NULL, version = t.version + 1
  FROM jsonb_to_recordset($1::jsonb) AS b(task_id uuid, worker_id text, attempt int)
  WHERE t.id = ANY($2::uuid[]) AND t.id = b.task_id AND t.status::text = 'leased' AND t.lease_owner = b.worker_id AND t.attempt = b.attempt
  RETURNING t.workload, t.priority, t.fair_rank, t.created_at, t.chunk_index
)
SELECT pg_notify('leasehold_tasks', workload || ':' || count(*) || ':' || (array_agg(
    priority || ';' || fair_rank || ';' || (extract(epoch FROM created_at) * 1000000)::bigint || ';' || chunk_index
    ORDER BY priority DESC, fair_rank, created_at, chunk_index))[1])
FROM back GROUP BY workload
