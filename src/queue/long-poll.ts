// Long-poll claims: a claim that finds nothing parks until work for one of its workloads
// commits (a wake from the store's LISTEN connection), the poll interval passes (the floor
// under lost notifications), the wait or the caller's deadline ends, or the coordinator
// shuts down; then it claims again. An empty wait answers an empty list.
// WatchJob streams end at shutdown too (UNAVAILABLE: the client watches again elsewhere).

import { UnavailableError } from "./errors.js";
import type { QueueService } from "./service.js";
import type {
  CallOptions,
  JobUpdate,
  ListJobsInput,
  ListTasksInput,
  WatchOptions,
  ReportProgressInput,
  RetryJobInput,
  CancelJobInput,
  ClaimTasksInput,
  CompleteTaskInput,
  CreateJobInput,
  FailTaskInput,
  ListCompletedResultsInput,
  PutWorkloadInput,
  RenewLeaseInput,
  Task,
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

/** The queue with long-poll claims; every other call goes straight to the store. */
export class LongPollingQueue implements QueueService {
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
  }

  get parked(): number {
    return this.waiters.size;
  }

  async claimTasks(input: ClaimTasksInput, opts: CallOptions = {}): Promise<Task[]> {
    const waitMs = Math.max(0, (input.waitSeconds ?? 0) * 1000);
    const margin = this.options.deadlineMarginMs ?? 100;
    let until = Date.now() + waitMs;
    if (opts.deadline !== undefined) until = Math.min(until, opts.deadline - margin);
    for (;;) {
      const tasks = await this.queue.claimTasks(input, opts);
      if (tasks.length > 0 || this.closed || opts.signal?.aborted) return tasks;
      const left = until - Date.now();
      if (left <= 0) return tasks;
      await this.park(input.workloads, Math.min(left, this.jitteredPoll()), opts.signal);
      if (this.closed || opts.signal?.aborted || Date.now() >= until) return [];
    }
  }

  createJob(input: CreateJobInput, opts?: CallOptions) {
    return this.queue.createJob(input, opts);
  }
  renewLease(input: RenewLeaseInput, opts?: CallOptions) {
    return this.queue.renewLease(input, opts);
  }
  completeTask(input: CompleteTaskInput, opts?: CallOptions) {
    return this.queue.completeTask(input, opts);
  }
  completeTasks(inputs: CompleteTaskInput[], opts?: CallOptions) {
    return this.queue.completeTasks(inputs, opts);
  }
  failTask(input: FailTaskInput, opts?: CallOptions) {
    return this.queue.failTask(input, opts);
  }
  expireLeases(opts?: CallOptions) {
    return this.queue.expireLeases(opts);
  }
  getJobStatus(jobId: string, opts?: CallOptions) {
    return this.queue.getJobStatus(jobId, opts);
  }
  listCompletedResults(input: ListCompletedResultsInput, opts?: CallOptions) {
    return this.queue.listCompletedResults(input, opts);
  }
  cancelJob(input: CancelJobInput, opts?: CallOptions) {
    return this.queue.cancelJob(input, opts);
  }
  putWorkload(input: PutWorkloadInput, opts?: CallOptions) {
    return this.queue.putWorkload(input, opts);
  }
  listWorkloads(opts?: CallOptions) {
    return this.queue.listWorkloads(opts);
  }
  reportProgress(input: ReportProgressInput, opts?: CallOptions) {
    return this.queue.reportProgress(input, opts);
  }
  retryJob(input: RetryJobInput, opts?: CallOptions) {
    return this.queue.retryJob(input, opts);
  }
  listJobs(input: ListJobsInput, opts?: CallOptions) {
    return this.queue.listJobs(input, opts);
  }
  listTasks(input: ListTasksInput, opts?: CallOptions) {
    return this.queue.listTasks(input, opts);
  }
  getTask(taskId: string, opts?: CallOptions) {
    return this.queue.getTask(taskId, opts);
  }
  maintain(opts?: CallOptions) {
    return this.queue.maintain(opts);
  }
  taskStats(scope: "unfinished" | "all", opts?: CallOptions) {
    return this.queue.taskStats(scope, opts);
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
