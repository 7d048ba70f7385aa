// Maintenance besides the lease reaper: pending-task expiry, dead watch registrations, retention
// and the usage rollup (usage-rollup.ts), after one read-only probe that says which of them has anything to do, then the event
// log's partitions (event-partitions.ts: created ahead, dropped past the retention; at most once a
// minute). One pass per call; the loop with its start and stop is queue/maintenance.ts's Maintainer.

import type pg from "pg";
import type { MaintenanceResult } from "../../../queue/types.js";
import { withClient } from "../sql/db.js";
import { EventPartitions, type EventPartitionsConfig } from "./event-partitions.js";
import { PendingExpiry, type PendingExpiryConfig } from "./pending-expiry.js";
import { defineQuery } from "../sql/query.js";
import { SETTLED_OR_UNBILLED, Retention, type RetentionConfig } from "./retention.js";
import { UNROLLED_JOBS_DUE, UsageRollup, type UsageRollupConfig } from "./usage-rollup.js";

export interface StoreMaintenanceConfig {
  pendingExpiry?: PendingExpiryConfig;
  retention?: RetentionConfig;
  /** The event log's partitions; their retention is retention.days unless given here. */
  eventPartitions?: EventPartitionsConfig;
  usageRollup?: UsageRollupConfig;
}

// Streams of a coordinator that died without deregistering.
export const DELETE_EXPIRED_JOB_WATCHERS = `DELETE FROM job_watchers WHERE expires_at < now()`;

/*
 * The same for the rest of maintenance (pending-task expiry, dead watch registrations, retention):
 * one read-only statement per pass on an idle database instead of three or four transactions.
 * The pending probe is EXPIRE_PENDING's predicate; $1 is the retention in days (null: none).
 */
export const MAINTENANCE_DUE = `
SELECT
  EXISTS (
    SELECT 1 FROM workloads w
    WHERE w.max_pending_seconds IS NOT NULL AND EXISTS (
      SELECT 1 FROM tasks
      WHERE status = 'pending' AND workload = w.name
        AND created_at <= now() - make_interval(secs => w.max_pending_seconds)
        AND run_after <= now() - make_interval(secs => w.max_pending_seconds))
  ) AS pending,
  EXISTS (SELECT 1 FROM job_watchers WHERE expires_at < now()) AS watchers,
  ($1::int IS NOT NULL AND EXISTS (
    SELECT 1 FROM jobs
    WHERE status IN ('completed', 'failed', 'cancelled') AND completed_at < now() - make_interval(days => $1::int)
      AND ${SETTLED_OR_UNBILLED}
  )) AS retention,
  ${UNROLLED_JOBS_DUE} AS rollup`;

const maintenanceDue = defineQuery<{ days: number | null }, { pending: boolean; watchers: boolean; retention: boolean; rollup: boolean }>(
  "leasehold_maintenance_due",
  MAINTENANCE_DUE,
  (p) => [p.days],
);

export class StoreMaintenance {
  private readonly pendingExpiry: PendingExpiry;
  private readonly retention: Retention;
  private readonly eventPartitions: EventPartitions;
  private readonly usageRollup: UsageRollup;

  constructor(
    private readonly pool: pg.Pool,
    config: StoreMaintenanceConfig = {},
  ) {
    this.pendingExpiry = new PendingExpiry(pool, config.pendingExpiry);
    this.retention = new Retention(pool, config.retention);
    this.usageRollup = new UsageRollup(pool, config.usageRollup);
    this.eventPartitions = new EventPartitions(pool, { retentionDays: config.retention?.days, ...config.eventPartitions });
  }

  async runOnce(signal: AbortSignal | undefined): Promise<MaintenanceResult> {
    const result: MaintenanceResult = { expiredPending: 0, deletedJobs: 0 };
    const days = this.retention.days;
    const due = await withClient(this.pool, signal, (c) => maintenanceDue.one(c, { days: days ?? null }));
    if (due.pending) result.expiredPending = await this.pendingExpiry.runOnce(signal);
    if (due.watchers) await withClient(this.pool, signal, (c) => c.query(DELETE_EXPIRED_JOB_WATCHERS));
    // Before retention, so a job is counted before it can be deleted.
    if (due.rollup) result.rolledUpJobs = await this.usageRollup.runOnce(signal);
    if (days !== undefined && due.retention) result.deletedJobs = await this.retention.runOnce(signal);
    if (this.eventPartitions.due) {
      const partitions = await this.eventPartitions.runOnce(signal);
      result.createdEventPartitions = partitions.created;
      result.droppedEventPartitions = partitions.dropped;
    }
    return result;
  }
}
