// Statuses, times and attempts as the console shows them.
import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import { AttemptOutcome, JobStatus, TaskStatus, type TaskAttempt } from "../../../gen/leasehold/queue/v1/queue_pb.js";
import { h } from "../dom.js";

export const ts = (t: Timestamp | undefined) => (t ? timestampDate(t) : undefined);
export const jobStatusName = (s: JobStatus) => (JobStatus[s] ?? "unknown").toLowerCase();
export const taskStatusName = (s: TaskStatus) => (TaskStatus[s] ?? "unknown").toLowerCase();
export const FINAL_JOB = new Set([JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED]);

export function badge(kind: string, text = kind): HTMLElement {
  return h("span", { class: `badge s-${kind}` }, text);
}

/**
 * "#2 worker-a failed oom: out of memory". An attempt's error is why the task stopped only when the
 * task failed for good; under any other status (a retried failure, then a cancellation or a new
 * lease) it is said to be that earlier attempt's, so it never reads as the cause.
 */
export function attemptText(a: TaskAttempt, taskStatus: TaskStatus = TaskStatus.FAILED): string {
  const how = (AttemptOutcome[a.outcome] ?? "unknown").toLowerCase().replace("_", " ");
  const err = a.errorCode ? ` ${a.errorCode}${a.errorMessage ? `: ${a.errorMessage}` : ""}` : "";
  const earlier = a.errorCode && taskStatus !== TaskStatus.FAILED ? " (an earlier attempt's error)" : "";
  const used = Object.entries(a.usage ?? {})
    .sort(([x], [y]) => (x < y ? -1 : x > y ? 1 : 0))
    .map(([k, v]) => `${k} ${v}`)
    .join(", ");
  return `#${a.attempt} ${a.workerId || "?"} ${how}${err}${a.retried ? " (retried)" : ""}${earlier}${used ? ` [used ${used}]` : ""}`;
}
