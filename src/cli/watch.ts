// `job watch` (and `job submit --watch`): a WatchJob stream applied to what the CLI knows of the
// job, drawn as a progress bar on a terminal or one stderr line per status change elsewhere; the
// exit code is the job's outcome.
import {
  JobEventKind,
  JobStatus,
  TaskStatus,
  WatchJobResponseSchema,
  type GetJobResponse,
  type WatchJobResponse,
} from "../../gen/leasehold/queue/v1/queue_pb.js";
import type { Invocation } from "./command.js";
import { CliError } from "./errors.js";
import { failureLine, jobStatusName, jsonOf, out, percent, printJson, taskStatusName, type FailureFields } from "./format.js";

const FINAL_EXIT = new Map<JobStatus, number>([
  [JobStatus.COMPLETED, 0],
  [JobStatus.FAILED, 1],
  [JobStatus.CANCELLED, 3],
]);

/** Exit code of a finished job (0 completed, 1 failed, 3 cancelled); undefined while it runs. */
export function exitCodeOf(status: JobStatus): number | undefined {
  return FINAL_EXIT.get(status);
}

/** What `job watch` knows of a job: the snapshot with every later event applied. */
export class WatchState {
  jobId = "";
  status = JobStatus.UNSPECIFIED;
  total = 0;
  readonly counts = new Map<TaskStatus, number>();
  /** Latest progress fraction of each task leased now. */
  readonly progress = new Map<string, number>();
  /** What failed the job: from a final snapshot, or the first task that failed for good. */
  failure: FailureFields | undefined;

  /** Applies one stream message; true when a task or the job changed status. */
  apply(msg: WatchJobResponse): boolean {
    const u = msg.update;
    if (u.case === "snapshot") {
      this.loadSnapshot(u.value);
      return true;
    }
    if (u.case !== "event") return false;
    const e = u.value;
    switch (e.kind) {
      case JobEventKind.TASK_STATUS:
        if (e.previousTaskStatus !== TaskStatus.UNSPECIFIED) this.add(e.previousTaskStatus, -1);
        this.add(e.taskStatus, 1);
        // A new status (or a new lease) starts the task's progress over.
        this.progress.delete(e.taskId);
        if (e.taskStatus === TaskStatus.FAILED && this.failure === undefined) {
          this.failure = {
            chunkIndex: e.chunkIndex,
            taskId: e.taskId,
            attempt: e.attempt,
            workerId: e.workerId,
            errorCode: e.errorCode,
            errorMessage: e.errorMessage,
          };
        }
        return true;
      case JobEventKind.TASK_PROGRESS:
        if (e.taskStatus === TaskStatus.LEASED || e.taskStatus === TaskStatus.UNSPECIFIED) this.progress.set(e.taskId, e.progress);
        return false;
      case JobEventKind.JOB_STATUS:
        this.status = e.jobStatus;
        return true;
      default:
        return false;
    }
  }

  private loadSnapshot(s: GetJobResponse): void {
    this.jobId = s.job?.id ?? this.jobId;
    this.status = s.job?.status ?? JobStatus.UNSPECIFIED;
    this.total = s.totalTasks;
    const c = s.taskCounts;
    this.counts.clear();
    this.counts.set(TaskStatus.PENDING, c?.pending ?? 0);
    this.counts.set(TaskStatus.LEASED, c?.leased ?? 0);
    this.counts.set(TaskStatus.COMPLETED, c?.completed ?? 0);
    this.counts.set(TaskStatus.FAILED, c?.failed ?? 0);
    this.counts.set(TaskStatus.CANCELLED, c?.cancelled ?? 0);
    this.counts.set(TaskStatus.WAITING, c?.waiting ?? 0);
    this.progress.clear();
    this.failure = s.failure;
  }

  private add(status: TaskStatus, n: number): void {
    this.counts.set(status, (this.counts.get(status) ?? 0) + n);
  }

  count(status: TaskStatus): number {
    return this.counts.get(status) ?? 0;
  }

  /** (completed + the latest progress of each leased task) / total, from 0 to 1. */
  fraction(): number {
    if (this.total <= 0) return 0;
    let done = this.count(TaskStatus.COMPLETED);
    for (const p of this.progress.values()) done += Math.min(1, Math.max(0, p));
    return Math.min(1, done / this.total);
  }

  /** "running 1/3 completed (pending 1, leased 1, failed 0, cancelled 0)" */
  line(): string {
    const waiting = this.count(TaskStatus.WAITING) > 0 ? [TaskStatus.WAITING] : [];
    const others = [...waiting, TaskStatus.PENDING, TaskStatus.LEASED, TaskStatus.FAILED, TaskStatus.CANCELLED]
      .map((s) => `${taskStatusName(s)} ${this.count(s)}`)
      .join(", ");
    return `${jobStatusName(this.status)} ${this.count(TaskStatus.COMPLETED)}/${this.total} completed (${others})`;
  }

  bar(width = 30): string {
    const f = this.fraction();
    const filled = Math.round(f * width);
    return `[${"#".repeat(filled)}${"-".repeat(width - filled)}] ${this.count(TaskStatus.COMPLETED)}/${this.total} ${percent(f).padStart(4)} ${jobStatusName(this.status)}`;
  }
}

/** Follows a job until its stream ends; the exit code of its outcome. */
export async function watch(inv: Invocation, jobId: string): Promise<number> {
  const state = new WatchState();
  const tty = !inv.json && process.stderr.isTTY === true;
  let drawn = false;
  try {
    for await (const msg of inv.client.watchJob({ jobId }, inv.callOptions)) {
      const changed = state.apply(msg);
      if (inv.json) printJson(jsonOf(WatchJobResponseSchema, msg));
      else if (tty) {
        process.stderr.write(`\r${state.bar()}\x1b[K`);
        drawn = true;
      } else if (changed) process.stderr.write(`${state.line()}\n`);
    }
  } finally {
    if (drawn) process.stderr.write("\n");
  }
  const code = exitCodeOf(state.status);
  if (code === undefined) {
    throw new CliError(`the stream of job ${jobId} ended before the job finished (status ${jobStatusName(state.status)})`);
  }
  if (!inv.json) {
    out(`job ${jobId} ${jobStatusName(state.status)}: ${state.count(TaskStatus.COMPLETED)}/${state.total} tasks completed`);
    if (state.status === JobStatus.FAILED && state.failure) out(`failed at ${failureLine(state.failure)}`);
  }
  return code;
}
