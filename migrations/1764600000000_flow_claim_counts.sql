-- Up Migration

-- The claim's counts of a workload's live leases read only that workload's (the expiry test written
-- `(lease_expires_at > now()) IS TRUE`): a change to the function alone, whose text now lives in
-- migrations/functions/leasehold_flow_claim.sql (its header says why). Nothing versioned is left.

-- Down Migration

-- Nothing: the claim with this change is correct on the schema before it, and older releases'
-- text, where one is needed, is what the downs before this one restore.
