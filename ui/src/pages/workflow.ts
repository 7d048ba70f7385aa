// A workflow's page (#/workflows/<id>): its graph with each node's status, and a table of its nodes,
// live. It follows WatchWorkflow (a node's status change per event, resumed after the last one when
// the stream drops), and the task counts of up to four running nodes through their own WatchJob
// streams; the others' counts come from one GetWorkflow at most every two seconds, and only while
// events arrive. A token that may read workflows but not watch them (billing) sees one GetWorkflow.
import { Code, ConnectError } from "@connectrpc/connect";
import { JobEventKind, JobStatus, TaskStatus, type Workflow, type WorkflowNode } from "../../../gen/leasehold/queue/v1/queue_pb.js";
import { client, describeError } from "../api.js";
import { confirmAction, showError, showOk } from "../components/outcome.js";
import { badge, FINAL_JOB, jobStatusName, ts } from "../components/status.js";
import { drawWorkflow, nodeSummary, waitingFor } from "../components/workflow-graph.js";
import { clear, h, when } from "../dom.js";
import { main } from "../layout.js";
import { currentRole } from "../session.js";

/** Running nodes whose jobs the page follows at once for their task counts. */
const FOLLOWED_JOBS = 4;

export function renderWorkflow(workflowId: string): () => void {
  let stopped = false;
  const abort = new AbortController();
  let workflow: Workflow | undefined;
  let lastEventId = 0n;
  let live = "connecting";
  let streamEnded = false;
  const followed = new Map<string, AbortController>();

  const header = h("div", { id: "workflow-header" });
  const cancelButton = h(
    "button",
    { type: "button", id: "cancel-workflow", class: "danger", hidden: true, onclick: () => void cancelWorkflow() },
    "Cancel workflow",
  );
  const retryButton = h(
    "button",
    { type: "button", id: "retry-workflow", class: "primary", hidden: true, onclick: () => void retryWorkflow() },
    "Retry workflow",
  );
  const actions = h("div", { class: "actions", id: "workflow-actions" }, cancelButton, retryButton);
  const graph = h("div", { class: "wf-graph", id: "workflow-graph-wrap" });
  const graphCard = h(
    "section",
    { class: "card", "aria-labelledby": "graph-h" },
    h("h2", { id: "graph-h" }, "Graph"),
    h("p", { class: "hint" }, "Each box is a node, its edges the nodes it runs after (dashed: optional). A box opens its job."),
    graph,
  );
  const nodesCard = h("section", { class: "card", "aria-labelledby": "nodes-h" }, h("h2", { id: "nodes-h" }, "Nodes"));
  clear(main, header, actions, graphCard, nodesCard);

  const render = () => {
    if (!workflow) return;
    const w = workflow;
    const done = w.nodes.filter((n) => n.status === JobStatus.COMPLETED).length;
    clear(
      header,
      h("h1", {}, "Workflow ", w.name ? h("span", {}, w.name) : h("span", { class: "mono" }, w.id)),
      h(
        "dl",
        { class: "facts" },
        h("dt", {}, "Id"),
        h("dd", { class: "mono" }, w.id),
        h("dt", {}, "Status"),
        h(
          "dd",
          {},
          badge(jobStatusName(w.status)),
          h("span", { id: "workflow-status", "data-status": jobStatusName(w.status), class: "sr-only" }, jobStatusName(w.status)),
        ),
        h("dt", {}, "Nodes"),
        h("dd", { id: "workflow-progress" }, `${done} of ${w.nodes.length} completed`),
        h("dt", {}, "Created"),
        h("dd", {}, when(ts(w.createdAt))),
        h("dt", {}, "Finished"),
        h("dd", {}, when(ts(w.completedAt))),
        w.account ? h("dt", {}, "Account") : null,
        w.account ? h("dd", {}, h("a", { href: `#/workflows?${new URLSearchParams({ account: w.account })}` }, w.account)) : null,
        w.scheduleName ? h("dt", {}, "Schedule") : null,
        w.scheduleName ? h("dd", {}, `${w.scheduleName} (tick ${when(ts(w.scheduleFireTime))})`) : null,
        w.idempotencyKey ? h("dt", {}, "Idempotency key") : null,
        w.idempotencyKey ? h("dd", { class: "mono" }, w.idempotencyKey) : null,
        h("dt", {}, "Updates"),
        h("dd", { id: "live-state" }, live),
      ),
    );
    // A billing token reads workflows but may not change them.
    const acts = currentRole() !== "billing";
    cancelButton.hidden = !acts || FINAL_JOB.has(w.status);
    retryButton.hidden = !acts || !(w.status === JobStatus.FAILED || w.status === JobStatus.CANCELLED);
    graph.replaceChildren(drawWorkflow(w));
    const byName = new Map(w.nodes.map((n) => [n.name, n]));
    clear(
      nodesCard,
      nodesCard.firstChild as Node,
      h(
        "table",
        { id: "workflow-nodes" },
        h("caption", { class: "sr-only" }, "The workflow's nodes in the order they were given"),
        h(
          "thead",
          {},
          h("tr", {}, ...["Node", "Status", "Workload", "Tasks", "After", "Job", "Note"].map((t) => h("th", { scope: "col" }, t))),
        ),
        h("tbody", {}, ...w.nodes.map((n) => nodeRow(n, byName))),
      ),
    );
  };

  let renderQueued = false;
  const scheduleRender = () => {
    if (renderQueued) return;
    renderQueued = true;
    requestAnimationFrame(() => {
      renderQueued = false;
      if (!stopped) render();
    });
  };

  // Node counts follow events at most every two seconds: the stream says when, never a timer on its own.
  let countsTimer: number | undefined;
  const countsChanged = () => {
    if (countsTimer !== undefined) return;
    countsTimer = window.setTimeout(() => {
      countsTimer = undefined;
      if (!stopped) void refresh();
    }, 2000);
  };
  const refresh = async () => {
    try {
      const r = await client.getWorkflow({ workflowId }, { signal: abort.signal });
      if (r.workflow) merge(r.workflow);
    } catch (err) {
      if (!stopped) showError("Reading the workflow", err);
    }
  };

  /** A newer GetWorkflow's nodes, keeping the counts a followed job reported since (they are as new as its stream). */
  const merge = (fresh: Workflow) => {
    const old = new Map((workflow?.nodes ?? []).map((n) => [n.name, n]));
    for (const n of fresh.nodes) {
      const was = old.get(n.name);
      if (was && followed.has(n.name) && was.jobId === n.jobId) n.completedTasks = Math.max(n.completedTasks, was.completedTasks);
    }
    workflow = fresh;
    followJobs();
    scheduleRender();
  };

  /** Follows running nodes' jobs (a few at once) for their completed tasks. */
  const followJobs = () => {
    for (const n of workflow?.nodes ?? []) {
      if (followed.size >= FOLLOWED_JOBS) return;
      if (n.status !== JobStatus.RUNNING || followed.has(n.name)) continue;
      const stop = new AbortController();
      abort.signal.addEventListener("abort", () => stop.abort(), { once: true });
      followed.set(n.name, stop);
      void (async () => {
        try {
          for await (const msg of client.watchJob({ jobId: n.jobId }, { signal: stop.signal })) {
            const node = workflow?.nodes.find((x) => x.name === n.name);
            if (!node) break;
            if (msg.update.case === "snapshot") {
              node.totalTasks = msg.update.value.totalTasks;
              node.completedTasks = msg.update.value.taskCounts?.completed ?? node.completedTasks;
            } else if (msg.update.case === "event" && msg.update.value.kind === JobEventKind.TASK_STATUS) {
              const e = msg.update.value;
              if (e.taskStatus === TaskStatus.COMPLETED) node.completedTasks++;
              if (e.previousTaskStatus === TaskStatus.COMPLETED) node.completedTasks--;
            }
            scheduleRender();
          }
        } catch {
          // A box that stops counting is all a broken job stream costs: the node's own events still come.
        } finally {
          followed.delete(n.name);
          if (!stopped) followJobs();
        }
      })();
    }
  };

  const cancelWorkflow = async () => {
    if (!workflow) return;
    const label = workflow.name || workflow.id;
    if (!(await confirmAction(`Cancel workflow ${label}? Every node not final yet becomes cancelled.`, "Cancel workflow"))) return;
    try {
      const r = await client.cancelWorkflow({ workflowId, reason: "cancelled from the console" });
      showOk(`Workflow ${label} is ${jobStatusName(r.workflow?.status ?? 0)}: ${r.cancelledNodes} nodes cancelled.`);
      if (r.workflow) merge(r.workflow);
    } catch (err) {
      showError("Cancelling the workflow", err);
    }
  };

  const retryWorkflow = async () => {
    if (!workflow) return;
    const label = workflow.name || workflow.id;
    const text = `Retry workflow ${label}? Its failed and cancelled nodes run again, with every node after them; completed nodes keep their results.`;
    if (!(await confirmAction(text, "Retry workflow"))) return;
    try {
      const r = await client.retryWorkflow({ workflowId });
      showOk(
        `Workflow ${label} is ${jobStatusName(r.workflow?.status ?? 0)} again: ${r.retriedNodes} nodes, ${r.retriedTasks} tasks retried.`,
      );
      if (r.workflow) merge(r.workflow);
      // The old stream ended with the workflow; follow the new run.
      if (!stopped && streamEnded) void watch();
    } catch (err) {
      showError("Retrying the workflow", err);
    }
  };

  const fail = (err: unknown) => {
    const d = describeError(err);
    clear(
      main,
      h("h1", {}, "Workflow"),
      h("p", { class: "error-text", role: "alert" }, `${d.message}${d.requestId ? ` (request id ${d.requestId})` : ""}`),
    );
  };

  const watch = async (): Promise<void> => {
    streamEnded = false;
    let backoff = 500;
    for (;;) {
      try {
        live = "live";
        scheduleRender();
        for await (const msg of client.watchWorkflow({ workflowId, afterEventId: lastEventId }, { signal: abort.signal })) {
          if (msg.update.case === "snapshot" && msg.update.value.workflow) merge(msg.update.value.workflow);
          else if (msg.update.case === "event" && workflow) {
            const ev = msg.update.value;
            lastEventId = ev.id;
            const node = workflow.nodes.find((n) => n.name === ev.node);
            if (node) node.status = ev.status;
            workflow.status = derivedStatus(workflow.nodes);
            followJobs();
            scheduleRender();
            countsChanged();
          }
        }
        // The stream ends once every node is final: one GetWorkflow for the final counts and times.
        streamEnded = true;
        live = "finished (every node is final)";
        await refresh();
        return;
      } catch (err) {
        if (stopped) return;
        const e = ConnectError.from(err);
        if (e.code === Code.PermissionDenied && workflow === undefined) {
          // This token may read the workflow but not watch it.
          live = "not live (this token may read workflows but not watch them)";
          try {
            const r = await client.getWorkflow({ workflowId }, { signal: abort.signal });
            if (r.workflow) merge(r.workflow);
          } catch (err2) {
            if (!stopped) fail(err2);
          }
          return;
        }
        if ([Code.NotFound, Code.PermissionDenied, Code.Unauthenticated, Code.InvalidArgument].includes(e.code)) {
          fail(err);
          return;
        }
        // A dropped stream resumes after the last event it delivered.
        live = `reconnecting (${e.rawMessage})`;
        scheduleRender();
        await new Promise((r) => setTimeout(r, backoff));
        backoff = Math.min(backoff * 2, 10_000);
        if (stopped) return;
      }
    }
  };
  void watch();

  return () => {
    stopped = true;
    abort.abort();
    clearTimeout(countsTimer);
  };
}

