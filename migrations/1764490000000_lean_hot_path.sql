-- Up Migration

/*
 * Less work per claim, completion and inserted task. A profile of the backends under claim +
 * complete (perf, 16 connections) found the work itself (index and heap writes) small beside what
 * each statement and row pays around it: the event trigger's plpgsql call, CHECK expressions read
 * back and built per statement, foreign-key triggers per inserted row. All of this migration
 * against the one before (bench/sql-ab.ts, 3 alternating pairs, 4 s, 16 connections, medians of
 * the database backends' CPU per task): single claim + complete 873 -> 757 us, batched (max_tasks
 * 10 + CompleteTasks) 268 -> 161 us, a 10,000-task CreateJob 461 -> 148 ms (26 -> 9 us per task,
 * WAL 706 -> 622 bytes), one-task jobs from 16 submitters 548 -> 423 us per job.
 */

/*
 * The claim and completion statements write their own task_events rows (queries.ts: CLAIM_TASKS,
 * COMPLETE_TASK, COMPLETE_TASKS) instead of leaving them to the row trigger: the trigger is a
 * plpgsql call per row, with an INSERT and a job_watchers probe executed through SPI, and a
 * profile of the backends under claim + complete (perf, 16 connections) put ~14% of their CPU in it.
 * The guarantee that every status change is in the log stays with the trigger: it skips a row
 * only when the updating statement flipped event_flip, which a statement does exactly when it
 * inserts that change's event itself. Any other statement (fail, reaper, cancel, retry, expiry, and
 * whatever is written later) gets the trigger's event as before, without knowing about the flip.
 * Checked in the WHEN clause, so a skipped row costs no function call; what the guarantee still
 * costs the hot statements is that WHEN clause, read and built once per statement (~2.5% of the
 * backends' CPU in a perf profile; an A/B run with the trigger dropped altogether, 5 pairs: 778 ->
 * 773 us per claim + complete, within the noise). One byte per row.
 * Measured alone (bench/sql-ab.ts, 3 alternating pairs, 16 connections, backend CPU per task, both
 * sides without the foreign keys and regexes below): single claim + complete 958 -> 925 us,
 * batched (max_tasks 10 + COMPLETE_TASKS) 240 -> 187 us; WAL unchanged (the same rows are written).
 */
ALTER TABLE tasks ADD COLUMN event_flip boolean NOT NULL DEFAULT false;

DROP TRIGGER tasks_status_events ON tasks;
CREATE TRIGGER tasks_status_events AFTER UPDATE OF status, attempt ON tasks
  FOR EACH ROW WHEN ((OLD.status IS DISTINCT FROM NEW.status OR OLD.attempt IS DISTINCT FROM NEW.attempt)
                     AND OLD.event_flip = NEW.event_flip)
  EXECUTE FUNCTION leasehold_task_status_event();

/*
 * The error_message of an event that carries an error_code, copied by the status trigger itself
 * from NEW (the row it fires for) rather than by a BEFORE INSERT trigger on task_events reading
 * the task back: every event with an error_code comes from this trigger (a failure, a retry, an
 * expired lease, an expiry), and the hot statements' inline inserts no longer pay for evaluating
 * the other trigger's WHEN clause on every statement.
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

DROP TRIGGER task_events_error_message ON task_events;
DROP FUNCTION leasehold_event_error_message();

/*
 * Per-row checks the application already makes before any SQL runs (validation.ts), and which
 * PostgreSQL re-evaluates on every UPDATE of the row, whatever the update changed: the two sha256
 * regexes (a regex match per row, on top of each CHECK's expression being read back from its
 * stored form once per statement; all CHECKs together were ~7% of the backends' CPU under claim +
 * complete, perf). The constraints that state
 * invariants the statements keep (attempt within max_attempts, a completed task has its result, a
 * leased one its lease) stay. Measured alone (bench/sql-ab.ts, 3 pairs): 10k-task CreateJob
 * 284 -> 206 ms (25 -> 17 us of backend CPU per task), claim + complete 943 -> 841 us per task,
 * batched 250 -> 219 us.
 */
ALTER TABLE tasks DROP CONSTRAINT tasks_input_sha256_check;
ALTER TABLE tasks DROP CONSTRAINT tasks_result_sha256_check;
ALTER TABLE jobs DROP CONSTRAINT jobs_input_sha256_check;

/*
 * The same for the range checks the application makes (chunk_index, max_attempts) or that no
 * statement can break (attempt only ever goes up from 0), and for the log's two checks (kind:
 * written only by the statements and the trigger; progress: validated), which every claim and
 * completion now pays for in its own INSERT. Each CHECK costs every statement that writes the
 * table a read of its stored expression and an expression build, however simple it is: ~8% of the
 * backends' CPU under claim + complete went to the eight left after the regexes (perf). Together
 * with jobs' foreign key below (bench/sql-ab.ts, 3 pairs): claim + complete 726 -> 662 us per task,
 * batched 162 -> 154 us.
 */
