// A worker's leases (heartbeats, progress, cancellation, giving a task back) and the reporter that
// sends their outcomes: failures one by one, results in one CompleteTasks whose claim_next leases
// the next tasks for the lanes the results free.
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { CallOptions, Client as RpcClient } from "@connectrpc/connect";
import { LeaseholdError } from "./errors.js";
import { sleep } from "./client.js";
import type { Emitter } from "./events.js";
import type { ClaimTasksRequestSchema, QueueService, Task as TaskMessage } from "./gen/leasehold/queue/v1/queue_pb.js";
import { errorCodeOf, errorMessageOf, LeasedTask, TaskCancelledError, TaskError, type Result } from "./task.js";
import { usageMessage } from "./usage.js";

/** Where a worker's log lines go (`console` fits). */
export interface Logger {
  debug(message: string): void;
  info(message: string): void;
  warn(message: string): void;
  error(message: string): void;
}

/** What a worker did so far. */
export interface WorkerStats {
  /** Tasks leased (by claims and by results' claim_next). */
  claimed: number;
  /** Results the coordinator accepted. */
  completed: number;
  /** Failures the coordinator accepted (retryable ones too). */
  failed: number;
  /** Tasks cancelled while their handler ran, whose handler then ended without a result (nothing reported). */
  cancelled: number;
  /** Outcomes not recorded: the coordinator refused them, or the lease was lost first. */
  dropped: number;
  /** Tasks given back at a drain (retryable `worker_draining` failures due at once). */
  released: number;
}

/** What the leases and the reporter need of their worker. */
export interface WorkerContext {
  readonly workerId: string;
  readonly rpc: RpcClient<typeof QueueService>;
  readonly leases: Map<string, Lease>;
  readonly stats: WorkerStats;
  readonly log: Logger;
  readonly events: Emitter;
  readonly options: { heartbeatIntervalMs?: number; leaseSeconds?: number; batchResults: boolean };
  readonly stopping: boolean;
  /** The worker gave up on an unreachable coordinator: calls are not sent again. */
  readonly gaveUp: boolean;
  claimsRefused: boolean;
  call<T>(method: string, fn: () => Promise<T>): Promise<T>;
  /** The options of a unary call (its deadline). */
  callOptions(): CallOptions;
  start(message: TaskMessage): void;
  changed(): void;
  claimNext(lanes: number): MessageInitShape<typeof ClaimTasksRequestSchema> | undefined;
  /** A problem the worker goes on after: a warn line and an `error` event. */
  problem(message: string, cause?: unknown): void;
}

/** A handler's outcome waiting to be reported. */
export interface Outcome {
  lease: Lease;
  result?: Result;
  error?: unknown;
}

/** Whether a refusal says the task was cancelled (its result is still kept within the lease), not that the lease is gone. */
function isCancellation(e: LeaseholdError): boolean {
  return e.code === "aborted" && e.message.includes("was cancelled");
}

/** A refusal's message without the method's name it starts with: "task … was cancelled". */
function refusalText(e: LeaseholdError): string {
  return e.message.replace(/^[A-Za-z]+: /, "");
}

function transient(e: LeaseholdError): boolean {
  return e.code === "unavailable" || e.code === "deadline_exceeded" || e.code === "internal" || e.code === "unknown";
}

/** One leased task: its heartbeats and its handler's cancellation. */
export class Lease {
  readonly key: string;
  readonly task: LeasedTask;
  finished = false;
  /** The lease is no longer this worker's (expired, re-leased, given back): its result is dropped. */
  lost = false;
  /** Why the task was cancelled, once a heartbeat or progress report said so; its handler is told to stop. */
  cancelledReason: string | undefined;
  /** Given back at a drain (counted as released): whatever its handler ends with is not reported. */
  givenBack = false;
  private readonly abort = new AbortController();
  private readonly intervalMs: number;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private beatFailing = false;

