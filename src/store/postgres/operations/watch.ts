// WatchJob: a job's snapshot, then its events as they commit. A NOTIFY (the LISTEN connection)
// says when to read; the coordinator's WatchHub (watch-hub.ts) is the floor under lost ones.

import type pg from "pg";
import { QueueError, ValidationError } from "../../../queue/errors.js";
import type { JobUpdate, WatchOptions } from "../../../queue/types.js";
import { requireUuid } from "../../../queue/validation.js";
import type { StoreContext } from "../state/context.js";
import { inTransaction, withClient } from "../sql/db.js";
import { EVENTS_CEILING } from "../state/event-floors.js";
import { EventOrder } from "../state/event-order.js";
import { readJobStatus } from "./jobs.js";
import { defineQuery, type NoParams } from "../sql/query.js";
import { toJobEvent, type JobEventRow } from "../sql/rows.js";
import type { WatchHub } from "../state/watch-hub.js";

const FINAL_JOB_STATUSES: readonly string[] = ["completed", "failed", "cancelled"];
/** A watch stream's job_watchers row lives this long unless refreshed (every third of it). */
export const WATCHER_TTL_SECONDS = 60;
/** Each database read of a watch stream gets this long, whatever the stream's own life. */
export const WATCH_READ_TIMEOUT_MS = 10_000;

// WatchJob registers its stream so the task_events trigger notifies for the job (see migration).
export const INSERT_JOB_WATCHER = defineQuery<{ jobId: string; ttlSeconds: number }, { id: string }>(
  null,
  `INSERT INTO job_watchers (job_id, expires_at) VALUES ($1, now() + make_interval(secs => $2)) RETURNING id`,
  (p) => [p.jobId, p.ttlSeconds],
);
export const DELETE_JOB_WATCHER = defineQuery<{ watcherId: string }>(null, `DELETE FROM job_watchers WHERE id = $1`, (p) => [p.watcherId]);

export const CURRENT_SNAPSHOT = defineQuery<NoParams, { snapshot: string }>(null, `SELECT pg_current_snapshot()::text AS snapshot`);

/*
 * The job's events committed since snapshot $2 and not before: visible now but not in $2. Every
 * transaction older than $2's xmin had ended by then (so its rows were visible in $2 already),
 * which bounds the index range. created_at is bounded too, from $3 (the floor the log's
 * watermarks give $2: event-floors.ts) to just past the statement's start, so PostgreSQL reads
 * only the partitions written in between (most days one), pruned when the executor starts.
 * Prepared (it runs for every batch a stream sends): the plan is made once per connection, not
 * on every call over every partition. Returns the statement's own snapshot for the next call,
 * and the events as one json array so there is always exactly one row.
 */
export const JOB_EVENTS_SINCE = defineQuery<{ jobId: string; since: string; floor: string }, { snapshot: string; events: JobEventRow[] }>(
  "leasehold_job_events_since",
  `
SELECT pg_current_snapshot()::text AS snapshot,
  coalesce((
    SELECT json_agg(e ORDER BY e.id) FROM task_events e
    WHERE e.job_id = $1 AND e.xid >= pg_snapshot_xmin($2::pg_snapshot) AND NOT pg_visible_in_snapshot(e.xid, $2::pg_snapshot)
      AND e.created_at >= $3::timestamptz AND e.created_at < ${EVENTS_CEILING}
  ), '[]'::json) AS events`,
  (p) => [p.jobId, p.since, p.floor],
);

/*
 * A resumed WatchJob stream: the job's events written after the last one the client saw, read in
 * the snapshot's transaction so the live part continues from exactly there. A stream sends events
 * in id order and only once no lower id can still commit (event-order.ts), so the client has every
 * event up to its last id and none above it. $1 job id, $2 after event id.
 * No time bound (an id says nothing of the writing transaction's start), so it probes the index of
 * every partition; prepared, so that plan is made once per connection and not on every resume
 * (planning it over 15 partitions cost 2-3 times the read: bench:retention). The columns by name:
 * a kept plan of `SELECT *` would fail once a migration adds one.
 */
