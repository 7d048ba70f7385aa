-- Up Migration

-- Retention's reads (the maintenance probe and the deleting batches): finished jobs it may delete,
-- oldest first. An unsettled billable job is never deleted (it waits for SettleJob), so it is left
-- out here: through jobs_finished_idx the probe would step over every old unsettled job on each
-- maintenance pass. The predicate is the statements' own, word for word (retention.ts,
-- SETTLED_OR_UNBILLED), so the planner can prove they match it.
CREATE INDEX IF NOT EXISTS jobs_retention_idx ON jobs (completed_at)
  WHERE status IN ('completed', 'failed', 'cancelled')
    AND (settled_at IS NOT NULL OR (account IS NULL AND reserved_units IS NULL AND billing_key IS NULL));

-- Down Migration

DROP INDEX jobs_retention_idx;
