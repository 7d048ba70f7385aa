// Group commit for single-item calls: the calls of one kind that arrive while a statement of that
// kind is in flight wait in a lane, and when it returns they all go in the next statement. An idle
// lane runs a call at once (no timer), so a lone worker pays nothing; a busy one gets batches as
// large as its arrival rate makes them. This file knows nothing of SQL: `run` does the statement.
//
// Riders (submitRider) are items that fit any lane's statement: the next statement of whichever
// lane is busy takes them along, and they get a lane of their own only when none is busy. So two
// kinds that would otherwise each keep a statement in flight (results, which any claim statement
// can carry, and claims) share one, and PostgreSQL pays one statement's fixed cost for both.
//
// Lingering (options.lingerMs, hooks.returning): workers chaining small tasks come straight back
// with their next result, so a statement that returns while they are out would carry only those
// that queued behind it, about half of a busy fleet. A returning lane waits for the callers it
// just answered instead, up to lingerMs, and so carries all of them. Measured in
// docs/performance-log.md ("the lane waits for the workers it answered").

import { DeadlineExceededError } from "../../../queue/errors.js";

/** One item's outcome in a batch: its own answer, or its own error (a batch never fails for one item). */
export type Outcome<O> = { value: O } | { error: unknown };

export interface GroupCommitOptions {
  /** At most this many items in one statement (weighed by `weight` where the hooks give one); the rest wait for the next. */
  maxBatch: number;
  /**
   * How long (ms) a lane whose callers come back (`hooks.returning`) waits for them after a
   * statement, when fewer are waiting than that statement answered: the next statement then
   * carries them too, not half of them. 0 or unset: the next statement starts at once.
   */
  lingerMs?: number;
}

export interface GroupCommitHooks<I, O> {
  /**
   * Runs one batch: one outcome per item, in order. A rejection fails every item of the batch.
   * `signal` aborts once every caller in the batch has stopped waiting (their deadlines passed).
   */
  run(key: string, items: I[], signal: AbortSignal): Promise<Outcome<O>[]>;
  /** Items that must not share a statement (the same task twice): the later one waits for the next. */
  conflict?(a: I, b: I): boolean;
  /** The value of an item whose caller's deadline passed while its statement ran (claims give their tasks back). */
  abandon?(item: I, value: O): void;
  /** Told of each batch's size (metrics). */
  batched?(size: number): void;
  /** An item's share of maxBatch (a call of ten results weighs ten); 1 when not given. A lone item always fits. */
  weight?(item: I): number;
  /**
   * The lane's callers call again as soon as they are answered (a result with claim_next: its
   * worker reports the task it was handed), so after a statement the lane lingers for them
   * (options.lingerMs).
   */
  returning?: boolean;
}

interface Entry<I, O> {
  item: I;
  signal: AbortSignal | undefined;
  resolve(value: O): void;
  reject(err: unknown): void;
  onAbort?: () => void;
  /** Answered DEADLINE_EXCEEDED while its statement ran: its outcome, when it comes, is abandoned. */
  gone?: boolean;
}

interface Lane<I, O> {
  waiting: Entry<I, O>[];
  busy: boolean;
  /** Lingering after a statement: it starts the next one once this many wait, or when `timer` fires. */
  expect?: number;
  timer?: ReturnType<typeof setTimeout>;
}

/** Statements that start at once after a linger ran out with fewer than half back, before the next may linger. */
const LINGER_SKIPS = 8;

/** The key `run` is called with for a statement of riders alone (no other lane was busy to take them). */
export const RIDERS_KEY = "\u0000riders";

export class GroupCommit<I, O> {
  private readonly lanes = new Map<string, Lane<I, O>>();
  /** Riders waiting for a statement; kept apart from the map so no keyed lane is confused with them. */
  private readonly riders: Lane<I, O> = { waiting: [], busy: false };
  /** Statements to run without lingering: a linger that ran out with fewer than half back skips the next few. */
  private lingerSkips = 0;

  constructor(
    private readonly hooks: GroupCommitHooks<I, O>,
    private readonly options: GroupCommitOptions,
  ) {}