export const JOB_EVENTS_AFTER = defineQuery<{ jobId: string; afterEventId: string }, JobEventRow>(
  "leasehold_job_events_after",
  `SELECT id, job_id, task_id, chunk_index, kind, status, previous_status, attempt, worker_id, progress, message,
  partial_result_uri, error_code, xid, created_at, error_message, settlement_key, settled_units
FROM task_events WHERE job_id = $1 AND id > $2::bigint ORDER BY id`,
  (p) => [p.jobId, p.afterEventId],
);

/*
 * The stream registers itself (so the events trigger NOTIFYs for the job) before it reads the
 * snapshot, and reads every later batch as "committed since the previous read's snapshot"
 * (JOB_EVENTS_SINCE): nothing is missed or repeated whatever order transactions commit in. It
 * sends them in id order, holding an event back while a lower id may still commit
 * (event-order.ts), and reads again soon while it holds any. A NOTIFY only says when to read; the
 * floor under lost notifications is the coordinator's WatchHub, one statement per poll interval
 * for all its streams.
 *
 * The stream ends after the last event of the transaction that made the job final, not at the
 * job's final event: that transaction may write other events after it (a statement's rows fire
 * their triggers in an order no caller controls), and a watcher must see every one, or its counts
 * would not be GetJob's. A transaction's events commit together, so they arrive in one batch;
 * the batch's events of later transactions (a late result of a cancelled task) are not sent, but
 * for the job's settlement (job_settled), which only ever follows the final status. A live stream
 * ends before a later settlement; a resumed stream (after_event_id) of a final job gets it among
 * the events it missed, and a new watch's snapshot carries it as Job.settlement.
 */
