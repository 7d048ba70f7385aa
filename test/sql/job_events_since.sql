-- JOB_EVENTS_SINCE, as the store sends it (written by test/store/sql-snapshots.test.ts: do not edit by hand).
SELECT pg_current_snapshot()::text AS snapshot,
  coalesce((
    SELECT json_agg(e ORDER BY e.id) FROM task_events e
    WHERE e.job_id = $1 AND e.xid >= pg_snapshot_xmin($2::pg_snapshot) AND NOT pg_visible_in_snapshot(e.xid, $2::pg_snapshot)
      AND e.created_at >= $3::timestamptz AND e.created_at < statement_timestamp() + interval '5 minutes'
  ), '[]'::json) AS events
