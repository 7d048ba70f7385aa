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
 * What it does not see: leases its own transaction wrote before it, when that transaction's id is at
 * or past the snapshot's xmax (one past the last id to end; a running transaction's own may be
 * later). So a claim counts each workload's keys once, before it writes leases of them, and a
 * second pass in the same transaction leaves the keys the first tried alone
 * (leasehold_flow_claim_hinted). After the commit the id has ended, and later counts see them.
 *
 * What can still make a count long: a transaction that holds an id for minutes (one that has
 * written; a read-only snapshot has none) holds X back, and with it the floor.
 */
CREATE OR REPLACE FUNCTION leasehold_flow_live(p_workload text)
RETURNS TABLE (key text, n integer) LANGUAGE plpgsql VOLATILE
-- A plan with a sort (of anything) only where no other is possible: the floor's range is read in
-- tasks_leased_seq_idx's order, and every other way to it needs a sort. Costs alone did not keep it:
-- the planner's counts of the lease indexes drift apart (each is set by whichever of autovacuum's
-- ANALYZE, which counts the few live leases its sample meets, and VACUUM, which skips an index it
-- need not scan, touched it last), and with a few entries counted in that index's hundreds of pages
-- and none in tasks_lease_expiry_idx's, a full scan of the latter and a sort cost 8 against 400.
-- bench:horizon's keyed shape then read ~30,000 buffers a count, in spells of seconds every time the
-- plans were made again. Session settings made inside (the floor's set_config) still persist.
SET enable_sort = off
AS $$
DECLARE
  c_listed CONSTANT integer := 8;
  v_setting text := 'leasehold.flow_floor_' || to_hex(hashtext(p_workload));
BEGIN
  -- One statement (each statement of a plpgsql function costs its call): the floor as this session
  -- keeps it (`workload|floor|ids`; the workload's name guards against another of the same hash), the
  -- count from it, the next floor kept, and the live leases per key.
  RETURN QUERY
  WITH saved AS (
    SELECT CASE WHEN s[1] = p_workload THEN s[2]::bigint ELSE '-9223372036854775808'::bigint END AS floor_,
      CASE WHEN s[1] = p_workload THEN coalesce(string_to_array(nullif(s[3], ''), ',')::uuid[], '{}') ELSE '{}' END AS old
    FROM (SELECT string_to_array(current_setting(v_setting, true), '|') AS s) x
  ), live AS (
    -- The expiry test as `IS TRUE` (no index answers it), so only tasks_leased_seq_idx narrows these.
    -- In that index's order: the planner takes every partial index of leases for as small as the few
    -- live ones (the statistics know nothing of dead entries), so a full scan of
    -- tasks_lease_expiry_idx cost as little as this range, and a generic plan chose it: every lease
    -- since the horizon was held (12,000 buffers a count). Any other index now needs a sort on top, and
    -- costs more. Bounded above by this snapshot's xmax (no lease it sees has an id past it).
    SELECT * FROM (
      SELECT t.id, t.concurrency_key AS k, t.lease_seq AS seq FROM tasks t
      WHERE t.status = 'leased' AND t.workload = p_workload AND t.lease_seq >= (SELECT floor_ FROM saved)
        AND t.lease_seq < txid_snapshot_xmax(txid_current_snapshot()) AND (t.lease_expires_at > now()) IS TRUE
      ORDER BY t.lease_seq) from_floor
    UNION ALL
    -- By id alone (the rest as one `IS TRUE`): a generic plan once read every lease below the floor
    -- through tasks_leased_seq_idx to find these few.
    SELECT t.id, t.concurrency_key, t.lease_seq FROM tasks t
    WHERE t.id = ANY ((SELECT old FROM saved)::uuid[])
      AND (t.status = 'leased' AND t.workload = p_workload AND t.lease_seq < (SELECT floor_ FROM saved)
        AND t.lease_expires_at > now()) IS TRUE
    UNION ALL
    -- Through tasks_leased_noseq_idx, empty once such leases end: a generic plan once read these with a
    -- full scan of tasks_lease_expiry_idx, every lease since the horizon was held.
    SELECT t.id, t.concurrency_key, NULL FROM tasks t
    WHERE t.status = 'leased' AND t.workload = p_workload AND t.lease_seq IS NULL AND (t.lease_expires_at > now()) IS TRUE
  ), next_ AS (
    SELECT least(txid_snapshot_xmin(txid_current_snapshot()),
      (SELECT l.seq FROM live l WHERE l.seq IS NOT NULL ORDER BY l.seq OFFSET c_listed LIMIT 1)) AS floor_
  ), noted AS (
    SELECT set_config(v_setting, p_workload || '|' || x.floor_ || '|'
      || coalesce((SELECT string_agg(l.id::text, ',') FROM live l WHERE l.seq < x.floor_), ''), false) AS s
    FROM next_ x
  )
  SELECT l.k, count(l.id)::integer FROM noted LEFT JOIN live l ON true GROUP BY l.k HAVING count(l.id) > 0;
END $$;
