/*
 * The event of a task's status or attempt change (trigger tasks_status_events: row-level, and only
 * for rows whose status or attempt changed and whose update did not flip event_flip, which the hot
 * statements use when they write their own events inline). The error_message of an event that
 * carries an error_code is copied from NEW, the row it fires for. A watched job (job_watchers) is
 * NOTIFYed; pg_notify folds repeats within a transaction.
 */
CREATE OR REPLACE FUNCTION leasehold_task_status_event() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  with_error boolean := NEW.status = 'failed' OR (NEW.status = 'pending' AND OLD.status = 'leased');
BEGIN
  INSERT INTO task_events (job_id, task_id, chunk_index, kind, status, previous_status, attempt, worker_id, error_code, error_message)
  VALUES (NEW.job_id, NEW.id, NEW.chunk_index, 'task_status', NEW.status::text, OLD.status::text, NEW.attempt, NEW.lease_owner,
          CASE WHEN with_error THEN NEW.error_code END,
          CASE WHEN with_error AND NEW.error_code IS NOT NULL THEN NEW.error_message END);
  IF EXISTS (SELECT 1 FROM job_watchers w WHERE w.job_id = NEW.job_id) THEN
    PERFORM pg_notify('leasehold_events', NEW.job_id::text);
  END IF;
  RETURN NULL;
END $$;

