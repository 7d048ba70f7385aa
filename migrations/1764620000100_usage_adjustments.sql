-- Up Migration

-- What a settlement covered: the job's usage when SettleJob recorded it (a result accepted later
-- is an adjustment, below, and never changes it).
ALTER TABLE jobs ADD COLUMN settled_usage jsonb;

-- What the usage rollup last added of the job to account_usage ([{hour, workload, jobs, tasks
-- completed and failed, lease seconds, usage}], one element per workload of its tasks), so that a
-- job counted and then changed (retried, or given a late result) is counted again as the
-- difference: the old parts subtracted, the new ones added (usage-rollup.ts).
ALTER TABLE jobs ADD COLUMN rolled_usage jsonb;

-- Usage accepted after its job was settled (a late result of a task cancelled while its lease
-- ran): an adjustment a billing service lists and settles once, as Stripe invoices late usage,
-- never a silent change to a closed settlement. Kept apart from the job (no foreign key) so that
-- retention, which deletes settled jobs, never takes an unsettled adjustment with it.
CREATE TABLE usage_adjustments (
  id             uuid PRIMARY KEY,
  job_id         uuid NOT NULL,
  task_id        uuid NOT NULL,
  attempt        integer NOT NULL,
  account        text REFERENCES accounts (name),
  workload       text NOT NULL,
  usage          jsonb NOT NULL,
  created_at     timestamptz NOT NULL DEFAULT now(),
  settlement_key text,
  settled_units  bigint CHECK (settled_units >= 0),
  settled_at     timestamptz,
  -- One adjustment per accepted late report (a task's attempt completes once).
  UNIQUE (task_id, attempt)
);
-- ListAdjustments: unsettled ones, oldest first; small, as one leaves it when it is settled.
CREATE INDEX usage_adjustments_unsettled_idx ON usage_adjustments (created_at, id) WHERE settled_at IS NULL;
-- A job's adjustments (GetJob's reconciliation, tests).
CREATE INDEX usage_adjustments_job_idx ON usage_adjustments (job_id);

-- Down Migration

DROP TABLE usage_adjustments;
ALTER TABLE jobs DROP COLUMN rolled_usage, DROP COLUMN settled_usage;
