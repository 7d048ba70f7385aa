// The lease reaper: expired leases back to pending (or failed for good when their attempts are
// used), the jobs that lost a task for good ended under their failure policy (job-end.ts), and
// running jobs a coordinator left unended (nothing unfinished, or past a fail_fast threshold)
// ended. One pass per call; the loop that calls it every interval, with its start and stop, is
// queue/maintenance.ts's Maintainer. Every coordinator runs it: the statements take their rows with
// SKIP LOCKED, so several reapers share the work.

import type pg from "pg";
import type { QueueObserver } from "../../../queue/service.js";
import type { ExpireLeasesResult } from "../../../queue/types.js";
import { countBy } from "../sql/arrays.js";
import { NOTIFY_CHANNEL } from "../sql/channels.js";
import { inTransaction, withClient } from "../sql/db.js";
import { defineQuery } from "../sql/query.js";
import type { TaskRow } from "../sql/rows.js";
import { endJobs, STALLED_JOBS, STALLED_JOBS_DUE } from "../operations/job-end.js";

export interface LeaseReaperConfig {
  /** Expired leases handled per transaction; the pass repeats while batches come back full. */
  batchSize?: number;
  /** Told how many leases expired in each pass that found any (metrics). */
  observer?: QueueObserver;
  /** Told after each pass's probe whether any lease had expired (claim-hints.ts gates the claim's zombie arm by it). */
  onProbe?: (leasesExpired: boolean) => void;
}

/*
 * The lease floor: a pass whose probe finds no expired lease lets the next passes look only at
 * leases expiring after its time less FLOOR_MARGIN_MS. Why: under a held MVCC horizon every lease
 * a finished task once had stays in tasks_lease_expiry_idx as a dead version whose expiry has
 * passed, and a probe from the bottom of the index checked every one of them against the heap on
 * every pass. The margin covers a lease written by a statement that started before the probe and
 * committed after it (its expiry is its start plus the lease, at least 1 s): statements live
 * under PG_STATEMENT_TIMEOUT_MS (5 s by default). Every FULL_SWEEP_MS a pass looks at every
 * lease again, so a lease the margin missed waits that long at most.
 */
const FLOOR_MARGIN_MS = 60_000;
const FULL_SWEEP_MS = 300_000;

export const LEASE_REAPER_DEFAULTS = { batchSize: 1000 } as const;

/*
 * Is there anything for the reaper to do? One read-only statement, so an idle database costs one
 * transaction per reaper pass instead of three (a BEGIN … COMMIT around an EXPIRE_LEASES that
 * finds nothing, and a FINISH_STALLED_JOBS that updates nothing). Its two probes are the
 * predicates of those statements, through the same indexes; the work itself still runs with
 * SKIP LOCKED, so a probe that is stale by the time the work runs costs nothing but that statement.
 */
// $1 the lease floor (null: none), $2 the margin of the next floor in seconds.
export const REAPER_DUE = defineQuery<
  { floor: string | null; marginSeconds: number },
  { leases: boolean; stalled_jobs: boolean; floor: string }
>(
  "leasehold_reaper_due",
  `
SELECT
  EXISTS (
    SELECT 1 FROM tasks
    WHERE status = 'leased' AND lease_expires_at > coalesce($1::timestamptz, '-infinity') AND lease_expires_at <= now()
  ) AS leases,
  ${STALLED_JOBS_DUE} AS stalled_jobs,
  (now() - make_interval(secs => $2::float8))::text AS floor`,
  (p) => [p.floor, p.marginSeconds],
);

/*
 * The reaper, first half: expired leases back to pending while attempts remain, else failed with
 * lease_expired. SKIP LOCKED lets every coordinator run it at once without waiting on or
 * double-counting each other; the batch bound keeps each transaction short.
 */
