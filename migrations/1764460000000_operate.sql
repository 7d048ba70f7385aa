-- Up Migration

-- Claimable tasks left unclaimed this long fail with error_code 'expired' (maintenance loop);
-- NULL: never.
ALTER TABLE workloads ADD COLUMN max_pending_seconds integer CHECK (max_pending_seconds > 0);

-- ListJobs: newest first, all jobs or one status (a workload filter rides on either).
CREATE INDEX jobs_created_idx ON jobs (created_at DESC, id DESC);
CREATE INDEX jobs_status_created_idx ON jobs (status, created_at DESC, id DESC);
-- Retention: finished jobs, oldest first.
CREATE INDEX jobs_finished_idx ON jobs (completed_at) WHERE status IN ('completed', 'failed', 'cancelled');

/*
 * Append-only log of what happened to a job and its tasks: status changes (written by the
 * triggers below, so no statement can change a status without leaving an event) and progress
 * reports (written by ReportProgress). WatchJob reads it.
 * - xid: the writing transaction. WatchJob reads "events committed since my last snapshot"
 *   (visible now, not visible in the previous pg_current_snapshot()), which is exact and in
 *   commit order; an id or timestamp cursor would skip rows of transactions that commit late.
 * - No foreign keys: the log is written on the claim/complete hot path, and retention deletes a
 *   job's events itself before the job.
 */
CREATE TABLE task_events (
  id                 bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  job_id             uuid NOT NULL,
  task_id            uuid,
  chunk_index        integer,
  kind               text NOT NULL CHECK (kind IN ('task_status', 'task_progress', 'job_status')),
  status             text,
  previous_status    text,
  attempt            integer,
  worker_id          text,
  progress           double precision CHECK (progress >= 0 AND progress <= 1),
  message            text,
  partial_result_uri text,
  error_code         text,
  xid                xid8 NOT NULL DEFAULT pg_current_xact_id(),
  created_at         timestamptz NOT NULL DEFAULT now()
);
-- One job's events since a snapshot: `job_id = $1 AND xid >= xmin(previous snapshot)`.
CREATE INDEX task_events_job_xid_idx ON task_events (job_id, xid);

/*
 * Jobs someone is watching (one row per WatchJob stream, refreshed while it lasts). Events
 * NOTIFY only for these: a NOTIFY takes a database-wide lock at commit, which would serialize
 * every claim and completion if they all notified. UNLOGGED: after a crash the streams are gone too.
 */
CREATE UNLOGGED TABLE job_watchers (
  id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  job_id     uuid NOT NULL,
  expires_at timestamptz NOT NULL
);
CREATE INDEX job_watchers_job_idx ON job_watchers (job_id);

-- Statement-level with transition tables: one INSERT … SELECT per statement, whatever the number
-- of rows (a 100-task claim is one insert, a heartbeat inserts nothing).
CREATE FUNCTION leasehold_task_status_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO task_events (job_id, task_id, chunk_index, kind, status, previous_status, attempt, worker_id, error_code)
  SELECT n.job_id, n.id, n.chunk_index, 'task_status', n.status::text, o.status::text, n.attempt, n.lease_owner,
         CASE WHEN n.status = 'failed' OR (n.status = 'pending' AND o.status = 'leased') THEN n.error_code END
  FROM new_tasks n JOIN old_tasks o ON o.id = n.id
  -- a reclaimed expired lease stays 'leased' but is a new attempt
  WHERE n.status <> o.status OR n.attempt <> o.attempt
  ORDER BY n.job_id, n.chunk_index;
  RETURN NULL;
END $$;

CREATE TRIGGER tasks_status_events AFTER UPDATE ON tasks
  REFERENCING OLD TABLE AS old_tasks NEW TABLE AS new_tasks
  FOR EACH STATEMENT EXECUTE FUNCTION leasehold_task_status_events();

CREATE FUNCTION leasehold_job_status_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO task_events (job_id, kind, status, previous_status)
  SELECT n.id, 'job_status', n.status::text, o.status::text
  FROM new_jobs n JOIN old_jobs o ON o.id = n.id
  WHERE n.status <> o.status;
  RETURN NULL;
END $$;

CREATE TRIGGER jobs_status_events AFTER UPDATE ON jobs
  REFERENCING OLD TABLE AS old_jobs NEW TABLE AS new_jobs
  FOR EACH STATEMENT EXECUTE FUNCTION leasehold_job_status_events();

-- Payload: the job id. Delivered at commit, so a woken watcher finds the events.
CREATE FUNCTION leasehold_notify_watchers() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('leasehold_events', d.job_id::text)
  FROM (SELECT DISTINCT job_id FROM new_events) d
  WHERE EXISTS (SELECT 1 FROM job_watchers w WHERE w.job_id = d.job_id);
  RETURN NULL;
END $$;

CREATE TRIGGER task_events_notify AFTER INSERT ON task_events
  REFERENCING NEW TABLE AS new_events
  FOR EACH STATEMENT EXECUTE FUNCTION leasehold_notify_watchers();

-- Down Migration

DROP TRIGGER task_events_notify ON task_events;
DROP TRIGGER jobs_status_events ON jobs;
DROP TRIGGER tasks_status_events ON tasks;
DROP FUNCTION leasehold_notify_watchers();
DROP FUNCTION leasehold_job_status_events();
DROP FUNCTION leasehold_task_status_events();
DROP TABLE job_watchers;
DROP TABLE task_events;
DROP INDEX jobs_finished_idx;
DROP INDEX jobs_status_created_idx;
DROP INDEX jobs_created_idx;
ALTER TABLE workloads DROP COLUMN max_pending_seconds;
