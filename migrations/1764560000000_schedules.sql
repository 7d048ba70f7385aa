-- Up Migration

/*
 * Periodic schedules (docs/schedules.md). Every coordinator runs the scheduler: each pass takes the
 * due schedules through schedules_due_idx with FOR UPDATE SKIP LOCKED, creates their jobs and moves
 * next_fire_at on in the same transaction, so a pass costs O(schedules due), not O(schedules).
 */
CREATE TABLE schedules (
  name          text PRIMARY KEY,
  cron          text NOT NULL,
  timezone      text NOT NULL,
  -- The CreateJob request made on each tick, as the queue's CreateJobInput (validated at PutSchedule).
  job           jsonb NOT NULL,
  overlap       text NOT NULL CHECK (overlap IN ('allow', 'skip')),
  catch_up      text NOT NULL CHECK (catch_up IN ('skip', 'one', 'all')),
  max_catch_up  integer NOT NULL CHECK (max_catch_up >= 1),
  paused        boolean NOT NULL DEFAULT false,
  -- The next tick to handle; null when the expression matches no later time.
  next_fire_at  timestamptz,
  last_fire_at  timestamptz,
  last_job_id   uuid,
  created_at    timestamptz NOT NULL DEFAULT now(),
  updated_at    timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX schedules_due_idx ON schedules (next_fire_at) WHERE NOT paused AND next_fire_at IS NOT NULL;

/*
 * One row per handled tick: the key that makes each tick create at most one job across all
 * coordinators, inserted in the transaction that creates the job (or records the tick skipped).
 * Pruned by the scheduler after a day; deleted with its schedule.
 */
CREATE TABLE schedule_ticks (
  schedule_name text NOT NULL REFERENCES schedules (name) ON DELETE CASCADE,
  fire_at       timestamptz NOT NULL,
  -- fired: job_id is its job; skipped: overlap or catch-up; failed: the template no longer passed CreateJob.
  outcome       text NOT NULL CHECK (outcome IN ('fired', 'skipped', 'failed')),
  job_id        uuid,
  detail        text,
  created_at    timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (schedule_name, fire_at)
);

-- The schedule and tick a job was created for (ListJobs filters by schedule).
ALTER TABLE jobs ADD COLUMN schedule_name text, ADD COLUMN schedule_fire_at timestamptz;
CREATE INDEX jobs_schedule_created_idx ON jobs (schedule_name, created_at DESC, id DESC) WHERE schedule_name IS NOT NULL;

-- Down Migration

DROP INDEX jobs_schedule_created_idx;
ALTER TABLE jobs DROP COLUMN schedule_fire_at, DROP COLUMN schedule_name;
DROP TABLE schedule_ticks;
DROP TABLE schedules;
