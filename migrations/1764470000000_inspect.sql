-- Up Migration

/*
 * Task inspection (ListTasks, GetTask, the failure of a failed job) tells each attempt from
 * task_events; a failed or retried attempt's error_message was not in the log, only in the task
 * row, where the next failure overwrites it. Events that carry an error_code (a failure, a retry,
 * an expired lease: never a claim, a completion or a progress report) now copy the task's
 * error_message as they are inserted.
 * A BEFORE INSERT trigger on the log rather than a change to leasehold_task_status_event(): the
 * status trigger stays exactly as it was (it is the hot path, and tuned on its own), and whatever
 * writes an event with an error_code gets its message. The WHEN clause is checked before any
 * function runs, so an event without an error_code (all of the claim/complete path) pays only that
 * check; a failure pays one primary-key read of the row its statement just updated.
 */
ALTER TABLE task_events ADD COLUMN error_message text;

CREATE FUNCTION leasehold_event_error_message() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  SELECT t.error_message INTO NEW.error_message FROM tasks t WHERE t.id = NEW.task_id;
  RETURN NEW;
END $$;

CREATE TRIGGER task_events_error_message BEFORE INSERT ON task_events
  FOR EACH ROW WHEN (NEW.error_code IS NOT NULL AND NEW.error_message IS NULL AND NEW.task_id IS NOT NULL)
  EXECUTE FUNCTION leasehold_event_error_message();

/*
 * A job's failed tasks in chunk order: ListTasks ?status=failed and the failure GetJob reports
 * read them without walking the job's other chunks. Partial, so only a task failing for good
 * writes to it (never a claim or a completion); failed tasks are few.
 */
CREATE INDEX tasks_job_failed_idx ON tasks (job_id, chunk_index) WHERE status = 'failed';

-- Down Migration

DROP INDEX tasks_job_failed_idx;
DROP TRIGGER task_events_error_message ON task_events;
DROP FUNCTION leasehold_event_error_message();
ALTER TABLE task_events DROP COLUMN error_message;
