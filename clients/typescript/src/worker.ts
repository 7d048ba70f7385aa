// The worker as its users see it: handlers, run, stop, stats and events. Everything else lives in
// the engine (worker-engine.ts) behind a private field, so the package's types show only this.
import type { WorkerEvents, WorkerListener } from "./events.js";
import { WorkerEngine, type Handler, type WorkerOptions } from "./worker-engine.js";
import type { WorkerStats } from "./worker-lease.js";

export type { Handler, WorkerOptions } from "./worker-engine.js";
export type { WorkerStats } from "./worker-lease.js";
export type { WorkerEvents, WorkerListener } from "./events.js";

/**
 * Runs handlers for tasks of its workloads until stopped (SIGTERM/SIGINT or `stop()`), then drains.
 *
 * @example
 * const worker = new Worker("http://127.0.0.1:8080", { workloads: ["render"], concurrency: 4, token });
 * worker.handle("render", async (task) => {
 *   await task.progress(0.5, "halfway");            // renews the lease; throws once cancelled
 *   const uri = await render(task.inputUri, task.parameters, task.signal);
 *   return { uri, sha256 };
 * });
 * worker.on("failed", (task, error) => console.log(`chunk ${task.chunkIndex} failed: ${String(error)}`));
 * await worker.run();                               // resolves after a drain; rejects with WorkerConfigError at start
 */
export class Worker {
  readonly #engine: WorkerEngine;

  constructor(url: string, options: WorkerOptions) {
    this.#engine = new WorkerEngine(url, options);
  }

  /** The id the worker leases tasks as (`workerId`, or `<workerPrefix><hostname>-<pid>`). */
  get workerId(): string {
    return this.#engine.workerId;
  }

  /** What the worker did so far (a snapshot). */
  get stats(): Readonly<WorkerStats> {
    return { ...this.#engine.stats };
  }

  /** Registers the handler of `workload`'s tasks. */
  handle(workload: string, handler: Handler): this {
    this.#engine.handle(workload, handler);
    return this;
  }

  /**
   * Calls `listener` on each `event`: `completed` (task, result), `failed` (task, error), `cancelled`
   * (task, reason) once the coordinator recorded the outcome (or, cancelled, once the handler
   * stopped), and `error` (error) for a problem the worker goes on after. A listener that throws is
   * logged and does not stop the worker; an `error` nobody listens to is only logged.
   */
  on<E extends keyof WorkerEvents>(event: E, listener: WorkerListener<E>): this {
    this.#engine.events.on(event, listener);
    return this;
  }

  /** Removes a listener added with `on`. */
  off<E extends keyof WorkerEvents>(event: E, listener: WorkerListener<E>): this {
    this.#engine.events.off(event, listener);
    return this;
  }

  /**
   * Claims and runs tasks until stopped, then drains: stops claiming, lets running handlers finish
   * for up to `drainTimeoutMs`, gives the rest back as retryable failures due at once
   * (`worker_draining`) and resolves. Rejects with `WorkerConfigError` at start when a workload has
   * no handler, the URL is not a coordinator's, or the coordinator refuses the token, the worker id,
   * the labels or a workload (naming the workloads it knows); and with `UnavailableError` once the
   * coordinator has not answered for `unreachableTimeoutMs` (default 60 s), at start or later.
   */
  run(): Promise<void> {
    return this.#engine.run();
  }

  /** Begins a drain, as SIGTERM does; a second call gives the tasks still running back at once. */
  stop(): void {
    this.#engine.stop();
  }
}
