-- Up Migration

/*
 * The capped claim without one lock per workload while the cap is far (gates).
 *
 * Before: every claim of a capped workload took the workload's transaction-scoped advisory lock,
 * so the claims of one workload ran one at a time until their commits, on every coordinator; a
 * cap the load never reached cost 35-50% of throughput. Now each flow workload has GATES advisory
 * locks, (hash of the workload, 0 … GATES-1), and a claim either
 * - takes one or more gates with pg_try_advisory_xact_lock (the gated path, while every cap is
 *   far), each gate worth at most `unit` tasks, and leases at most
 *   cap - live - (gates it does not hold) × unit: the gates it does not hold bound what every other
 *   claim in flight can still add, however many coordinators there are; or
 * - takes all the gates, in order (the exact path: a cap near, a rate limit, or a pause), so no
 *   other claim of the workload is in flight, and leases at most cap - live, as before.
 * unit = least(100, smallest cap / (2 × GATES)), so the gated path holds while the live leases are
 * below about half the cap. The proof that no cap is passed, and the measurements:
 * docs/flow-control-claim.md ("Gates").
 */
-- The claim with gates (and p_owners, for coalesced claims) is migrations/functions/leasehold_flow_claim.sql;
-- its signature differs from the one the flow_control migration of older releases made, so that one goes.
DROP FUNCTION IF EXISTS leasehold_flow_claim(text[], integer, text, integer, jsonb);

-- Down Migration

-- The claim of the releases before this migration (their flow_control migration made it): one advisory
-- lock per workload for every capped claim. Kept here, once, for a rollback to such a release.
DROP FUNCTION IF EXISTS leasehold_flow_claim(text[], integer, text, integer, jsonb, text[]);
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