/** The workflow's status from its nodes', as the coordinator derives it (between two GetWorkflow reads). */
function derivedStatus(nodes: WorkflowNode[]): JobStatus {
  if (nodes.length > 0 && nodes.every((n) => FINAL_JOB.has(n.status))) {
    if (nodes.every((n) => n.status === JobStatus.COMPLETED)) return JobStatus.COMPLETED;
    return nodes.some((n) => n.status === JobStatus.FAILED) ? JobStatus.FAILED : JobStatus.CANCELLED;
  }
  return nodes.some((n) => n.status === JobStatus.RUNNING || FINAL_JOB.has(n.status)) ? JobStatus.RUNNING : JobStatus.PENDING;
}

function nodeRow(n: WorkflowNode, byName: Map<string, WorkflowNode>): HTMLElement {
  const waits = waitingFor(n, byName);
  const note =
    n.status === JobStatus.WAITING
      ? waits.length > 0
        ? `waits for ${waits.join(", ")}`
        : `waits for ${n.waitingParents} job(s) outside the workflow`
      : n.cancelReason;
  return h(
    "tr",
    { "data-node": n.name, "data-status": jobStatusName(n.status) },
    h("th", { scope: "row" }, n.name),
    h("td", {}, badge(jobStatusName(n.status))),
    h("td", {}, n.workload),
    h("td", { class: "num", "data-tasks": n.name }, `${n.completedTasks}/${n.totalTasks}`),
    h("td", {}, n.after.map((a) => `${a.node}${a.optional ? " (optional)" : ""}`).join(", ") || "—"),
    h("td", {}, h("a", { href: `#/jobs/${encodeURIComponent(n.jobId)}`, class: "mono" }, n.jobId)),
    h("td", { title: nodeSummary(n, waits) }, note || "—"),
  );
}
