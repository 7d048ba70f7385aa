// The time window of a watch read: from the floor its snapshot allows (the event log's watermarks,
// cached here) to a little past the statement's start, so PostgreSQL reads only the partitions
// written in between. Used by watch.ts (a live stream's read) and watch-hub.ts (the poll of all of
// a coordinator's streams); the watermarks are recorded by event-partitions.ts.

import { defineQuery, type NoParams, type Queryable } from "../sql/query.js";

/*
 * Why the floor is a parameter computed here and not a function the statement calls: the
 * statement then compares created_at with a plain value, which PostgreSQL prunes by when the
 * executor starts, at the cost of a comparison. A SQL function in the statement (the first design:
 * leasehold_events_floor(snapshot), STABLE) is run once per execution to prune by and, before
 * PostgreSQL 18, has its body parsed and planned on every execution: ~100 µs a read on 15 and 17,
 * as much as the read itself on one table (bench:retention, docs/scaling.md).
 *
 * A watermark (upper, xid_bound) says every event with created_at < upper has an xid below
 * xid_bound, forever: rows are only ever added, so any subset of them, however stale, gives a
 * floor that is correct (an older one only reads more partitions). The cache is read again at
 * most every REFRESH_MS; a new watermark is recorded once per partition interval.
 */
const WATERMARKS = defineQuery<NoParams, { upper: string; xid_bound: string }>(
  "leasehold_event_watermarks",
  `SELECT upper::text AS upper, xid_bound::text AS xid_bound FROM task_event_watermarks ORDER BY upper DESC LIMIT 30`,
);

const REFRESH_MS = 60_000;

/**
 * The ceiling of a watch read, in its text: an event a read's snapshot can see was written by a
 * transaction that started before the snapshot was taken, and an event's created_at is its
 * transaction's start, so none is later than the statement's start. The margin is the one the
 * watermarks already assume (the server's clock does not step back by more than 5 minutes:
 * event-partitions.ts). It leaves out the partitions created ahead and, once the window is
 * covered by partitions, the default one: a read probes one partition's index on most days.
 */
export const EVENTS_CEILING = `statement_timestamp() + interval '5 minutes'`;

/** `-infinity`: no watermark is known below a snapshot, every partition is read. */
export const NO_FLOOR = "-infinity";

export class EventFloors {
  /** Newest first; xid_bound as a bigint (xid8 is 64 bits). */
  private marks: { upper: string; xidBound: bigint }[] = [];
  private readAt = -Infinity;
  private reading: Promise<void> | undefined;

  /** The watermarks, read again on c if the cache is older than REFRESH_MS (a failed read keeps the old ones). */
  async refresh(c: Queryable): Promise<void> {
    if (Date.now() - this.readAt < REFRESH_MS) return;
    this.reading ??= WATERMARKS.run(c)
      .then((rows) => {
        this.marks = rows.map((r) => ({ upper: r.upper, xidBound: BigInt(r.xid_bound) }));
        this.readAt = Date.now();
      })
      .finally(() => (this.reading = undefined));
    await this.reading;
  }

  /**
   * The floor for a read since `snapshot` (pg_current_snapshot text, `xmin:xmax:xip,…`): the
   * newest watermark whose xid bound is at or below the snapshot's xmin. Every transaction below
   * xmin had ended when the snapshot was taken, so the events a read since it must return
   * (committed later) have xids at or above xmin, and none of them is below that watermark's upper.
   */
  floor(snapshot: string): string {
    const xmin = BigInt(snapshot.slice(0, snapshot.indexOf(":")));
    for (const m of this.marks) if (m.xidBound <= xmin) return m.upper;
    return NO_FLOOR;
  }

  /** The lowest floor of several snapshots (the hub's poll reads one window for all its streams). */
  lowest(snapshots: readonly string[]): string {
    let xmin: bigint | undefined;
    for (const s of snapshots) {
      const x = BigInt(s.slice(0, s.indexOf(":")));
      if (xmin === undefined || x < xmin) xmin = x;
    }
    return xmin === undefined ? NO_FLOOR : this.floor(`${xmin}:`);
  }
}