export async function* watchJob(ctx: StoreContext, hub: WatchHub, jobId: string, opts: WatchOptions): AsyncGenerator<JobUpdate> {
  const id = requireUuid("job_id", jobId);
  const after = opts.afterEventId === undefined || opts.afterEventId === "0" ? undefined : opts.afterEventId;
  if (after !== undefined && !/^[1-9]\d{0,18}$/.test(after))
    throw new ValidationError("after_event_id", "must be an event id (a positive integer)");
  const signal = opts.signal;
  const wakes = new Wakes();
  const unsubscribe = ctx.options.jobWakes?.subscribeJob(id, () => wakes.wake());
  const read = <T>(fn: (c: pg.PoolClient) => Promise<T>, begin?: string) => {
    const readSignal = signal
      ? AbortSignal.any([signal, AbortSignal.timeout(WATCH_READ_TIMEOUT_MS)])
      : AbortSignal.timeout(WATCH_READ_TIMEOUT_MS);
    return begin ? inTransaction(ctx.pool, readSignal, fn, begin) : withClient(ctx.pool, readSignal, fn);
  };
  let watcherId: string | undefined;
  let leaveHub: (() => void) | undefined;
  try {
    watcherId = (await read((c) => INSERT_JOB_WATCHER.one(c, { jobId: id, ttlSeconds: WATCHER_TTL_SECONDS }))).id;
    const { status, snapshot, missed } = await read(async (c) => {
      const status = await readJobStatus(c, id, opts.account);
      const { snapshot } = await CURRENT_SNAPSHOT.one(c);
      // A resumed stream: what was written after the client's last event, up to this snapshot.
      const missed = after === undefined ? [] : await JOB_EVENTS_AFTER.run(c, { jobId: id, afterEventId: after });
      return { status, snapshot, missed };
    }, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY");
    if (after === undefined) yield { snapshot: status };
    const order = new EventOrder(BigInt(after ?? 0), hub.inProgress, hub.holdMs);
    // Final already: the events the client lacks are all written (a resumed stream that saw the
    // final event before it left gets those of the same transaction, if any), and then the end.
    if (FINAL_JOB_STATUSES.includes(status.job.status) || missed.some(isFinal)) return void (yield* untilFinal(missed));
    if (yield* untilFinal(order.add(snapshot, missed))) return;
    const stream = { jobId: id, since: snapshot, watcherId, wake: () => wakes.wake() };
    leaveHub = hub.add(stream);
    let retryMs = HELD_RETRY_MS;
    for (;;) {
      // The hub wakes the stream when its job has news; held events need a read of their own.
      await wakes.next(order.holding ? retryMs : Infinity, signal);
      if (signal?.aborted) {
        // Shutdown ends the stream with its reason (UNAVAILABLE: watch again); a client that left needs nothing.
        if (signal.reason instanceof QueueError) throw signal.reason;
        return;
      }
      const { snapshot, events } = await read(async (c) => {
        await hub.floors.refresh(c);
        return JOB_EVENTS_SINCE.one(c, { jobId: id, since: stream.since, floor: hub.floors.floor(stream.since) });
      });
      stream.since = snapshot;
      if (events.some(isFinal)) return void (yield* untilFinal(order.flush(events)));
      const ready = order.add(snapshot, events);
      retryMs = ready.length > 0 || events.length > 0 ? HELD_RETRY_MS : Math.min(retryMs * 2, HELD_RETRY_MAX_MS);
      if (yield* untilFinal(ready)) return;
    }
  } finally {
    leaveHub?.();
    unsubscribe?.();
    if (watcherId) {
      const done = watcherId;
      await withClient(ctx.pool, AbortSignal.timeout(WATCH_READ_TIMEOUT_MS), (c) => DELETE_JOB_WATCHER.run(c, { watcherId: done })).catch(
        () => {},
      );
    }
  }
}

/** A stream holding events back reads again after this, doubling while nothing changes, up to the max. */
const HELD_RETRY_MS = 10;
const HELD_RETRY_MAX_MS = 250;

const isFinal = (r: JobEventRow) => r.kind === "job_status" && FINAL_JOB_STATUSES.includes(r.status ?? "");

/**
 * Yields a batch of events (in id order) up to and including the last one of the transaction that
 * made the job final, if the batch has it; returns whether it did (the stream then ends).
 */
async function* untilFinal(rows: readonly JobEventRow[]): AsyncGenerator<JobUpdate, boolean> {
  let finalXid: string | undefined;
  for (const row of rows) {
    // A settlement comes after the job is final, in a transaction of its own: a stream that
    // reads it in the same batch, or a resumed one of a final job, sends it too.
    if (finalXid !== undefined && String(row.xid) !== finalXid && row.kind !== "job_settled") continue;
    const event = toJobEvent(row);
    yield { event };
    if (finalXid === undefined && event.kind === "job_status" && FINAL_JOB_STATUSES.includes(event.status ?? "")) {
      finalXid = String(row.xid);
    }
  }
  return finalXid !== undefined;
}

/** Wake-ups of one watch stream: a wake that comes while nobody waits is kept for the next wait. */
class Wakes {
  private pending = false;
  private resolve: (() => void) | undefined;

  wake(): void {
    this.pending = true;
    this.resolve?.();
  }

  /** Resolves on a wake (or one that came since the last call), after ms (Infinity: never), or when signal aborts. */
  async next(ms: number, signal?: AbortSignal): Promise<void> {
    if (!this.pending && !signal?.aborted) {
      let timer: NodeJS.Timeout | undefined;
      const done = () => this.resolve?.();
      await new Promise<void>((resolve) => {
        this.resolve = resolve;
        if (Number.isFinite(ms)) timer = setTimeout(resolve, ms); // setTimeout would read Infinity as 1 ms
        signal?.addEventListener("abort", done, { once: true });
      });
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      this.resolve = undefined;
    }
    this.pending = false;
  }
}
