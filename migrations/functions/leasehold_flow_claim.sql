/*
 * The claim of flow-controlled workloads as it was before the claim learned to read past a held
 * MVCC horizon: the claim statements call leasehold_flow_claim_hinted, which runs this one when
 * FLOW_CLAIM_HINTS=false (see docs/flow-control-claim.md). Every lease it writes carries lease_seq,
 * the id of its transaction, so the other's counts see it. VOLATILE, so each statement inside runs on a snapshot taken
 * after the locks it waits for were granted: it sees every lease the claimer before it committed.
 * Workloads in name order (one lock order for every claimer), each until `want` are leased.
 *
 * Gates: each flow workload has GATES advisory locks, (hash of the workload, 0 … GATES-1), and a
 * claim either
 * - takes one or more gates with pg_try_advisory_xact_lock (the gated path, while every cap is
 *   far), each gate worth at most `unit` tasks, and leases at most
 *   cap - live - (gates it does not hold) × unit: the gates it does not hold bound what every other
 *   claim in flight can still add, however many coordinators there are; or
 * - takes all the gates, in order (the exact path: a cap near, a rate limit, or a pause), so no
 *   other claim of the workload is in flight, and leases at most cap - live.
 * unit = least(100, smallest cap / (2 × GATES)), so the gated path holds while the live leases are
 * below about half the cap. The proof that no cap is passed, and the measurements: docs/flow-control-claim.md
 * ("Gates").
 *
 * A cap far away (flow-control-claim.md, "A cap far away"): a session whose last claim of the workload
 * found every cap far by its counts after the gates, less than a second ago, skips the count
 * before the gates and takes the gated path (the session setting `leasehold.flow_far_<hash>` holds
 * when, epoch seconds; '' for near). It is a hint and nothing more: the bound rests on the count
 * after the gates, so a stale hint can only make a claim lease less than it could. When every key
 * has room for the whole allowance beyond the reserve, no key can reach its cap in this claim, and
 * the plain query leases the same tasks as the per-key one. A claim that left a caller with nothing
 * records it (leasehold_slot_wanted), so the completions wake parked claims only then.
 *
 * The counts of a workload's live leases read only that workload's: the expiry test is written
 * `(lease_expires_at > now()) IS TRUE`, which no index answers, so the one index these counts can
 * narrow is tasks_leased_key_idx (workload, concurrency_key, lease_expires_at), whose workload
 * comes first. Written `lease_expires_at > now()`, the test also matched tasks_lease_expiry_idx
 * (every workload's leases, by expiry) and, on PostgreSQL 18, tasks_job_unfinished_idx (job,
 * status: every lease of every workload, by a skip scan), a count that grows with every other
 * workload's leases. The tests mean the same: `IS TRUE` of a comparison of two non-null values is
 * the comparison.
 *
 * p_owners (when given): the worker of each slot, for a claim of several callers at once (coalesced
 * claims): the n-th task this call leases goes to p_owners[n], and `slot` says which n it was.
 */
CREATE OR REPLACE FUNCTION leasehold_flow_claim(p_workloads text[], p_want integer, p_worker text, p_lease_seconds integer, p_labels jsonb,
  p_owners text[] DEFAULT NULL)
RETURNS TABLE (task tasks, fresh boolean, slot integer) LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  c_gates CONSTANT integer := 8;
  w workloads;
  v_name text;
  v_lock integer;
  v_keyed boolean;
  v_unit integer;
  v_gated boolean;
  v_may_wait boolean;
  v_held integer;
  v_first integer;
  v_need integer;
  v_reserve integer;
  v_allowance integer;
  v_scan integer;
  v_live integer;
  v_tokens double precision;
  v_taken integer;
  v_want integer := p_want;
  v_short text[] := '{}';
  v_offset integer;
  v_key_room integer;
  v_key_cap integer;
  v_all integer;
  v_far text;
