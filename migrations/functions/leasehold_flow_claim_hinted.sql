/*
 * The claim of flow-controlled workloads as the claim statements call it: leasehold_flow_claim's
 * rules (gates, caps, the rate, pause, labels, fair share, priorities; docs/flow-control-claim.md),
 * with what it reads chosen so that a long transaction elsewhere on the database, which keeps every
 * dead row version it leaves, does not make each claim read more than the last
 * (flow-control-claim.md, "Under a held horizon"):
 *
 * - Live leases are counted by leasehold_flow_live, from a floor this session keeps, not from the
 *   start of the workload's leases: the counts after the gates, and the one before that chooses the
 *   path.
 * - The scan of pending tasks starts where the coordinator's hint says (p_hints -> '~f' -> workload:
 *   a place per priority, each a priority p, then fair rank r, creation time c in microseconds and
 *   chunk i; flow-hints.ts), not at the front of the workload. The hint is where this function said
 *   the last claims of the lane stopped: each row it returns carries, in `hint`, the place of the first pending task of its
 *   workload that the claim may have passed over and a later one could take. That is the last task
 *   it leased from pending, or one before it still pending that it did not lease: a candidate it
 *   left, a task of a key at its cap (the scan passes over those keys' tasks without reading them as
 *   candidates), or one another claim held locked (skipped; that claim may roll back, and nothing
 *   would announce it). One more index read, unlocked and bounded by that last task, finds it; so the
 *   lane needs no age to cover a rollback, and is never read again from the front but for an
 *   announcement without a head.
 *   No row from pending, no stop: the coordinator keeps what it has. The coordinator moves a hint
 *   back for every announcement that makes a task claimable, as for the plain claim. `hint` is JSON,
 *   {"s": the stop, "l": this session's floor of live leases}. p_hints -> '~l' ->
 *   workload is the furthest floor the coordinator has heard of, taken when further than this
 *   session's.
 * - The arm of expired leases is left out while the lease reaper's last probe, recent, found none
 *   (p_hints ->> '~expired' = 'false'), as in the plain claim.
 * - Per-key caps below 2 × GATES, with no workload cap or rate, take a lock per key and one gate, not
 *   every gate (flow-control-claim.md, "Keys of their own"): claims of different keys side by side.
 *   A claim left short by the keys it passed over reads once more, past them.
 * - A caller left with nothing is recorded (its completions' wakes) only when a limit held the claim
 *   back, not when there was nothing to take.
 *
 * p_hints NULL, or with '~flow' = 'off' (FLOW_CLAIM_HINTS=false): leasehold_flow_claim itself, every
 * row with a NULL hint. Every lease it writes carries lease_seq, the id of its transaction.
 */
CREATE OR REPLACE FUNCTION leasehold_flow_claim_hinted(p_workloads text[], p_want integer, p_worker text, p_lease_seconds integer,
  p_labels jsonb, p_owners text[], p_hints jsonb)
RETURNS TABLE (task tasks, fresh boolean, slot integer, hint text) LANGUAGE plpgsql VOLATILE AS $$
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
  v_near boolean;
  v_lkeys text[];
  v_lns integer[];
  v_tokens double precision;
  v_taken integer;
  v_want integer := p_want;
  v_short text[] := '{}';
  v_offset integer;
  v_key_room integer;
  v_far text;
  v_expired boolean := coalesce((p_hints ->> '~expired')::boolean, true);
  -- Where the scan of pending tasks starts: per priority band (p, r, c, i), highest first; below the
  -- last band (v_below), from the front.
  v_bp integer[];
  v_br bigint[];
  v_bc timestamptz[];
  v_bi integer[];
  v_below integer;
  v_floor_setting text;
  v_floor text;
  -- The last task leased from pending (l), the first candidate left (d), the first task of a key at its cap (k).
  v_lp integer;
  v_lr bigint;
  v_lc timestamptz;
  v_li integer;
  v_dp integer;
  v_dr bigint;
  v_dc timestamptz;
  v_di integer;
  v_full text[];
  v_rows tasks[];
  v_fresh boolean[];
  v_slots integer[];
  v_hint text;
  v_stop text;
  -- The path of keys of their own: the lock of a key, those taken, and the candidates as arrays.
  v_keylocks boolean;
  v_limited boolean;
  v_klock integer;
  v_locked text[];
  v_tried text[];
  v_taken_ids uuid[];
  v_covered integer;
  v_cid uuid[];
  v_ckey text[];
  v_carm integer[];
  v_cp integer[];
  v_cr bigint[];
  v_cc timestamptz[];
  v_ci integer[];
  -- A second pass of that path: what the first took, and the keys it leaves out.
  v_got integer;
  v_skip text[];
  v_pass_skip text[];
  v_acc_rows tasks[];
  v_acc_fresh boolean[];
  v_acc_slots integer[];