ALTER TABLE tasks DROP CONSTRAINT tasks_chunk_index_check;
ALTER TABLE tasks DROP CONSTRAINT tasks_attempt_check;
ALTER TABLE tasks DROP CONSTRAINT tasks_max_attempts_check;
ALTER TABLE task_events DROP CONSTRAINT task_events_kind_check;
ALTER TABLE task_events DROP CONSTRAINT task_events_progress_check;

/*
 * Foreign keys of tasks, checked per inserted row (10,000 per CreateJob) by an RI trigger:
 * - tasks.workload: CREATE_JOB inserts only when every workload it names exists unchanged (the
 *   `fresh` CTE), and workloads are never deleted.
 * - tasks.job_id: tasks are only ever inserted with their job, in the same statement; the cascade
 *   on delete is done by retention itself (DELETE_OLD_JOBS deletes a job's tasks with it).
 * Measured alone (bench/sql-ab.ts, 3 pairs): 10k-task CreateJob 277 -> 209 ms (25 -> 17 us of
 * backend CPU per task); an earlier measurement of the insert alone gave 316 -> 234 ms.
 */
ALTER TABLE tasks DROP CONSTRAINT tasks_workload_fkey;
ALTER TABLE tasks DROP CONSTRAINT tasks_job_id_fkey;

/*
 * jobs.workload likewise (CREATE_JOB checks it in the same statement). Its check also took a
 * FOR KEY SHARE lock on the workload's row per job: concurrent submitters to one workload turned
 * that into a MultiXact per job. With the checks above (bench/sql-ab.ts, 3 pairs, 16 concurrent
 * one-task CreateJobs): 466 -> 401 us of backend CPU and 1,604 -> 1,385 WAL bytes per job.
 */
ALTER TABLE jobs DROP CONSTRAINT jobs_workload_fkey;

/*
 * Lease expiry over leased tasks only. tasks_status_lease_created_idx also held every pending
 * task, for EXPIRE_PENDING alone, so each inserted task paid for an entry there (six index inserts
 * per task, now five). EXPIRE_PENDING now reads the claim index (workload, priority, created_at),
 * where its created_at bound is an index condition; the metrics' count of unfinished tasks reads
 * tasks_job_unfinished_idx, which has the same predicate. The claim's expired arm and the reaper
 * read the leased range as before. A/B (bench/sql-ab.ts, 3 pairs): 10k-task CreateJob
 * 135 -> 124 ms, WAL 667 -> 584 bytes per task; claim + complete unchanged.
 */
DROP INDEX tasks_status_lease_created_idx;
CREATE INDEX tasks_lease_expiry_idx ON tasks (lease_expires_at) WHERE status = 'leased';

-- Down Migration

CREATE INDEX tasks_status_lease_created_idx ON tasks (status, lease_expires_at, created_at) WHERE status IN ('pending', 'leased');
DROP INDEX tasks_lease_expiry_idx;

ALTER TABLE jobs ADD CONSTRAINT jobs_workload_fkey FOREIGN KEY (workload) REFERENCES workloads (name);
ALTER TABLE task_events ADD CONSTRAINT task_events_progress_check CHECK (progress >= 0 AND progress <= 1);
ALTER TABLE task_events ADD CONSTRAINT task_events_kind_check CHECK (kind IN ('task_status', 'task_progress', 'job_status'));
ALTER TABLE tasks ADD CONSTRAINT tasks_max_attempts_check CHECK (max_attempts > 0);
ALTER TABLE tasks ADD CONSTRAINT tasks_attempt_check CHECK (attempt >= 0);
ALTER TABLE tasks ADD CONSTRAINT tasks_chunk_index_check CHECK (chunk_index >= 0);
ALTER TABLE jobs ADD CONSTRAINT jobs_input_sha256_check CHECK (input_sha256 ~ '^[0-9a-f]{64}$');
ALTER TABLE tasks ADD CONSTRAINT tasks_job_id_fkey FOREIGN KEY (job_id) REFERENCES jobs (id) ON DELETE CASCADE;
ALTER TABLE tasks ADD CONSTRAINT tasks_workload_fkey FOREIGN KEY (workload) REFERENCES workloads (name);
ALTER TABLE tasks ADD CONSTRAINT tasks_result_sha256_check CHECK (result_sha256 ~ '^[0-9a-f]{64}$');
ALTER TABLE tasks ADD CONSTRAINT tasks_input_sha256_check CHECK (input_sha256 ~ '^[0-9a-f]{64}$');

CREATE FUNCTION leasehold_event_error_message() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  SELECT t.error_message INTO NEW.error_message FROM tasks t WHERE t.id = NEW.task_id;
  RETURN NEW;
END $$;

CREATE TRIGGER task_events_error_message BEFORE INSERT ON task_events
  FOR EACH ROW WHEN (NEW.error_code IS NOT NULL AND NEW.error_message IS NULL AND NEW.task_id IS NOT NULL)
  EXECUTE FUNCTION leasehold_event_error_message();

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

DROP TRIGGER tasks_status_events ON tasks;
CREATE TRIGGER tasks_status_events AFTER UPDATE OF status, attempt ON tasks
  FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.attempt IS DISTINCT FROM NEW.attempt)
  EXECUTE FUNCTION leasehold_task_status_event();

ALTER TABLE tasks DROP COLUMN event_flip;
