// Task inspection: ListTasks and GetTask, each task with its attempts, and the read of one task
// that explains a refused write (lease.ts, complete.ts). Reads only: none of these statements runs
// on the claim/complete path.

import type pg from "pg";
import { attemptsOf } from "../../../queue/attempts.js";
import { NotFoundError } from "../../../queue/errors.js";
import type { CallOptions, JobEvent, ListTasksInput, ListTasksResult, Task, TaskDetail } from "../../../queue/types.js";
import { encodeTasksPageToken, validateListTasks } from "../../../queue/list-validation.js";
import { requireUuid } from "../../../queue/validation.js";
import type { StoreContext } from "../state/context.js";
import { withClient } from "../sql/db.js";
import { JOB_EXISTS } from "./jobs.js";
import { defineQuery } from "../sql/query.js";
import { accountScope } from "../sql/scope.js";
import { toJobEvent, toTask, type JobEventRow, type TaskRow } from "../sql/rows.js";
import { waitingOf } from "./flow-control.js";
import { readParents, waitingForParents } from "./dependencies.js";

export const SELECT_TASK = defineQuery<{ taskId: string }, TaskRow>(null, `SELECT * FROM tasks WHERE id = $1`, (p) => [p.taskId]);

// GetTask for a bound token (CallOptions.account): another account's task is not found, by the
// same one statement as a task that does not exist. The job's account by its key (a subquery on
// the job's id, so no plan walks the account's index). $2 the account.
export const SELECT_ACCOUNT_TASK = defineQuery<{ taskId: string; account: string }, TaskRow>(
  null,
  `SELECT t.* FROM tasks t WHERE t.id = $1 AND ${accountScope("(SELECT j.account FROM jobs j WHERE j.id = t.job_id) = $2")}`,
  (p) => [p.taskId, p.account],
);

/*
 * ListTasks, keyset-paginated on chunk_index. One variant per index, as for ListJobs (generic
 * plans cannot choose by a parameter's value): every task or one status through tasks_job_chunk_idx
 * (the job's chunks in order, others filtered out), and failed tasks through the partial
 * tasks_job_failed_idx, so "why did it fail" does not walk a 10,000-chunk job's completed chunks.
 * $1 job id, $2 after chunk_index (-1 for the first page), $3 limit, $4 the caller's account (null:
 * any job; another account's job has no tasks, and is then not found) [, $5 status].
 */
const tasksPage = (statusFilter: string) => `
SELECT * FROM tasks
WHERE job_id = $1 AND chunk_index > $2 ${statusFilter}
  AND ${accountScope("$4::text IS NULL OR (SELECT j.account FROM jobs j WHERE j.id = $1) = $4")}
ORDER BY chunk_index
LIMIT $3`;
interface TasksPage {
  jobId: string;
  afterChunk: number;
  limit: number;
  account: string | null;
}
const pageValues = (p: TasksPage) => [p.jobId, p.afterChunk, p.limit, p.account];
export const LIST_TASKS = defineQuery<TasksPage, TaskRow>(null, tasksPage(""), pageValues);
export const LIST_TASKS_BY_STATUS = defineQuery<TasksPage & { status: Task["status"] }, TaskRow>(
  null,
  tasksPage("AND status = $5::task_status"),
  (p) => [...pageValues(p), p.status],
);
export const LIST_FAILED_TASKS = defineQuery<TasksPage, TaskRow>(null, tasksPage("AND status = 'failed'"), pageValues);

/*
 * The events the attempts of some of a job's tasks are told from: every status change, and the
 * last progress report of each attempt (a chatty worker may have sent thousands). Through the
 * (job_id, xid) index, so it reads the job's events and keeps those of the tasks asked for: an
 * index on task_id would serve it better but cost every claim and completion a second index
 * write (the primary key on id measured ~8% of throughput). $1 job id, $2 task ids.
 */
