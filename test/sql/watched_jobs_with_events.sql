-- WATCHED_JOBS_WITH_EVENTS, as the store sends it (written by test/store/sql-snapshots.test.ts: do not edit by hand).
SELECT w.i::int AS i
FROM unnest($1::uuid[], $2::text[]) WITH ORDINALITY AS w(job_id, since, i)
WHERE EXISTS (
  SELECT 1 FROM task_events e
  WHERE e.job_id = w.job_id AND e.xid >= pg_snapshot_xmin(w.since::pg_snapshot) AND NOT pg_visible_in_snapshot(e.xid, w.since::pg_snapshot)
    AND e.created_at >= $3::timestamptz AND e.created_at < statement_timestamp() + interval '5 minutes'
)
