// Pending-task expiry: claimable tasks of workloads with max_pending_seconds that nobody claimed in
// that long fail with 'expired', and their jobs are ended under their failure policy. Run by StoreMaintenance (store-maintenance.ts)
// when its probe finds any; several coordinators share the work through SKIP LOCKED.

import type pg from "pg";
import { inTransaction, withClient } from "../sql/db.js";
import { defineQuery } from "../sql/query.js";
import { endJobs, FINISH_JOBS } from "../operations/job-end.js";

export interface PendingExpiryConfig {
  /** Expired pending tasks failed per transaction; the pass repeats while batches come back full. */
  batchSize?: number;
}

export const PENDING_EXPIRY_DEFAULTS = { batchSize: 1000 } as const;

/*
 * Abandoned work: claimable tasks of workloads with max_pending_seconds that nobody claimed in
 * that long fail with 'expired'. Read through the claim index (tasks_claim_pending_idx: workload,
 * priority, created_at), where the created_at bound is an index condition: PostgreSQL 18 skips
 * from one priority to the next ("Index Searches" = the workload's distinct priorities + 1); older
 * servers check the bound on each of the workload's pending index entries without reading the heap.
 * Pending tasks are no longer in the lease index, which every task insert paid for (see
 * migrations/1764490000000_lean_hot_path.sql). No order needed: the caller repeats while batches
 * come back full. $1 batch.
 */
export const EXPIRE_PENDING = defineQuery<{ batch: number }, { id: string; job_id: string }>(
  null,
  `
WITH stale AS (
  SELECT c.id
  FROM workloads w
  CROSS JOIN LATERAL (
    SELECT id FROM tasks
    WHERE status = 'pending' AND workload = w.name
      AND created_at <= now() - make_interval(secs => w.max_pending_seconds)
      AND run_after <= now() - make_interval(secs => w.max_pending_seconds)
    LIMIT $1
    FOR UPDATE SKIP LOCKED
  ) c
  WHERE w.max_pending_seconds IS NOT NULL
)
UPDATE tasks t
SET status = 'failed', completed_at = now(), error_code = 'expired',
    error_message = 'no worker claimed the task within its workload''s max_pending_seconds',
    version = t.version + 1
WHERE t.id = ANY (ARRAY(SELECT id FROM stale))
RETURNING t.id, t.job_id`,
  (p) => [p.batch],
);

export class PendingExpiry {
  private readonly batchSize: number;

  constructor(
    private readonly pool: pg.Pool,
    config: PendingExpiryConfig = {},
  ) {
    this.batchSize = config.batchSize ?? PENDING_EXPIRY_DEFAULTS.batchSize;
    if (!Number.isInteger(this.batchSize) || this.batchSize < 1)
      throw new RangeError(`pending expiry batchSize must be a positive integer, not ${this.batchSize}`);
  }

  /** One pass; returns how many tasks expired. */
  async runOnce(signal: AbortSignal | undefined): Promise<number> {
    let total = 0;
    for (;;) {
      const jobs = await inTransaction(this.pool, signal, async (c) => {
        const rows = await EXPIRE_PENDING.run(c, { batch: this.batchSize });
        const jobs = [...new Set(rows.map((r) => r.job_id))];
        // A job whose tasks have all ended now ends with them, in this transaction: a job that was
        // never claimed is not running, so the reaper's safety net would not find it.
        if (jobs.length > 0) await FINISH_JOBS.run(c, { jobIds: jobs });
        return { ids: jobs, expired: rows.length };
      });
      // The rest of the failure policy (a fail_fast job past its threshold), after the commit.
      if (jobs.ids.length > 0) await withClient(this.pool, signal, (c) => endJobs(c, jobs.ids));
      total += jobs.expired;
      if (jobs.expired < this.batchSize) return total;
    }
  }
}
