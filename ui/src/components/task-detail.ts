// A chunk's task, opened from the grid or the tasks table: its status, why it waits (a pending
// one), input, result and each attempt with its worker, outcome and error.
import { TaskStatus, WaitingReason } from "../../../gen/leasehold/queue/v1/queue_pb.js";
import { client } from "../api.js";
import { clear, h, when } from "../dom.js";
import { showError } from "./outcome.js";
import { attemptText, badge, taskStatusName, ts } from "./status.js";

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
