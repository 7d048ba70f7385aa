// A worker's events, typed: listeners by event name, called in the order they were added. Node's
// EventEmitter is not used: the package runs in browsers too, and an `error` event nobody listens
// to must not throw (a worker goes on after a failed claim; its log line says so already).
import type { TaskContext, Result } from "./task.js";

/** The events of a {@link Worker} and their listeners' arguments. */
export interface WorkerEvents {
  /** The coordinator accepted the task's result. */
  completed: [task: TaskContext, result: Result];
  /**
   * The coordinator accepted the task's failure: `error` is what the handler threw (a
   * `RetryableError`, or a `TaskError` with `retryable`, is tried again while attempts remain).
   */
  failed: [task: TaskContext, error: unknown];
  /**
   * The task was cancelled (its job cancelled or failed) and its handler ended without a result:
   * nothing was reported (the coordinator has already ended the task).
   */
  cancelled: [task: TaskContext, reason: string];
  /**
   * Something went wrong in the worker itself, which goes on: a claim, heartbeat or report that
   * failed (a `LeaseholdError`), an outcome the coordinator refused or a lease lost. The same as the
   * worker's warn and error log lines.
   */
  error: [error: Error];
}

/** A listener of event `E`. */
export type WorkerListener<E extends keyof WorkerEvents> = (...args: WorkerEvents[E]) => void;

export class Emitter {
  /** Each event's listeners; typed by the calls that add and call them (a map cannot tie a key to its value's type). */
  readonly #listeners = new Map<keyof WorkerEvents, readonly unknown[]>();
  readonly #onListenerError: (event: string, error: unknown) => void;

  constructor(onListenerError: (event: string, error: unknown) => void) {
    this.#onListenerError = onListenerError;
  }

  on<E extends keyof WorkerEvents>(event: E, listener: WorkerListener<E>): void {
    this.#listeners.set(event, [...(this.#listeners.get(event) ?? []), listener]);
  }

  off<E extends keyof WorkerEvents>(event: E, listener: WorkerListener<E>): void {
    this.#listeners.set(
      event,
      (this.#listeners.get(event) ?? []).filter((l) => l !== listener),
    );
  }

  /** Calls each listener; one that throws is reported and does not stop the others or the worker. */
  emit<E extends keyof WorkerEvents>(event: E, ...args: WorkerEvents[E]): void {
    for (const listener of (this.#listeners.get(event) ?? []) as readonly WorkerListener<E>[]) {
      try {
        listener(...args);
      } catch (e) {
        this.#onListenerError(event, e);
      }
    }
  }
}
