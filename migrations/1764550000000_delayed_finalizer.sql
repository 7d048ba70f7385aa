-- Up Migration

/*
 * Delayed jobs. A task not yet due is a pending task whose run_after (the retry backoff's column)
 * is in the future: the claim already passes it over inside tasks_claim_pending_idx, so the claim
 * statement does not change. jobs.run_at is the earliest due time of the job's tasks while that
 * lay ahead when it was created (null: due at once); a pending job whose run_at is still ahead is
 * shown as scheduled.
 *
 * Finalizers. A job may name a finalizer (workload, parameters, whether it runs after a failed or
 * cancelled job too). finalizer_job_id on the parent and parent_job_id on the finalizer job link
 * the two both ways.
 */
ALTER TABLE jobs
  ADD COLUMN run_at timestamptz,
  ADD COLUMN finalizer_workload text,
  ADD COLUMN finalizer_parameters jsonb,
  ADD COLUMN finalizer_on_failure boolean NOT NULL DEFAULT false,
  ADD COLUMN finalizer_job_id uuid,
  ADD COLUMN parent_job_id uuid;

-- At most one finalizer job per parent, whatever enqueues it (see leasehold_enqueue_finalizer).
CREATE UNIQUE INDEX jobs_parent_job_id_key ON jobs (parent_job_id) WHERE parent_job_id IS NOT NULL;

/*
 * One row per (due time, workload) of delayed tasks, so a coordinator can wake parked claimers at
 * the due time without polling for it: each coordinator keeps one timer for the earliest row
 * (due-wakes.ts) and at that time deletes the due rows and sends the same NOTIFY a new job sends.
 * A DELETE takes each row once, so one due time is announced once however many coordinators fire.
 * 10,000 tasks due at one second are one row.
 */
CREATE TABLE due_wakeups (
  run_at   timestamptz NOT NULL,
  workload text NOT NULL,
  tasks    integer NOT NULL
);
CREATE INDEX due_wakeups_run_at_idx ON due_wakeups (run_at);

/*
 * The finalizer is enqueued by the statement that gives the job its final status, whichever it is
 * (the last completion, FINISH_JOBS_IF_DONE, a settle under the failure policy, CancelJob, pending
 * expiry), in its transaction: a BEFORE trigger on that update, so the parent's row records the
 * finalizer's id in the same write.
 *
 * Exactly once: every statement that ends a job updates it only while it is pending or running,
 * under its row lock. Two coordinators completing the last two chunks at the same instant both
 * try that update; the second waits for the first's row lock, re-reads the row (now final), and
 * updates nothing, so this trigger runs once per transition. finalizer_job_id IS NULL keeps a job
 * that RetryJob reopened from enqueueing a second finalizer, and the unique index on
 * parent_job_id would refuse one anyway.
 *
 * The finalizer job is one task, chunk 0, whose parameters are the finalizer's with parent_job_id
 * and parent_status added; its input_uri names the parent (leasehold:jobs/<id>) and its
 * input_sha256 is the sha256 of the parent's id. A finalizer whose workload was deleted since is
 * skipped rather than failing the parent's last completion.
 */
CREATE FUNCTION leasehold_enqueue_finalizer() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  fin_id uuid := gen_random_uuid();
  params jsonb;
  w workloads%ROWTYPE;
BEGIN
  IF NEW.status <> 'completed' AND NOT NEW.finalizer_on_failure THEN
    RETURN NEW;
  END IF;
  SELECT * INTO w FROM workloads WHERE name = NEW.finalizer_workload;
  IF NOT FOUND THEN
    RETURN NEW;
  END IF;
  params := coalesce(NEW.finalizer_parameters, '{}'::jsonb)
    || jsonb_build_object('parent_job_id', NEW.id::text, 'parent_status', NEW.status::text);
  INSERT INTO jobs (id, workload, input_uri, input_sha256, parameters, priority, traceparent, failure_policy, max_failed_tasks, parent_job_id)
  VALUES (fin_id, w.name, 'leasehold:jobs/' || NEW.id::text, encode(sha256(convert_to(NEW.id::text, 'UTF8')), 'hex'), params,
    NEW.priority, NEW.traceparent, w.failure_policy, 0, NEW.id)
  ON CONFLICT DO NOTHING;
  IF NOT FOUND THEN
    RETURN NEW;
  END IF;
  INSERT INTO tasks (job_id, chunk_index, workload, input_uri, input_sha256, parameters, max_attempts, priority, traceparent)
  VALUES (fin_id, 0, w.name, 'leasehold:jobs/' || NEW.id::text, encode(sha256(convert_to(NEW.id::text, 'UTF8')), 'hex'), params,
    w.max_attempts, NEW.priority, NEW.traceparent);
  -- The wake-up a new job sends (channels.ts), delivered at commit.
  PERFORM pg_notify('leasehold_tasks', w.name || ':1');
  NEW.finalizer_job_id := fin_id;
  RETURN NEW;
END $$;

CREATE TRIGGER jobs_enqueue_finalizer BEFORE UPDATE OF status ON jobs
  FOR EACH ROW WHEN (
    NEW.finalizer_workload IS NOT NULL AND NEW.finalizer_job_id IS NULL
    AND OLD.status IN ('pending', 'running') AND NEW.status IN ('completed', 'failed', 'cancelled'))
  EXECUTE FUNCTION leasehold_enqueue_finalizer();

-- Down Migration

DROP TRIGGER jobs_enqueue_finalizer ON jobs;
DROP FUNCTION leasehold_enqueue_finalizer();
DROP TABLE due_wakeups;
DROP INDEX jobs_parent_job_id_key;
ALTER TABLE jobs
  DROP COLUMN parent_job_id,
  DROP COLUMN finalizer_job_id,
  DROP COLUMN finalizer_on_failure,
  DROP COLUMN finalizer_parameters,
  DROP COLUMN finalizer_workload,
  DROP COLUMN run_at;
