-- RENEW_LEASE, as the store sends it (written by test/store/sql-snapshots.test.ts: do not edit by hand).
UPDATE tasks t
SET lease_expires_at = now() + make_interval(secs => coalesce($4::int, wl.lease_seconds)),
    version = t.version + 1
FROM workloads wl
WHERE t.id = $1 AND t.status::text = 'leased' AND t.lease_owner = $2 AND t.attempt = $3 AND t.lease_expires_at > now() AND wl.name = t.workload
RETURNING t.*
