/*
 * The finalizer is enqueued by the statement that gives the job its final status, whichever it is
 * (the last completion, FINISH_JOBS_IF_DONE, an end under the failure policy, CancelJob, pending
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
 * skipped rather than failing the parent's last completion. Its job and task ids are time-ordered
 * (version 7, leasehold_uuidv7), as every other job's and task's.
 *
 * The finalizer's work is the parent's caller's: it belongs to the parent's account (its quota, and
 * its settlement: the finalizer job is billed on its own, listed by ListSettlements with its
 * parent_job_id), and a parent billable without an account (a billing context only) makes a
 * finalizer billable too, with 0 units reserved (the parent's billing key stays the parent's).
 * The quota never refuses it: a job with a finalizer held one task of its account's quota for it
 * from its creation (accounts.ts), which this insert takes over in the same transaction as the
 * parent leaves the account's unfinished jobs.
 */
CREATE OR REPLACE FUNCTION leasehold_enqueue_finalizer() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  fin_id uuid := leasehold_uuidv7();
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
  INSERT INTO jobs (id, workload, input_uri, input_sha256, parameters, priority, traceparent, failure_policy, max_failed_tasks, parent_job_id,
    account, reserved_units)
  VALUES (fin_id, w.name, 'leasehold:jobs/' || NEW.id::text, encode(sha256(convert_to(NEW.id::text, 'UTF8')), 'hex'), params,
    NEW.priority, NEW.traceparent, w.failure_policy, 0, NEW.id,
    NEW.account, CASE WHEN NEW.account IS NULL AND (NEW.reserved_units IS NOT NULL OR NEW.billing_key IS NOT NULL) THEN 0 END)
  ON CONFLICT DO NOTHING;
  IF NOT FOUND THEN
    RETURN NEW;
  END IF;
  INSERT INTO tasks (id, job_id, chunk_index, workload, input_uri, input_sha256, parameters, max_attempts, priority, traceparent)
  VALUES (leasehold_uuidv7(), fin_id, 0, w.name, 'leasehold:jobs/' || NEW.id::text, encode(sha256(convert_to(NEW.id::text, 'UTF8')), 'hex'), params,
    w.max_attempts, NEW.priority, NEW.traceparent);
  -- The wake-up a new job sends (channels.ts), delivered at commit.
  PERFORM pg_notify('leasehold_tasks', w.name || ':1');
  NEW.finalizer_job_id := fin_id;
  RETURN NEW;
END $$;

