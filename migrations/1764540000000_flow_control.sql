-- Up Migration

/*
 * Flow control: concurrency caps (per workload, per concurrency key), fair share between keys,
 * rate limits, pause, and worker labels, all enforced by the claim statement itself so they hold
 * across coordinators. The design, with the bounds it gives, is docs/flow-control-claim.md.
 */

-- Workload settings. `flow` says whether a claim must take the serialized path
-- (leasehold_flow_claim below); a workload without any of these keeps the plain claim.
ALTER TABLE workloads
  ADD COLUMN max_leased integer CHECK (max_leased > 0),
  ADD COLUMN max_leased_per_key integer CHECK (max_leased_per_key > 0),
  ADD COLUMN max_leases_per_second double precision CHECK (max_leases_per_second > 0),
  ADD COLUMN leases_burst integer CHECK (leases_burst >= 1),
  ADD COLUMN paused boolean NOT NULL DEFAULT false,
  -- Some key has its own cap (PutKeyLimit); set once, never cleared.
  ADD COLUMN has_key_limits boolean NOT NULL DEFAULT false,
  -- A job with a concurrency_key was created: from then on every job of the workload gets a fair
  -- rank (a job without a key is key ''), so keyed and unkeyed work share the workload in turn.
  ADD COLUMN keyed boolean NOT NULL DEFAULT false,
  ADD CONSTRAINT workloads_rate_has_burst CHECK ((max_leases_per_second IS NULL) = (leases_burst IS NULL)),
  ADD COLUMN flow boolean GENERATED ALWAYS AS (
    paused OR has_key_limits OR max_leased IS NOT NULL OR max_leased_per_key IS NOT NULL OR max_leases_per_second IS NOT NULL
  ) STORED;

-- Per-key caps that differ from the workload's max_leased_per_key (a premium tenant's key).
CREATE TABLE workload_key_limits (
  workload   text NOT NULL,
  key        text NOT NULL,
  max_leased integer NOT NULL CHECK (max_leased > 0),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (workload, key)
);

/*
 * Token buckets of rate-limited workloads, shared by every coordinator. A row of its own, not
 * columns of workloads: it changes on every claim, and CreateJob checks that a workload row is
 * unchanged (its xmin) before it inserts.
 */
CREATE TABLE workload_rate_buckets (
  workload     text PRIMARY KEY,
  tokens       double precision NOT NULL,
  refreshed_at timestamptz NOT NULL
);

-- The next fair rank of each key of a keyed workload (flow-control-claim.md, "Fair share").
CREATE TABLE flow_keys (
  workload  text NOT NULL,
  key       text NOT NULL,
  next_rank bigint NOT NULL,
  PRIMARY KEY (workload, key)
);

/*
 * Which labels workers of a workload claimed with, and when: each coordinator writes a row at most
 * every few seconds per (workload, labels), not per claim. Read only to say why a task is waiting.
 * UNLOGGED: after a crash it refills within seconds of the workers' next claims.
 */
CREATE UNLOGGED TABLE worker_sightings (
  workload text NOT NULL,
  labels   jsonb NOT NULL,
  seen_at  timestamptz NOT NULL,
  PRIMARY KEY (workload, labels)
);

ALTER TABLE jobs
  ADD COLUMN concurrency_key text NOT NULL DEFAULT '',
  ADD COLUMN required_labels jsonb;

ALTER TABLE tasks
  ADD COLUMN concurrency_key text NOT NULL DEFAULT '',
  ADD COLUMN required_labels jsonb,
  ADD COLUMN fair_rank bigint NOT NULL DEFAULT 0;

-- The claim order gains fair_rank after priority: 0 for every task of a workload that never saw
-- a key, so such a workload's order (priority, age, chunk) is exactly what it was.
DROP INDEX tasks_claim_pending_idx;
CREATE INDEX tasks_claim_pending_idx ON tasks (workload, priority DESC, fair_rank, created_at, chunk_index, run_after)
  WHERE status = 'pending';

-- Live leases per workload and key: what a capped claim counts (flow-control-claim.md, "Caps").
CREATE INDEX tasks_leased_key_idx ON tasks (workload, concurrency_key, lease_expires_at) WHERE status = 'leased';

-- The claim of flow-controlled workloads lives in migrations/functions/leasehold_flow_claim.sql,
-- applied after the versioned migrations (src/store/postgres/schema/migrate.ts).

-- Down Migration

DROP FUNCTION IF EXISTS leasehold_flow_claim(text[], integer, text, integer, jsonb);
DROP INDEX tasks_leased_key_idx;
DROP INDEX tasks_claim_pending_idx;
CREATE INDEX tasks_claim_pending_idx ON tasks (workload, priority DESC, created_at, chunk_index, run_after)
  WHERE status = 'pending';
ALTER TABLE tasks DROP COLUMN fair_rank, DROP COLUMN required_labels, DROP COLUMN concurrency_key;
ALTER TABLE jobs DROP COLUMN required_labels, DROP COLUMN concurrency_key;
DROP TABLE worker_sightings;
DROP TABLE flow_keys;
DROP TABLE workload_rate_buckets;
DROP TABLE workload_key_limits;
ALTER TABLE workloads
  DROP COLUMN flow,
  DROP CONSTRAINT workloads_rate_has_burst,
  DROP COLUMN keyed,
  DROP COLUMN has_key_limits,
  DROP COLUMN paused,
  DROP COLUMN leases_burst,
  DROP COLUMN max_leases_per_second,
  DROP COLUMN max_leased_per_key,
  DROP COLUMN max_leased;
