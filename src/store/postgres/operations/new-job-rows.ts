// A new job's answer, made from what was sent rather than read back: its tasks as the database
// holds them once the insert commits (every column is either a value sent or a default of the
// inserting transaction), and the array values CREATE_JOB and CREATE_JOBS send for them.

import type { CreateJobResult, Task } from "../../../queue/types.js";
import type { NormalizedCreateJob } from "../../../queue/validation.js";
import { intArrayLiteral, textArrayLiteral } from "../sql/arrays.js";
import { toJob, type JobRow } from "../sql/rows.js";

/** Each task's parameters as JSON text; tasks without parameters of their own share the job's object, written once. */
export function parametersJson(tasks: readonly { parameters: object }[]): string[] {
  const out = new Array<string>(tasks.length);
  let last: object | undefined;
  let lastJson = "";
  for (let i = 0; i < tasks.length; i++) {
    const p = tasks[i].parameters;
    if (p !== last) {
      last = p;
      lastJson = JSON.stringify(p);
    }
    out[i] = lastJson;
  }
  return out;
}

/** A task's created_at and run_after until the insert says what its now() was. */
const NOT_YET = new Date(NaN);

/**
 * A new job's tasks as the database holds them, without reading them back: every column is either
 * what was sent or a default of the inserting transaction (now() is the job's created_at, set by
 * createdJob), in chunk order.
 */
export function taskRows(job: NormalizedCreateJob, jobId: string, ids: readonly string[], maxAttempts: readonly number[]): Task[] {
  const tasks: Task[] = job.tasks.map((t, i) => ({
    id: ids[i],
    jobId,
    chunkIndex: t.chunkIndex,
    workload: t.workload,
    inputUri: t.inputUri,
    inputSha256: t.inputSha256,
    parameters: t.parameters,
    status: "pending",
    attempt: 0,
    maxAttempts: maxAttempts[i],
    priority: job.priority,
    leaseOwner: null,
    leaseExpiresAt: null,
    resultUri: null,
    resultSha256: null,
    metrics: null,
    errorCode: null,
    errorMessage: null,
    createdAt: NOT_YET,
    startedAt: null,
    completedAt: null,
    runAfter: NOT_YET,
    version: 0,
    traceparent: job.traceparent,
    concurrencyKey: job.concurrencyKey,
    requiredLabels: t.requiredLabels,
  }));
  if (!inChunkOrder(tasks)) tasks.sort((a, b) => a.chunkIndex - b.chunkIndex);
  return tasks;
}

/** The result of an inserted job: its row, and its tasks' created_at and run_after (the row's now()). */
export function createdJob(row: JobRow, tasks: Task[]): CreateJobResult {
  const created = toJob(row);
  for (const t of tasks) {
    t.createdAt = created.createdAt;
    t.runAfter = created.createdAt;
  }
  return { job: created, tasks, created: true };
}

function inChunkOrder(tasks: readonly Task[]): boolean {
  for (let i = 1; i < tasks.length; i++) if (tasks[i - 1].chunkIndex > tasks[i].chunkIndex) return false;
  return true;
}

/** Each task's required labels as jsonb text for CREATE_JOB; null when every task has the job's. */
export function taskLabels(job: NormalizedCreateJob): (string | null)[] | null {
  if (!job.tasks.some((t) => t.requiredLabels !== job.requiredLabels)) return null;
  return job.tasks.map((t) => (t.requiredLabels === null ? null : JSON.stringify(t.requiredLabels)));
}

/** The task columns CREATE_JOB and CREATE_JOBS send, as array literals (arrays.ts), one element per task. */
export interface TaskArrays {
  taskIds: string;
  taskChunkIndexes: string;
  taskWorkloads: string;
  taskInputUris: string;
  taskInputSha256s: string;
  taskParameters: string;
  taskMaxAttempts: string;
}

/** The literals made here (a third of pg's cost for 10,000 tasks), for tasks of one job or of many in a row. */
export function taskArrays(tasks: NormalizedCreateJob["tasks"], ids: readonly string[], maxAttempts: readonly number[]): TaskArrays {
  return {
    taskIds: textArrayLiteral(ids),
    taskChunkIndexes: intArrayLiteral(tasks.map((t) => t.chunkIndex)),
    taskWorkloads: textArrayLiteral(tasks.map((t) => t.workload)),
    taskInputUris: textArrayLiteral(tasks.map((t) => t.inputUri)),
    taskInputSha256s: textArrayLiteral(tasks.map((t) => t.inputSha256)),
    taskParameters: textArrayLiteral(parametersJson(tasks)),
    taskMaxAttempts: intArrayLiteral(maxAttempts),
  };
}
