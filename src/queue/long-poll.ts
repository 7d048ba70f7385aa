// Long-poll claims: a claim that finds nothing parks until work for one of its workloads
// commits (a wake from the store's LISTEN connection), the poll interval passes (the floor
// under lost notifications), the wait or the caller's deadline ends, or the coordinator
// shuts down; then it claims again. An empty wait answers an empty list.
// WatchJob streams end at shutdown too (UNAVAILABLE: the client watches again elsewhere).

import { UnavailableError } from "./errors.js";
import { overriding } from "./override.js";
import type { QueueService } from "./service.js";
import type {
  BatchCompletedAndClaimed,
  CallOptions,
  ClaimTasksInput,
  CompletedAndClaimed,
  CompleteTaskInput,
  JobUpdate,
  Task,
  WatchOptions,
} from "./types.js";

/** Where wake-ups come from: (workload, how many tasks became claimable). */
export interface WakeSource {
  subscribe(onWake: (workload: string, count: number) => void, onReconnect: () => void): () => void;
}

export interface LongPollOptions {
  pollIntervalMs: number;
  /** Answer this long before the caller's deadline, so the empty answer arrives in time. */
  deadlineMarginMs?: number;
}

interface Waiter {
  workloads: string[];
  wake: () => void;
}

// Every call but the claims (claimTasks, and the claim_next of result reports) and watchJob is the
// wrapped queue's own: the constructor returns the queue seen through this object (override.ts),
// so nothing is passed through by hand.
// eslint-disable-next-line @typescript-eslint/no-unsafe-declaration-merging, @typescript-eslint/no-empty-object-type
export interface LongPollingQueue extends QueueService {}

/** The queue with long-poll claims and watches that end at shutdown; every other call goes straight to the store. */
// eslint-disable-next-line @typescript-eslint/no-unsafe-declaration-merging
export class LongPollingQueue {
  /** Parked claims in arrival order; a wake goes to the longest-waiting first. */
  private readonly waiters = new Set<Waiter>();
  /** Open WatchJob streams, ended by close(). */
  private readonly watches = new Set<AbortController>();
  private closed = false;
  private readonly unsubscribe: () => void;

  constructor(
    private readonly queue: QueueService,
    wakes: WakeSource,
    private readonly options: LongPollOptions,
  ) {
    this.unsubscribe = wakes.subscribe(
      (workload, count) => this.wakeFor(workload, count),
      () => this.wakeAll(), // notifications may have been lost while disconnected
    );
    return overriding(queue, this) as LongPollingQueue;
  }

  get parked(): number {
    return this.waiters.size;
  }

  async claimTasks(input: ClaimTasksInput, opts: CallOptions = {}): Promise<Task[]> {
    return this.claimOrWait(input, opts, await this.queue.claimTasks(input, opts));
  }

  /** `first` is what a claim just found; while it is nothing, park until a wake, and claim again. */
  private async claimOrWait(input: ClaimTasksInput, opts: CallOptions, first: Task[]): Promise<Task[]> {
    const waitMs = Math.max(0, (input.waitSeconds ?? 0) * 1000);
    const margin = this.options.deadlineMarginMs ?? 100;
    let until = Date.now() + waitMs;
    if (opts.deadline !== undefined) until = Math.min(until, opts.deadline - margin);
    let tasks = first;
    for (;;) {
      if (tasks.length > 0 || this.closed || opts.signal?.aborted) return tasks;
      const left = until - Date.now();
      if (left <= 0) return tasks;
      // A rate limit without a token says when the next is due: claim again then rather than at the
      // poll interval. The claims parked here spread their retries over as many token intervals as
      // there are of them, so one token does not wake them all at once.
      const due = opts.claimRetryAfterMs === undefined ? Infinity : opts.claimRetryAfterMs * (1 + Math.random() * this.waiters.size);
      opts.claimRetryAfterMs = undefined;
      await this.park(input.workloads, Math.min(left, this.jitteredPoll(), due), opts.signal);
      if (this.closed || opts.signal?.aborted || Date.now() >= until) return [];
      tasks = await this.queue.claimTasks(input, opts);
    }
  }

  // A result report's claim_next waits as a claim does, after the result is written: the report's
  // own claim (the store never waits; it checks wait_seconds with the rest before writing) is the
  // first try, and only when it found nothing does the report park.
  async completeTaskAndClaim(input: CompleteTaskInput, next: ClaimTasksInput, opts: CallOptions = {}): Promise<CompletedAndClaimed> {
    const r = await this.queue.completeTaskAndClaim(input, next, opts);
    return { task: r.task, next: await this.claimOrWait(next, opts, r.next) };
  }

  async completeTasksAndClaim(
    inputs: CompleteTaskInput[],
    next: ClaimTasksInput,
    opts: CallOptions = {},
  ): Promise<BatchCompletedAndClaimed> {
    const r = await this.queue.completeTasksAndClaim(inputs, next, opts);
    return { outcomes: r.outcomes, next: await this.claimOrWait(next, opts, r.next) };
  }

  async *watchJob(jobId: string, opts: WatchOptions = {}): AsyncGenerator<JobUpdate> {
    const stop = new AbortController();
    if (this.closed) stop.abort(shuttingDown());
    this.watches.add(stop);
    try {
      yield* this.queue.watchJob(jobId, { ...opts, signal: opts.signal ? AbortSignal.any([opts.signal, stop.signal]) : stop.signal });
    } finally {
      this.watches.delete(stop);
    }
  }

  /** Answers every parked claim at once (with an empty result) and stops waking. */
  close(): void {
    this.closed = true;
    this.unsubscribe();
    this.wakeAll();
    for (const w of this.watches) w.abort(shuttingDown());
  }

  private jitteredPoll(): number {
    const base = this.options.pollIntervalMs;
    return base * (0.8 + Math.random() * 0.4);
  }

  private park(workloads: string[], ms: number, signal: AbortSignal | undefined): Promise<void> {
    return new Promise((resolve) => {
      const waiter: Waiter = { workloads, wake: () => done() };
      const timer = setTimeout(() => done(), ms);
      const done = () => {
        clearTimeout(timer);
        signal?.removeEventListener("abort", done);
        this.waiters.delete(waiter);
        resolve();
      };
      signal?.addEventListener("abort", done, { once: true });
      this.waiters.add(waiter);
    });
  }

  /** Wakes at most `count` claims parked on this workload: no thundering herd. */
  private wakeFor(workload: string, count: number): void {
    let left = count;
    for (const w of this.waiters) {
      if (left <= 0) break;
      if (w.workloads.includes(workload)) {
        w.wake();
        left--;
      }
    }
  }

  private wakeAll(): void {
    for (const w of [...this.waiters]) w.wake();
  }
}

function shuttingDown(): UnavailableError {
  return new UnavailableError("the coordinator is shutting down; watch the job again");
}
