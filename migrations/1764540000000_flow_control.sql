-- Up Migration

/*
 * Flow control: concurrency caps (per workload, per concurrency key), fair share between keys,
 * rate limits, pause, and worker labels, all enforced by the claim statement itself so they hold
 * across coordinators. The design, with the bounds it gives, is src/store/postgres/flow-control.md.
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

-- The next fair rank of each key of a keyed workload (flow-control.md, "Fair share").
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

-- Live leases per workload and key: what a capped claim counts (flow-control.md, "Caps").
CREATE INDEX tasks_leased_key_idx ON tasks (workload, concurrency_key, lease_expires_at) WHERE status = 'leased';

/*
 * The claim of flow-controlled workloads (the claim statement calls it for those only; see
 * flow-control.md). VOLATILE, so each statement inside runs on a snapshot taken after the
 * advisory lock was granted: it sees every lease the claimer before it committed.
 * Workloads in name order (one lock order for every claimer), each until `want` are leased.
 */
CREATE FUNCTION leasehold_flow_claim(p_workloads text[], p_want integer, p_worker text, p_lease_seconds integer, p_labels jsonb)
RETURNS TABLE (task tasks, fresh boolean) LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  w workloads;
  v_name text;
  v_allowance integer;
  v_scan integer;
  v_live integer;
  v_tokens double precision;
  v_taken integer;
  v_want integer := p_want;
BEGIN
  FOREACH v_name IN ARRAY (SELECT array_agg(n ORDER BY n) FROM unnest(p_workloads) AS n) LOOP
    EXIT WHEN v_want <= 0;
    SELECT * INTO w FROM workloads WHERE workloads.name = v_name;
    CONTINUE WHEN NOT FOUND OR w.paused OR NOT w.flow;
    -- Every capped claim of this workload, on any coordinator, passes here one at a time.
    PERFORM pg_advisory_xact_lock(hashtextextended('leasehold.flow:' || v_name, 0));
    -- Read again after the lock: a cap changed meanwhile counts from this claim on.
    SELECT * INTO w FROM workloads WHERE workloads.name = v_name;
    CONTINUE WHEN w.paused OR NOT w.flow;
    v_allowance := v_want;
    IF w.max_leased IS NOT NULL THEN
      SELECT count(*) INTO v_live FROM tasks t
      WHERE t.status = 'leased' AND t.workload = v_name AND t.lease_expires_at > now();
      v_allowance := least(v_allowance, w.max_leased - v_live);
    END IF;
    IF w.max_leases_per_second IS NOT NULL THEN
      INSERT INTO workload_rate_buckets AS b (workload, tokens, refreshed_at) VALUES (v_name, w.leases_burst, now())
      ON CONFLICT (workload) DO UPDATE
        SET tokens = least(w.leases_burst::float8, b.tokens + extract(epoch FROM now() - b.refreshed_at)::float8 * w.max_leases_per_second),
            refreshed_at = now()
      RETURNING b.tokens INTO v_tokens;
      v_allowance := least(v_allowance, floor(v_tokens)::integer);
    END IF;
    CONTINUE WHEN v_allowance <= 0;
    -- With per-key caps a candidate of a key with no room left is passed over: read a few more.
    v_scan := CASE WHEN w.max_leased_per_key IS NULL AND NOT w.has_key_limits THEN v_allowance ELSE v_allowance * 4 + 16 END;
    RETURN QUERY
    WITH live_keys AS (
      SELECT l.concurrency_key AS key, count(*)::integer AS n FROM tasks l
      WHERE l.status = 'leased' AND l.workload = v_name AND l.lease_expires_at > now()
        AND (w.max_leased_per_key IS NOT NULL OR w.has_key_limits)
      GROUP BY l.concurrency_key
    ), room AS (
      SELECT k.key, coalesce(o.max_leased, w.max_leased_per_key) - k.n AS left_
      FROM live_keys k LEFT JOIN workload_key_limits o ON o.workload = v_name AND o.key = k.key
    ), full_keys AS (
      SELECT coalesce(array_agg(room.key), '{}') AS keys, count(*) = 0 AS none FROM room WHERE room.left_ <= 0
    ), expired AS (
      SELECT c.id, c.concurrency_key, c.priority, c.fair_rank, c.created_at, c.chunk_index, 0 AS arm
      FROM tasks c
      WHERE c.status = 'leased' AND c.workload = v_name AND c.lease_expires_at <= now() AND c.attempt < c.max_attempts
        AND (c.required_labels IS NULL OR c.required_labels <@ p_labels)
      ORDER BY c.lease_expires_at
      LIMIT v_scan
      FOR UPDATE SKIP LOCKED
    ), pending AS (
      SELECT c.id, c.concurrency_key, c.priority, c.fair_rank, c.created_at, c.chunk_index, 1 AS arm
      FROM tasks c
      WHERE c.status = 'pending' AND c.workload = v_name AND c.run_after <= now()
        AND (c.required_labels IS NULL OR c.required_labels <@ p_labels)
        -- Why the OR: the planner estimates `<> ALL (an array it cannot see)` as if the array held
        -- ten of the column's commonest values, so a workload whose tasks all share one key (''
        -- when none is given) was estimated at one pending row: it then chose to read and sort
        -- every pending task (38 ms at 30,000) over the ordered index scan that stops at the
        -- first (0.2 ms). A bare boolean sub-select is estimated at one half, which keeps the
        -- index scan; with no key full it is true and the array is not looked at.
        AND ((SELECT none FROM full_keys) OR c.concurrency_key <> ALL ((SELECT keys FROM full_keys)::text[]))
      ORDER BY c.priority DESC, c.fair_rank, c.created_at, c.chunk_index
      LIMIT v_scan
      FOR UPDATE SKIP LOCKED
    ), ranked AS (
      SELECT c.*, row_number() OVER (PARTITION BY c.concurrency_key ORDER BY c.arm, c.priority DESC, c.fair_rank, c.created_at, c.chunk_index) AS nth
      FROM (SELECT * FROM expired UNION ALL SELECT * FROM pending) c
    ), picked AS (
      SELECT r.id, r.arm FROM ranked r
      LEFT JOIN room ON room.key = r.concurrency_key
      LEFT JOIN workload_key_limits o ON o.workload = v_name AND o.key = r.concurrency_key
      WHERE r.nth <= coalesce(room.left_, o.max_leased, w.max_leased_per_key, r.nth)
      ORDER BY r.arm, r.priority DESC, r.fair_rank, r.created_at, r.chunk_index
      LIMIT v_allowance
    ), claimed AS (
      UPDATE tasks t
      SET status = 'leased',
          attempt = t.attempt + 1,
          lease_owner = p_worker,
          lease_expires_at = now() + make_interval(secs => coalesce(p_lease_seconds, w.lease_seconds)),
          started_at = coalesce(t.started_at, now()),
          version = t.version + 1,
          event_flip = NOT t.event_flip
      FROM picked p
      WHERE t.id = p.id
      RETURNING t, p.arm = 1
    )
    SELECT * FROM claimed;
    GET DIAGNOSTICS v_taken = ROW_COUNT;
    v_want := v_want - v_taken;
    IF w.max_leases_per_second IS NOT NULL AND v_taken > 0 THEN
      UPDATE workload_rate_buckets b SET tokens = b.tokens - v_taken WHERE b.workload = v_name;
    END IF;
  END LOOP;
END $$;

-- Down Migration

DROP FUNCTION leasehold_flow_claim(text[], integer, text, integer, jsonb);
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