BEGIN
  IF p_hints IS NULL OR p_hints ->> '~flow' = 'off' THEN
    RETURN QUERY SELECT f.task, f.fresh, f.slot, NULL::text
      FROM leasehold_flow_claim(p_workloads, p_want, p_worker, p_lease_seconds, p_labels, p_owners) f;
    RETURN;
  END IF;
  FOREACH v_name IN ARRAY (SELECT array_agg(n ORDER BY n) FROM unnest(p_workloads) AS n) LOOP
    EXIT WHEN v_want <= 0;
    SELECT * INTO w FROM workloads WHERE workloads.name = v_name;
    CONTINUE WHEN NOT FOUND OR w.paused OR NOT w.flow;
    v_keyed := w.max_leased_per_key IS NOT NULL OR w.has_key_limits;
    v_lock := hashtext('leasehold.flow:' || v_name);
    -- The floor of the workload's live leases the coordinator knows (another session's count found it),
    -- when it is further on than this session's: leasehold_flow_live counts from it.
    v_floor_setting := 'leasehold.flow_floor_' || to_hex(hashtext(v_name));
    v_floor := p_hints -> '~l' ->> v_name;
    IF v_floor IS NOT NULL AND coalesce(split_part(current_setting(v_floor_setting, true), '|', 1) <> v_name
      OR split_part(current_setting(v_floor_setting, true), '|', 2)::bigint < split_part(v_floor, '|', 1)::bigint, true) THEN
      PERFORM set_config(v_floor_setting, v_name || '|' || v_floor, false);
    END IF;
    -- The most one gate may lease (leasehold_flow_claim.sql, "Gates").
    v_unit := least(w.max_leased, w.max_leased_per_key,
      CASE WHEN w.has_key_limits THEN (SELECT min(o.max_leased) FROM workload_key_limits o WHERE o.workload = v_name) END) / (2 * c_gates);
    v_unit := CASE WHEN v_unit > 100 THEN 100 ELSE v_unit END;
    -- The gated path when every cap is far, by a count before any gate (only to choose the path) or
    -- this session's last claim of the workload less than a second ago.
    v_far := 'leasehold.flow_far_' || to_hex(v_lock);
    v_gated := w.max_leases_per_second IS NULL AND coalesce(v_unit, 0) >= 1;
    IF v_gated AND extract(epoch FROM now()) - coalesce(nullif(current_setting(v_far, true), '')::float8, 0) >= 1 THEN
      SELECT coalesce(sum(l.n), 0), coalesce(bool_or(l.n + c_gates * v_unit > coalesce(o.max_leased, w.max_leased_per_key)), false)
      INTO v_live, v_near
      FROM leasehold_flow_live(v_name) l LEFT JOIN workload_key_limits o ON o.workload = v_name AND o.key = l.key;
      v_gated := (w.max_leased IS NULL OR v_live <= w.max_leased - c_gates * v_unit) AND NOT (v_keyed AND v_near);
    END IF;
    -- May this claim wait for a gate? Not once its transaction has written rows (leasehold_flow_claim.sql).
    v_may_wait := txid_current_if_assigned() IS NULL;
    -- Where the scan starts: the lane's bands, one per priority it knows, each from its place; every
    -- priority above the last band that has no band of its own holds nothing this lane may take.
    SELECT coalesce(array_agg(b.p ORDER BY b.p DESC), '{}'), coalesce(array_agg(b.r ORDER BY b.p DESC), '{}'),
      coalesce(array_agg(b.c ORDER BY b.p DESC), '{}'), coalesce(array_agg(b.i ORDER BY b.p DESC), '{}'), coalesce(min(b.p), 2147483647)
    INTO v_bp, v_br, v_bc, v_bi, v_below
    FROM (
      SELECT (e ->> 'p')::integer AS p, (e ->> 'r')::bigint AS r,
        CASE WHEN e ->> 'c' = 'Infinity' THEN 'infinity'::timestamptz
          ELSE 'epoch'::timestamptz + (e ->> 'c')::bigint * interval '1 microsecond' END AS c,
        (e ->> 'i')::integer AS i
      FROM jsonb_array_elements(coalesce(p_hints -> '~f' -> v_name, '[]')) e) b;
    v_offset := p_want - v_want;
    v_full := '{}';
    v_dp := NULL;
    /*
     * Per-key caps below 2 × GATES (so no gated claim), and no workload cap or rate: each key's cap is
     * kept by a lock of its own, not by every gate (flow-control-claim.md, "Keys of their own"). The
     * claim holds one gate, which keeps it apart from a claim on the exact path (an older release's, or
     * FLOW_CLAIM_HINTS=false: it holds them all), reads and locks its candidates, tries the locks of
     * their keys in claim order (never waits for one), counts the live leases on a snapshot taken
     * after those locks, and leases only tasks of keys it holds, within their room. Two claims of
     * different keys run side by side; two of one key take turns, as every claim of the workload did.
     */
    v_keylocks := v_keyed AND coalesce(v_unit, 0) < 1 AND w.max_leased IS NULL AND w.max_leases_per_second IS NULL;
    IF v_keylocks THEN
      v_first := pg_backend_pid() % c_gates;
      v_held := 0;
      FOR i IN 0 .. c_gates - 1 LOOP
        IF pg_try_advisory_xact_lock(v_lock, (v_first + i) % c_gates) THEN
          v_held := 1;
          EXIT;
        END IF;
      END LOOP;
      IF v_held = 0 THEN
        -- It holds no gate of the workload while it waits: no cycle with the exact path, which waits in order.
        IF NOT v_may_wait THEN
          v_short := v_short || v_name;
          CONTINUE;
        END IF;
        PERFORM pg_advisory_xact_lock(v_lock, v_first);
      END IF;
      -- Read again after the gate: settings that no longer allow this path wait for the next claim.
      SELECT * INTO w FROM workloads WHERE workloads.name = v_name;
      CONTINUE WHEN w.paused OR NOT w.flow;
      IF NOT ((w.max_leased_per_key IS NOT NULL OR w.has_key_limits) AND w.max_leased IS NULL AND w.max_leases_per_second IS NULL
        AND coalesce(least(w.max_leased_per_key,
          CASE WHEN w.has_key_limits THEN (SELECT min(o.max_leased) FROM workload_key_limits o WHERE o.workload = v_name) END) / (2 * c_gates), 0) < 1) THEN
        v_short := v_short || v_name;
        CONTINUE;
      END IF;
      v_allowance := v_want;
      v_klock := hashtext('leasehold.key:' || v_name);
      v_tried := '{}';
      v_skip := '{}';
      v_got := 0;
      v_acc_rows := '{}';
      v_acc_fresh := '{}';
      v_acc_slots := '{}';
      v_lp := NULL;
      v_dp := NULL;
      /*
       * At most two passes. The front of a priority is often one key's job (fair share interleaves
       * keys of one priority only), so the first pass's candidates may all be of a key with room for
       * one more, or whose lock another claim holds: it leases less than it wants, and each caller
       * left with nothing came back with a ClaimTasks (16% of result reports' claims in
       * bench:horizon's keyed shape). The second pass leaves every key the first tried out of its
       * scan and its leases, and reads past them, to the next keys and priorities: its count need not
       * see the first pass's leases, which it might not (leasehold_flow_live counts below the
       * snapshot's xmax, and this transaction's id, not yet ended, may be at or past it).
       */
      FOR v_pass IN 1 .. 2 LOOP
        -- Candidates are locked as they are read (each lock a WAL record): a few more than it wants, for
        -- those of keys near their cap or in another claim's hands, not 4 × want + 16 as below.
        v_scan := (v_allowance - v_got) * 2 + 4;
        -- In one statement (each costs its call): the keys at their cap by a count before their locks
        -- (only to leave their tasks out of the scan), and the candidates in claim order, locked as
        -- they are read (SKIP LOCKED): read unlocked, the front of the queue was mostly tasks that claims
        -- side by side had just leased, and a claim found nothing it could still take.
        WITH full_ AS (
          SELECT coalesce(array_agg(l.key), '{}') || v_skip AS keys, count(*) = 0 AND cardinality(v_skip) = 0 AS none
          FROM leasehold_flow_live(v_name) l LEFT JOIN workload_key_limits o ON o.workload = v_name AND o.key = l.key
          WHERE coalesce(o.max_leased, w.max_leased_per_key) - l.n <= 0
        ), cand AS (
          SELECT * FROM (
            SELECT c.id, c.concurrency_key, c.priority, c.fair_rank, c.created_at, c.chunk_index, 0 AS arm
            FROM tasks c
            WHERE c.status = 'leased' AND c.workload = v_name AND c.lease_expires_at <= now() AND c.attempt < c.max_attempts AND v_expired
              AND (c.required_labels IS NULL OR c.required_labels <@ p_labels)
            ORDER BY c.lease_expires_at
            LIMIT v_scan
            FOR UPDATE SKIP LOCKED) expired
          UNION ALL
          SELECT * FROM (
            SELECT * FROM (
              SELECT x.* FROM unnest(v_bp, v_br, v_bc, v_bi) AS b(p, r, c, i)
              CROSS JOIN LATERAL (
                SELECT c.id, c.concurrency_key, c.priority, c.fair_rank, c.created_at, c.chunk_index, 1 AS arm
                FROM tasks c
                WHERE c.status = 'pending' AND c.workload = v_name AND c.priority = b.p
                  AND (c.fair_rank, c.created_at, c.chunk_index) >= (b.r, b.c, b.i) AND c.run_after <= now()
                  AND (c.required_labels IS NULL OR c.required_labels <@ p_labels)
                  AND ((SELECT none FROM full_) OR c.concurrency_key <> ALL ((SELECT keys FROM full_)::text[]))
                ORDER BY c.fair_rank, c.created_at, c.chunk_index
                LIMIT v_scan
                FOR UPDATE SKIP LOCKED) x) banded
            UNION ALL
            SELECT * FROM (
              SELECT c.id, c.concurrency_key, c.priority, c.fair_rank, c.created_at, c.chunk_index, 1 AS arm
              FROM tasks c
              WHERE c.status = 'pending' AND c.workload = v_name AND c.priority < v_below AND c.run_after <= now()
                AND (c.required_labels IS NULL OR c.required_labels <@ p_labels)
                AND ((SELECT none FROM full_) OR c.concurrency_key <> ALL ((SELECT keys FROM full_)::text[]))
              ORDER BY c.priority DESC, c.fair_rank, c.created_at, c.chunk_index
              LIMIT v_scan
              FOR UPDATE SKIP LOCKED) below
            LIMIT v_scan) pending
        )
        -- The arrays in the order the arms give their rows (an Aggregate reads its input in order): the
        -- expired leases, then the pending tasks in claim order, as the scans read them. One sort each
        -- was a third of the claim's CPU (perf).
        SELECT coalesce(array_agg(c.id), '{}'), coalesce(array_agg(c.concurrency_key), '{}'), coalesce(array_agg(c.arm), '{}'),
          coalesce(array_agg(c.priority), '{}'), coalesce(array_agg(c.fair_rank), '{}'), coalesce(array_agg(c.created_at), '{}'),
          coalesce(array_agg(c.chunk_index), '{}'), (SELECT keys FROM full_)
        INTO v_cid, v_ckey, v_carm, v_cp, v_cr, v_cc, v_ci, v_full
        FROM cand c;
        -- The locks of the keys of the first candidates, in claim order, each tried once (a key another
        -- claim holds is left to it), until the keys held cover as many candidates as the claim wants:
        -- claims side by side take the keys they need, not every key near the front.
        -- This pass's keys only: a key the first pass locked stays locked, but is not this pass's.
        v_locked := '{}';
        v_covered := 0;
        FOR i IN 1 .. coalesce(cardinality(v_ckey), 0) LOOP
          EXIT WHEN v_covered >= v_allowance - v_got;
          IF v_ckey[i] = ANY (v_locked) THEN
            v_covered := v_covered + 1;
          ELSIF NOT v_ckey[i] = ANY (v_tried) THEN
            v_tried := v_tried || v_ckey[i];
            IF pg_try_advisory_xact_lock(v_klock, hashtext(v_ckey[i])) THEN
              v_locked := v_locked || v_ckey[i];
              v_covered := v_covered + 1;
            END IF;
          END IF;
        END LOOP;
        -- The live leases per key are counted inside the next statement (`live`), on a snapshot taken
        -- after those locks: every lease of a key whose lock this claim holds was written under that
        -- lock, and committed before it was let go.
        WITH live AS (
          SELECT * FROM leasehold_flow_live(v_name)
        ), cand AS (
          SELECT u.id, u.key, u.arm, u.p AS priority, u.r AS fair_rank, u.c AS created_at, u.i AS chunk_index, u.ord
          FROM unnest(v_cid, v_ckey, v_carm, v_cp, v_cr, v_cc, v_ci) WITH ORDINALITY AS u(id, key, arm, p, r, c, i, ord)
        ), judged AS (
          SELECT c.*, c.key = ANY (v_locked)
            AND row_number() OVER (PARTITION BY c.key ORDER BY c.ord) <= coalesce(coalesce(o.max_leased, w.max_leased_per_key) - coalesce(l.n, 0),
              row_number() OVER (PARTITION BY c.key ORDER BY c.ord)) AS ok
          FROM cand c
          LEFT JOIN live l ON l.key = c.key
          LEFT JOIN workload_key_limits o ON o.workload = v_name AND o.key = c.key
        ), taken AS (
          SELECT j.id, j.arm, row_number() OVER (ORDER BY j.ord)::integer AS rn FROM judged j WHERE j.ok ORDER BY j.ord LIMIT v_allowance - v_got
        ), claimed AS (
          UPDATE tasks t
          SET status = 'leased',
              attempt = t.attempt + 1,
              lease_owner = coalesce(p_owners[v_offset + v_got + p.rn], p_worker),
              lease_expires_at = now() + make_interval(secs => coalesce(p_lease_seconds, w.lease_seconds)),
              lease_seq = txid_current(),
              started_at = coalesce(t.started_at, now()),
              version = t.version + 1,
              event_flip = NOT t.event_flip
          FROM taken p
          WHERE t.id = p.id
          RETURNING t AS r, p.arm = 1 AS fresh, v_offset + v_got + p.rn AS slot
        )
        SELECT array_agg(c.r), array_agg(c.fresh), array_agg(c.slot) INTO v_rows, v_fresh, v_slots FROM claimed c;
        -- The last task leased from pending, and the first candidate from pending not leased (its key's
        -- room ran out, its key's lock was another claim's, or it came after the last one leased), from
        -- the arrays: smaller statements cost less to start (perf). Over both passes: the last leased
        -- of either, and the first pass's first left (before anything the second reads).
        FOR i IN 1 .. coalesce(cardinality(v_rows), 0) LOOP
          CONTINUE WHEN NOT v_fresh[i];
          IF v_lp IS NULL OR (v_rows[i]).priority < v_lp OR ((v_rows[i]).priority = v_lp
            AND ((v_rows[i]).fair_rank, (v_rows[i]).created_at, (v_rows[i]).chunk_index) > (v_lr, v_lc, v_li)) THEN
            v_lp := (v_rows[i]).priority;
            v_lr := (v_rows[i]).fair_rank;
            v_lc := (v_rows[i]).created_at;
            v_li := (v_rows[i]).chunk_index;
          END IF;
        END LOOP;
        v_taken_ids := ARRAY(SELECT (r).id FROM unnest(v_rows) AS r);
        -- The keys of candidates not leased whose lock it tried (their room ran out, or another claim
        -- holds them): a second pass only when there are some.
        v_pass_skip := '{}';
        FOR i IN 1 .. coalesce(cardinality(v_cid), 0) LOOP
          CONTINUE WHEN v_cid[i] = ANY (v_taken_ids);
          IF v_ckey[i] = ANY (v_tried) AND NOT v_ckey[i] = ANY (v_pass_skip) THEN
            v_pass_skip := v_pass_skip || v_ckey[i];
          END IF;
          CONTINUE WHEN v_carm[i] = 0 OR v_dp IS NOT NULL;
          v_dp := v_cp[i];
          v_dr := v_cr[i];
          v_dc := v_cc[i];
          v_di := v_ci[i];
        END LOOP;
        v_got := v_got + coalesce(cardinality(v_rows), 0);
        v_acc_rows := v_acc_rows || coalesce(v_rows, '{}');
        v_acc_fresh := v_acc_fresh || coalesce(v_fresh, '{}');
        v_acc_slots := v_acc_slots || coalesce(v_slots, '{}');
        -- Again only when it went short for keys it passed over, and its scan stopped at its bound
        -- (fewer candidates: it read every task it could take).
        EXIT WHEN v_got >= v_allowance OR cardinality(v_pass_skip) = 0
          OR coalesce(cardinality(array_positions(v_carm, 1)), 0) < v_scan;
        v_skip := v_tried;
      END LOOP;
      v_rows := CASE WHEN cardinality(v_acc_rows) > 0 THEN v_acc_rows END;
      v_fresh := v_acc_fresh;
      v_slots := v_acc_slots;
    ELSE
      IF v_gated AND NOT pg_try_advisory_xact_lock_shared(v_lock, c_gates) THEN
        v_gated := false;
      END IF;
      IF v_gated THEN
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
        -- The exact path, as in leasehold_flow_claim.sql.
        IF NOT v_may_wait THEN
          v_may_wait := coalesce(v_unit, 0) < 1 OR w.max_leases_per_second IS NOT NULL
            OR pg_try_advisory_xact_lock(v_lock, c_gates);
        END IF;
        v_held := 0;
        IF v_may_wait THEN
          -- Every gate, in order, in one statement (a statement each cost its call).
          PERFORM pg_advisory_xact_lock(v_lock, g) FROM generate_series(0, c_gates - 1) AS g;
          v_held := c_gates;
        ELSE
          FOR i IN 0 .. c_gates - 1 LOOP
            EXIT WHEN NOT pg_try_advisory_xact_lock(v_lock, i);
            v_held := v_held + 1;
          END LOOP;
        END IF;
        IF v_held < c_gates THEN
          v_short := v_short || v_name;
          CONTINUE;
        END IF;
        v_reserve := 0;
        SELECT * INTO w FROM workloads WHERE workloads.name = v_name;
        CONTINUE WHEN w.paused OR NOT w.flow;
      END IF;
      v_allowance := CASE WHEN v_gated THEN least(v_want, v_held * v_unit) ELSE v_want END;
      -- The live leases per key, on a snapshot taken after the gates were granted.
      v_live := NULL;
      v_lkeys := '{}';
      v_lns := '{}';
      IF w.max_leased IS NOT NULL OR v_keyed THEN
        SELECT coalesce(array_agg(l.key), '{}'), coalesce(array_agg(l.n), '{}'), coalesce(sum(l.n), 0)
        INTO v_lkeys, v_lns, v_live FROM leasehold_flow_live(v_name) l;
      END IF;
      IF w.max_leased IS NOT NULL THEN
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
      v_key_room := NULL;
      IF v_keyed THEN
        -- The least room of any key: of a key with live leases, its cap less them; of any other, its
        -- cap (the smallest override, or the default).
        SELECT least(
          (SELECT min(coalesce(o.max_leased, w.max_leased_per_key) - k.n) FROM unnest(v_lkeys, v_lns) AS k(key, n)
           LEFT JOIN workload_key_limits o ON o.workload = v_name AND o.key = k.key),
          (SELECT min(o.max_leased) FROM workload_key_limits o WHERE o.workload = v_name),
          w.max_leased_per_key) INTO v_key_room;
        -- Every key has room for the whole allowance beyond the reserve: no key can reach its cap in this
        -- claim, and the plain query leases what the per-key one would (on the exact path too, now that
        -- the room is exact: a cap of 4 per key and claims of a few tasks are mostly far).
        IF v_key_room - v_reserve >= v_allowance THEN
          v_keyed := false;
        END IF;
      END IF;
      IF w.max_leases_per_second IS NULL AND coalesce(v_unit, 0) >= 1 THEN
        PERFORM set_config(v_far, CASE WHEN (w.max_leased IS NULL OR v_live + c_gates * v_unit <= w.max_leased)
          AND (v_key_room IS NULL OR v_key_room >= c_gates * v_unit) THEN extract(epoch FROM now())::text ELSE '' END, false);
      END IF;
      IF v_allowance <= 0 THEN
        v_short := v_short || v_name;
        CONTINUE;
      END IF;
      IF NOT v_keyed THEN
        -- No per-key room to watch: the plain claim's two arms, the fresh one from the hint.
        WITH expired AS (
          SELECT c.id, c.priority, c.fair_rank, c.created_at, c.chunk_index, 0 AS arm
          FROM tasks c
          WHERE c.status = 'leased' AND c.workload = v_name AND c.lease_expires_at <= now() AND c.attempt < c.max_attempts AND v_expired
            AND (c.required_labels IS NULL OR c.required_labels <@ p_labels)
          ORDER BY c.lease_expires_at
          LIMIT v_allowance
          FOR UPDATE SKIP LOCKED
        ), pending AS (
          -- The bands in order (a nested loop over them, in the array's order), then below the last.
          SELECT * FROM (
            SELECT x.* FROM unnest(v_bp, v_br, v_bc, v_bi) AS b(p, r, c, i)
            CROSS JOIN LATERAL (
              SELECT c.id, c.priority, c.fair_rank, c.created_at, c.chunk_index, 1 AS arm
              FROM tasks c
              WHERE c.status = 'pending' AND c.workload = v_name AND c.priority = b.p
                AND (c.fair_rank, c.created_at, c.chunk_index) >= (b.r, b.c, b.i) AND c.run_after <= now()
                AND (c.required_labels IS NULL OR c.required_labels <@ p_labels)
              ORDER BY c.fair_rank, c.created_at, c.chunk_index
              LIMIT v_allowance
              FOR UPDATE SKIP LOCKED) x) banded
          UNION ALL
          SELECT * FROM (
            SELECT c.id, c.priority, c.fair_rank, c.created_at, c.chunk_index, 1 AS arm
            FROM tasks c
            WHERE c.status = 'pending' AND c.workload = v_name AND c.priority < v_below AND c.run_after <= now()
              AND (c.required_labels IS NULL OR c.required_labels <@ p_labels)
            ORDER BY c.priority DESC, c.fair_rank, c.created_at, c.chunk_index
            LIMIT v_allowance
            FOR UPDATE SKIP LOCKED) below
          LIMIT v_allowance
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
          RETURNING t AS r, p.arm = 1 AS fresh, v_offset + p.rn AS slot
        )
        SELECT (SELECT array_agg(c.r ORDER BY c.slot) FROM claimed c), (SELECT array_agg(c.fresh ORDER BY c.slot) FROM claimed c),
          (SELECT array_agg(c.slot ORDER BY c.slot) FROM claimed c), l.priority, l.fair_rank, l.created_at, l.chunk_index
        INTO v_rows, v_fresh, v_slots, v_lp, v_lr, v_lc, v_li
        FROM (SELECT 1) one LEFT JOIN LATERAL (
          SELECT (c.r).priority, (c.r).fair_rank, (c.r).created_at, (c.r).chunk_index FROM claimed c WHERE c.fresh
          ORDER BY (c.r).priority, (c.r).fair_rank DESC, (c.r).created_at DESC, (c.r).chunk_index DESC LIMIT 1) l ON true;
      ELSE
        -- With per-key caps a candidate of a key with no room left is passed over: read a few more.
        v_scan := v_allowance * 4 + 16;
        SELECT coalesce(array_agg(k.key), '{}') INTO v_full
        FROM unnest(v_lkeys, v_lns) AS k(key, n) LEFT JOIN workload_key_limits o ON o.workload = v_name AND o.key = k.key
        WHERE coalesce(o.max_leased, w.max_leased_per_key) - k.n - v_reserve <= 0;
        WITH room AS (
          -- A key's room: its cap less its live leases and what gated claims in flight may add to it.
          SELECT k.key, coalesce(o.max_leased, w.max_leased_per_key) - k.n - v_reserve AS left_
          FROM unnest(v_lkeys, v_lns) AS k(key, n) LEFT JOIN workload_key_limits o ON o.workload = v_name AND o.key = k.key
        ), expired AS (
          SELECT c.id, c.concurrency_key, c.priority, c.fair_rank, c.created_at, c.chunk_index, 0 AS arm
          FROM tasks c
          WHERE c.status = 'leased' AND c.workload = v_name AND c.lease_expires_at <= now() AND c.attempt < c.max_attempts AND v_expired
            AND (c.required_labels IS NULL OR c.required_labels <@ p_labels)
          ORDER BY c.lease_expires_at
          LIMIT v_scan
          FOR UPDATE SKIP LOCKED
        ), pending AS (
          -- As above, keys at their cap left out. The OR: see leasehold_flow_claim.sql (a bare boolean
          -- keeps the ordered index scan).
          SELECT * FROM (
            SELECT x.* FROM unnest(v_bp, v_br, v_bc, v_bi) AS b(p, r, c, i)
            CROSS JOIN LATERAL (
              SELECT c.id, c.concurrency_key, c.priority, c.fair_rank, c.created_at, c.chunk_index, 1 AS arm
              FROM tasks c
              WHERE c.status = 'pending' AND c.workload = v_name AND c.priority = b.p
                AND (c.fair_rank, c.created_at, c.chunk_index) >= (b.r, b.c, b.i) AND c.run_after <= now()
                AND (c.required_labels IS NULL OR c.required_labels <@ p_labels)
                AND ((SELECT cardinality(v_full) = 0) OR c.concurrency_key <> ALL ((SELECT v_full)::text[]))
              ORDER BY c.fair_rank, c.created_at, c.chunk_index
              LIMIT v_scan
              FOR UPDATE SKIP LOCKED) x) banded
          UNION ALL
          SELECT * FROM (
            SELECT c.id, c.concurrency_key, c.priority, c.fair_rank, c.created_at, c.chunk_index, 1 AS arm
            FROM tasks c
            WHERE c.status = 'pending' AND c.workload = v_name AND c.priority < v_below AND c.run_after <= now()
              AND (c.required_labels IS NULL OR c.required_labels <@ p_labels)
              AND ((SELECT cardinality(v_full) = 0) OR c.concurrency_key <> ALL ((SELECT v_full)::text[]))
            ORDER BY c.priority DESC, c.fair_rank, c.created_at, c.chunk_index
            LIMIT v_scan
            FOR UPDATE SKIP LOCKED) below
          LIMIT v_scan
        ), ranked AS (
          SELECT c.*, row_number() OVER (PARTITION BY c.concurrency_key ORDER BY c.arm, c.priority DESC, c.fair_rank, c.created_at, c.chunk_index) AS nth
          FROM (SELECT * FROM expired UNION ALL SELECT * FROM pending) c
        ), judged AS (
          SELECT r.*, r.nth <= coalesce(room.left_, coalesce(o.max_leased, w.max_leased_per_key) - v_reserve, r.nth) AS ok
          FROM ranked r
          LEFT JOIN room ON room.key = r.concurrency_key
          LEFT JOIN workload_key_limits o ON o.workload = v_name AND o.key = r.concurrency_key
        ), picked AS (
          SELECT j.id, j.arm, row_number() OVER (ORDER BY j.arm, j.priority DESC, j.fair_rank, j.created_at, j.chunk_index)::integer AS rn
          FROM judged j
          WHERE j.ok
          ORDER BY j.arm, j.priority DESC, j.fair_rank, j.created_at, j.chunk_index
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
          RETURNING t AS r, p.arm = 1 AS fresh, v_offset + p.rn AS slot
        )
        SELECT (SELECT array_agg(c.r ORDER BY c.slot) FROM claimed c), (SELECT array_agg(c.fresh ORDER BY c.slot) FROM claimed c),
          (SELECT array_agg(c.slot ORDER BY c.slot) FROM claimed c), l.priority, l.fair_rank, l.created_at, l.chunk_index,
          d.priority, d.fair_rank, d.created_at, d.chunk_index
        INTO v_rows, v_fresh, v_slots, v_lp, v_lr, v_lc, v_li, v_dp, v_dr, v_dc, v_di
        FROM (SELECT 1) one LEFT JOIN LATERAL (
          SELECT (c.r).priority, (c.r).fair_rank, (c.r).created_at, (c.r).chunk_index FROM claimed c WHERE c.fresh
          ORDER BY (c.r).priority, (c.r).fair_rank DESC, (c.r).created_at DESC, (c.r).chunk_index DESC LIMIT 1) l ON true
        LEFT JOIN LATERAL (
          SELECT j.priority, j.fair_rank, j.created_at, j.chunk_index FROM judged j WHERE j.arm = 1 AND NOT j.ok
          ORDER BY j.priority DESC, j.fair_rank, j.created_at, j.chunk_index LIMIT 1) d ON true;
      END IF;
    END IF;
    v_taken := coalesce(cardinality(v_rows), 0);
    -- Went short for a limit (a cap, a key's room or lock, the gates' share, the rate), not for want of
    -- tasks: only then may a freed slot give a parked caller something (recorded below).
    v_limited := v_allowance < v_want OR v_dp IS NOT NULL OR cardinality(v_full) > 0;
    v_hint := NULL;
    v_stop := NULL;
    IF v_lp IS NOT NULL THEN
      -- Where the lane's next claim starts: the last task leased from pending, or a task before it
      -- that this claim left (a candidate whose key's room ran out).
      IF v_dp IS NOT NULL AND (v_dp > v_lp OR (v_dp = v_lp AND (v_dr, v_dc, v_di) < (v_lr, v_lc, v_li))) THEN
        v_lp := v_dp;
        v_lr := v_dr;
        v_lc := v_dc;
        v_li := v_di;
      END IF;
      -- Or the first task still pending, from where the scan started up to there, that this claim did
      -- not lease (its own leases are no longer pending on this snapshot): a task of a key at its cap
      -- (the scan passed over them without reading them as candidates), or one another claim held
      -- locked (the scan skipped it), which that claim may yet roll back: nothing else would announce
      -- it, and a hint past it would strand it. Read unlocked, so such a task is seen; bounded at the
      -- stop, so this read stays within the stretch the scan read.
      SELECT x.priority, x.fair_rank, x.created_at, x.chunk_index INTO v_dp, v_dr, v_dc, v_di FROM (
        SELECT y.* FROM unnest(v_bp, v_br, v_bc, v_bi) AS b(p, r, c, i)
        CROSS JOIN LATERAL (
          SELECT c.priority, c.fair_rank, c.created_at, c.chunk_index FROM tasks c
          WHERE c.status = 'pending' AND c.workload = v_name AND c.priority = b.p AND b.p >= v_lp
            AND (c.fair_rank, c.created_at, c.chunk_index) >= (b.r, b.c, b.i)
            AND (c.fair_rank, c.created_at, c.chunk_index) <= (
              CASE WHEN b.p = v_lp THEN v_lr ELSE 9223372036854775807 END,
              CASE WHEN b.p = v_lp THEN v_lc ELSE 'infinity'::timestamptz END,
              CASE WHEN b.p = v_lp THEN v_li ELSE 2147483647 END)
            AND c.run_after <= now() AND (c.required_labels IS NULL OR c.required_labels <@ p_labels)
          ORDER BY c.fair_rank, c.created_at, c.chunk_index
          LIMIT 1) y
        UNION ALL
        SELECT * FROM (
          SELECT c.priority, c.fair_rank, c.created_at, c.chunk_index FROM tasks c
          WHERE c.status = 'pending' AND c.workload = v_name AND c.priority < v_below AND c.priority > v_lp AND c.run_after <= now()
            AND (c.required_labels IS NULL OR c.required_labels <@ p_labels)
          ORDER BY c.priority DESC, c.fair_rank, c.created_at, c.chunk_index
          LIMIT 1) between_
        UNION ALL
        SELECT * FROM (
          SELECT c.priority, c.fair_rank, c.created_at, c.chunk_index FROM tasks c
          WHERE c.status = 'pending' AND c.workload = v_name AND c.priority = v_lp AND v_lp < v_below
            AND (c.fair_rank, c.created_at, c.chunk_index) <= (v_lr, v_lc, v_li) AND c.run_after <= now()
            AND (c.required_labels IS NULL OR c.required_labels <@ p_labels)
          ORDER BY c.fair_rank, c.created_at, c.chunk_index
          LIMIT 1) at_stop
        LIMIT 1) x;
      IF FOUND AND v_dp IS NOT NULL AND (v_dp > v_lp OR (v_dp = v_lp AND (v_dr, v_dc, v_di) < (v_lr, v_lc, v_li))) THEN
        v_lp := v_dp;
        v_lr := v_dr;
        v_lc := v_dc;
        v_li := v_di;
      END IF;
      v_stop := v_lp || ';' || v_lr || ';' || (extract(epoch FROM v_lc) * 1000000)::bigint || ';' || v_li;
    END IF;
    -- What the coordinator learns (claim-hints.ts): where the lane's next claim starts, and this
    -- session's floor of the workload's live leases, for its other sessions.
    v_floor := nullif(substr(current_setting(v_floor_setting, true), length(v_name) + 2), '');
    IF split_part(current_setting(v_floor_setting, true), '|', 1) IS DISTINCT FROM v_name THEN
      v_floor := NULL;
    END IF;
    v_hint := json_build_object('s', v_stop, 'l', v_floor)::text;
    RETURN QUERY SELECT v_rows[i], v_fresh[i], v_slots[i], v_hint FROM generate_subscripts(v_rows, 1) AS i;
    IF v_taken < v_want AND v_limited THEN
      v_short := v_short || v_name;
    END IF;
    v_want := v_want - v_taken;
    IF w.max_leases_per_second IS NOT NULL AND v_taken > 0 THEN
      UPDATE workload_rate_buckets b SET tokens = b.tokens - v_taken WHERE b.workload = v_name;
    END IF;
  END LOOP;
  -- A caller that got nothing may park until a slot frees: record it for the workloads a limit held
  -- back (leasehold_flow_claim.sql). One that found nothing to take waits for the next job, whose
  -- CreateJob announces it: a freed slot would give it nothing, and its wake costs every completion
  -- a NOTIFY (the commit's notify lock, shared by the cluster).
  IF cardinality(v_short) > 0 AND (
    CASE WHEN p_owners IS NULL THEN v_want = p_want
    ELSE EXISTS (SELECT 1 FROM unnest(p_owners[p_want - v_want + 1:]) o WHERE o <> ALL (coalesce(p_owners[:p_want - v_want], '{}')))
    END) THEN
    PERFORM leasehold_slot_wanted(n) FROM unnest(v_short) AS n;
  END IF;
END $$;
