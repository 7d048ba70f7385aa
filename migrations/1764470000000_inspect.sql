-- Up Migration

/*
 * Task inspection (ListTasks, GetTask, the failure of a failed job) derives each attempt from
 * task_events; a failed or retried attempt's error_message was not in the log, only in the task
 * row, where the next failure overwrites it. The status trigger now copies it into the event, in
 * the same CASE as error_code: only failing transitions carry it, so a claim or a completion
 * writes the same row as before (one more NULL column).
 */
ALTER TABLE task_events ADD COLUMN error_message text;

CREATE OR REPLACE FUNCTION leasehold_task_status_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO task_events (job_id, task_id, chunk_index, kind, status, previous_status, attempt, worker_id, error_code, error_message)
  VALUES (NEW.job_id, NEW.id, NEW.chunk_index, 'task_status', NEW.status::text, OLD.status::text, NEW.attempt, NEW.lease_owner,
          CASE WHEN NEW.status = 'failed' OR (NEW.status = 'pending' AND OLD.status = 'leased') THEN NEW.error_code END,
          CASE WHEN NEW.status = 'failed' OR (NEW.status = 'pending' AND OLD.status = 'leased') THEN NEW.error_message END);
  IF EXISTS (SELECT 1 FROM job_watchers w WHERE w.job_id = NEW.job_id) THEN
    PERFORM pg_notify('leasehold_events', NEW.job_id::text);
  END IF;
  RETURN NULL;
END $$;

/*
 * A job's failed tasks in chunk order: ListTasks ?status=failed and the failure GetJob reports
 * read them without walking the job's other chunks. Partial, so only a task failing for good
 * writes to it (never a claim or a completion); failed tasks are few.
 */
CREATE INDEX tasks_job_failed_idx ON tasks (job_id, chunk_index) WHERE status = 'failed';

-- Down Migration

DROP INDEX tasks_job_failed_idx;

CREATE OR REPLACE FUNCTION leasehold_task_status_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO task_events (job_id, task_id, chunk_index, kind, status, previous_status, attempt, worker_id, error_code)
  VALUES (NEW.job_id, NEW.id, NEW.chunk_index, 'task_status', NEW.status::text, OLD.status::text, NEW.attempt, NEW.lease_owner,
          CASE WHEN NEW.status = 'failed' OR (NEW.status = 'pending' AND OLD.status = 'leased') THEN NEW.error_code END);
  IF EXISTS (SELECT 1 FROM job_watchers w WHERE w.job_id = NEW.job_id) THEN
    PERFORM pg_notify('leasehold_events', NEW.job_id::text);
  END IF;
  RETURN NULL;
END $$;

ALTER TABLE task_events DROP COLUMN error_message;
