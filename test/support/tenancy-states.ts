// An account's jobs in every state a job reaches, made through the store as callers and workers
// would (for the tenancy tests: a bound token must find none of another account's, whatever state
// it is in, so every scope of every statement is exercised): pending, leased, completed with a
// result, failed, cancelled, settled, settled with a late result (an adjustment), ended with its
// finalizer enqueued, the finalizer's own job, and a schedule's tick job.
import type pg from "pg";
import type { PostgresQueue } from "../../src/store/postgres/store.js";
import { sha } from "./queue.js";

export interface StateFixture {
  /** the state's name, for failure messages */
  state: string;
  jobId: string;
  /** a task of the job */
  taskId: string;
}

export interface AccountStates {
  states: StateFixture[];
  /** an unsettled adjustment of the account (the late result's) */
  adjustmentId: string;
  /** the schedule whose tick made the "tick" state's job */
  scheduleName: string;
  /** the workloads the states use (their tasks are all this account's) */
  workloads: string[];
  /** a workflow of the account: its first node pending, its second waiting for it */
  workflowId: string;
}

const WORKER = "states-worker";

/**
 * Makes the states for `account` (which must exist) on workloads of their own (named by `tag`), so
 * that claims here take only these tasks. Unscoped store calls: an admin's and the workers'.
 */
export async function accountStates(q: PostgresQueue, pool: pg.Pool, account: string, tag: string): Promise<AccountStates> {
  const w = `st_${tag}`;
  const fin = `st_${tag}_fin`;
  const tick = `st_${tag}_tick`;
  for (const name of [w, fin, tick]) await q.putWorkload({ name, maxAttempts: 1, leaseSeconds: 300 });
  let n = 0;
  const create = async (extra: Record<string, unknown> = {}) =>
    (await q.createJob({ workload: w, account, inputUri: `s3://in/${tag}/${++n}`, inputSha256: sha(`${tag}-${n}`), ...extra })).job.id;
  const claim = async () => {
    const [t] = await q.claimTasks({ workerId: WORKER, workloads: [w], maxTasks: 1 });
    if (!t) throw new Error("accountStates: nothing to claim");
    return t;
  };
  const complete = (t: { id: string; attempt: number }, usage: Record<string, number> = { gpu_ms: 1 }) =>
    q.completeTask({
      taskId: t.id,
      workerId: WORKER,
      attempt: t.attempt,
      resultUri: `s3://secret/${tag}/${t.id}`,
      resultSha256: sha(t.id),
      usage,
    });
  const states: StateFixture[] = [];
  const add = (state: string, jobId: string, taskId: string) => states.push({ state, jobId, taskId });

  let id = await create();
  let t = await claim();
  add("leased", id, t.id);

  id = await create();
  t = await claim();
  await complete(t);
  add("completed with a result", id, t.id);

  id = await create();
  t = await claim();
  await q.failTask({ taskId: t.id, workerId: WORKER, attempt: t.attempt, errorCode: "boom", retryable: false, usage: { gpu_ms: 2 } });
  add("failed", id, t.id);

  id = await create();
  t = await claim();
  await complete(t);
  await q.settleJob({ jobId: id, settlementKey: `st-${tag}-settled`, settledUnits: 1 });
  add("settled", id, t.id);

  id = await create();
  t = await claim();
  await q.cancelJob({ jobId: id, reason: "states" });
  await q.settleJob({ jobId: id, settlementKey: `st-${tag}-adjusted`, settledUnits: 0 });
  await complete(t, { gpu_ms: 5 });
  add("settled, then a late result (an adjustment)", id, t.id);
  const { rows: adj } = await pool.query<{ id: string }>(`SELECT id FROM usage_adjustments WHERE job_id = $1`, [id]);
  if (adj.length !== 1) throw new Error("accountStates: the late result made no adjustment");

  id = await create({ finalizer: { workload: fin } });
  t = await claim();
  await complete(t);
  add("ended, its finalizer enqueued", id, t.id);
  const finJob = (await q.getJobStatus(id)).job.finalizerJobId;
  if (!finJob) throw new Error("accountStates: no finalizer job");
  const finTask = (await q.listTasks({ jobId: finJob })).tasks[0].task;
  add("a finalizer's job", finJob, finTask.id);

  const scheduleName = `st-${tag}`;
  await q.putSchedule({
    name: scheduleName,
    cron: "0 0 1 1 *",
    job: { workload: tick, account, inputUri: "s3://in/tick", inputSha256: sha("tick") },
  });
  await pool.query(`UPDATE schedules SET next_fire_at = now() WHERE name = $1`, [scheduleName]);
  const fired = await q.fireSchedules();
  if (fired.failures.length > 0) throw new Error(`accountStates: the tick failed: ${fired.failures[0].message}`);
  const { rows: ticked } = await pool.query<{ id: string }>(`SELECT id FROM jobs WHERE schedule_name = $1`, [scheduleName]);
  add("a schedule's tick job", ticked[0].id, (await q.listTasks({ jobId: ticked[0].id })).tasks[0].task.id);

  id = await create();
  await q.cancelJob({ jobId: id });
  add("cancelled", id, (await q.listTasks({ jobId: id })).tasks[0].task.id);

  // Last, so that no claim above took its task.
  id = await create();
  add("pending", id, (await q.listTasks({ jobId: id })).tasks[0].task.id);

  // A job waiting for another, and a workflow whose second node waits for its first.
  const waiting = (
    await q.createJob({ workload: w, account, inputUri: `s3://in/${tag}/w`, inputSha256: sha(`${tag}-w`), after: [{ jobId: id }] })
  ).job.id;
  add("waiting for its parent", waiting, (await q.listTasks({ jobId: waiting })).tasks[0].task.id);
  const { workflow } = await q.createWorkflow({
    account,
    nodes: [
      { name: "first", job: { workload: w, inputUri: `s3://in/${tag}/f`, inputSha256: sha(`${tag}-f`) } },
      { name: "second", job: { workload: w, inputUri: `s3://in/${tag}/s`, inputSha256: sha(`${tag}-s`) }, after: [{ node: "first" }] },
    ],
  });
  const second = workflow.nodes[1].jobId;
  add("a workflow's waiting node", second, (await q.listTasks({ jobId: second })).tasks[0].task.id);

  return { states, adjustmentId: adj[0].id, scheduleName, workloads: [w, fin, tick], workflowId: workflow.id };
}
