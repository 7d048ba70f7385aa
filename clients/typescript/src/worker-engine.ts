// The worker's implementation: claims tasks for its lanes, runs each workload's handler, keeps the
// leases alive and reports outcomes in batches whose answers lease the next tasks. One event loop,
// no threads: a lane is a slot the handler's promise holds until its outcome is reported. Not
// exported from the package: `Worker` (worker.ts) is its public face, so none of this is API.
import { createClient, type CallOptions, type Client as RpcClient } from "@connectrpc/connect";
import { hostname, openTransport, SIGNALS, type OpenTransport } from "#transport";
import { errorFor, LeaseholdError, toLeaseholdError, WorkerConfigError } from "./errors.js";
import { sleep } from "./client.js";
import { Emitter } from "./events.js";
import { checkBaseUrl, type ConnectionOptions } from "./options.js";
import { QueueService, type Task as TaskMessage } from "./gen/leasehold/queue/v1/queue_pb.js";
import { Lease, Reporter, type Logger, type Outcome, type WorkerContext, type WorkerStats } from "./worker-lease.js";
import { TaskError, type Result, type TaskContext } from "./task.js";
import { usageMessage, type Usage } from "./usage.js";

/** A handler of one workload's tasks: returns a Result, or throws (a RetryableError to be tried again). */
export type Handler = (task: TaskContext) => Promise<Result> | Result;

/** Options of a {@link Worker}. */
export interface WorkerOptions extends ConnectionOptions {
  /** The workloads to claim; each needs a handler before `run()`. */
  workloads: string[];
  /** How many tasks run at once; default 1. */
  concurrency?: number;
  /** The worker's id; default `<workerPrefix><hostname>-<pid>` in Node, else a random one. */
  workerId?: string;
  /** Prefix of the default worker id (a worker token only acts as ids with its prefix). */
  workerPrefix?: string;
  /** Lease length asked for on claims; default the workload's. */
  leaseSeconds?: number;
  /** How long a claim waits for a task (long poll), 0–30; default 5. */
  waitSeconds?: number;
  /** Claim a task for every free lane (default true), else one per claim. */
  prefetch?: boolean;
  /** Results ready together go out in one CompleteTasks (default true). */
  batchResults?: boolean;
  /** Each result report leases the next tasks for the lanes it frees (claim_next; default true). */
  claimWithResults?: boolean;
  /** How long a drain lets running handlers finish before giving their tasks back; default 30,000 ms. */
  drainTimeoutMs?: number;
  /** Heartbeat period; default a third of each lease. */
  heartbeatIntervalMs?: number;
  /**
   * How long the coordinator may go unreached (no answer at all: connection refused or lost, TLS
   * not spoken, calls timing out) before `run()` stops and rejects with an `UnavailableError`; at
   * start and while running. Default 60,000 ms; `Infinity` retries for ever. A coordinator that
   * answers, even `unavailable` (its database is down), is waited for.
   */
  unreachableTimeoutMs?: number;
  /** Labels sent on every claim: tasks whose required labels they all match are leased too. */
  labels?: Record<string, string>;
  /** Drain on SIGTERM and SIGINT (Node; default true). */
  handleSignals?: boolean;
  /** Where log lines go; default `console`. */
  logger?: Logger;
}

const NIL_UUID = "00000000-0000-0000-0000-000000000000";
const WORKER_ID = /^[\x21-\x7e]{1,128}$/;
const MAX_BATCH = 100;

/** The worker's implementation behind `Worker` (see worker.ts for what each public call does). */
export class WorkerEngine implements WorkerContext {
  readonly url: string;
  readonly workloads: string[];
  readonly concurrency: number;
  readonly workerId: string;
  readonly stats: WorkerStats = { claimed: 0, completed: 0, failed: 0, cancelled: 0, dropped: 0, released: 0 };
  readonly log: Logger;
  readonly events: Emitter;
  readonly options: Required<
    Pick<WorkerOptions, "waitSeconds" | "prefetch" | "batchResults" | "claimWithResults" | "drainTimeoutMs" | "unreachableTimeoutMs">
  > &
    WorkerOptions;
  rpc!: RpcClient<typeof QueueService>;
  readonly leases = new Map<string, Lease>();
  stopping = false;
  claimsRefused = false;
  private hurry = false;
  private fatal: Error | undefined;
  private readonly handlers = new Map<string, Handler>();
  private readonly waiters: (() => void)[] = [];
  private poll = new AbortController();
  /** Aborted by stop(): ends the backoff sleeps of the start checks and the claim loop. */
  private readonly stopped = new AbortController();
  private reporter!: Reporter;
  private open: OpenTransport | undefined;
  /** When the first call of the current run of unanswered calls failed; undefined while the coordinator answers. */
  private unreachedSince: number | undefined;
  /** The coordinator went unreached for unreachableTimeoutMs: the worker stopped and sends nothing more. */
  private unreachable = false;

