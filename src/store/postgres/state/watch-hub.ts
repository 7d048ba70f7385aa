// WatchHub: the poll floor and the job_watchers refresh of every WatchJob stream a coordinator
// holds, batched. NOTIFY wake-ups still go straight to each stream (the LISTEN connection); this
// is what catches a lost notification, with one statement per interval for all streams instead
// of one per stream, and one watcher refresh per third of the watcher TTL instead of one each.

import type pg from "pg";
import { withClient } from "../sql/db.js";
import { EVENTS_CEILING, EventFloors } from "./event-floors.js";
import { InProgressAges } from "./event-order.js";
import { defineQuery } from "../sql/query.js";

// Every stream of a coordinator at once (WatchHub), so open streams cost one statement per refresh, not one each.
export const REFRESH_JOB_WATCHERS = defineQuery<{ watcherIds: string[]; ttlSeconds: number }>(
  null,
  `UPDATE job_watchers SET expires_at = now() + make_interval(secs => $2) WHERE id = ANY($1::uuid[])`,
  (p) => [p.watcherIds, p.ttlSeconds],
);

/*
 * The floor under lost notifications for all of a coordinator's watch streams in one statement:
 * which streams (by position in the arrays: job $1[i], the stream's last snapshot $2[i]) have
 * events committed since their snapshot. One probe of task_events_job_xid_idx per stream, in the
 * partitions from $3 (the lowest of the streams' floors: event-floors.ts) to just past the
 * statement's start (the others are pruned when the executor starts), the same bounds as
 * JOB_EVENTS_SINCE; the streams named then read their events themselves.
 * Measured (bench:watchers, 1,000 idle SSE streams, 1 s interval): 3.1 database transactions/s in
 * all, the reaper's two probes included; with a poll per stream, 300 streams had made 328/s (plus one
 * watcher refresh per stream every 20 s, now REFRESH_JOB_WATCHERS once for all).
 */
export const WATCHED_JOBS_WITH_EVENTS = defineQuery<{ jobIds: string[]; snapshots: string[]; floor: string }, { i: number }>(
  "leasehold_watched_jobs_with_events",
  `
SELECT w.i::int AS i
FROM unnest($1::uuid[], $2::text[]) WITH ORDINALITY AS w(job_id, since, i)
WHERE EXISTS (
  SELECT 1 FROM task_events e
  WHERE e.job_id = w.job_id AND e.xid >= pg_snapshot_xmin(w.since::pg_snapshot) AND NOT pg_visible_in_snapshot(e.xid, w.since::pg_snapshot)
    AND e.created_at >= $3::timestamptz AND e.created_at < ${EVENTS_CEILING}
)`,
  (p) => [p.jobIds, p.snapshots, p.floor],
);

export interface WatchedStream {
  jobId: string;
  /** The stream's last snapshot (pg_current_snapshot text): events committed since then are news. */
  since: string;
  /** The stream's job_watchers row. */
  watcherId: string;
  /** Makes the stream read its events now. */
  wake(): void;
}

export interface WatchHubOptions {
  pollIntervalMs: number;
  watcherTtlSeconds: number;
  /** Each statement of the hub gets this long. */
  readTimeoutMs: number;
  /** A transaction in progress longer than this holds no stream's events back (event-order.ts). */
  holdMs?: number;
}

/** The default of WatchHubOptions.holdMs: well past a coordinator transaction, short for a watcher. */
export const DEFAULT_HOLD_MS = 1000;

export class WatchHub {
  private readonly streams = new Set<WatchedStream>();
  private timer: NodeJS.Timeout | undefined;
  private busy = false;
  private refreshedAt = Date.now();
  private checkCount = 0;
  /** The log's watermarks as this coordinator last read them: the floors of its streams' reads. */
  readonly floors = new EventFloors();
  /** Transactions in progress as the streams' reads saw them, shared so a long one is known once. */
  readonly inProgress = new InProgressAges();

  constructor(
    private readonly pool: pg.Pool,
    private readonly options: WatchHubOptions,
  ) {}

  get holdMs(): number {
    return this.options.holdMs ?? DEFAULT_HOLD_MS;
  }

  /** Floor checks run so far (each one statement, whatever the number of streams). */
  get checks(): number {
    return this.checkCount;
  }

  get size(): number {
    return this.streams.size;
  }

  add(stream: WatchedStream): () => void {
    if (this.streams.size === 0) this.refreshedAt = Date.now(); // the first stream's row is new
    this.streams.add(stream);
    if (!this.timer && !this.busy) this.schedule();
    return () => {
      this.streams.delete(stream);
      if (this.streams.size === 0) {
        clearTimeout(this.timer);
        this.timer = undefined;
      }
    };
  }

  private schedule(): void {
    const ms = this.options.pollIntervalMs * (0.8 + Math.random() * 0.4);
    this.timer = setTimeout(() => void this.tick(), ms);
    this.timer.unref();
  }

  private async tick(): Promise<void> {
    this.timer = undefined;
    this.busy = true;
    const streams = [...this.streams];
    try {
      if (streams.length === 0) return;
      const signal = AbortSignal.timeout(this.options.readTimeoutMs);
      await withClient(this.pool, signal, async (c) => {
        if (Date.now() - this.refreshedAt > (this.options.watcherTtlSeconds * 1000) / 3) {
          await REFRESH_JOB_WATCHERS.run(c, { watcherIds: streams.map((s) => s.watcherId), ttlSeconds: this.options.watcherTtlSeconds });
          this.refreshedAt = Date.now();
        }
        await this.floors.refresh(c);
        const snapshots = streams.map((s) => s.since);
        const rows = await WATCHED_JOBS_WITH_EVENTS.run(c, {
          jobIds: streams.map((s) => s.jobId),
          snapshots,
          floor: this.floors.lowest(snapshots),
        });
        this.checkCount++;
        for (const r of rows) streams[r.i - 1]?.wake();
      });
    } catch {
      // Each stream reads for itself: a database that is down ends the streams with its error,
      // as a failed read of their own would.
      for (const s of streams) s.wake();
    } finally {
      this.busy = false;
      if (this.streams.size > 0 && !this.timer) this.schedule();
    }
  }
}
