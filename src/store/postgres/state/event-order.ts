// A watch stream sends a job's events in id order, so that "after event id N" (Last-Event-ID, a
// resumed WatchJob) means exactly "every event the stream had not sent yet".
//
// Why events can arrive out of id order: an event's id is drawn when it is written, not when its
// transaction commits. Transaction A writes event 10, transaction B writes event 11 and commits
// first; a read between the two commits sees 11 and not 10. Sent as they became visible (11, then
// 10), a client that left after 10 resumed "after 10" and was sent 11 again, and one that left
// after 11 never got 10. So the stream holds an event back until no lower id can still commit.
//
// When is that? A read at snapshot S sees the job's events up to some id B. Every event with an id
// at or below B was drawn before S was taken (B's own transaction had committed by then). The
// transactions that can still commit such an event are the ones S lists as in progress: one that
// had no xid yet when S was taken draws its ids only after it has one (each event is written by
// a statement that has already changed a row: the status triggers fire after their row's update,
// and the inline INSERTs read their rows from the UPDATE beside them), so its ids are above B.
// Once every transaction in progress at S has ended, the events up to B are all known, and the
// stream sends them.
//
// The snapshot cannot say which of its transactions write events for the job. One that stays
// open longer than `holdMs` (a report, a migration, a session idle in a transaction) is taken to
// be not the coordinator's, whose writes end within their statement's deadline, so it holds
// nothing back after that: an event-writing transaction that slow is the one case left where the
// order can still slip.

import type { JobEventRow } from "../sql/rows.js";

/** A pg_current_snapshot() as text: `xmin:xmax:xip,…`. */
export interface Snapshot {
  xmin: bigint;
  xmax: bigint;
  xip: bigint[];
}

export function parseSnapshot(text: string): Snapshot {
  const [xmin, xmax, xip] = text.split(":");
  return { xmin: BigInt(xmin), xmax: BigInt(xmax), xip: xip ? xip.split(",").map((x) => BigInt(x)) : [] };
}

/** Whether transaction xid had ended (committed or not) when snapshot s was taken. */
export function endedIn(xid: bigint, s: Snapshot): boolean {
  return xid < s.xmin || (xid < s.xmax && !s.xip.includes(xid));
}

/**
 * When each in-progress transaction was first seen in a snapshot, shared by a coordinator's
 * streams so that a long one is recognised once, not again by every stream that opens.
 */
export class InProgressAges {
  private readonly since = new Map<bigint, number>();

  /** Records s's in-progress transactions and forgets those it shows ended. */
  observe(s: Snapshot, now: number): void {
    for (const x of this.since.keys()) if (endedIn(x, s)) this.since.delete(x);
    for (const x of s.xip) if (!this.since.has(x)) this.since.set(x, now);
  }

  /** How long xid has been seen in progress (0 if it was not). */
  age(xid: bigint, now: number): number {
    const at = this.since.get(xid);
    return at === undefined ? 0 : now - at;
  }
}

/** One stream's held-back events and the points at which they can be sent. */
export class EventOrder {
  /** Seen, not sent yet; kept in id order. */
  private held: JobEventRow[] = [];
  /** Per read: its snapshot and the highest event id seen by then. */
  private marks: { snapshot: Snapshot; upTo: bigint }[] = [];
  private highest: bigint;

  /**
   * @param sentUpTo the last event id the client has (a resumed stream), 0 for a new stream
   * @param holdMs past this a transaction in progress holds nothing back (see above)
   */
  constructor(
    sentUpTo: bigint,
    private readonly ages: InProgressAges,
    private readonly holdMs: number,
  ) {
    this.highest = sentUpTo;
  }

  /** Events are held back: read again soon, even without a wake-up, to send them. */
  get holding(): boolean {
    return this.held.length > 0;
  }

  /**
   * Takes a read's events (those committed since the previous read, at snapshot `snapshotText`)
   * and returns, in id order, those that can be sent now.
   */
  add(snapshotText: string, rows: readonly JobEventRow[], now = Date.now()): JobEventRow[] {
    const snapshot = parseSnapshot(snapshotText);
    this.ages.observe(snapshot, now);
    for (const r of rows) {
      const id = BigInt(r.id);
      if (id > this.highest) this.highest = id;
    }
    // A read's rows come in id order; only rows added to ones still held need sorting.
    if (rows.length > 0) this.held = this.held.length === 0 ? [...rows] : [...this.held, ...rows].sort((a, b) => compareIds(a.id, b.id));
    this.marks.push({ snapshot, upTo: this.highest });
    // The newest read whose in-progress transactions have all ended (or are too old to count).
    let settled = -1;
    for (let i = this.marks.length - 1; i >= 0; i--) {
      const m = this.marks[i];
      if (m.snapshot.xip.every((x) => endedIn(x, snapshot) || this.ages.age(x, now) >= this.holdMs)) {
        settled = i;
        break;
      }
    }
    if (settled < 0) return [];
    const upTo = this.marks[settled].upTo;
    this.marks = this.marks.slice(settled + 1);
    const cut = this.held.findIndex((r) => BigInt(r.id) > upTo);
    const out = cut < 0 ? this.held : this.held.slice(0, cut);
    this.held = cut < 0 ? [] : this.held.slice(cut);
    return out;
  }

  /** Everything held and `rows`, in id order (the job is final: its stream sends what it has and ends). */
  flush(rows: readonly JobEventRow[]): JobEventRow[] {
    const out = [...this.held, ...rows].sort((a, b) => compareIds(a.id, b.id));
    this.held = [];
    this.marks = [];
    return out;
  }
}

function compareIds(a: string | number, b: string | number): number {
  const x = BigInt(a);
  const y = BigInt(b);
  return x < y ? -1 : x > y ? 1 : 0;
}
