// Long-poll claims: a claim that finds nothing parks until work for one of its workloads
// commits (a wake from the store's LISTEN connection), the poll interval passes (the floor
// under lost notifications), the wait or the caller's deadline ends, or the coordinator
// shuts down; then it claims again. An empty wait answers an empty list.
// WatchJob streams end at shutdown too (UNAVAILABLE: the client watches again elsewhere).

import { UnavailableError } from "./errors.js";
import type { ApiQueue } from "./service.js";
import type {
  BatchCompletedAndClaimed,
  CallOptions,
  ClaimOutcome,
  ClaimTasksInput,
  CompletedAndClaimed,
  CompleteTaskInput,
  JobUpdate,
  Task,
  WatchOptions,
  WorkflowUpdate,
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

/** The calls that may park: the API serves these through a LongPollingQueue, every other one from the store. */
export type ParkingCalls = Pick<ApiQueue, "claimTasks" | "completeTaskAndClaim" | "completeTasksAndClaim" | "watchJob" | "watchWorkflow">;

/** What a long poll asks of the queue under it: a claim that says when a rate limit's next token is due, and the calls it wraps. */
export interface ClaimingQueue extends Pick<ApiQueue, "completeTaskAndClaim" | "completeTasksAndClaim" | "watchJob" | "watchWorkflow"> {
  claim(input: ClaimTasksInput, opts?: CallOptions): Promise<ClaimOutcome>;
}

interface Waiter {
  workloads: string[];
  wake: () => void;
}

/**
 * Long-poll claims (claimTasks, and the claim_next of result reports) and watches that end at
 * shutdown. Only the calls that park are here; the API calls the store for every other one.
 */
export class LongPollingQueue implements ParkingCalls {
  /** Parked claims in arrival order; a wake goes to the longest-waiting first. */
  private readonly waiters = new Set<Waiter>();
  /** Open WatchJob streams, ended by close(). */
  private readonly watches = new Set<AbortController>();
  private closed = false;
  private readonly unsubscribe: () => void;

  constructor(
    private readonly queue: ClaimingQueue,
    wakes: WakeSource,
    private readonly options: LongPollOptions,
  ) {
    this.unsubscribe = wakes.subscribe(
      (workload, count) => this.wakeFor(workload, count),
      () => this.wakeAll(), // notifications may have been lost while disconnected
    );
  }

  get parked(): number {
    return this.waiters.size;
  }

  async claimTasks(input: ClaimTasksInput, opts: CallOptions = {}): Promise<Task[]> {
    return this.claimOrWait(input, opts, await this.queue.claim(input, opts));
  }

  /** `first` is what a claim just found; while it is nothing, park until a wake, and claim again. */
  private async claimOrWait(input: ClaimTasksInput, opts: CallOptions, first: ClaimOutcome): Promise<Task[]> {
    const waitMs = Math.max(0, (input.waitSeconds ?? 0) * 1000);
    const margin = this.options.deadlineMarginMs ?? 100;
    let until = Date.now() + waitMs;
    if (opts.deadline !== undefined) until = Math.min(until, opts.deadline - margin);
    let { tasks, retryAfterMs } = first;
    for (;;) {
      if (tasks.length > 0 || this.closed || opts.signal?.aborted) return tasks;
      const left = until - Date.now();
      if (left <= 0) return tasks;
      // A rate limit without a token says when the next is due: claim again then rather than at the
      // poll interval. The claims parked here spread their retries over twice as many token
      // intervals as there are of them (other coordinators' claims want the same tokens), so one
      // token does not wake them all at once; the bucket keeps tokens no claim took, up to the
      // burst, so a late retry loses none while the claims outnumber the rate.
      const due = retryAfterMs === undefined ? Infinity : retryAfterMs * (1 + Math.random() * 2 * this.waiters.size);
      // A claim refused by the rate limit sleeps until its token is due: a wake (a completion, a new
      // job) brings no token, and claiming again on every wake is what made such claims spin. It
      // parks on no workload, so it takes no wake from another claim; shutdown still ends it.
      await this.park(Number.isFinite(due) ? [] : input.workloads, Math.min(left, this.jitteredPoll(), due), opts.signal);
      if (this.closed || opts.signal?.aborted || Date.now() >= until) return [];
      ({ tasks, retryAfterMs } = await this.queue.claim(input, opts));
    }
  }

  // A result report's claim_next waits as a claim does, after the result is written: the report's
  // own claim (the store never waits; it checks wait_seconds with the rest before writing) is the
  // first try, and only when it found nothing does the report park.
  async completeTaskAndClaim(input: CompleteTaskInput, next: ClaimTasksInput, opts: CallOptions = {}): Promise<CompletedAndClaimed> {
    const r = await this.queue.completeTaskAndClaim(input, next, opts);
    return { task: r.task, next: await this.claimOrWait(next, opts, { tasks: r.next }) };
  }

  async completeTasksAndClaim(
    inputs: CompleteTaskInput[],
    next: ClaimTasksInput,
    opts: CallOptions = {},
  ): Promise<BatchCompletedAndClaimed> {
    const r = await this.queue.completeTasksAndClaim(inputs, next, opts);
    return { outcomes: r.outcomes, next: await this.claimOrWait(next, opts, { tasks: r.next }) };
  }

  async *watchJob(jobId: string, opts: WatchOptions = {}): AsyncGenerator<JobUpdate> {
    yield* this.untilShutdown(opts, (o) => this.queue.watchJob(jobId, o));
  }

  async *watchWorkflow(workflowId: string, opts: WatchOptions = {}): AsyncGenerator<WorkflowUpdate> {
    yield* this.untilShutdown(opts, (o) => this.queue.watchWorkflow(workflowId, o));
  }

  /** A stream that close() ends (with UNAVAILABLE: watch again). */
  private async *untilShutdown<T>(opts: WatchOptions, watch: (opts: WatchOptions) => AsyncIterable<T>): AsyncGenerator<T> {
    const stop = new AbortController();
    if (this.closed) stop.abort(shuttingDown());
    this.watches.add(stop);
    try {
      yield* watch({ ...opts, signal: opts.signal ? AbortSignal.any([opts.signal, stop.signal]) : stop.signal });
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
