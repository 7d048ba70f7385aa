// The AbortController of a unary call (its signal is the call's: deadline, client gone), reused
// from call to call. Node makes each AbortSignal through Object.setPrototypeOf on a fresh
// EventTarget, which leaves it a slow object: creating one was the largest single item of the
// API layer's own CPU in a profile (~7% per REST call, bench:api).
// Reuse is safe only for a controller nobody can still observe: one that never aborted (an
// aborted signal stays aborted, and an abort means work may still be winding down) and has no
// listener left (every waiter removes its own when the call ends). A unary call awaits all of its
// work before it answers; a server stream (which may hand its signal to AbortSignal.any, whose
// result outlives the call) gets a controller of its own instead.
import { getEventListeners } from "node:events";

const MAX_SPARE = 256;
const spare: AbortController[] = [];

/** A controller for one unary call; give it back with giveBackController when the call is over. */
export function takeController(): AbortController {
  return spare.pop() ?? new AbortController();
}

/** Keeps a finished call's controller for the next call when nothing can tell it was used. */
export function giveBackController(controller: AbortController): void {
  const { signal } = controller;
  if (spare.length < MAX_SPARE && !signal.aborted && getEventListeners(signal, "abort").length === 0) spare.push(controller);
}