BEGIN
  FOREACH v_name IN ARRAY (SELECT array_agg(n ORDER BY n) FROM unnest(p_workloads) AS n) LOOP
    EXIT WHEN v_want <= 0;
    SELECT * INTO w FROM workloads WHERE workloads.name = v_name;
    CONTINUE WHEN NOT FOUND OR w.paused OR NOT w.flow;
    v_keyed := w.max_leased_per_key IS NOT NULL OR w.has_key_limits;
    v_lock := hashtext('leasehold.flow:' || v_name);
    -- The most one gate may lease: a fraction of the smallest cap (least() passes over NULLs), so
    -- GATES × unit, all that claims in flight can add, is at most half of every cap.
    v_unit := least(w.max_leased, w.max_leased_per_key,
      CASE WHEN w.has_key_limits THEN (SELECT min(o.max_leased) FROM workload_key_limits o WHERE o.workload = v_name) END) / (2 * c_gates);
    v_unit := CASE WHEN v_unit > 100 THEN 100 ELSE v_unit END;
    /*
     * The gated path when every cap is far: the live leases (a read before any gate, only to
     * choose the path; the cap is checked again after the gates) leave room for what all the
     * gates can add, or this session's last claim of the workload found so less than a second
     * ago. A rate limit is read and written under all the gates, as before.
     */
    v_far := 'leasehold.flow_far_' || to_hex(v_lock);
    v_gated := w.max_leases_per_second IS NULL AND coalesce(v_unit, 0) >= 1
      AND (extract(epoch FROM now()) - coalesce(nullif(current_setting(v_far, true), '')::float8, 0) < 1 OR (
      (w.max_leased IS NULL OR (
        SELECT count(*) FROM (
          SELECT 1 FROM tasks t WHERE t.status = 'leased' AND t.workload = v_name AND (t.lease_expires_at > now()) IS TRUE
          LIMIT w.max_leased - c_gates * v_unit + 1) l) <= w.max_leased - c_gates * v_unit)
      AND (NOT v_keyed OR NOT EXISTS (
        SELECT 1 FROM (
          SELECT l.concurrency_key AS key, count(*) AS n FROM tasks l
          WHERE l.status = 'leased' AND l.workload = v_name AND (l.lease_expires_at > now()) IS TRUE
          GROUP BY l.concurrency_key) k
        LEFT JOIN workload_key_limits o ON o.workload = v_name AND o.key = k.key
        WHERE k.n + c_gates * v_unit > coalesce(o.max_leased, w.max_leased_per_key)))));
    /*
     * May this claim wait for a gate? Not once its transaction has written rows (a result report
     * that claims the worker's next tasks, or leases of an earlier workload): a gate's holder can
     * wait for such a transaction. FOR UPDATE SKIP LOCKED skips a row locked by a transaction in
     * flight, but when the version it saw was updated by one that has just committed, PostgreSQL
     * follows the update chain and waits for the next version's writer (XLTW_LockUpdated), skip
     * or not: a task claimed and at once reported on by its worker, whose report then waits for
     * the gate. Such a claim tries the gates and, finding them taken, leases nothing of this
     * workload; its worker's next claim, a transaction with no writes, may wait.
     */
    v_may_wait := txid_current_if_assigned() IS NULL;
    -- Gated claims in flight hold lock (hash, GATES) shared: tried, never waited for; a claim that
    -- finds it held exclusively takes the exact path.
    IF v_gated AND NOT pg_try_advisory_xact_lock_shared(v_lock, c_gates) THEN
      v_gated := false;
    END IF;
    IF v_gated THEN
      -- As many gates as the claim can use, tried from a place that differs per backend; a claim
      -- that finds every gate taken waits for one. It holds no other gate of this workload then,
      -- so it cannot be part of a deadlock with the exact path, which waits for gates in order.
      v_need := least(c_gates, (v_want + v_unit - 1) / v_unit);
      v_first := pg_backend_pid() % c_gates;
      v_held := 0;
      FOR i IN 0 .. c_gates - 1 LOOP
        EXIT WHEN v_held >= v_need;
        IF pg_try_advisory_xact_lock(v_lock, (v_first + i) % c_gates) THEN
          v_held := v_held + 1;
        END IF;
      END LOOP;
      IF v_held = 0 THEN
        IF NOT v_may_wait THEN
          v_short := v_short || v_name;
          CONTINUE;
        END IF;
        PERFORM pg_advisory_xact_lock(v_lock, v_first);
        v_held := 1;
      END IF;
      v_reserve := (c_gates - v_held) * v_unit;
    ELSE
      -- Every capped claim of this workload on the exact path, on any coordinator, passes here one
      -- at a time, and while it does no gated claim is in flight. An exact claim holding all the
      -- gates cannot wait for a transaction through an update chain (no claim of the workload
      -- commits between its gates and its snapshot), so a claim that has written may wait for the
      -- gates too, once it holds (hash, GATES) exclusively: no gated claim is in flight then, and
      -- none starts until it commits. Else it only tries them. This keeps a reached cap full
      -- under result reports that claim the next task (they take the slot they just freed).
      -- A workload whose settings allow no gated claim (a cap below 2 × GATES, a rate limit) has
      -- none in flight but for the moments after its settings changed: such a claim waits.
      IF NOT v_may_wait THEN
        v_may_wait := coalesce(v_unit, 0) < 1 OR w.max_leases_per_second IS NOT NULL
          OR pg_try_advisory_xact_lock(v_lock, c_gates);
      END IF;
      v_held := 0;
      FOR i IN 0 .. c_gates - 1 LOOP
        IF v_may_wait THEN
          PERFORM pg_advisory_xact_lock(v_lock, i);
        ELSIF NOT pg_try_advisory_xact_lock(v_lock, i) THEN
          EXIT;
        END IF;
        v_held := v_held + 1;
      END LOOP;
      IF v_held < c_gates THEN
        v_short := v_short || v_name;
        CONTINUE;
      END IF;
      v_reserve := 0;
      -- Read again after the gates: a cap changed meanwhile counts from this claim on.
      SELECT * INTO w FROM workloads WHERE workloads.name = v_name;
      CONTINUE WHEN w.paused OR NOT w.flow;
    END IF;
    v_allowance := CASE WHEN v_gated THEN least(v_want, v_held * v_unit) ELSE v_want END;
    IF w.max_leased IS NOT NULL THEN
      -- A fresh snapshot, taken after the gates were granted. Every count of live leases here reads
      -- tasks_leased_key_idx, the workload's own (see the top of the migration that added `IS TRUE`).
      SELECT count(*) INTO v_live FROM tasks t
      WHERE t.status = 'leased' AND t.workload = v_name AND (t.lease_expires_at > now()) IS TRUE;
      v_allowance := least(v_allowance, w.max_leased - v_live - v_reserve);
    END IF;
    IF w.max_leases_per_second IS NOT NULL THEN
      INSERT INTO workload_rate_buckets AS b (workload, tokens, refreshed_at) VALUES (v_name, w.leases_burst, now())
      ON CONFLICT (workload) DO UPDATE
        SET tokens = least(w.leases_burst::float8, b.tokens + extract(epoch FROM now() - b.refreshed_at)::float8 * w.max_leases_per_second),
            refreshed_at = now()
      RETURNING b.tokens INTO v_tokens;
      v_allowance := least(v_allowance, floor(v_tokens)::integer);
    END IF;
    IF v_keyed AND coalesce(v_unit, 0) >= 1 THEN
      -- No key holds more than all the workload's live leases, and none has a cap below the
      -- smallest: while that cap less them is at least GATES × unit, it is the least room of any
      -- key, found by a plain count (the workload cap's, or one that stops past that point).
      v_key_cap := least(w.max_leased_per_key,
        CASE WHEN w.has_key_limits THEN (SELECT min(o.max_leased) FROM workload_key_limits o WHERE o.workload = v_name) END);
      v_all := v_live;
      IF v_all IS NULL THEN
        SELECT count(*) INTO v_all FROM (
          SELECT 1 FROM tasks t WHERE t.status = 'leased' AND t.workload = v_name AND (t.lease_expires_at > now()) IS TRUE
          LIMIT v_key_cap - c_gates * v_unit + 1) l;
      END IF;
      IF v_all <= v_key_cap - c_gates * v_unit THEN
        v_key_room := v_key_cap - v_all;
      ELSE
        -- Else the least room of any key by its count: of a key with live leases, its cap less
        -- them; of any other, its cap (the smallest override, or the default).
        SELECT least(
          (SELECT min(coalesce(o.max_leased, w.max_leased_per_key) - k.n) FROM (
            SELECT l.concurrency_key AS key, count(*)::integer AS n FROM tasks l
            WHERE l.status = 'leased' AND l.workload = v_name AND (l.lease_expires_at > now()) IS TRUE
            GROUP BY l.concurrency_key) k
           LEFT JOIN workload_key_limits o ON o.workload = v_name AND o.key = k.key),
          (SELECT min(o.max_leased) FROM workload_key_limits o WHERE o.workload = v_name),
          w.max_leased_per_key) INTO v_key_room;
      END IF;
      -- Every key has room for the whole allowance beyond the reserve: no key can reach its cap in
      -- this claim, so the per-key query would lease what the plain one does (below).
      IF v_key_room - v_reserve >= v_allowance THEN
        v_keyed := false;
      END IF;
    END IF;
    IF w.max_leases_per_second IS NULL AND coalesce(v_unit, 0) >= 1 THEN
      -- What the next claim of this workload on this session may skip the first count on: every
      -- cap far, by the counts just taken after the gates.
      PERFORM set_config(v_far, CASE WHEN (w.max_leased IS NULL OR v_live + c_gates * v_unit <= w.max_leased)
        AND (v_key_room IS NULL OR v_key_room >= c_gates * v_unit) THEN extract(epoch FROM now())::text ELSE '' END, false);
    END IF;
    IF v_allowance <= 0 THEN
      v_short := v_short || v_name;
      CONTINUE;
    END IF;
    -- Slots before this workload's tasks: those the earlier workloads of this call took.
    v_offset := p_want - v_want;
    IF NOT v_keyed THEN
      -- No per-key caps: the plain claim's two arms and nothing else (the keyed query below costs
      -- a count per key, a window and two sorts more per claim).
      RETURN QUERY
      WITH expired AS (
        SELECT c.id, c.priority, c.fair_rank, c.created_at, c.chunk_index, 0 AS arm
        FROM tasks c
        WHERE c.status = 'leased' AND c.workload = v_name AND c.lease_expires_at <= now() AND c.attempt < c.max_attempts
          AND (c.required_labels IS NULL OR c.required_labels <@ p_labels)
        ORDER BY c.lease_expires_at
        LIMIT v_allowance
        FOR UPDATE SKIP LOCKED
      ), pending AS (
        SELECT c.id, c.priority, c.fair_rank, c.created_at, c.chunk_index, 1 AS arm
        FROM tasks c
        WHERE c.status = 'pending' AND c.workload = v_name AND c.run_after <= now()
          AND (c.required_labels IS NULL OR c.required_labels <@ p_labels)
        ORDER BY c.priority DESC, c.fair_rank, c.created_at, c.chunk_index
        LIMIT v_allowance
        FOR UPDATE SKIP LOCKED
      ), picked AS (
        SELECT c.id, c.arm, row_number() OVER (ORDER BY c.arm, c.priority DESC, c.fair_rank, c.created_at, c.chunk_index)::integer AS rn
        FROM (SELECT * FROM expired UNION ALL SELECT * FROM pending) c
        ORDER BY c.arm, c.priority DESC, c.fair_rank, c.created_at, c.chunk_index
        LIMIT v_allowance
      ), claimed AS (
        UPDATE tasks t
        SET status = 'leased',
            attempt = t.attempt + 1,
            lease_owner = coalesce(p_owners[v_offset + p.rn], p_worker),
            lease_expires_at = now() + make_interval(secs => coalesce(p_lease_seconds, w.lease_seconds)),
            lease_seq = txid_current(),
            started_at = coalesce(t.started_at, now()),
            version = t.version + 1,
            event_flip = NOT t.event_flip
        FROM picked p
        WHERE t.id = p.id
        RETURNING t, p.arm = 1, v_offset + p.rn
      )
      SELECT * FROM claimed;
      GET DIAGNOSTICS v_taken = ROW_COUNT;
      IF v_taken < v_want THEN
        v_short := v_short || v_name;
      END IF;
      v_want := v_want - v_taken;
      IF w.max_leases_per_second IS NOT NULL AND v_taken > 0 THEN
        UPDATE workload_rate_buckets b SET tokens = b.tokens - v_taken WHERE b.workload = v_name;
      END IF;
      CONTINUE;
    END IF;
    -- With per-key caps a candidate of a key with no room left is passed over: read a few more.
    v_scan := v_allowance * 4 + 16;
    RETURN QUERY
    WITH live_keys AS (
      SELECT l.concurrency_key AS key, count(*)::integer AS n FROM tasks l
      WHERE l.status = 'leased' AND l.workload = v_name AND (l.lease_expires_at > now()) IS TRUE
        AND v_keyed
      GROUP BY l.concurrency_key
    ), room AS (
      -- A key's room: its cap less its live leases and what gated claims in flight may add to it.
      SELECT k.key, coalesce(o.max_leased, w.max_leased_per_key) - k.n - v_reserve AS left_
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
      SELECT r.id, r.arm, row_number() OVER (ORDER BY r.arm, r.priority DESC, r.fair_rank, r.created_at, r.chunk_index)::integer AS rn
      FROM ranked r
      LEFT JOIN room ON room.key = r.concurrency_key
      LEFT JOIN workload_key_limits o ON o.workload = v_name AND o.key = r.concurrency_key
      WHERE r.nth <= coalesce(room.left_, coalesce(o.max_leased, w.max_leased_per_key) - v_reserve, r.nth)
      ORDER BY r.arm, r.priority DESC, r.fair_rank, r.created_at, r.chunk_index
      LIMIT v_allowance
    ), claimed AS (
      UPDATE tasks t
      SET status = 'leased',
          attempt = t.attempt + 1,
          lease_owner = coalesce(p_owners[v_offset + p.rn], p_worker),
          lease_expires_at = now() + make_interval(secs => coalesce(p_lease_seconds, w.lease_seconds)),
          lease_seq = txid_current(),
          started_at = coalesce(t.started_at, now()),
          version = t.version + 1,
          event_flip = NOT t.event_flip
      FROM picked p
      WHERE t.id = p.id
      RETURNING t, p.arm = 1, v_offset + p.rn
    )
    SELECT * FROM claimed;
    GET DIAGNOSTICS v_taken = ROW_COUNT;
    IF v_taken < v_want THEN
      v_short := v_short || v_name;
    END IF;
    v_want := v_want - v_taken;
    IF w.max_leases_per_second IS NOT NULL AND v_taken > 0 THEN
      UPDATE workload_rate_buckets b SET tokens = b.tokens - v_taken WHERE b.workload = v_name;
    END IF;
  END LOOP;
  -- A caller that got nothing may park until a slot frees: record it for the workloads that went
  -- short (the statements that free slots wake parked claims only then). One served in part does
  -- not park, so a claim cut short by the gates alone, its callers served, records nothing.
  IF cardinality(v_short) > 0 AND (
    CASE WHEN p_owners IS NULL THEN v_want = p_want
    ELSE EXISTS (SELECT 1 FROM unnest(p_owners[p_want - v_want + 1:]) o WHERE o <> ALL (coalesce(p_owners[:p_want - v_want], '{}')))
    END) THEN
    PERFORM leasehold_slot_wanted(n) FROM unnest(v_short) AS n;
  END IF;
END $$;
