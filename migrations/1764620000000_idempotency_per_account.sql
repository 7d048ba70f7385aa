-- Up Migration

-- Idempotency keys are scoped to the account that sent them, as billing keys are
-- (jobs_billing_key_idx): one global key let an account learn whether another had used a key (an
-- answer of 409 rather than 201) and take a key before its owner did. The jobs without an account
-- share one namespace, so single-tenant mode is unchanged. CreateJob's ON CONFLICT DO NOTHING
-- names no target and is answered by this index as it was by the constraint; the replay's lookup
-- (SELECT_JOB_BY_IDEMPOTENCY_KEY) reads it by the same expression.
ALTER TABLE jobs DROP CONSTRAINT jobs_idempotency_key_key;
CREATE UNIQUE INDEX jobs_idempotency_key_idx ON jobs ((coalesce(account, '')), idempotency_key) WHERE idempotency_key IS NOT NULL;

-- Down Migration

-- Fails (and changes nothing) while two accounts hold jobs of one key: keys global again would
-- have to drop one of them.
DROP INDEX jobs_idempotency_key_idx;
ALTER TABLE jobs ADD CONSTRAINT jobs_idempotency_key_key UNIQUE (idempotency_key);
