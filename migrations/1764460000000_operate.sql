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
 * - Measured on 2 cores (raw claim+complete, 16 connections): these triggers cost ~10% of throughput.
 */
CREATE TABLE task_events (
  -- Write order (a task's events are in its order); no primary-key index: nothing looks an event
  -- up by id, and that index measured ~8% of claim+complete throughput on the hot path.
  id                 bigint GENERATED ALWAYS AS IDENTITY,
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

/*
 * Row-level, and only for rows whose status or attempt changed (the WHEN clause is checked before
 * any function runs; a heartbeat does not even get that far, as it sets neither column). A
 * statement-level trigger with transition tables was measured slower on the one-task claim and
 * completion that dominate: it pays for its tuplestores and a join on every statement, even empty ones.
 * A watched job (job_watchers) is NOTIFYed; pg_notify folds repeats within a transaction.
 */
CREATE FUNCTION leasehold_task_status_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO task_events (job_id, task_id, chunk_index, kind, status, previous_status, attempt, worker_id, error_code)
  VALUES (NEW.job_id, NEW.id, NEW.chunk_index, 'task_status', NEW.status::text, OLD.status::text, NEW.attempt, NEW.lease_owner,
          CASE WHEN NEW.status = 'failed' OR (NEW.status = 'pending' AND OLD.status = 'leased') THEN NEW.error_code END);
  IF EXISTS (SELECT 1 FROM job_watchers w WHERE w.job_id = NEW.job_id) THEN
    PERFORM pg_notify('leasehold_events', NEW.job_id::text);
  END IF;
  RETURN NULL;
END $$;

-- A reclaimed expired lease stays 'leased' but is a new attempt: an event too.
CREATE TRIGGER tasks_status_events AFTER UPDATE OF status, attempt ON tasks
  FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.attempt IS DISTINCT FROM NEW.attempt)
  EXECUTE FUNCTION leasehold_task_status_event();

CREATE FUNCTION leasehold_job_status_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO task_events (job_id, kind, status, previous_status)
  VALUES (NEW.id, 'job_status', NEW.status::text, OLD.status::text);
  IF EXISTS (SELECT 1 FROM job_watchers w WHERE w.job_id = NEW.id) THEN
    PERFORM pg_notify('leasehold_events', NEW.id::text);
  END IF;
  RETURN NULL;
END $$;

CREATE TRIGGER jobs_status_events AFTER UPDATE OF status ON jobs
  FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
  EXECUTE FUNCTION leasehold_job_status_event();

-- Down Migration

DROP TRIGGER jobs_status_events ON jobs;
DROP TRIGGER tasks_status_events ON tasks;
DROP FUNCTION leasehold_job_status_event();
DROP FUNCTION leasehold_task_status_event();
DROP TABLE job_watchers;
DROP TABLE task_events;
DROP INDEX jobs_finished_idx;
DROP INDEX jobs_status_created_idx;
DROP INDEX jobs_created_idx;
ALTER TABLE workloads DROP COLUMN max_pending_seconds;