  /**
   * The item's outcome once its batch has run. Items of one key share statements; a caller whose
   * deadline passes while its item still waits is answered DEADLINE_EXCEEDED and its item never runs.
   */
  submit(key: string, item: I, signal?: AbortSignal): Promise<O> {
    let lane = this.lanes.get(key);
    if (!lane) {
      lane = { waiting: [], busy: false };
      this.lanes.set(key, lane);
    }
    const l = lane;
    return this.enqueue(l, item, signal, () => {
      if (!l.busy) this.start(key, l);
      else if (l.expect !== undefined && this.waitingFor(l) >= l.expect) this.release(key, l);
    });
  }

  /**
   * An item any lane's statement may carry: it goes with the next statement of a busy lane, or, when
   * no lane is busy, runs at once in a lane of riders. `run` is then called with the key RIDERS_KEY.
   */
  submitRider(item: I, signal?: AbortSignal): Promise<O> {
    return this.enqueue(this.riders, item, signal, () => {
      if (!this.riders.busy && !this.anyBusy()) this.start(RIDERS_KEY, this.riders);
      else if (this.riders.expect !== undefined && this.waitingFor(this.riders) >= this.riders.expect)
        this.release(RIDERS_KEY, this.riders);
      else
        for (const [key, l] of this.lanes)
          if (l.expect !== undefined && this.waitingFor(l) >= l.expect) {
            this.release(key, l);
            break;
          }
    });
  }

  /** What the lane's next statement could take, weighed: its own waiting items and the riders. */
  private waitingFor(lane: Lane<I, O>): number {
    return this.weigh(lane.waiting) + (lane === this.riders ? 0 : this.weigh(this.riders.waiting));
  }

  private weigh(entries: readonly Entry<I, O>[]): number {
    const { weight } = this.hooks;
    if (!weight) return entries.length;
    let load = 0;
    for (const e of entries) load += weight(e.item);
    return load;
  }

  /**
   * After a statement that answered `answered` callers (weighed) who come back at once: when fewer
   * than they and those already waiting are here (up to maxBatch), the lane stays busy (riders still join it) until they are,
   * or until lingerMs has passed. A lone worker never waits: it is the one expected. Group commit's
   * commit_delay, with the callers counted instead of guessed.
   */
  private linger(key: string, lane: Lane<I, O>, answered: number): boolean {
    const ms = this.options.lingerMs ?? 0;
    if (ms <= 0 || !this.hooks.returning) return false;
    if (this.lingerSkips > 0) {
      this.lingerSkips--;
      return false;
    }
    const before = this.waitingFor(lane);
    const expect = Math.min(this.options.maxBatch, answered + before);
    if (before >= expect) return false;
    lane.expect = expect;
    lane.timer = setTimeout(() => {
      // Time is up. When not even half of them came back (workers with real work, or gone), those
      // waiting waited for little: the next statements start at once, and lingering is tried
      // again after them. One slow worker of a busy fleet does not stop it.
      if ((this.waitingFor(lane) - before) * 2 < expect - before) this.lingerSkips = LINGER_SKIPS;
      this.release(key, lane);
    }, ms);
    return true;
  }

  /** Ends a lane's lingering: its next statement starts, or it goes idle. */
  private release(key: string, lane: Lane<I, O>): void {
    if (lane.timer) clearTimeout(lane.timer);
    lane.timer = undefined;
    lane.expect = undefined;
    if (this.waitingFor(lane) > 0) void this.flush(key, lane);
    else this.idle(key, lane);
  }

  private anyBusy(): boolean {
    for (const l of this.lanes.values()) if (l.busy) return true;
    return false;
  }

  private enqueue(l: Lane<I, O>, item: I, signal: AbortSignal | undefined, kick: () => void): Promise<O> {
    if (signal?.aborted) return Promise.reject(waitedTooLong());
    return new Promise<O>((resolve, reject) => {
      const entry: Entry<I, O> = { item, signal, resolve, reject };
      if (signal) {
        entry.onAbort = () => {
          const i = l.waiting.indexOf(entry);
          if (i < 0) return; // already in a statement: settled when it returns
          l.waiting.splice(i, 1);
          reject(waitedTooLong());
        };
        signal.addEventListener("abort", entry.onAbort, { once: true });
      }
      l.waiting.push(entry);
      kick();
    });
  }

