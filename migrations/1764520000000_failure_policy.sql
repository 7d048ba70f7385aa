-- Up Migration

/*
 * A job's failure policy: how many failed tasks it tolerates (max_failed_tasks) and what the
 * failure past that does (fail_fast: fails the job and cancels its unfinished tasks; continue:
 * the other tasks still run, and the job fails once all are final). A workload holds the default
 * of its jobs; a job holds its own, resolved when it is created, so a later PutWorkload does not
 * change what running jobs do. The defaults are the behaviour before this migration (fail_fast,
 * no failure tolerated). No CHECK on jobs: every statement that writes a jobs row would read it
 * back (see 1764490000000_lean_hot_path.sql); validation.ts keeps the values in range, and the
 * workloads' CHECK (a rarely written table) states the rule once.
 */
CREATE TYPE failure_policy AS ENUM ('fail_fast', 'continue');

ALTER TABLE workloads
  ADD COLUMN failure_policy failure_policy NOT NULL DEFAULT 'fail_fast',
  ADD COLUMN max_failed_tasks integer NOT NULL DEFAULT 0 CHECK (max_failed_tasks >= 0);

ALTER TABLE jobs
  ADD COLUMN failure_policy failure_policy NOT NULL DEFAULT 'fail_fast',
  ADD COLUMN max_failed_tasks integer NOT NULL DEFAULT 0;

/*
 * A failed task's job is settled after the failure commits (SETTLE_JOB): is it past its
 * max_failed_tasks, or is it done? That count reads the job's failed tasks; tasks_job_failed_idx
 * (1764470000000_inspect.sql) holds exactly them, so a job with 10,000 completed chunks costs
 * nothing extra.
 */

-- Down Migration

ALTER TABLE jobs DROP COLUMN max_failed_tasks, DROP COLUMN failure_policy;
ALTER TABLE workloads DROP COLUMN max_failed_tasks, DROP COLUMN failure_policy;
DROP TYPE failure_policy;