  constructor(url: string, options: WorkerOptions) {
    if (!options.workloads?.length) throw new TypeError("workloads: at least one");
    const concurrency = options.concurrency ?? 1;
    if (!Number.isInteger(concurrency) || concurrency < 1) throw new TypeError("concurrency: an integer, at least 1");
    const waitSeconds = options.waitSeconds ?? 5;
    if (!(waitSeconds >= 0 && waitSeconds <= 30)) throw new TypeError("waitSeconds: 0 to 30");
    const unreachableTimeoutMs = options.unreachableTimeoutMs ?? 60_000;
    if (!(unreachableTimeoutMs > 0)) throw new TypeError("unreachableTimeoutMs: more than 0 (Infinity: never give up)");
    this.url = checkBaseUrl(url);
    this.workloads = [...options.workloads];
    this.concurrency = concurrency;
    this.workerId = options.workerId ?? `${options.workerPrefix ?? ""}${defaultWorkerId()}`;
    if (!WORKER_ID.test(this.workerId))
      throw new TypeError(`workerId must be 1 to 128 printable ASCII characters without spaces: ${this.workerId}`);
    this.log = options.logger ?? console;
    this.events = new Emitter((event, e) => this.log.error(`a "${event}" listener of worker ${this.workerId} threw: ${String(e)}`));
    this.options = {
      prefetch: true,
      batchResults: true,
      claimWithResults: true,
      drainTimeoutMs: 30_000,
      ...options,
      waitSeconds,
      unreachableTimeoutMs,
    };
  }

  /** Registers the handler of `workload`'s tasks. */
  handle(workload: string, handler: Handler): this {
    this.handlers.set(workload, handler);
    return this;
  }

  stop(): void {
    if (this.stopping) this.hurry = true;
    this.stopping = true;
    this.stopped.abort();
    this.changed();
  }

  get gaveUp(): boolean {
    return this.unreachable;
  }

  async run(): Promise<void> {
    const missing = this.workloads.filter((w) => !this.handlers.has(w));
    if (missing.length) throw new WorkerConfigError(`no handler for workload(s) ${missing.join(", ")}`);
    this.open = openTransport(this.url, this.options);
    this.rpc = createClient(QueueService, this.open.transport);
    this.reporter = new Reporter(this);
    const onSignal = (sig: string) => {
      this.log.info(`leasehold worker ${this.workerId}: ${sig}: draining (stop claiming, finish running tasks)`);
      this.stop();
    };
    const listen = SIGNALS && this.options.handleSignals !== false && typeof process !== "undefined";
    if (listen) for (const sig of ["SIGTERM", "SIGINT"] as const) process.on(sig, onSignal);
    this.log.info(`leasehold worker ${this.workerId}: ${this.concurrency} lane(s) for ${this.workloads.join(", ")} at ${this.url}`);
    try {
      await this.checkIdentity();
      if (!this.stopping) await this.checkWorkloads();
      if (this.stopping) {
        if (this.fatal) throw this.fatal;
        return;
      }
      const claimer = this.claimLoop();
      await this.until(() => this.stopping);
      await this.drain(claimer);
      if (this.fatal) throw this.fatal;
    } finally {
      if (listen) for (const sig of ["SIGTERM", "SIGINT"] as const) process.off(sig, onSignal);
      for (const lease of this.leases.values()) lease.stopBeats();
      this.open.close();
    }
  }

  // ---------- the context the leases and the reporter use ----------

  async call<T>(method: string, fn: () => Promise<T>): Promise<T> {
    try {
      const answer = await fn();
      this.unreachedSince = undefined;
      return answer;
    } catch (e) {
      const err = toLeaseholdError(method, e, { url: this.url, callerAborted: this.poll.signal.aborted });
      this.unanswered(err);
      throw err;
    }
  }

  callOptions(): CallOptions {
    return { timeoutMs: this.options.timeoutMs ?? 10_000 };
  }

  problem(message: string, cause?: unknown): void {
    this.log.warn(message);
    this.events.emit("error", cause instanceof Error ? cause : new Error(message));
  }

