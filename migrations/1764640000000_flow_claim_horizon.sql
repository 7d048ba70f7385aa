-- Up Migration

/*
 * The flow-controlled claim under a held MVCC horizon (docs/long-transactions.md, "What the claim
 * does about it"; docs/flow-control-claim.md, "Under a held horizon"). While a long transaction
 * elsewhere holds VACUUM back, every lease a finished task once held stays in the index of leases,
 * and the claim counted the workload's live leases through all of them: at 400 tasks/s with one
 * snapshot held, 24,000 heap visits a claim after two minutes (auto_explain), and the queue fell
 * behind.
 *
 * lease_seq: the id of the transaction that wrote the lease (txid_current(), never reused), set
 * by every claim. A lease written after a snapshot was taken has an id at least that snapshot's
 * xmin, so a claim that saw the workload's live leases can tell the next one where they start:
 * at the smallest id among them, or the snapshot's xmin if that is smaller. The claim counts from
 * there (leasehold_flow_live), past every older lease, dead or alive, that it need not read. NULL:
 * a lease written before this migration or by an older release's claim, counted apart.
 *
 * tasks_leased_seq_idx takes the place of tasks_leased_key_idx (workload, concurrency_key,
 * lease_expires_at): the claim's counts were that index's reason, and a lease pays for one index
 * either way. Its third column keeps the expired-lease arm of a claim (lease_expires_at <= now())
 * answered in the index.
 */
ALTER TABLE tasks ADD COLUMN lease_seq bigint;
CREATE INDEX tasks_leased_seq_idx ON tasks (workload, lease_seq, lease_expires_at) WHERE status = 'leased';
DROP INDEX tasks_leased_key_idx;

/*
 * The leases without a lease_seq (written before this migration, or by an older release's claim),
 * which the count reads apart. An index of their own, empty once those leases end, so that no plan
 * reads them through an index of every lease: a cached generic plan of that read once chose a full
 * scan of tasks_lease_expiry_idx (its cost estimated equal while both indexes were small), and under
 * a held horizon that was every lease since, dead ones included (14,600 buffers a count after three
 * minutes of bench:horizon's keyed shape, twice a claim).
 */
CREATE INDEX tasks_leased_noseq_idx ON tasks (workload) WHERE status = 'leased' AND lease_seq IS NULL;

/*
 * The furthest rank any key of a workload has got (CreateJob's fair rank when nothing is pending at
 * the job's priority): read through the index from its top, where the newest version of the
 * furthest key sits, instead of every version of every key of the workload (a sequential scan of
 * flow_keys, which under a held horizon keeps one version per job).
 */
CREATE INDEX flow_keys_rank_idx ON flow_keys (workload, next_rank);

-- The claim that counts from lease_seq is migrations/functions/leasehold_flow_claim_hinted.sql.

-- Down Migration

-- The functions that read lease_seq (their files; an older release's `migrate up` never calls them).
DROP FUNCTION IF EXISTS leasehold_flow_claim_hinted(text[], integer, text, integer, jsonb, text[], jsonb);
DROP FUNCTION IF EXISTS leasehold_flow_live(text);
DROP INDEX flow_keys_rank_idx;
DROP INDEX tasks_leased_noseq_idx;
CREATE INDEX tasks_leased_key_idx ON tasks (workload, concurrency_key, lease_expires_at) WHERE status = 'leased';
DROP INDEX tasks_leased_seq_idx;
ALTER TABLE tasks DROP COLUMN lease_seq;
