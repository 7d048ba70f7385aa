-- Up Migration

CREATE TYPE job_status AS ENUM ('pending', 'running', 'completed', 'failed', 'cancelled');
CREATE TYPE task_status AS ENUM ('pending', 'leased', 'completed', 'failed', 'cancelled');

CREATE TABLE workloads (
  name              text PRIMARY KEY CHECK (name ~ '^[a-z][a-z0-9_-]{0,62}$'),
  max_attempts      integer NOT NULL CHECK (max_attempts > 0),
  lease_seconds     integer NOT NULL CHECK (lease_seconds > 0),
  parameters_schema jsonb,
  created_at        timestamptz NOT NULL DEFAULT now(),
  updated_at        timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE jobs (
  id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  workload         text NOT NULL REFERENCES workloads (name),
  input_uri        text NOT NULL DEFAULT '',
  input_sha256     text CHECK (input_sha256 ~ '^[0-9a-f]{64}$'),
  parameters       jsonb NOT NULL DEFAULT '{}',
  status           job_status NOT NULL DEFAULT 'pending',
  priority         integer NOT NULL DEFAULT 0,
  idempotency_key  text UNIQUE,
  -- sha256 of the normalised CreateJob request, so a replay with the same key can be told from a conflict.
  request_sha256   text,
  traceparent      text,
  cancel_reason    text,
  created_at       timestamptz NOT NULL DEFAULT now(),
  updated_at       timestamptz NOT NULL DEFAULT now(),
  completed_at     timestamptz
);

-- Unfinished jobs by status: the maintenance sweep's `status = 'running'`, and the claim's
-- `status = 'pending' AND id = ANY(...)` as one index condition.
CREATE INDEX jobs_unfinished_idx ON jobs (status, id) WHERE status IN ('pending', 'running');

CREATE TABLE tasks (
  id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  job_id           uuid NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
  chunk_index      integer NOT NULL CHECK (chunk_index >= 0),
  workload         text NOT NULL REFERENCES workloads (name),
  input_uri        text NOT NULL,
  input_sha256     text NOT NULL CHECK (input_sha256 ~ '^[0-9a-f]{64}$'),
  parameters       jsonb NOT NULL DEFAULT '{}',
  status           task_status NOT NULL DEFAULT 'pending',
  attempt          integer NOT NULL DEFAULT 0 CHECK (attempt >= 0),
  max_attempts     integer NOT NULL CHECK (max_attempts > 0),
  priority         integer NOT NULL DEFAULT 0,
  lease_owner      text,
  lease_expires_at timestamptz,
  result_uri       text,
  result_sha256    text CHECK (result_sha256 ~ '^[0-9a-f]{64}$'),
  metrics          jsonb,
  error_code       text,
  error_message    text,
  created_at       timestamptz NOT NULL DEFAULT now(),
  started_at       timestamptz,
  completed_at     timestamptz,
  run_after        timestamptz NOT NULL DEFAULT now(),
  version          integer NOT NULL DEFAULT 0,
  traceparent      text,
  -- Also the (job_id) index of the spec: job_id leads it, and it orders results by chunk for the stitcher.
  CONSTRAINT tasks_job_chunk_key UNIQUE (job_id, chunk_index),
  CONSTRAINT tasks_attempt_within_max CHECK (attempt <= max_attempts),
  CONSTRAINT tasks_completed_has_result CHECK (status <> 'completed' OR (result_uri IS NOT NULL AND result_sha256 IS NOT NULL)),
  CONSTRAINT tasks_leased_has_lease CHECK (status <> 'leased' OR (lease_owner IS NOT NULL AND lease_expires_at IS NOT NULL))
);

-- The spec's (status, lease_expires_at, created_at) index, over unfinished tasks only: it serves
-- the reaper's and the claim's `status = 'leased' AND lease_expires_at <= now()` range scans, and
-- finished rows (the bulk of the table) neither bloat it nor pay for it when they are written.
CREATE INDEX tasks_status_lease_created_idx ON tasks (status, lease_expires_at, created_at)
  WHERE status IN ('pending', 'leased');

-- Serves the claim: for one workload, an index-ordered top-N over pending work in
-- claim order, so a deep backlog (or a million finished rows) costs nothing extra.
-- Partial, so finished rows are not in it at all.
CREATE INDEX tasks_claim_pending_idx ON tasks (workload, priority DESC, created_at, chunk_index)
  WHERE status = 'pending';

-- Is anything of this job still unfinished (or still pending)? Answered per job without reading
-- its completed chunks; status is in the key so `job_id = $1 AND status = 'pending'` is one index
-- condition, which keeps the planner off a sequential scan when most of the table is pending.
CREATE INDEX tasks_job_unfinished_idx ON tasks (job_id, status)
  WHERE status IN ('pending', 'leased');

-- Down Migration

DROP TABLE tasks;
DROP TABLE jobs;
DROP TABLE workloads;
DROP TYPE task_status;
DROP TYPE job_status;
