// A chunk's task, opened from the grid or the tasks table: its status, why it waits (a pending
// one), input, result and each attempt with its worker, outcome and error.
import { TaskStatus, WaitingReason } from "../../../gen/leasehold/queue/v1/queue_pb.js";
import { client } from "../api.js";
import { clear, h, when } from "../dom.js";
import { showError } from "./outcome.js";
import { attemptText, badge, jobStatusName, taskStatusName, ts } from "./status.js";

export async function showTaskDetail(detail: HTMLElement, chunk: number, taskId: string | undefined): Promise<void> {
  detail.hidden = false;
  if (!taskId) {
    clear(detail, h("h2", { id: "detail-h" }, `Chunk ${chunk}`), h("p", {}, "Still loading this chunk's task…"));
    return;
  }
  try {
    const r = await client.getTask({ taskId });
    const t = r.task;
    const status = t?.status ?? TaskStatus.UNSPECIFIED;
    clear(
      detail,
      h("h2", { id: "detail-h" }, `Chunk ${chunk}`),
      h(
        "dl",
        { class: "facts" },
        h("dt", {}, "Task"),
        h("dd", { class: "mono" }, taskId),
        h("dt", {}, "Status"),
        h("dd", {}, badge(taskStatusName(status))),
        r.waitingReason !== WaitingReason.UNSPECIFIED ? h("dt", {}, "Waiting") : null,
        r.waitingReason !== WaitingReason.UNSPECIFIED
          ? h(
              "dd",
              { id: "task-waiting", "data-reason": waitingReasonName(r.waitingReason) },
              h("strong", {}, waitingReasonLabel(r.waitingReason)),
              r.waitingDetail ? `: ${r.waitingDetail}` : "",
            )
          : null,
        h("dt", {}, "Attempt"),
        h("dd", {}, `${t?.attempt ?? 0} of ${t?.maxAttempts ?? 0}`),
        h("dt", {}, "Input"),
        h("dd", { class: "mono" }, t?.inputUri ?? ""),
        t?.resultUri ? h("dt", {}, "Result") : null,
        t?.resultUri ? h("dd", { class: "mono" }, t.resultUri) : null,
        // What a stage after others reads: its job's parents, each with its status and (one task's) result.
        t?.parents.length ? h("dt", {}, "Parents") : null,
        t?.parents.length
          ? h(
              "dd",
              { id: "task-parents" },
              h(
                "ul",
                { class: "plain" },
                ...t.parents.map((p) =>
                  h(
                    "li",
                    {},
                    h("a", { href: `#/jobs/${encodeURIComponent(p.jobId)}`, class: "mono" }, p.node || p.jobId),
                    " ",
                    badge(jobStatusName(p.status)),
                    p.result ? h("span", { class: "mono" }, ` ${p.result.resultUri}`) : ` ${p.completedTasks}/${p.totalTasks} tasks`,
                  ),
                ),
              ),
            )
          : null,
      ),
      r.attempts.length
        ? h("ol", { class: "attempts" }, ...r.attempts.map((a) => h("li", {}, attemptText(a, status), " — ", when(ts(a.leasedAt)))))
        : h("p", {}, "Never leased."),
    );
  } catch (err) {
    showError("Loading the task", err);
  }
}

function waitingReasonName(r: WaitingReason): string {
  return (WaitingReason[r] ?? String(r)).toLowerCase();
}

/** WORKLOAD_CAP → "Workload cap". */
function waitingReasonLabel(r: WaitingReason): string {
  const words = waitingReasonName(r).replace(/_/g, " ");
  return words.charAt(0).toUpperCase() + words.slice(1);
}
