-- Up Migration

/*
 * Storage settings for a queue's churn. Every task row is written three times (insert, claim,
 * completion) and every write but the insert leaves a dead version in the heap and dead entries in
 * the indexes it touched; the partial indexes (claim order, lease expiry, unfinished per job) are
 * the hot ones, and dead entries there are what a claim has to step over. With the defaults
 * (vacuum at 20% dead tuples) a table of 1,000,000 finished tasks lets 200,000 dead versions pile up
 * before autovacuum comes; the claim + complete statements under pgbench fell from ~2,150/s to
 * ~1,450/s within three minutes that way and were back after a REINDEX.
 * - tasks: vacuum after 1% (at least 1,000 rows) has changed, analyze after 2%.
 * - jobs: the same, at job scale (three writes per job).
 * - No fillfactor: no update of a task can be HOT (status and lease_expires_at are indexed), and
 *   fillfactor 70 on tasks measured the same as 100 (bench:sql, alternating runs: 0.41 and 0.42
 *   of the bare loop against 0.43, WAL per task 2,640 against 2,675 bytes) for 30% more heap.
 * - task_events: append-only; vacuumed (for its visibility map) after 5% new rows, so index-only
 *   reads of a job's events stay index-only.
 * - job_watchers: tiny and rewritten on every refresh.
 */
ALTER TABLE tasks SET (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000, autovacuum_analyze_scale_factor = 0.02);
ALTER TABLE jobs SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_threshold = 500);
ALTER TABLE task_events SET (autovacuum_vacuum_insert_scale_factor = 0.05, autovacuum_vacuum_insert_threshold = 10000);
ALTER TABLE job_watchers SET (autovacuum_vacuum_scale_factor = 0.05, autovacuum_vacuum_threshold = 200);

-- Down Migration

ALTER TABLE job_watchers RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold);
ALTER TABLE task_events RESET (autovacuum_vacuum_insert_scale_factor, autovacuum_vacuum_insert_threshold);
ALTER TABLE jobs RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold);
ALTER TABLE tasks RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold, autovacuum_analyze_scale_factor);
