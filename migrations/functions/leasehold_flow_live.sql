/*
 * A flow-controlled workload's live leases (unexpired), counted per concurrency key, for
 * leasehold_flow_claim_hinted. Read through tasks_leased_seq_idx from a floor this session keeps per
 * workload (docs/flow-control-claim.md, "Under a held horizon"), not from the index's start.
 *
 * Why: a lease's index entry stays until VACUUM removes it, and VACUUM removes nothing newer than the
 * oldest snapshot on the database. Under a snapshot held for minutes, a count from the start read
 * every lease the workload ever held since (24,000 heap visits a claim after two minutes at 400
 * tasks/s), where the live ones were a dozen.
 *
 * The floor: every lease is written with lease_seq = the id of its transaction (txid_current()).
 * Take a count's snapshot S, its xmin X, and the live leases it saw. A lease written by a
 * transaction that committed after S has an id of at least X (it was running at S, or began
 * after). So every lease live at any moment after S either was live in S, or has lease_seq >= X.
 * This count therefore keeps, as the next one's start, F = least(X, the (LISTED + 1)-th smallest
 * lease_seq it saw live), and the ids of the live leases it saw below F (at most LISTED: a worker
 * that holds a lease for long does not hold the floor back for everyone). The next count reads
 * lease_seq >= F through the index, those few by id, and the leases without a lease_seq (written by
 * an older release), and keeps a new floor. A floor is never wrong later, only further back than it
 * need be: leases end, and none is ever written below it. Kept in a session setting, so each
 * connection has its own, and a new one counts from the start once.
 *
 * What can still make a count long: a transaction that holds an id for minutes (one that has
 * written; a read-only snapshot has none) holds X back, and with it the floor.
 */
CREATE OR REPLACE FUNCTION leasehold_flow_live(p_workload text)
RETURNS TABLE (key text, n integer) LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  c_listed CONSTANT integer := 8;
  v_setting text := 'leasehold.flow_floor_' || to_hex(hashtext(p_workload));
  v_saved text[];
  v_floor bigint := -9223372036854775808;
  v_old uuid[] := '{}';
  v_xmin bigint;
  v_keys text[];
  v_seqs bigint[];
  v_ids uuid[];
  v_next bigint;
BEGIN
  -- workload|floor|ids: the workload's name guards against another workload of the same hash.
  v_saved := string_to_array(current_setting(v_setting, true), '|');
  IF v_saved[1] = p_workload THEN
    v_floor := v_saved[2]::bigint;
    v_old := coalesce(string_to_array(nullif(v_saved[3], ''), ',')::uuid[], '{}');
  END IF;
  -- The expiry test as `IS TRUE` (no index answers it), so only tasks_leased_seq_idx narrows these.
  SELECT coalesce(array_agg(l.key), '{}'), coalesce(array_agg(l.seq), '{}'), coalesce(array_agg(l.id), '{}'),
    txid_snapshot_xmin(txid_current_snapshot())
  INTO v_keys, v_seqs, v_ids, v_xmin
  FROM (
    SELECT t.id, t.concurrency_key AS key, t.lease_seq AS seq FROM tasks t
    WHERE t.status = 'leased' AND t.workload = p_workload AND t.lease_seq >= v_floor AND (t.lease_expires_at > now()) IS TRUE
    UNION ALL
    -- By id alone (the rest as one `IS TRUE`): a generic plan once read every lease below the floor
    -- through tasks_leased_seq_idx to find these few.
    SELECT t.id, t.concurrency_key, t.lease_seq FROM tasks t
    WHERE t.id = ANY (v_old)
      AND (t.status = 'leased' AND t.workload = p_workload AND t.lease_seq < v_floor AND t.lease_expires_at > now()) IS TRUE
    UNION ALL
    SELECT t.id, t.concurrency_key, NULL FROM tasks t
    WHERE t.status = 'leased' AND t.workload = p_workload AND t.lease_seq IS NULL AND (t.lease_expires_at > now()) IS TRUE
  ) l;
  SELECT least(v_xmin, (SELECT s FROM unnest(v_seqs) s WHERE s IS NOT NULL ORDER BY s OFFSET c_listed LIMIT 1)) INTO v_next;
  PERFORM set_config(v_setting, p_workload || '|' || v_next || '|'
    || coalesce((SELECT string_agg(u.id::text, ',') FROM unnest(v_ids, v_seqs) AS u(id, s) WHERE u.s < v_next), ''), false);
  RETURN QUERY SELECT u.k, count(*)::integer FROM unnest(v_keys) AS u(k) GROUP BY u.k;
END $$;