  constructor(
    private readonly w: WorkerContext,
    message: TaskMessage,
  ) {
    this.key = `${message.id}:${message.attempt}`;
    this.task = new LeasedTask(message, w.workerId, this.abort.signal, (f, m, u) => this.progress(f, m, u));
    const leaseMs = this.task.leaseExpiresAt ? this.task.leaseExpiresAt.getTime() - Date.now() : 30_000;
    this.intervalMs = w.options.heartbeatIntervalMs ?? Math.max(500, leaseMs / 3);
  }

  private request() {
    return { taskId: this.task.id, workerId: this.w.workerId, attempt: this.task.attempt, leaseSeconds: this.w.options.leaseSeconds };
  }

  /** Schedules the next heartbeat. */
  beat(delayMs = this.intervalMs): void {
    this.stopBeats();
    this.timer = setTimeout(() => void this.renew(), delayMs);
  }

  stopBeats(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }

  private renewed(task: TaskMessage | undefined): void {
    if (task?.leaseExpiresAt) this.task.leaseExpiresAt = new Date(Number(task.leaseExpiresAt.seconds) * 1000);
  }

  private async renew(): Promise<void> {
    if (this.lost || !this.w.leases.has(this.key)) return;
    try {
      const res = await this.w.call("RenewLease", () => this.w.rpc.renewLease(this.request(), this.w.callOptions()));
      this.beatFailing = false;
      this.renewed(res.task);
      this.beat();
    } catch (e) {
      const err = e as LeaseholdError;
      if (err.code === "aborted" || err.code === "not_found") {
        if (this.finished && !isCancellation(err)) this.lost = true;
        else this.refused(err);
        return;
      }
      if (!this.beatFailing) this.w.problem(`heartbeat of task ${this.task.id} failed (${String(err)}); retrying`, err);
      this.beatFailing = true;
      this.beat(Math.min(this.intervalMs, 1000) * (0.5 + Math.random() / 2));
    }
  }

  private async progress(fraction: number, message: string, partialResultUri: string): Promise<void> {
    this.task.throwIfCancelled();
    try {
      const res = await this.w.call("ReportProgress", () =>
        this.w.rpc.reportProgress(
          {
            ...this.request(),
            progress: Math.min(Math.max(fraction, 0), 1),
            message: message.slice(0, 1000),
            partialResultUri,
          },
          this.w.callOptions(),
        ),
      );
      this.renewed(res.task);
      this.beat();
    } catch (e) {
      if (!(e instanceof LeaseholdError)) throw e;
      if (e.code === "aborted" || e.code === "not_found") {
        this.refused(e);
        throw new TaskCancelledError(`${e.code}: ${e.message}`);
      }
      this.w.problem(`progress of task ${this.task.id} not reported (${String(e)})`, e);
    }
  }

  /**
   * A heartbeat or progress report refused: the task was cancelled (a result is still kept), or the
   * lease lost. A cancellation is the normal end of a cancelled job's tasks: the line that says so
   * comes once its handler ends (a debug one), not here.
   */
  private refused(e: LeaseholdError): void {
    if (isCancellation(e)) this.cancelledReason ??= refusalText(e);
    else {
      this.lost = true;
      this.w.log.info(
        `task ${this.task.id} (attempt ${this.task.attempt}): ${e.message}; its handler is told to stop (request id ${e.requestId})`,
      );
    }
    this.stopBeats();
    this.abort.abort(new TaskCancelledError(`${e.code}: ${e.message}`));
  }

  /** Gives the task back as a retryable failure due at once, so another worker leases it now. */
  giveBack(why: string): void {
    this.lost = true;
    this.givenBack = true;
    this.stopBeats();
    this.abort.abort(new TaskCancelledError(`worker draining: ${why}`));
    // A coordinator the worker gave up on would not answer: the lease expires there instead.
    if (this.w.gaveUp) return this.forget();
    void this.w
      .call("FailTask", () =>
        this.w.rpc.failTask(
          {
            ...this.request(),
            errorCode: "worker_draining",
            errorMessage: why,
            retryable: true,
            retryAfterSeconds: 0,
          },
          this.w.callOptions(),
        ),
      )
      .then(
        () => this.w.stats.released++,
        (e: unknown) => this.w.problem(`task ${this.task.id} not given back (${String(e)}); its lease will expire`, e),
      )
      .finally(() => this.forget());
  }

