// A job's page (#/jobs/<id>): follows WatchJob, a server stream, and asks for anything else only
// when an event says something changed. Its parts are components: the summary (job-summary.ts),
// the chunk grid (chunk-grid.ts, filled by chunk-loader.ts), a chunk's task (task-detail.ts), the
// tasks table and the result manifest.
import { Code, ConnectError } from "@connectrpc/connect";
import { JobEventKind, type GetJobResponse, type Job } from "../../../gen/leasehold/queue/v1/queue_pb.js";
import { client, describeError } from "../api.js";
import { ChunkGrid } from "../components/chunk-grid.js";
import { loadChunks, type ChunkState } from "../components/chunk-loader.js";
import { jobActions, renderJobHeader, renderJobProgress } from "../components/job-summary.js";
import { confirmAction, showError, showOk } from "../components/outcome.js";
import { createResultsTable } from "../components/results-table.js";
import { FINAL_JOB, jobStatusName, taskStatusName } from "../components/status.js";
import { showTaskDetail } from "../components/task-detail.js";
import { createTasksTable } from "../components/tasks-table.js";
import { clear, h } from "../dom.js";
import { main } from "../layout.js";

/** Renders the page and starts following the job; the returned function stops it. */
export function renderJob(jobId: string): () => void {
  let stopped = false;
  const abort = new AbortController();
  let snapshot: GetJobResponse | undefined;
  let grid: ChunkGrid | undefined;
  const chunks: ChunkState = { chunkTask: [], touched: new Uint8Array(0) };
  /** The newest attempt an event reported for each chunk: an older attempt's event changes nothing. */
  let attempts = new Int32Array(0);
  let lastEventId = 0n;
  let live = "connecting";
  let streamEnded = false;

  const header = h("div", { id: "job-header" });
  const progress = h("div", { class: "card", id: "job-progress-card" });
  const cancelButton = h(
    "button",
    { type: "button", id: "cancel-job", class: "danger", hidden: true, onclick: () => snapshot?.job && void cancelJob(snapshot.job) },
    "Cancel job",
  );
  const retryButton = h(
    "button",
    { type: "button", id: "retry-job", class: "primary", hidden: true, onclick: () => snapshot?.job && void retryJob(snapshot.job) },
    "Retry job",
  );
  const actions = h("div", { class: "actions", id: "job-actions" }, cancelButton, retryButton);
  const gridCard = h("section", { class: "card", "aria-labelledby": "grid-h" }, h("h2", { id: "grid-h" }, "Chunks"));
  const detail = h("section", { class: "card", id: "task-detail", "aria-labelledby": "detail-h", hidden: true });
  const tasksCard = h("section", { class: "card", "aria-labelledby": "tasks-h" }, h("h2", { id: "tasks-h" }, "Tasks, attempts and errors"));
  const resultsCard = h("section", { class: "card", "aria-labelledby": "results-h" }, h("h2", { id: "results-h" }, "Result manifest"));
  clear(main, header, actions, progress, gridCard, detail, tasksCard, resultsCard);

  const openChunk = (chunk: number) => void showTaskDetail(detail, chunk, chunks.chunkTask[chunk]);
  const ctx = { jobId, signal: abort.signal, stopped: () => stopped, openChunk };
  const tasks = createTasksTable(tasksCard, ctx);
  const results = createResultsTable(resultsCard, ctx);

  const renderHeader = () => {
    if (!snapshot?.job) return;
    renderJobHeader(header, snapshot, live);
    // The buttons persist across re-renders (only shown or hidden), so a click never lands on a replaced node.
    const can = jobActions(snapshot.job.status);
    cancelButton.hidden = !can.cancel;
    retryButton.hidden = !can.retry;
  };
  const renderProgress = () => snapshot && renderJobProgress(progress, snapshot);

  let progressQueued = false;
  const scheduleProgress = () => {
    if (progressQueued) return;
    progressQueued = true;
    requestAnimationFrame(() => {
      progressQueued = false;
      renderProgress();
    });
  };

  // Tables follow events at most every two seconds: the stream says when, never a timer on its own.
  let tablesTimer: number | undefined;
  const tablesChanged = () => {
    if (tablesTimer !== undefined) return;
    tablesTimer = window.setTimeout(() => {
      tablesTimer = undefined;
      if (!stopped) void Promise.all([tasks.load(), results.load()]);
    }, 2000);
  };

  const fillGrid = () => {
    if (!grid || !snapshot) return;
    loadChunks(jobId, grid, snapshot, chunks, abort.signal, () => stopped).catch(
      (err: unknown) => !stopped && showError("Loading chunks", err),
    );
  };

  const cancelJob = async (job: Job) => {
    if (!(await confirmAction(`Cancel job ${job.id}? Its pending and leased tasks become cancelled.`, "Cancel job"))) return;
    try {
      const r = await client.cancelJob({ jobId: job.id, reason: "cancelled from the console" });
      showOk(`Job ${job.id} is ${jobStatusName(r.job?.status ?? 0)}.`);
    } catch (err) {
      showError("Cancelling the job", err);
    }
  };

  const retryJob = async (job: Job) => {
    if (!(await confirmAction(`Retry job ${job.id}? Its failed and cancelled tasks go back to pending with fresh attempts.`, "Retry job")))
      return;
    try {
      const r = await client.retryJob({ jobId: job.id });
      showOk(`Job ${job.id} is ${jobStatusName(r.job?.status ?? 0)} again: ${r.retriedTasks} tasks retried.`);
      // The old stream ended with the job; follow the new run.
      if (!stopped && streamEnded) void watch();
    } catch (err) {
      showError("Retrying the job", err);
    }
  };

  const onSnapshot = (s: GetJobResponse) => {
    snapshot = s;
    if (!grid || grid.total !== s.totalTasks) {
      grid = new ChunkGrid(s.totalTasks, openChunk);
      attempts = new Int32Array(s.totalTasks);
      chunks.touched = new Uint8Array(s.totalTasks);
      gridCard.replaceChildren(gridCard.firstChild as Node, grid.element);
      grid.layout();
    } else {
      // A new snapshot of a job already drawn (a retry's fresh stream): what changed before it has no event here.
      chunks.touched.fill(0);
    }
    fillGrid();
    renderHeader();
    renderProgress();
    void tasks.load();
    void results.load();
  };

  const watch = async (): Promise<void> => {
    streamEnded = false;
    let backoff = 500;
    for (;;) {
      try {
        live = "live";
        renderHeader();
        for await (const msg of client.watchJob({ jobId, afterEventId: lastEventId }, { signal: abort.signal })) {
          if (msg.update.case === "snapshot") onSnapshot(msg.update.value);
          else if (msg.update.case === "event" && snapshot) {
            const ev = msg.update.value;
            lastEventId = ev.id;
            const c = snapshot.taskCounts;
            if (ev.kind === JobEventKind.TASK_STATUS && c) {
              const prev = taskStatusName(ev.previousTaskStatus) as keyof typeof c;
              const next = taskStatusName(ev.taskStatus) as keyof typeof c;
              if (typeof c[prev] === "number") (c[prev] as number)--;
              if (typeof c[next] === "number") (c[next] as number)++;
              if (ev.taskId) chunks.chunkTask[ev.chunkIndex] = ev.taskId;
              if (ev.attempt >= attempts[ev.chunkIndex]) {
                attempts[ev.chunkIndex] = ev.attempt;
                chunks.touched[ev.chunkIndex] = 1;
                grid?.set(ev.chunkIndex, ev.taskStatus);
              }
              scheduleProgress();
              tablesChanged();
            } else if (ev.kind === JobEventKind.JOB_STATUS && snapshot.job) {
              snapshot.job.status = ev.jobStatus;
              if (!FINAL_JOB.has(ev.jobStatus)) snapshot.failure = undefined;
              renderHeader();
              tablesChanged();
            }
          }
        }
        // The stream ends with the job's final event: one GetJob for the failure and the final times.
        streamEnded = true;
        live = "finished (the job is final)";
        snapshot = await client.getJob({ jobId }, { signal: abort.signal });
        renderHeader();
        renderProgress();
        tablesChanged();
        return;
      } catch (err) {
        if (stopped) return;
        const e = ConnectError.from(err);
        if ([Code.NotFound, Code.PermissionDenied, Code.Unauthenticated, Code.InvalidArgument].includes(e.code)) {
          const d = describeError(err);
          clear(
            main,
            h("h1", {}, "Job"),
            h("p", { class: "error-text", role: "alert" }, `${d.message}${d.requestId ? ` (request id ${d.requestId})` : ""}`),
          );
          return;
        }
        // A dropped stream resumes after the last event it delivered.
        live = `reconnecting (${e.rawMessage})`;
        renderHeader();
        await new Promise((r) => setTimeout(r, backoff));
        backoff = Math.min(backoff * 2, 10_000);
        if (stopped) return;
      }
    }
  };
  void watch();

  const onResize = () => grid?.layout();
  window.addEventListener("resize", onResize);
  return () => {
    stopped = true;
    abort.abort();
    clearTimeout(tablesTimer);
    window.removeEventListener("resize", onResize);
  };
}