export const EXPIRE_LEASES = defineQuery<{ batch: number; floor: string | null }, Pick<TaskRow, "id" | "job_id" | "workload" | "status">>(
  null,
  `
WITH expired AS (
  SELECT id FROM tasks
  WHERE status = 'leased' AND lease_expires_at > coalesce($2::timestamptz, '-infinity') AND lease_expires_at <= now()
  ORDER BY lease_expires_at
  LIMIT $1
  FOR UPDATE SKIP LOCKED
)
UPDATE tasks t
SET status = CASE WHEN t.attempt < t.max_attempts THEN 'pending' ELSE 'failed' END::task_status,
    completed_at = CASE WHEN t.attempt < t.max_attempts THEN NULL ELSE now() END,
    run_after = now(),
    lease_expires_at = NULL,
    error_code = 'lease_expired',
    error_message = 'the lease expired before the worker reported a result',
    version = t.version + 1
WHERE t.id = ANY (ARRAY(SELECT id FROM expired))
RETURNING t.id, t.job_id, t.workload, t.status`,
  (p) => [p.batch, p.floor],
);

/** Stalled jobs ended per reaper pass (the safety net; normally there are none). */
const STALLED_BATCH = 100;

export const NOTIFY_WORKLOADS = defineQuery<{ workloads: string[]; counts: number[] }>(
  null,
  `SELECT pg_notify('${NOTIFY_CHANNEL}', w || ':' || n) FROM unnest($1::text[], $2::int[]) AS x(w, n)`,
  (p) => [p.workloads, p.counts],
);

export class LeaseReaper {
  private readonly batchSize: number;
  /** No lease below this had expired unhandled at the last clean probe, less the margin (see FLOOR_MARGIN_MS). */
  private floor: string | null = null;
  private sweptAt = -Infinity;

  constructor(
    private readonly pool: pg.Pool,
    private readonly config: LeaseReaperConfig = {},
  ) {
    this.batchSize = config.batchSize ?? LEASE_REAPER_DEFAULTS.batchSize;
    if (!Number.isInteger(this.batchSize) || this.batchSize < 1)
      throw new RangeError(`lease reaper batchSize must be a positive integer, not ${this.batchSize}`);
  }

  /** One pass: every expired lease (in batches), then the stalled jobs. */
  async runOnce(signal: AbortSignal | undefined): Promise<ExpireLeasesResult> {
    const total: ExpireLeasesResult = { requeued: 0, failed: 0 };
    if (Date.now() - this.sweptAt >= FULL_SWEEP_MS) {
      this.floor = null;
      this.sweptAt = Date.now();
    }
    const floor = this.floor;
    const due = await withClient(this.pool, signal, (c) => REAPER_DUE.one(c, { floor, marginSeconds: FLOOR_MARGIN_MS / 1000 }));
    this.config.onProbe?.(due.leases);
    if (!due.leases) this.floor = due.floor;
    while (due.leases) {
      const batch = await inTransaction(this.pool, signal, async (c) => {
        const rows = await EXPIRE_LEASES.run(c, { batch: this.batchSize, floor });
        const requeued = countBy(rows.filter((r) => r.status === "pending").map((r) => r.workload));
        if (requeued.size > 0) await NOTIFY_WORKLOADS.run(c, { workloads: [...requeued.keys()], counts: [...requeued.values()] });
        return rows;
      });
      for (const r of batch) total[r.status === "pending" ? "requeued" : "failed"]++;
      // Jobs that lost a task for good, ended once the loss has committed (job-end.ts says why).
      const failedJobs = batch.filter((r) => r.status === "failed").map((r) => r.job_id);
      if (failedJobs.length > 0) await withClient(this.pool, signal, (c) => endJobs(c, failedJobs));
      if (batch.length < this.batchSize) break;
    }
    if (due.stalled_jobs) {
      await withClient(this.pool, signal, async (c) => {
        const rows = await STALLED_JOBS.run(c, { limit: STALLED_BATCH });
        await endJobs(
          c,
          rows.map((r) => r.id),
        );
      });
    }
    if (total.requeued + total.failed > 0) this.config.observer?.leasesExpired(total.requeued + total.failed);
    return total;
  }
}
