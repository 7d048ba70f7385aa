// The answers to a lease-fenced write that found no live lease: a replayed result is a success,
// anything else a conflict that says why, from the task as it is now.
import { LeaseConflictError, ResultConflictError } from "./errors.js";
import type { Usage } from "./types.js";
import type { CompleteTaskInput, LeaseRef, Task } from "./types.js";
import { sameUsage } from "./usage.js";

/**
 * A completion that matched no live lease: a replay of the accepted result returns the task, anything
 * else is a conflict. A result is its result_uri and result_sha256; metrics describe the run (a retried
 * request may have recomputed a duration), so a replay with other metrics is the same result and
 * the metrics first recorded stay. Usage is part of the result: a replay with other usage than the
 * attempt's accepted report (`recorded`) is refused, so usage is counted once per accepted report.
 */
export function replayOrConflict(task: Task, done: CompleteTaskInput, recorded?: Usage): Task {
  if (task.status === "completed" && task.attempt === done.attempt && task.leaseOwner === done.workerId) {
    const same = task.resultUri === done.resultUri && task.resultSha256 === done.resultSha256;
    if (!same) throw new ResultConflictError(`task ${task.id} is already completed with a different result manifest`);
    if (!sameUsage(recorded, done.usage))
      throw new ResultConflictError(
        `task ${task.id} is already completed with different usage (recorded ${JSON.stringify(recorded ?? {})}, reported ${JSON.stringify(done.usage ?? {})})`,
      );
    return task; // nothing written
  }
  throw leaseConflict(task, done);
}

/** Why a lease-fenced write found no live lease, from the task as it is now. */
export function leaseConflict(task: Task, ref: LeaseRef): LeaseConflictError {
  if (task.status === "cancelled") {
    // Its holder may still report the result it has (late-result.ts): say until when.
    const holder =
      task.leaseExpiresAt !== null &&
      task.leaseExpiresAt.getTime() > Date.now() &&
      task.leaseOwner === ref.workerId &&
      task.attempt === ref.attempt;
    const until = holder
      ? ` (its result is still accepted until ${task.leaseExpiresAt!.toISOString()}, when the lease would have expired)`
      : "";
    return new LeaseConflictError("task_cancelled", `task ${task.id} was cancelled${until}`);
  }
  if (task.status === "completed" || task.status === "failed") {
    return new LeaseConflictError("task_finished", `task ${task.id} is already ${task.status}`);
  }
  if (ref.attempt > task.attempt) {
    return new LeaseConflictError(
      "attempt_ahead",
      `attempt ${ref.attempt} of task ${task.id} was never leased; the current attempt is ${task.attempt} (send the attempt ClaimTasks returned)`,
    );
  }
  if (task.attempt !== ref.attempt) {
    return new LeaseConflictError(
      "stale_attempt",
      `attempt ${ref.attempt} of task ${task.id} is stale; the current attempt is ${task.attempt}`,
    );
  }
  if (task.leaseOwner !== ref.workerId) {
    return new LeaseConflictError("not_leaseholder", `worker ${JSON.stringify(ref.workerId)} does not hold the lease on task ${task.id}`);
  }
  return new LeaseConflictError("lease_expired", `the lease on task ${task.id} has expired`);
}
