// How a worker's result reaches the statements that record it: as named parameters of the
// one-result statements (COMPLETE_TASK and its forms, the late result's), and as a row of the
// jsonb recordset the batched ones read. One mapping each, so the statements cannot drift apart.

import type { CompleteTaskInput } from "../../../queue/types.js";

/** A result: the fenced task, its manifest (metrics as jsonb text or null). */
export interface ResultParams {
  taskId: string;
  workerId: string;
  attempt: number;
  resultUri: string;
  resultSha256: string;
  metrics: string | null;
  /** The report's usage as jsonb text; null for none. Not among RESULT_PARAMS: each statement places it. */
  usage: string | null;
}

/** The one-result statements' parameters. */
export function resultParams(done: CompleteTaskInput): ResultParams {
  return {
    taskId: done.taskId,
    workerId: done.workerId,
    attempt: done.attempt,
    resultUri: done.resultUri,
    resultSha256: done.resultSha256,
    metrics: done.metrics === undefined ? null : JSON.stringify(done.metrics),
    usage: done.usage === undefined ? null : JSON.stringify(done.usage),
  };
}

/** ResultParams in the order the statements number them first ($1..$6), the usage apart. */
export const RESULT_PARAMS = [
  "taskId",
  "workerId",
  "attempt",
  "resultUri",
  "resultSha256",
  "metrics",
] as const satisfies readonly (keyof ResultParams)[];

/** One result as the batched statements' jsonb recordsets have it (CompleteTasks and the coalesced ones). */
export function resultRecord(done: CompleteTaskInput) {
  return {
    task_id: done.taskId,
    worker_id: done.workerId,
    attempt: done.attempt,
    result_uri: done.resultUri,
    result_sha256: done.resultSha256,
    metrics: done.metrics ?? null,
    usage: done.usage ?? null,
  };
}
