-- Up Migration

/*
 * Jobs that wait for other jobs (CreateJob's after), and workflows: jobs created together with the
 * edges between them.
 *
 * A waiting job is stored as pending (as a scheduled one is) with waiting_on > 0: the parents not
 * final yet. Its tasks are 'waiting', a task status no claim index covers (tasks_claim_pending_idx
 * and the flow claim's scans are partial on status = 'pending'), so a waiting task is not in the
 * claim's way however many there are, and the claim statements did not change. The value is added
 * here and first used by the function files (applied after this migration commits: a new enum value
 * cannot be used in the transaction that adds it).
 *
 * job_dependencies holds the edges, keyed by parent: the statement that ends a parent finds its
 * children through the primary key. resolved: the parent was final when the child last counted it
 * (waiting_on counts the unresolved edges). No foreign keys, as tasks have none (the lean_hot_path
 * migration): retention deletes a job's edges with it.
 *
 * dependents marks a job that some job waits on, so that the trigger below runs only for those.
 */
ALTER TYPE task_status ADD VALUE IF NOT EXISTS 'waiting';
CREATE TYPE dependency_policy AS ENUM ('all_completed', 'all_final');

CREATE TABLE workflows (
  id               uuid PRIMARY KEY,
  name             text NOT NULL DEFAULT '',
  account          text REFERENCES accounts (name),
  idempotency_key  text,
  -- sha256 of the normalised request, so a replay with the same key can be told from a conflict.
  request_sha256   text,
  schedule_name    text,
  schedule_fire_at timestamptz,
  created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX workflows_idempotency_key_idx ON workflows ((coalesce(account, '')), idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX workflows_created_idx ON workflows (created_at DESC, id DESC);
CREATE INDEX workflows_account_idx ON workflows (account, created_at DESC, id DESC) WHERE account IS NOT NULL;
CREATE INDEX workflows_schedule_idx ON workflows (schedule_name, created_at DESC, id DESC) WHERE schedule_name IS NOT NULL;

ALTER TABLE jobs
  ADD COLUMN dependency_policy dependency_policy,
  ADD COLUMN waiting_on integer NOT NULL DEFAULT 0 CHECK (waiting_on >= 0),
  ADD COLUMN dependents boolean NOT NULL DEFAULT false,
  ADD COLUMN workflow_id uuid,
  ADD COLUMN workflow_node text;
-- A workflow's nodes by name (GetWorkflow, its events, retention of the workflow whole).
CREATE UNIQUE INDEX jobs_workflow_node_idx ON jobs (workflow_id, workflow_node) WHERE workflow_id IS NOT NULL;

CREATE TABLE job_dependencies (
  parent_id uuid NOT NULL,
  child_id  uuid NOT NULL,
  optional  boolean NOT NULL DEFAULT false,
  resolved  boolean NOT NULL DEFAULT false,
  PRIMARY KEY (parent_id, child_id)
);
-- A job's parents (GetJob, a promoted task's parents, RetryWorkflow's recount).
CREATE INDEX job_dependencies_child_idx ON job_dependencies (child_id);

-- A promoted task's parents as they were when its job became pending (ClaimTasks returns them).
ALTER TABLE tasks ADD COLUMN parents jsonb;

/*
 * A schedule may create a workflow on each tick instead of a job: its template (the queue's
 * CreateWorkflowInput), the last one it made, and each tick's. Such a schedule stores job as '{}'
 * (not null): a coordinator of the release before, during a rolling upgrade, reads it as a template
 * CreateJob refuses, and records the tick failed rather than failing its pass.
 */
ALTER TABLE schedules ADD COLUMN workflow jsonb, ADD COLUMN last_workflow_id uuid;
ALTER TABLE schedule_ticks ADD COLUMN workflow_id uuid;

/*
 * The statement that changes a job's status to or from final also resolves the jobs after it: a
 * thin trigger function owned by this migration, which never changes, calls the one whose text
 * lives in migrations/functions/leasehold_job_status_changed.sql (resolved when it runs, so the
 * file may come after this migration). Only for a job that others wait on or that is a workflow's
 * node. Named to fire after jobs_status_events, so a job's own status event comes first.
 */
CREATE FUNCTION leasehold_job_status_hook() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM leasehold_job_status_changed(OLD, NEW);
  RETURN NULL;
END $$;

CREATE TRIGGER jobs_status_wake_dependents AFTER UPDATE OF status ON jobs
  FOR EACH ROW WHEN ((NEW.dependents OR NEW.workflow_id IS NOT NULL) AND OLD.status IS DISTINCT FROM NEW.status)
  EXECUTE FUNCTION leasehold_job_status_hook();

-- Down Migration

/*
 * The release before has no dependencies: a job still waiting could never run there, so it is
 * cancelled (with its waiting tasks), and task_status is made again without 'waiting' (an enum
 * value cannot be dropped), with the column, its default and everything on it as they were.
 */
DROP TRIGGER jobs_status_wake_dependents ON jobs;
DROP FUNCTION leasehold_job_status_hook();
-- The functions of this release's files that the release before has no file for (its jobs
-- parameters would also hold the jobs table).
DROP FUNCTION IF EXISTS leasehold_job_status_changed(jobs, jobs);
DROP FUNCTION IF EXISTS leasehold_promote_jobs(uuid[], boolean);
UPDATE tasks SET status = 'cancelled', completed_at = now() WHERE status = 'waiting';
UPDATE jobs SET status = 'cancelled', completed_at = now(), updated_at = now(),
  cancel_reason = 'its parents were dropped by a rollback of the dependencies migration'
WHERE status = 'pending' AND waiting_on > 0;
DROP TABLE job_dependencies;
-- The release before cannot fire a schedule of workflows: such schedules go with the feature.
DELETE FROM schedules WHERE workflow IS NOT NULL;
ALTER TABLE schedule_ticks DROP COLUMN workflow_id;
ALTER TABLE schedules DROP COLUMN last_workflow_id, DROP COLUMN workflow;
DROP INDEX jobs_workflow_node_idx;
ALTER TABLE jobs
  DROP COLUMN workflow_node,
  DROP COLUMN workflow_id,
  DROP COLUMN dependents,
  DROP COLUMN waiting_on,
  DROP COLUMN dependency_policy;
DROP TABLE workflows;
DROP TYPE dependency_policy;
ALTER TABLE tasks DROP COLUMN parents;

DROP TRIGGER tasks_status_events ON tasks;
DROP INDEX tasks_job_unfinished_idx, tasks_job_failed_idx, tasks_lease_expiry_idx, tasks_claim_pending_idx, tasks_leased_key_idx;
ALTER TABLE tasks DROP CONSTRAINT tasks_completed_has_result, DROP CONSTRAINT tasks_leased_has_lease;
ALTER TABLE tasks ALTER COLUMN status DROP DEFAULT;
ALTER TYPE task_status RENAME TO task_status_with_waiting;
CREATE TYPE task_status AS ENUM ('pending', 'leased', 'completed', 'failed', 'cancelled');
ALTER TABLE tasks ALTER COLUMN status TYPE task_status USING status::text::task_status;
DROP TYPE task_status_with_waiting;
ALTER TABLE tasks ALTER COLUMN status SET DEFAULT 'pending';
ALTER TABLE tasks
  ADD CONSTRAINT tasks_completed_has_result CHECK (status <> 'completed' OR (result_uri IS NOT NULL AND result_sha256 IS NOT NULL)),
  ADD CONSTRAINT tasks_leased_has_lease CHECK (status <> 'leased' OR (lease_owner IS NOT NULL AND lease_expires_at IS NOT NULL));
CREATE INDEX tasks_job_unfinished_idx ON tasks (job_id, status) WHERE status IN ('pending', 'leased');
CREATE INDEX tasks_job_failed_idx ON tasks (job_id, chunk_index) WHERE status = 'failed';
CREATE INDEX tasks_lease_expiry_idx ON tasks (lease_expires_at) WHERE status = 'leased';
CREATE INDEX tasks_claim_pending_idx ON tasks (workload, priority DESC, fair_rank, created_at, chunk_index, run_after) WHERE status = 'pending';
CREATE INDEX tasks_leased_key_idx ON tasks (workload, concurrency_key, lease_expires_at) WHERE status = 'leased';
CREATE TRIGGER tasks_status_events AFTER UPDATE OF status, attempt ON tasks
  FOR EACH ROW WHEN ((OLD.status IS DISTINCT FROM NEW.status OR OLD.attempt IS DISTINCT FROM NEW.attempt) AND OLD.event_flip = NEW.event_flip)
  EXECUTE FUNCTION leasehold_task_status_event();
