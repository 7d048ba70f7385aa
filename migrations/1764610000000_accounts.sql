-- Up Migration

-- Accounts and the money path: who a job belongs to, what its tasks used, and its settlement.

-- An account's tier: its quota of pending tasks (0: none) and the priority of its jobs that set none.
CREATE TABLE accounts (
  name              text PRIMARY KEY,
  max_pending_tasks integer NOT NULL DEFAULT 0 CHECK (max_pending_tasks >= 0),
  priority          integer NOT NULL DEFAULT 0,
  created_at        timestamptz NOT NULL DEFAULT now(),
  updated_at        timestamptz NOT NULL DEFAULT now()
);

-- A job's account and billing context, and its settlement once recorded. A job is billable when it
-- has an account or a billing context; only billable jobs are settled.
ALTER TABLE jobs
  ADD COLUMN account        text REFERENCES accounts (name),
  ADD COLUMN reserved_units bigint CHECK (reserved_units >= 0),
  ADD COLUMN billing_key    text,
  ADD COLUMN settlement_key text,
  ADD COLUMN settled_units  bigint CHECK (settled_units >= 0),
  ADD COLUMN settled_at     timestamptz,
  -- When the usage rollup counted the job (account_usage); NULL until then.
  ADD COLUMN rolled_up_at   timestamptz;

-- billing_key is unique per account (the jobs without an account share one namespace).
CREATE UNIQUE INDEX jobs_billing_key_idx ON jobs ((coalesce(account, '')), billing_key) WHERE billing_key IS NOT NULL;
-- ListJobs of one account, newest first.
CREATE INDEX jobs_account_idx ON jobs (account, created_at DESC, id DESC) WHERE account IS NOT NULL;
-- ListSettlements: final billable jobs not yet settled, oldest final first. Small: a job leaves it
-- when it is settled.
CREATE INDEX jobs_unsettled_idx ON jobs (completed_at, id)
  WHERE settled_at IS NULL AND status IN ('completed', 'failed', 'cancelled')
    AND (account IS NOT NULL OR reserved_units IS NOT NULL OR billing_key IS NOT NULL);
-- The usage rollup's queue: final jobs of an account it has not counted yet.
CREATE INDEX jobs_unrolled_idx ON jobs (completed_at, id)
  WHERE rolled_up_at IS NULL AND account IS NOT NULL AND status IN ('completed', 'failed', 'cancelled');

-- Usage counters ({"gpu_ms": 1200, ...}) summed over a task's accepted reports; NULL for none.
ALTER TABLE tasks ADD COLUMN usage jsonb;
-- What the attempt an event ends (a completion or a failure) reported it used; and a settlement's
-- key and units on the job's 'job_settled' event.
ALTER TABLE task_events
  ADD COLUMN usage          jsonb,
  ADD COLUMN settlement_key text,
  ADD COLUMN settled_units  bigint;

-- The rollup GetAccountUsage reads: per account, hour (of the jobs' completed_at) and workload.
CREATE TABLE account_usage (
  account         text NOT NULL REFERENCES accounts (name),
  hour            timestamptz NOT NULL,
  workload        text NOT NULL,
  jobs            bigint NOT NULL DEFAULT 0,
  tasks_completed bigint NOT NULL DEFAULT 0,
  tasks_failed    bigint NOT NULL DEFAULT 0,
  lease_seconds   double precision NOT NULL DEFAULT 0,
  usage           jsonb NOT NULL DEFAULT '{}',
  PRIMARY KEY (account, hour, workload)
);

-- Down Migration

DROP TABLE account_usage;
ALTER TABLE task_events DROP COLUMN usage, DROP COLUMN settlement_key, DROP COLUMN settled_units;
ALTER TABLE tasks DROP COLUMN usage;
DROP INDEX jobs_unrolled_idx;
DROP INDEX jobs_unsettled_idx;
DROP INDEX jobs_account_idx;
DROP INDEX jobs_billing_key_idx;
ALTER TABLE jobs
  DROP COLUMN account, DROP COLUMN reserved_units, DROP COLUMN billing_key, DROP COLUMN settlement_key,
  DROP COLUMN settled_units, DROP COLUMN settled_at, DROP COLUMN rolled_up_at;
DROP TABLE accounts;