  /**
   * Counts how long the coordinator has gone without answering (an error without its request id:
   * refused, reset, TLS, deadline), and gives up once that reaches unreachableTimeoutMs: the worker
   * stops at once, and run() rejects.
   */
  private unanswered(err: LeaseholdError): void {
    const unreached = err.requestId === undefined && (err.code === "unavailable" || err.code === "deadline_exceeded");
    if (!unreached) {
      this.unreachedSince = undefined;
      return;
    }
    const now = Date.now();
    this.unreachedSince ??= now;
    const limit = this.options.unreachableTimeoutMs;
    if (this.unreachable || now - this.unreachedSince < limit) return;
    this.unreachable = true;
    this.fatal = errorFor(
      "unavailable",
      `the coordinator at ${this.url} did not answer for ${Math.round(limit / 1000)} s (unreachableTimeoutMs ${limit}); last: ${err.message}`,
      { cause: err },
    );
    this.hurry = true;
    this.stop();
  }

  /** Starts a leased task in a lane (or gives it back at once while draining). */
  start(message: TaskMessage): void {
    this.stats.claimed++;
    const lease = new Lease(this, message);
    this.leases.set(lease.key, lease);
    if (this.stopping) {
      lease.giveBack("the worker is draining");
      return;
    }
    lease.beat();
    const handler = this.handlers.get(message.workload);
    void (async (): Promise<Outcome> => {
      try {
        if (!handler) throw errorFor("not_found", `no handler for workload ${message.workload}`);
        const result = await handler(lease.task);
        checkUsage(result.usage, "result.usage");
        return { lease, result };
      } catch (error) {
        return { lease, error };
      }
    })().then((outcome) => {
      lease.finished = true;
      this.changed();
      this.reporter.add(outcome);
    });
  }

  /** Called when lanes free up or the worker stops: wakes whatever waits for either. */
  changed(): void {
    for (const w of this.waiters.splice(0)) w();
  }

  /** The lanes neither running a handler nor holding an outcome yet to be reported. */
  freeLanes(): number {
    return this.concurrency - this.leases.size;
  }

  /** The claim a report carries for `lanes` lanes it frees (never parked), or none. */
  claimNext(lanes: number) {
    if (lanes <= 0 || !this.options.claimWithResults || this.claimsRefused || this.stopping) return undefined;
    return {
      workloads: this.workloads,
      labels: this.options.labels ?? {},
      maxTasks: Math.min(this.options.prefetch ? lanes : 1, MAX_BATCH),
      leaseSeconds: this.options.leaseSeconds,
    };
  }

  private async until(done: () => boolean): Promise<void> {
    while (!done()) await new Promise<void>((resolve) => this.waiters.push(resolve));
  }

  private async claimLoop(): Promise<void> {
    const backoff = new Backoff();
    while (!this.stopping) {
      const free = this.freeLanes();
      if (free <= 0) {
        await this.until(() => this.stopping || this.freeLanes() > 0);
        continue;
      }
      try {
        const res = await this.call("ClaimTasks", () =>
          this.rpc.claimTasks(
            {
              workerId: this.workerId,
              workloads: this.workloads,
              maxTasks: Math.min(this.options.prefetch ? free : 1, MAX_BATCH),
              waitSeconds: this.options.waitSeconds,
              leaseSeconds: this.options.leaseSeconds,
              labels: this.options.labels ?? {},
            },
            { signal: this.poll.signal, timeoutMs: this.options.waitSeconds * 1000 + (this.options.timeoutMs ?? 10_000) },
          ),
        );
        backoff.reset();
        for (const t of res.tasks) this.start(t);
      } catch (e) {
        if (this.stopping) return;
        const err = e as LeaseholdError;
        if (err.reason === "WORKLOAD_NOT_FOUND" || (err.code === "invalid_argument" && /workload/.test(err.message))) {
          this.fatal = unknownWorkloads(err);
          this.stop();
          return;
        }
        if (backoff.attempts === 0)
          this.problem(`leasehold worker ${this.workerId}: claim failed (${String(err)}); retrying with backoff`, err);
        await sleep(backoff.next(), this.stopped.signal).catch(() => {});
      }
    }
  }

  private async drain(claimer: Promise<void>): Promise<void> {
    const deadline = Date.now() + this.options.drainTimeoutMs;
    const running = () => [...this.leases.values()].filter((l) => !l.finished && !l.lost).length;
    while (running() > 0 && !this.hurry && Date.now() < deadline) {
      await Promise.race([new Promise<void>((r) => this.waiters.push(r)), sleep(Math.min(250, Math.max(1, deadline - Date.now())))]);
    }
    // Only now abort a parked claim: aborted earlier, one being answered would leave its tasks leased here.
    this.poll.abort(new Error("worker drained"));
    await claimer;
    for (const lease of this.leases.values()) {
      if (!lease.finished && !lease.lost) lease.giveBack("the worker stopped before the handler finished");
    }
    await this.reporter.idle();
    this.log.info(`leasehold worker ${this.workerId} drained: ${JSON.stringify(this.stats)}`);
  }