export const TASK_ATTEMPT_EVENTS = defineQuery<{ jobId: string; taskIds: string[] }, JobEventRow>(
  null,
  `
SELECT * FROM (
  (SELECT * FROM task_events
   WHERE job_id = $1 AND task_id = ANY($2::uuid[]) AND kind = 'task_status')
  UNION ALL
  (SELECT DISTINCT ON (task_id, attempt) * FROM task_events
   WHERE job_id = $1 AND task_id = ANY($2::uuid[]) AND kind = 'task_progress'
   ORDER BY task_id, attempt, id DESC)
) e
ORDER BY id`,
  (p) => [p.jobId, p.taskIds],
);

export async function listTasks(ctx: StoreContext, input: ListTasksInput, opts: CallOptions): Promise<ListTasksResult> {
  const q = validateListTasks(input);
  return withClient(ctx.pool, opts.signal, async (c) => {
    // One row past the page tells whether another page exists.
    const p = { jobId: q.jobId, afterChunk: q.afterChunk, limit: q.pageSize + 1, account: opts.account ?? null };
    const rows =
      q.status === null
        ? await LIST_TASKS.run(c, p)
        : q.status === "failed"
          ? await LIST_FAILED_TASKS.run(c, p)
          : await LIST_TASKS_BY_STATUS.run(c, { ...p, status: q.status });
    if (rows.length === 0 && !(await JOB_EXISTS.one(c, { jobId: q.jobId, account: opts.account })).found) {
      throw new NotFoundError("job", q.jobId);
    }
    let page = rows.slice(0, q.pageSize).map(toTask);
    // A waiting task has no parents stored yet (they are written when its job is promoted): the parents now.
    if (page.some((t) => t.status === "waiting")) {
      const parents = await readParents(c, q.jobId);
      page = page.map((t) => (t.status === "waiting" ? { ...t, parents } : t));
    }
    return {
      tasks: await withAttempts(c, q.jobId, page),
      nextPageToken: rows.length > q.pageSize ? encodeTasksPageToken(q.status, page[page.length - 1].chunkIndex) : "",
    };
  });
}

export async function getTask(ctx: StoreContext, taskId: string, opts: CallOptions): Promise<TaskDetail> {
  const id = requireUuid("task_id", taskId);
  return withClient(ctx.pool, opts.signal, async (c) => {
    const loaded = opts.account === undefined ? await loadTask(c, id) : await loadAccountTask(c, id, opts.account);
    if (loaded.status === "waiting") {
      // Its job waits for its parents: they are the reason, read now.
      const { task, detail: why } = await waitingForParents(c, loaded);
      return { ...(await withAttempts(c, task.jobId, [task]))[0], waiting: { reason: "parents", detail: why } };
    }
    const task = loaded;
    const detail = (await withAttempts(c, task.jobId, [task]))[0];
    // Why a pending task waits, computed now (flow-control.ts): nothing is stored per claim for it.
    const waiting = await waitingOf(c, task);
    return waiting ? { ...detail, waiting } : detail;
  });
}

/** Tasks of one job with their attempts, from one read of the job's events. */
async function withAttempts(c: pg.PoolClient, jobId: string, tasks: Task[]): Promise<TaskDetail[]> {
  if (tasks.length === 0) return [];
  const rows = await TASK_ATTEMPT_EVENTS.run(c, { jobId, taskIds: tasks.map((t) => t.id) });
  const byTask = new Map<string, JobEvent[]>();
  for (const r of rows) {
    const e = toJobEvent(r);
    const list = byTask.get(e.taskId ?? "");
    if (list) list.push(e);
    else byTask.set(e.taskId ?? "", [e]);
  }
  return tasks.map((task) => ({ task, attempts: attemptsOf(task, byTask.get(task.id) ?? []) }));
}

async function loadAccountTask(c: pg.PoolClient, taskId: string, account: string): Promise<Task> {
  const row = await SELECT_ACCOUNT_TASK.maybe(c, { taskId, account });
  if (!row) throw new NotFoundError("task", taskId);
  return toTask(row);
}

export async function loadTask(c: pg.PoolClient, taskId: string): Promise<Task> {
  const row = await SELECT_TASK.maybe(c, { taskId });
  if (!row) throw new NotFoundError("task", taskId);
  return toTask(row);
}
