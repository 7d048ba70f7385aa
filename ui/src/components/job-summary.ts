// The top of a job's page: its facts (status, workload, times, why it failed, whether updates are
// live) and its progress (a bar and the count of tasks in each status).
import { DependencyPolicy, JobStatus, type GetJobResponse, type Job } from "../../../gen/leasehold/queue/v1/queue_pb.js";
import { clear, h, when } from "../dom.js";
import { STATUS_COLORS } from "./chunk-grid.js";
import { moneyFacts } from "./money.js";
import { badge, jobStatusName, ts } from "./status.js";

export function renderJobHeader(header: HTMLElement, snapshot: GetJobResponse, live: string): void {
  const job = snapshot.job;
  if (!job) return;
  const failure = snapshot.failure;
  clear(
    header,
    h("h1", {}, "Job ", h("span", { class: "mono" }, job.id)),
    h(
      "dl",
      { class: "facts" },
      h("dt", {}, "Status"),
      h(
        "dd",
        {},
        badge(jobStatusName(job.status)),
        h("span", { id: "job-status", "data-status": jobStatusName(job.status), class: "sr-only" }, jobStatusName(job.status)),
      ),
      h("dt", {}, "Workload"),
      h("dd", {}, job.workload),
      h("dt", {}, "Created"),
      h("dd", {}, when(ts(job.createdAt))),
      h("dt", {}, "Finished"),
      h("dd", {}, when(ts(job.completedAt))),
      job.idempotencyKey ? h("dt", {}, "Idempotency key") : null,
      job.idempotencyKey ? h("dd", { class: "mono" }, job.idempotencyKey) : null,
      job.cancelReason ? h("dt", {}, "Cancel reason") : null,
      job.cancelReason ? h("dd", {}, job.cancelReason) : null,
      job.runAt ? h("dt", {}, "Run at") : null,
      job.runAt ? h("dd", { id: "job-run-at" }, when(ts(job.runAt))) : null,
      // The finalizer job enqueued at this job's end, and on a finalizer job the job that ended.
      job.finalizer ? h("dt", {}, "Finalizer") : null,
      job.finalizer
        ? h(
            "dd",
            { id: "job-finalizer" },
            job.finalizerJobId
              ? h("a", { href: `#/jobs/${job.finalizerJobId}`, class: "mono" }, job.finalizerJobId)
              : `${job.finalizer.workload} (when this job ${job.finalizer.runOnFailure ? "ends" : "completes"})`,
          )
        : null,
      ...moneyFacts(job),
      ...workflowFacts(job),
      job.parentJobId ? h("dt", {}, "Parent job") : null,
      job.parentJobId ? h("dd", { id: "job-parent" }, h("a", { href: `#/jobs/${job.parentJobId}`, class: "mono" }, job.parentJobId)) : null,
      h("dt", {}, "Updates"),
      h("dd", { id: "live-state" }, live),
    ),
    failure
      ? h(
          "p",
          { class: "error-text", id: "job-failure" },
          `Failed at chunk ${failure.chunkIndex} (attempt ${failure.attempt}, ${failure.workerId || "no worker"}): ${failure.errorCode}${failure.errorMessage ? ` — ${failure.errorMessage}` : ""}`,
        )
      : null,
  );
}

/** The workflow a job is a node of, and the jobs it runs after (with their statuses), each a link. */
function workflowFacts(job: Job): (HTMLElement | null)[] {
  const policy = job.dependencyPolicy === DependencyPolicy.ALL_FINAL ? "all final" : "all completed";
  return [
    job.workflowId ? h("dt", {}, "Workflow") : null,
    job.workflowId
      ? h(
          "dd",
          { id: "job-workflow" },
          h("a", { href: `#/workflows/${encodeURIComponent(job.workflowId)}` }, `node ${job.workflowNode}`),
          " of workflow ",
          h("span", { class: "mono" }, job.workflowId),
        )
      : null,
    job.parents.length > 0 ? h("dt", {}, "Runs after") : null,
    job.parents.length > 0
      ? h(
          "dd",
          { id: "job-parents" },
          `${job.parents.length} job${job.parents.length === 1 ? "" : "s"}, ${policy}${job.waitingParents > 0 ? `; waiting for ${job.waitingParents}` : ""}`,
          h(
            "ul",
            { class: "plain" },
            ...job.parents.map((p) =>
              h(
                "li",
                { "data-parent": p.jobId },
                h("a", { href: `#/jobs/${encodeURIComponent(p.jobId)}`, class: "mono" }, p.node || p.jobId),
                " ",
                badge(jobStatusName(p.status)),
                ` ${p.completedTasks}/${p.totalTasks} tasks${p.optional ? ", optional" : ""}`,
              ),
            ),
          ),
        )
      : null,
  ];
}

/** Whether the job's cancel and retry actions apply to its status now. */
export function jobActions(status: JobStatus): { cancel: boolean; retry: boolean } {
  return {
    cancel: [JobStatus.PENDING, JobStatus.RUNNING, JobStatus.SCHEDULED, JobStatus.WAITING].includes(status),
    retry: status === JobStatus.FAILED || status === JobStatus.CANCELLED,
  };
}

export function renderJobProgress(progress: HTMLElement, snapshot: GetJobResponse): void {
  const c = snapshot.taskCounts;
  const total = snapshot.totalTasks;
  const done = c?.completed ?? 0;
  const pct = total ? Math.floor((done / total) * 100) : 0;
  clear(
    progress,
    h("h2", { id: "progress-h" }, "Progress"),
    h("progress", { id: "job-progress", max: total || 1, value: done, "aria-labelledby": "progress-h", "data-percent": pct }),
    h("p", { id: "progress-text" }, `${pct}% — ${done} of ${total} tasks completed`),
    h(
      "ul",
      { class: "legend" },
      ...(["pending", "leased", "completed", "failed", "cancelled", "waiting"] as const).map((s, i) =>
        // Waiting shows only for a job that waits for its parents.
        s === "waiting" && !c?.waiting
          ? null
          : h(
              "li",
              {},
              h("span", { class: "key", style: null, "data-color": STATUS_COLORS[i + 1], "aria-hidden": "true" }),
              `${s}: `,
              h("strong", { "data-count": s }, c?.[s] ?? 0),
            ),
      ),
    ),
  );
  for (const k of progress.querySelectorAll<HTMLElement>("[data-color]")) k.style.background = k.dataset.color ?? "";
}
