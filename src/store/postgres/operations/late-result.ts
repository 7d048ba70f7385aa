// A late result: the result of a task that was cancelled while its lease ran (CancelJob, or a
// fail_fast job failed by another task) is accepted and kept when it arrives within that lease,
// from the lease's holder and attempt. The work is done and paid for (a GPU render of a chunk);
// throwing it away would leave a retried job to redo it. The task becomes completed with its
// result, ListCompletedResults lists it, and its job keeps its final status: the job's outcome was
// decided when it ended, and a job is final once. Heartbeats, progress reports and failures of a
// cancelled task are still refused, so its worker learns of the cancellation at its next one.
//
// A cancelled task keeps the lease_owner, attempt and lease_expires_at it had (the cancelling
// statements leave them); RetryJob clears lease_expires_at, so once the task is pending again no
// old lease matches.
//
// Its job is final, so its usage may come after the job was counted by the usage rollup and after
// it was settled: in the same transaction, under the job's lock (the one SettleJob and RetryJob
// take), the job is given to the rollup again and, when it is settled, the usage becomes an
// adjustment (adjustments.ts). The lock makes a settle and a late result of one job one at a time:
// the settlement's usage has the late usage or the adjustment has it, exactly one of the two.

import type pg from "pg";
import type { CompleteTaskInput, Task } from "../../../queue/types.js";
import type { StoreContext } from "../state/context.js";
import { usageSum, watchedJobs } from "../sql/fragments.js";
import { namedQuery } from "../sql/query.js";
import { RESULT_PARAMS, resultParams, type ResultParams } from "../sql/result-params.js";
import { toTask, type TaskRow } from "../sql/rows.js";
import { transaction } from "../sql/db.js";
import { recordLateUsage } from "./adjustments.js";
import { JOB_LOCK } from "./job-end.js";

/*
 * The same fencing as a completion, on a cancelled task whose lease has not expired (database
 * clock). Not on the hot path: only a result the completion refused gets here, and only for a
 * cancelled task of this worker and attempt. Its event (cancelled -> completed) is written here
 * rather than by the status trigger (event_flip), so that it carries the report's usage: the work
 * was done and consumed resources, so an accepted late result's usage counts like any other.
 * The parameters as COMPLETE_TASK's.
 */
export const COMPLETE_CANCELLED_TASK = namedQuery<ResultParams, TaskRow>(
  null,
  `
WITH done AS (
  UPDATE tasks
  SET status = 'completed', result_uri = @resultUri, result_sha256 = @resultSha256, metrics = @metrics::jsonb, usage = ${usageSum("tasks.usage", "@usage::jsonb")},
      completed_at = now(), lease_expires_at = NULL, version = version + 1, event_flip = NOT event_flip
  WHERE id = @taskId AND status = 'cancelled' AND lease_owner = @workerId AND attempt = @attempt AND lease_expires_at > now()
  RETURNING *
), events AS (
  INSERT INTO task_events (job_id, task_id, chunk_index, kind, status, previous_status, attempt, worker_id, usage)
  SELECT job_id, id, chunk_index, 'task_status', 'completed', 'cancelled', attempt, lease_owner, @usage::jsonb FROM done
), ${watchedJobs("done")}
SELECT done.*, (SELECT count(*) FROM watched) AS notified FROM done`,
  [...RESULT_PARAMS, "usage"],
);

/** The task completed with this late result, or undefined when the result is not a late one (or came after the lease). */
export async function acceptLateResult(
  ctx: StoreContext,
  c: pg.PoolClient,
  task: Task,
  done: CompleteTaskInput,
): Promise<Task | undefined> {
  if (task.status !== "cancelled" || task.leaseExpiresAt === null || task.leaseOwner !== done.workerId || task.attempt !== done.attempt)
    return undefined;
  const row = await transaction(c, async () => {
    await JOB_LOCK.run(c, { jobId: task.jobId });
    const completed = await COMPLETE_CANCELLED_TASK.maybe(c, resultParams(done));
    if (completed)
      await recordLateUsage(c, { jobId: completed.job_id, taskId: completed.id, attempt: completed.attempt, usage: done.usage });
    return completed;
  });
  if (!row) return undefined;
  ctx.options.observer?.tasksCompleted(1);
  return toTask(row);
}
