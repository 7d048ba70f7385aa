// The maintenance loop every coordinator runs: lease expiry (the reaper), then pending-task
// expiry and retention. Each coordinator runs its own; the store's statements take their rows
// with SKIP LOCKED, so several loops on one database share the work instead of repeating it.
import { PassLoop } from "./pass-loop.js";
import type { CallOptions, ExpireLeasesResult, MaintenanceResult } from "./types.js";

/** What the loop calls: the maintenance half of the queue. */
export interface MaintenanceQueue {
  expireLeases(opts?: CallOptions): Promise<ExpireLeasesResult>;
  /** Maintenance besides lease expiry: pending-task expiry and retention. */
  maintain(opts?: CallOptions): Promise<MaintenanceResult>;
}

export interface MaintainerLogger {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
}

export interface MaintainerConfig {
  /** Pause between the end of one pass and the start of the next. */
  intervalMs?: number;
  /**
   * Deadline of each half of a pass. Like a request, a pass has one (and stop() cuts it short),
   * so a locked table or a slow database never holds a pooled connection longer than that.
   * Default: the interval, at least MIN_PASS_DEADLINE_MS.
   */
  passDeadlineMs?: number;
  /** Called after every pass, failed or not (tests wait on it). */
  onPass?: (pass: { expired?: ExpireLeasesResult; maintained?: MaintenanceResult }) => void;
}

export const MAINTAINER_DEFAULTS = { intervalMs: 1000 } as const;
const MIN_PASS_DEADLINE_MS = 5000;

/**
 * Runs expireLeases, then maintain, every intervalMs, never two passes at once; a failure is
 * logged and the next pass tries again.
 */
export class Maintainer {
  private readonly intervalMs: number;
  private readonly passDeadlineMs: number;
  private readonly loop: PassLoop;

  constructor(
    private readonly queue: MaintenanceQueue,
    private readonly logger: MaintainerLogger,
    private readonly config: MaintainerConfig = {},
  ) {
    this.intervalMs = config.intervalMs ?? MAINTAINER_DEFAULTS.intervalMs;
    if (!(this.intervalMs > 0)) throw new RangeError(`maintenance intervalMs must be positive, not ${this.intervalMs}`);
    this.passDeadlineMs = config.passDeadlineMs ?? Math.max(this.intervalMs, MIN_PASS_DEADLINE_MS);
    const intervalMs = this.intervalMs;
    this.loop = new PassLoop(
      async () => {
        await this.pass();
        return intervalMs;
      },
      { firstDelayMs: intervalMs, retryMs: intervalMs },
    );
  }

  start(): void {
    this.loop.start();
  }

  /** Stops scheduling, cuts a pass in progress short and waits for it. */
  stop(): Promise<void> {
    return this.loop.stop();
  }

  private signal(): AbortSignal {
    return this.loop.signal(this.passDeadlineMs);
  }

  private async pass(): Promise<void> {
    const { logger } = this;
    let expired: ExpireLeasesResult | undefined;
    let maintained: MaintenanceResult | undefined;
    try {
      expired = await this.queue.expireLeases({ signal: this.signal() });
      if (expired.requeued > 0 || expired.failed > 0) logger.info({ requeued: expired.requeued, failed: expired.failed }, "expired leases");
    } catch (err) {
      logger.warn({ err }, "lease reaper failed; retrying next interval");
    }
    try {
      maintained = await this.queue.maintain({ signal: this.signal() });
      if (maintained.expiredPending > 0)
        logger.info({ expired_tasks: maintained.expiredPending }, "failed tasks nobody claimed within max_pending_seconds");
      if (maintained.deletedJobs > 0) logger.info({ deleted_jobs: maintained.deletedJobs }, "deleted finished jobs past RETENTION_DAYS");
      if (maintained.createdEventPartitions)
        logger.info({ partitions: maintained.createdEventPartitions }, "created event log partitions ahead");
      if (maintained.droppedEventPartitions)
        logger.info({ partitions: maintained.droppedEventPartitions }, "dropped event log partitions past RETENTION_DAYS");
    } catch (err) {
      logger.warn({ err }, "maintenance failed; retrying next interval");
    }
    this.config.onPass?.({ expired, maintained });
  }
}
