// The loop under each of the coordinator's background services (the maintenance loop, the
// scheduler, the horizon watch): one pass at a time, then the sleep the pass asks for; each pass
// runs under a deadline of its own that stop() also cuts short, and stop() waits for the pass in
// progress, so a coordinator that shuts down never leaves a statement of a pass running.

export interface PassLoopOptions {
  /** Sleep before the first pass. */
  firstDelayMs: number;
  /** Sleep after a pass that threw (a pass normally catches and logs its own failures). */
  retryMs: number;
  /** Let the process exit while the loop sleeps (a service that only watches). */
  unref?: boolean;
}

export class PassLoop {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private stopped = true;
  private stopping = new AbortController();

  /** `pass` runs one pass and answers how long to sleep before the next. */
  constructor(
    private readonly pass: () => Promise<number>,
    private readonly options: PassLoopOptions,
  ) {}

  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.stopping = new AbortController();
    this.schedule(this.options.firstDelayMs);
  }

  /** Stops scheduling, cuts a pass in progress short and waits for it. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    this.stopping.abort();
    await this.running;
  }

  /** Whether stop() was called (a pass's failure after it is the stop's doing, not worth a warning). */
  get isStopped(): boolean {
    return this.stopped;
  }

  /** The signal of one pass, or of one part of it: aborted by stop() or after deadlineMs. */
  signal(deadlineMs: number): AbortSignal {
    return AbortSignal.any([this.stopping.signal, AbortSignal.timeout(deadlineMs)]);
  }

  private schedule(delayMs: number): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      let next = this.options.retryMs;
      this.running = this.pass()
        .then(
          (ms) => {
            next = ms;
          },
          () => {},
        )
        .finally(() => {
          this.running = undefined;
          this.schedule(next);
        });
    }, delayMs);
    if (this.options.unref) this.timer.unref();
  }
}
