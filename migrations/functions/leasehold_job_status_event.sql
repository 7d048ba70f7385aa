/*
 * The event of a job's status change (trigger jobs_status_events, row-level, only for rows whose
 * status changed). A watched job (job_watchers) is NOTIFYed; pg_notify folds repeats within a
 * transaction.
 */
CREATE OR REPLACE FUNCTION leasehold_job_status_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO task_events (job_id, kind, status, previous_status)
  VALUES (NEW.id, 'job_status', NEW.status::text, OLD.status::text);
  IF EXISTS (SELECT 1 FROM job_watchers w WHERE w.job_id = NEW.id) THEN
    PERFORM pg_notify('leasehold_events', NEW.id::text);
  END IF;
  RETURN NULL;
END $$;