  /** The lease leaves the worker: its lane is free. */
  forget(): void {
    this.stopBeats();
    if (this.w.leases.delete(this.key)) this.w.changed();
  }
}

const MAX_BATCH = 100;

/** Sends outcomes as they come, one report at a time; outcomes arriving meanwhile go in the next. */
export class Reporter {
  private readonly outbox: Outcome[] = [];
  private running: Promise<void> | undefined;
  /** Reports of single outcomes (batchResults false) still in flight. */
  private readonly single = new Set<Promise<void>>();

  constructor(private readonly w: WorkerContext) {}

  add(outcome: Outcome): void {
    // Unbatched, each lane's outcome is its own call, sent at once as the lane's own: one report
    // at a time would make every lane wait for the others' round trips.
    if (!this.w.options.batchResults) {
      const sent: Promise<void> = this.report([outcome])
        .catch((e: unknown) => this.w.problem(`reporting results failed: ${String(e)}`, e))
        .finally(() => this.single.delete(sent));
      this.single.add(sent);
      return;
    }
    this.outbox.push(outcome);
    // setImmediate-like: outcomes settled in the same turn go out together.
    this.running ??= sleep(0).then(() => this.flush());
  }

  /** Resolves once every outcome handed over is reported (or dropped). */
  async idle(): Promise<void> {
    while (this.running || this.single.size > 0) {
      await this.running;
      await Promise.all([...this.single]);
    }
  }

  private async flush(): Promise<void> {
    try {
      while (this.outbox.length) {
        const batch = this.outbox.splice(0, MAX_BATCH);
        await this.report(batch).catch((e: unknown) => this.w.problem(`reporting results failed: ${String(e)}`, e));
      }
    } finally {
      this.running = undefined;
    }
  }

  private async report(batch: Outcome[]): Promise<void> {
    const live = batch.filter((o) => {
      if (o.lease.givenBack) {
        this.w.log.debug(`task ${o.lease.task.id}: its handler ended after the task was given back; nothing reported`);
        o.lease.forget();
        return false;
      }
      // A cancelled task's handler that stops (throws) has nothing to report: the coordinator ended the task already.
      if (o.result === undefined && o.lease.cancelledReason !== undefined) {
        this.cancelled(o, o.lease.cancelledReason);
        return false;
      }
      if (!o.lease.lost) return true;
      this.w.stats.dropped++;
      this.w.problem(`task ${o.lease.task.id}: lease lost, its outcome is dropped`);
      o.lease.forget();
      return false;
    });
    const failures = live.filter((o) => o.result === undefined);
    const results = live.filter((o) => o.result !== undefined);
    await Promise.all(failures.map((o) => this.sendFailure(o)));
    if (results.length) await this.sendResults(results);
  }

  /** Ends a cancelled task's outcome: one debug line, the `cancelled` count and event, no report. */
  private cancelled(o: Outcome, reason: string): void {
    this.w.stats.cancelled++;
    const ended = o.error === undefined ? "" : ` (${errorMessageOf(o.error)})`;
    this.w.log.debug(`task ${o.lease.task.id} (attempt ${o.lease.task.attempt}): ${reason}; its handler stopped${ended}`);
    o.lease.forget();
    this.w.events.emit("cancelled", o.lease.task, reason);
  }

  private async retrying<T>(method: string, fn: () => Promise<T>): Promise<T> {
    let delay = 100;
    for (;;) {
      try {
        return await this.w.call(method, fn);
      } catch (e) {
        if (!(e instanceof LeaseholdError) || !transient(e) || this.w.gaveUp) throw e;
        this.w.log.warn(`${method} failed (${String(e)}); sending again`);
        await sleep(delay * (0.5 + Math.random() / 2));
        delay = Math.min(delay * 2, 5000);
      }
    }
  }

