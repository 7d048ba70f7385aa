// A task's attempts, told from the job's event log (task_events). Each lease of a task leaves a
// status event when it starts (status 'leased' at the new attempt) and, unless it still runs, one
// when it ends; progress reports are events of their own. Pure: the store reads the events.

import type { AttemptOutcome, JobEvent, Task, TaskAttempt } from "./types.js";

/** What the reaper writes into the task; a claim that takes an expired lease back writes nothing, so say the same. */
const LEASE_EXPIRED_MESSAGE = "the lease expired before the worker reported a result";

/**
 * The attempts of `task`, oldest first, from its events in write order (task_status and
 * task_progress events of this task only).
 */
export function attemptsOf(task: Task, events: readonly JobEvent[]): TaskAttempt[] {
  const attempts: TaskAttempt[] = [];
  let open: TaskAttempt | undefined;

  const end = (at: Date, outcome: AttemptOutcome, fields: Partial<TaskAttempt> = {}) => {
    if (!open) return;
    Object.assign(open, { endedAt: at, outcome, ...fields });
    open = undefined;
  };

  for (const e of events) {
    if (e.taskId !== task.id) continue;
    if (e.kind === "task_progress") {
      const a = [...attempts].reverse().find((x) => x.attempt === e.attempt);
      if (a) {
        a.lastProgress = { progress: e.progress ?? 0, message: e.message, partialResultUri: e.partialResultUri, reportedAt: e.createdAt };
      }
      continue;
    }
    if (e.kind !== "task_status") continue;
    // The usage of the report that ended an attempt, on its event; a late result's event (cancelled ->
    // completed) comes after the cancellation ended the attempt, so it is matched by number.
    if (e.usage) {
      const a = [...attempts].reverse().find((x) => x.attempt === e.attempt);
      if (a) a.usage = e.usage;
    }
    if (e.status === "leased") {
      // Leased again while leased: a claim took an expired lease back, which ends the previous attempt.
      end(e.createdAt, "lease_expired", { errorCode: "lease_expired", errorMessage: LEASE_EXPIRED_MESSAGE, retried: true });
      open = {
        attempt: e.attempt ?? 0,
        workerId: e.workerId,
        leasedAt: e.createdAt,
        endedAt: null,
        outcome: "running",
        errorCode: null,
        errorMessage: null,
        retried: false,
        lastProgress: null,
      };
      attempts.push(open);
      continue;
    }
    // Changes that do not end a lease (a retry of a failed job, cancelling or expiring pending work) end no attempt.
    if (e.previousStatus !== "leased") continue;
    if (e.status === "completed") end(e.createdAt, "completed");
    else if (e.status === "cancelled") end(e.createdAt, "cancelled");
    else if (e.status === "failed" || e.status === "pending") {
      const expired = e.errorCode === "lease_expired";
      end(e.createdAt, expired ? "lease_expired" : "failed", {
        errorCode: e.errorCode,
        errorMessage: e.errorMessage ?? (expired ? LEASE_EXPIRED_MESSAGE : null),
        retried: e.status === "pending",
      });
    }
  }

  // Events written before the log recorded error messages: the task row still holds the last one.
  const last = attempts.at(-1);
  if (last && last.errorMessage === null && last.errorCode !== null && last.attempt === task.attempt && last.errorCode === task.errorCode) {
    last.errorMessage = task.errorMessage;
  }
  return attempts;
}
