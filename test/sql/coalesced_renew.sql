-- COALESCED_RENEW, as the store sends it (written by test/store/sql-snapshots.test.ts: do not edit by hand).
UPDATE tasks t
SET lease_expires_at = now() + make_interval(secs => coalesce(b.lease_seconds, wl.lease_seconds)),
    version = t.version + 1
FROM jsonb_to_recordset($1::jsonb) AS b(task_id uuid, worker_id text, attempt int, lease_seconds int), workloads wl
WHERE t.id = ANY($2::uuid[]) AND t.id = b.task_id AND t.status::text = 'leased' AND t.lease_owner = b.worker_id AND t.attempt = b.attempt
  AND t.lease_expires_at > now() AND wl.name = t.workload
RETURNING t.*
