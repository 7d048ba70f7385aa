-- Records that a claim of the workload left a caller with nothing. Read first, so that claims
-- doing so together write once a second, not each; and never waits: of two claims recording at
-- once, one takes the advisory lock and the other leaves it to that one (a claim holding gates
-- must not wait here for another's commit).
CREATE OR REPLACE FUNCTION leasehold_slot_wanted(p_workload text) RETURNS void LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM workload_slot_waits s WHERE s.workload = p_workload AND s.wanted_at > now() - interval '1 second')
    AND pg_try_advisory_xact_lock(hashtext('leasehold.slot_wanted:' || p_workload)) THEN
    INSERT INTO workload_slot_waits AS s (workload, wanted_at) VALUES (p_workload, now())
    ON CONFLICT (workload) DO UPDATE SET wanted_at = greatest(s.wanted_at, excluded.wanted_at);
  END IF;
END $$;
