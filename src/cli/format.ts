// How the CLI prints: status names, errors, times, aligned tables, and the --json form (the REST
// API's: proto field names, implicit fields included).
import { toJson, type DescMessage, type JsonValue, type MessageShape } from "@bufbuild/protobuf";
import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import {
  AttemptOutcome,
  JobStatus,
  TaskStatus,
  type JobFailure,
  type TaskAttempt,
  type TaskDetail,
  WaitingReason,
} from "../../gen/leasehold/queue/v1/queue_pb.js";

/** The fields of a JobFailure the CLI names (a live watch builds one from a task event). */
export type FailureFields = Pick<JobFailure, "chunkIndex" | "taskId" | "attempt" | "workerId" | "errorCode" | "errorMessage">;

export function jobStatusName(s: JobStatus): string {
  return (JobStatus[s] ?? String(s)).toLowerCase();
}

export function taskStatusName(s: TaskStatus): string {
  return (TaskStatus[s] ?? String(s)).toLowerCase();
}

/** WaitingReason.WORKLOAD_CAP → "workload_cap". */
export function waitingReasonName(r: WaitingReason): string {
  return (WaitingReason[r] ?? String(r)).toLowerCase();
}

function outcomeName(o: AttemptOutcome): string {
  return (AttemptOutcome[o] ?? String(o)).toLowerCase();
}

/** "oom: out of memory" (the message only when there is one). */
export function errorText(code: string, message: string): string {
  return message ? `${code}: ${message}` : code;
}

/** "chunk 3117 (task …, attempt 2, worker w-7): oom: out of memory" */
export function failureLine(f: FailureFields): string {
  const where = [`task ${f.taskId}`, ...(f.attempt > 0 ? [`attempt ${f.attempt}`] : []), ...(f.workerId ? [`worker ${f.workerId}`] : [])];
  return `chunk ${f.chunkIndex} (${where.join(", ")}): ${errorText(f.errorCode, f.errorMessage)}`;
}

/**
 * A task's error as the cause only when the task failed for good. Another status keeps the error
 * of an earlier attempt (a retried failure, then a cancellation or a new lease): that one is named
 * with its attempt, "(attempt 1: nan: NaN at step 7)", so it never reads as why the task stopped.
 */
export function taskErrorCell({ task, attempts }: Pick<TaskDetail, "task" | "attempts">): string {
  if (!task?.errorCode) return "";
  const text = errorText(task.errorCode, task.errorMessage);
  if (task.status === TaskStatus.FAILED) return text;
  const earlier = attempts.findLast((a) => a.errorCode === task.errorCode);
  return `(${earlier ? `attempt ${earlier.attempt}` : "an earlier attempt"}: ${text})`;
}

/** Rows as columns padded to their widest cell (the last column unpadded). */
export function table(rows: string[][]): string {
  const widths: number[] = [];
  for (const row of rows) row.forEach((cell, i) => (widths[i] = Math.max(widths[i] ?? 0, cell.length)));
  return rows.map((row) => row.map((cell, i) => (i === row.length - 1 ? cell : cell.padEnd(widths[i]))).join("  ")).join("\n");
}

export function time(ts: Timestamp | undefined): string {
  return ts === undefined
    ? "-"
    : timestampDate(ts)
        .toISOString()
        .replace(/\.\d+Z$/, "Z");
}

export function percent(fraction: number): string {
  return `${Math.floor(Math.min(1, Math.max(0, fraction)) * 100)}%`;
}

/** One attempt as a row: number, worker, leased, ended, outcome and what it said. */
export function attemptRow(a: TaskAttempt): string[] {
  const p = a.lastProgress;
  const detail = [
    ...(a.errorCode ? [errorText(a.errorCode, a.errorMessage)] : []),
    ...(p ? [`progress ${percent(p.progress)}${p.message ? ` ${JSON.stringify(p.message)}` : ""}`] : []),
  ].join("; ");
  const outcome = `${outcomeName(a.outcome)}${a.retried ? " (retried)" : ""}`;
  return [`#${a.attempt}`, a.workerId || "-", time(a.leasedAt), a.endedAt ? time(a.endedAt) : "-", outcome, detail];
}

/** The REST API's JSON form: proto field names, implicit fields included. */
const JSON_WRITE = { useProtoFieldName: true, alwaysEmitImplicit: true } as const;

export function jsonOf<Desc extends DescMessage>(schema: Desc, msg: MessageShape<Desc>): JsonValue {
  return toJson(schema, msg, JSON_WRITE);
}

export function printJson(value: JsonValue): void {
  process.stdout.write(`${JSON.stringify(value)}\n`);
}

export function out(line: string): void {
  process.stdout.write(`${line}\n`);
}
