// Long-poll claims: a claim that finds nothing parks until work for one of its workloads
// commits (a wake from the store's LISTEN connection), the poll interval passes (the floor
// under lost notifications), the wait or the caller's deadline ends, or the coordinator
// shuts down; then it claims again. An empty wait answers an empty list.
// WatchJob streams end at shutdown too (UNAVAILABLE: the client watches again elsewhere).

import { UnavailableError } from "./errors.js";
import type { PutScheduleInput, PutScheduleResult, Schedule } from "./schedules.js";
import type { QueueService } from "./service.js";
import type {
  KeyLimit,
  ListWorkloadKeysInput,
  ListWorkloadKeysResult,
  PutKeyLimitInput,
  BatchCompletedAndClaimed,
  CallOptions,
  CancelJobInput,
  ClaimOutcome,
  ClaimTasksInput,
  CompletedAndClaimed,
  CompleteOutcome,
  CompleteTaskInput,
  CreateJobInput,
  CreateJobResult,
  ExpireLeasesResult,
  FailTaskInput,
  Job,
  JobStatusResult,
  JobUpdate,
  ListCompletedResultsInput,
  ListCompletedResultsResult,
  ListJobsInput,
  ListJobsResult,
  ListTasksInput,
  ListTasksResult,
  MaintenanceResult,
  PutWorkloadInput,
  RenewLeaseInput,
  ReportProgressInput,
  RetryJobInput,
  RetryJobResult,
  Task,
  TaskDetail,
  WatchOptions,
  Workload,
  WorkloadTaskStats,
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

/** The queue a long poll wraps: with a claim that says when a rate limit's next token is due. */
export interface ClaimingQueue extends QueueService {
  claim(input: ClaimTasksInput, opts?: CallOptions): Promise<ClaimOutcome>;
}

interface Waiter {
  workloads: string[];
  wake: () => void;
}

/**
 * The queue with long-poll claims (claimTasks, and the claim_next of result reports) and watches
 * that end at shutdown; every other call is passed to the wrapped queue as it is.
 */
export class LongPollingQueue implements QueueService {
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
    const stop = new AbortController();
    if (this.closed) stop.abort(shuttingDown());
    this.watches.add(stop);
    try {
      yield* this.queue.watchJob(jobId, { ...opts, signal: opts.signal ? AbortSignal.any([opts.signal, stop.signal]) : stop.signal });
    } finally {
      this.watches.delete(stop);
    }
  }

  // The calls a long poll does not change.

  createJob(input: CreateJobInput, opts?: CallOptions): Promise<CreateJobResult> {
    return this.queue.createJob(input, opts);
  }

  renewLease(input: RenewLeaseInput, opts?: CallOptions): Promise<Task> {
    return this.queue.renewLease(input, opts);
  }

  completeTask(input: CompleteTaskInput, opts?: CallOptions): Promise<Task> {
    return this.queue.completeTask(input, opts);
  }

  completeTasks(inputs: CompleteTaskInput[], opts?: CallOptions): Promise<CompleteOutcome[]> {
    return this.queue.completeTasks(inputs, opts);
  }

  failTask(input: FailTaskInput, opts?: CallOptions): Promise<Task> {
    return this.queue.failTask(input, opts);
  }

  getJobStatus(jobId: string, opts?: CallOptions): Promise<JobStatusResult> {
    return this.queue.getJobStatus(jobId, opts);
  }

  listCompletedResults(input: ListCompletedResultsInput, opts?: CallOptions): Promise<ListCompletedResultsResult> {
    return this.queue.listCompletedResults(input, opts);
  }

  cancelJob(input: CancelJobInput, opts?: CallOptions): Promise<Job> {
    return this.queue.cancelJob(input, opts);
  }

  putWorkload(input: PutWorkloadInput, opts?: CallOptions): Promise<Workload> {
    return this.queue.putWorkload(input, opts);
  }

  listWorkloads(opts?: CallOptions): Promise<Workload[]> {
    return this.queue.listWorkloads(opts);
  }

  putKeyLimit(input: PutKeyLimitInput, opts?: CallOptions): Promise<KeyLimit> {
    return this.queue.putKeyLimit(input, opts);
  }

  pauseWorkload(name: string, opts?: CallOptions): Promise<Workload> {
    return this.queue.pauseWorkload(name, opts);
  }

  // Resuming notifies the workload's channel: claims parked here are woken by that, on every coordinator.
  resumeWorkload(name: string, opts?: CallOptions): Promise<Workload> {
    return this.queue.resumeWorkload(name, opts);
  }

  listWorkloadKeys(input: ListWorkloadKeysInput, opts?: CallOptions): Promise<ListWorkloadKeysResult> {
    return this.queue.listWorkloadKeys(input, opts);
  }

  putSchedule(input: PutScheduleInput, opts?: CallOptions): Promise<PutScheduleResult> {
    return this.queue.putSchedule(input, opts);
  }

  getSchedule(name: string, opts?: CallOptions): Promise<Schedule> {
    return this.queue.getSchedule(name, opts);
  }

  listSchedules(opts?: CallOptions): Promise<Schedule[]> {
    return this.queue.listSchedules(opts);
  }

  deleteSchedule(name: string, opts?: CallOptions): Promise<Schedule> {
    return this.queue.deleteSchedule(name, opts);
  }

  pauseSchedule(name: string, opts?: CallOptions): Promise<Schedule> {
    return this.queue.pauseSchedule(name, opts);
  }

  resumeSchedule(name: string, opts?: CallOptions): Promise<Schedule> {
    return this.queue.resumeSchedule(name, opts);
  }

  reportProgress(input: ReportProgressInput, opts?: CallOptions): Promise<Task> {
    return this.queue.reportProgress(input, opts);
  }

  retryJob(input: RetryJobInput, opts?: CallOptions): Promise<RetryJobResult> {
    return this.queue.retryJob(input, opts);
  }

  listJobs(input: ListJobsInput, opts?: CallOptions): Promise<ListJobsResult> {
    return this.queue.listJobs(input, opts);
  }

  listTasks(input: ListTasksInput, opts?: CallOptions): Promise<ListTasksResult> {
    return this.queue.listTasks(input, opts);
  }

  getTask(taskId: string, opts?: CallOptions): Promise<TaskDetail> {
    return this.queue.getTask(taskId, opts);
  }

  expireLeases(opts?: CallOptions): Promise<ExpireLeasesResult> {
    return this.queue.expireLeases(opts);
  }

  maintain(opts?: CallOptions): Promise<MaintenanceResult> {
    return this.queue.maintain(opts);
  }

  taskStats(scope: "unfinished" | "all", opts?: CallOptions): Promise<WorkloadTaskStats[]> {
    return this.queue.taskStats(scope, opts);
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