  private start(key: string, lane: Lane<I, O>): void {
    lane.busy = true;
    void this.flush(key, lane);
  }

  private async flush(key: string, lane: Lane<I, O>): Promise<void> {
    const batch = this.take(lane);
    if (batch.length === 0) {
      this.idle(key, lane);
      return;
    }
    // A caller whose deadline passes while the statement runs is answered at once, as a direct
    // call's cancelled statement would be; when no caller is left, the statement is cancelled.
    const stop = new AbortController();
    let waiting = batch.length;
    const leave = (e: Entry<I, O>) => () => {
      e.gone = true;
      e.reject(waitedTooLong());
      if (--waiting === 0) stop.abort();
    };
    const leaves = batch.map((e) => {
      if (e.onAbort) e.signal?.removeEventListener("abort", e.onAbort);
      const onLeave = leave(e);
      e.signal?.addEventListener("abort", onLeave, { once: true });
      return onLeave;
    });
    this.hooks.batched?.(batch.length);
    try {
      const outcomes = await this.hooks.run(
        key,
        batch.map((e) => e.item),
        stop.signal,
      );
      batch.forEach((e, i) => this.settle(e, outcomes[i]));
    } catch (err) {
      for (const e of batch) if (!e.gone) e.reject(err);
    } finally {
      batch.forEach((e, i) => e.signal?.removeEventListener("abort", leaves[i]));
    }
    if (this.linger(key, lane, this.weigh(batch))) return;
    // Riders left waiting (more than one statement could take) go with this lane's next statement.
    if (lane.waiting.length > 0 || this.riders.waiting.length > 0) void this.flush(key, lane);
    else this.idle(key, lane);
  }

  private idle(key: string, lane: Lane<I, O>): void {
    lane.busy = false;
    if (lane !== this.riders && lane.waiting.length === 0) this.lanes.delete(key);
  }

  /**
   * Up to maxBatch waiting entries, the lane's own in arrival order and then riders, passing over
   * any that conflict with one taken.
   */
  private take(lane: Lane<I, O>): Entry<I, O>[] {
    const taken: Entry<I, O>[] = [];
    lane.waiting = this.pick(lane.waiting, taken);
    if (lane !== this.riders) this.riders.waiting = this.pick(this.riders.waiting, taken);
    return taken;
  }

  /** Moves the entries of `waiting` that fit into `taken`; returns the rest. */
  private pick(waiting: Entry<I, O>[], taken: Entry<I, O>[]): Entry<I, O>[] {
    const left: Entry<I, O>[] = [];
    const { conflict, weight } = this.hooks;
    let load = 0;
    if (weight) for (const t of taken) load += weight(t.item);
    else load = taken.length;
    for (const e of waiting) {
      const w = weight ? weight(e.item) : 1;
      const fits = taken.length === 0 || load + w <= this.options.maxBatch;
      if (fits && !(conflict && taken.some((t) => conflict(t.item, e.item)))) {
        taken.push(e);
        load += w;
      } else left.push(e);
    }
    return left;
  }

  private settle(e: Entry<I, O>, outcome: Outcome<O> | undefined): void {
    if (outcome === undefined) {
      e.reject(new Error("group commit: the batch answered fewer outcomes than items"));
      return;
    }
    if ("error" in outcome) {
      e.reject(outcome.error);
      return;
    }
    if (e.gone) {
      // The caller was answered DEADLINE_EXCEEDED: what it was given goes back.
      this.hooks.abandon?.(e.item, outcome.value);
      return;
    }
    e.resolve(outcome.value);
  }
}

function waitedTooLong(): DeadlineExceededError {
  return new DeadlineExceededError("the request's deadline passed while it waited for its statement");
}