  private async sendFailure(o: Outcome): Promise<void> {
    const err = o.error;
    const retryable = err instanceof TaskError && err.retryable;
    const lease = o.lease;
    try {
      await this.retrying("FailTask", () =>
        this.w.rpc.failTask(
          {
            taskId: lease.task.id,
            workerId: this.w.workerId,
            attempt: lease.task.attempt,
            errorCode: errorCodeOf(err),
            errorMessage: errorMessageOf(err),
            retryable,
            retryAfterSeconds:
              err instanceof TaskError && err.retryAfterSeconds !== undefined ? Math.ceil(err.retryAfterSeconds) : undefined,
            usage: this.failureUsage(err, lease.task.id),
          },
          this.w.callOptions(),
        ),
      );
      this.w.stats.failed++;
      lease.forget();
      this.w.events.emit("failed", lease.task, err);
    } catch (e) {
      // Cancelled before a heartbeat could say so: the same normal end as one the handler was told of.
      if (e instanceof LeaseholdError && isCancellation(e)) return this.cancelled(o, refusalText(e));
      this.w.stats.dropped++;
      lease.forget();
      this.w.problem(`failure of task ${lease.task.id} refused (${String(e)}); dropped`, e);
    }
  }

  /** A failure's usage as the message's map; one the coordinator would refuse is logged and left out, so the failure still goes. */
  private failureUsage(err: unknown, taskId: string): { [key: string]: bigint } {
    if (!(err instanceof TaskError)) return {};
    try {
      return usageMessage(err.usage, "TaskError.usage");
    } catch (e) {
      this.w.log.warn(`task ${taskId}: failure reported without its usage: ${String(e)}`);
      return {};
    }
  }

  private async sendResults(batch: Outcome[]): Promise<void> {
    const results = batch.map((o) => ({
      taskId: o.lease.task.id,
      workerId: this.w.workerId,
      attempt: o.lease.task.attempt,
      resultUri: o.result!.uri,
      resultSha256: o.result!.sha256,
      metrics: o.result!.metrics,
      usage: usageMessage(o.result!.usage, "result.usage"),
    }));
    let claimNext = this.w.claimNext(batch.length);
    let next: TaskMessage[] = [];
    try {
      if (this.w.options.batchResults) {
        const res = await this.retrying("CompleteTasks", () => this.w.rpc.completeTasks({ results, claimNext }, this.w.callOptions()));
        res.outcomes.forEach((out, i) => this.settled(batch[i], out.error ? `${out.error.code}: ${out.error.message}` : undefined));
        next = res.nextTasks;
      } else {
        for (const [i, r] of results.entries()) {
          try {
            const res = await this.retrying("CompleteTask", () => this.w.rpc.completeTask({ ...r, claimNext }, this.w.callOptions()));
            next.push(...res.nextTasks);
            this.settled(batch[i], undefined);
          } catch (e) {
            if (!(e instanceof LeaseholdError)) throw e;
            this.settled(batch[i], `${e.code}: ${e.message}`);
          }
          claimNext = undefined;
        }
      }
    } catch (e) {
      // A coordinator older than claim_next refuses the field: send again without it, from now on.
      if (claimNext && e instanceof LeaseholdError && e.code === "invalid_argument" && e.message.includes("claim_next")) {
        this.w.claimsRefused = true;
        return this.sendResults(batch);
      }
      for (const o of batch) this.settled(o, String(e));
    }
    for (const t of next) this.w.start(t);
  }

  private settled(o: Outcome, refusal: string | undefined): void {
    o.lease.forget();
    if (refusal === undefined) {
      this.w.stats.completed++;
      this.w.events.emit("completed", o.lease.task, o.result!);
    } else {
      this.w.stats.dropped++;
      this.w.problem(`result of task ${o.lease.task.id} refused (${refusal}); dropped`);
    }
  }
}