  /** A heartbeat of a task that cannot exist: NOT_FOUND means the token and worker id were accepted. */
  private async checkIdentity(): Promise<void> {
    const backoff = new Backoff();
    while (!this.stopping) {
      try {
        await this.call("RenewLease", () =>
          this.rpc.renewLease({ taskId: NIL_UUID, workerId: this.workerId, attempt: 1 }, this.callOptions()),
        );
        return;
      } catch (e) {
        const err = e as LeaseholdError;
        if (err.code === "not_found") return;
        if (err.code === "permission_denied") {
          throw new WorkerConfigError(
            `the coordinator refuses worker id ${this.workerId} with this token: ${err.message} (a worker token only acts as ` +
              "worker ids starting with its prefix; pass workerId or workerPrefix to match it)",
            { cause: err },
          );
        }
        if (err.code === "unauthenticated")
          throw new WorkerConfigError(`the coordinator refuses the token: ${err.message}`, { cause: err });
        if (err.code === "invalid_argument") {
          throw new WorkerConfigError(`the coordinator refuses worker id ${this.workerId}: ${err.message}`, { cause: err });
        }
        if (err.code === "unimplemented") throw new WorkerConfigError(err.message, { cause: err });
        if (backoff.attempts === 0) {
          const limit = this.options.unreachableTimeoutMs;
          const bound = Number.isFinite(limit) ? ` for up to ${Math.round(limit / 1000)} s (unreachableTimeoutMs)` : "";
          this.problem(
            `leasehold worker ${this.workerId}: coordinator not reachable at ${this.url} (${String(err)}); retrying${bound}`,
            err,
          );
        }
        await sleep(backoff.next(), this.stopped.signal).catch(() => {});
      }
    }
  }

  /** A result for a task that cannot exist, whose claim_next names the workloads: checked before the task is looked up. */
  private async checkWorkloads(): Promise<void> {
    try {
      await this.call("CompleteTask", () =>
        this.rpc.completeTask(
          {
            taskId: NIL_UUID,
            workerId: this.workerId,
            attempt: 1,
            resultUri: "leasehold:probe",
            resultSha256: "0".repeat(64),
            claimNext: { workloads: this.workloads, labels: this.options.labels ?? {} },
          },
          this.callOptions(),
        ),
      );
    } catch (e) {
      const err = e as LeaseholdError;
      if (err.reason === "WORKLOAD_NOT_FOUND" || err.message.includes("claim_next.workloads")) throw unknownWorkloads(err);
      if (err.code === "invalid_argument" && err.violations.some((v) => v.field.startsWith("claim_next.labels"))) {
        throw new WorkerConfigError(`the coordinator refuses the worker's labels ${JSON.stringify(this.options.labels)}: ${err.message}`, {
          cause: err,
        });
      }
    }
  }
}

function unknownWorkloads(err: LeaseholdError): WorkerConfigError {
  const known = err.metadata.known_workloads;
  const workload = err.metadata.workload;
  const what = workload ? `workload ${workload} is not known to the coordinator` : "a workload is not known to the coordinator";
  return new WorkerConfigError(`${what}: ${err.message}${known !== undefined ? ` (known workloads: ${known || "none"})` : ""}`, {
    cause: err,
  });
}

function defaultWorkerId(): string {
  return typeof process !== "undefined" && process.pid
    ? `${hostname()}-${process.pid}`
    : `${hostname()}-${Math.random().toString(36).slice(2, 10)}`;
}

/** Jittered exponential backoff, 100 ms doubling to 5 s. */
export class Backoff {
  attempts = 0;
  next(): number {
    const ms = Math.min(100 * 2 ** this.attempts, 5000);
    this.attempts++;
    return ms * (0.5 + Math.random() / 2);
  }
  reset(): void {
    this.attempts = 0;
  }
}

/** A handler's usage the coordinator would refuse fails its task here, with a message naming the counter. */
function checkUsage(usage: Usage | undefined, where: string): void {
  try {
    usageMessage(usage, where);
  } catch (e) {
    throw new TaskError(e instanceof Error ? e.message : String(e), { code: "invalid_usage" });
  }
}
