// The scheduler loop every coordinator runs: a pass fires the due schedules' ticks (the store's
// statements hold each schedule while they fire it, so several loops on one database share the
// ticks and never repeat one), then the loop sleeps until the next tick is due, at most
// maxIntervalMs, so a schedule put through another coordinator is seen within that.
import { PassLoop } from "./pass-loop.js";
import type { CallOptions } from "./types.js";
import type { ScheduleTickResult } from "./types.js";

/** What the loop calls: the scheduler half of the store. */
export interface SchedulerQueue {
  fireSchedules(opts?: CallOptions): Promise<ScheduleTickResult>;
}

export interface SchedulerLogger {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
}

export interface SchedulerLoopConfig {
  /** Longest sleep between passes (a new or resumed schedule elsewhere is seen within it). */
  maxIntervalMs?: number;
  /** Sleep after a pass that found due schedules held by other coordinators' passes. */
  heldBackoffMs?: number;
  /** Sleep after a failed pass. */
  retryMs?: number;
  /** Deadline of each pass (stop() cuts it short too). */
  passDeadlineMs?: number;
  /** Called after every pass, failed or not (tests wait on it). */
  onPass?: (pass: { result?: ScheduleTickResult; error?: unknown }) => void;
  /** Called when a pass fails, unless a stop cut it short (metrics count it). */
  onPassFailed?: (error: unknown) => void;
}

export const SCHEDULER_LOOP_DEFAULTS = { maxIntervalMs: 1000, heldBackoffMs: 50, retryMs: 1000, passDeadlineMs: 10_000 } as const;

export class SchedulerLoop {
  private readonly cfg: Required<Omit<SchedulerLoopConfig, "onPass" | "onPassFailed">>;
  private readonly loop: PassLoop;

  constructor(
    private readonly queue: SchedulerQueue,
    private readonly logger: SchedulerLogger,
    private readonly config: SchedulerLoopConfig = {},
  ) {
    this.cfg = { ...SCHEDULER_LOOP_DEFAULTS, ...withoutUndefined(config) };
    if (!(this.cfg.maxIntervalMs > 0)) throw new RangeError(`scheduler maxIntervalMs must be positive, not ${this.cfg.maxIntervalMs}`);
    this.loop = new PassLoop(() => this.pass(), { firstDelayMs: 0, retryMs: this.cfg.retryMs });
  }

  start(): void {
    this.loop.start();
  }

  /** Stops scheduling, cuts a pass in progress short and waits for it. */
  stop(): Promise<void> {
    return this.loop.stop();
  }

  /** One pass; the sleep before the next. */
  private async pass(): Promise<number> {
    const signal = this.loop.signal(this.cfg.passDeadlineMs);
    try {
      const result = await this.queue.fireSchedules({ signal });
      for (const f of result.failures)
        this.logger.warn(
          { schedule: f.schedule, fire_at: f.fireAt.toISOString(), err: f.message },
          "schedule tick created no job: CreateJob refused its template",
        );
      const { overlap, catchUp } = result.skipped;
      if (result.fired > 0 || overlap + catchUp > 0)
        this.logger.info({ fired: result.fired, skipped_overlap: overlap, skipped_catch_up: catchUp }, "schedule ticks");
      this.config.onPass?.({ result });
      const due = result.nextDueInMs;
      if (due === null) return this.cfg.maxIntervalMs;
      // Still due after the pass: held by another coordinator's pass (or more than one pass's worth).
      if (due <= 0) return result.fired > 0 ? 0 : this.cfg.heldBackoffMs;
      // A millisecond past the tick, so the pass finds it due by the database's clock.
      return Math.min(Math.ceil(due) + 1, this.cfg.maxIntervalMs);
    } catch (err) {
      if (!this.loop.isStopped) {
        this.logger.warn({ err }, "scheduler pass failed; retrying");
        this.config.onPassFailed?.(err);
      }
      this.config.onPass?.({ error: err });
      return this.cfg.retryMs;
    }
  }
}

function withoutUndefined<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}
