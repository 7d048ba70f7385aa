// What `workflow watch` knows of a workflow: its nodes from the snapshot, each later event (a node's
// status change) applied, and the task counts each node's job reported; drawn as one line per node.
import {
  JobStatus,
  type GetWorkflowResponse,
  type WatchWorkflowResponse,
  type Workflow,
  type WorkflowEvent,
  type WorkflowNode,
} from "../../gen/leasehold/queue/v1/queue_pb.js";
import { jobStatusName, percent } from "./format.js";

export const FINAL_STATUSES: ReadonlySet<JobStatus> = new Set([JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED]);

/** One node as the watch draws it. */
export interface NodeView {
  name: string;
  jobId: string;
  workload: string;
  status: JobStatus;
  /** The nodes it runs after, by name. */
  after: string[];
  total: number;
  completed: number;
  failed: number;
  /** Completed tasks plus the leased ones' latest progress, over all tasks (0–1), while its job is followed. */
  fraction: number | undefined;
  cancelReason: string;
}

function viewOf(n: WorkflowNode): NodeView {
  return {
    name: n.name,
    jobId: n.jobId,
    workload: n.workload,
    status: n.status,
    after: n.after.map((a) => a.node),
    total: n.totalTasks,
    completed: n.completedTasks,
    failed: 0,
    fraction: undefined,
    cancelReason: n.cancelReason,
  };
}

/**
 * A workflow's status from its nodes', as the coordinator derives it: once every node is final,
 * completed when all completed, else failed when any failed, else cancelled; before that, running
 * once any node started or ended, else pending.
 */
export function derivedStatus(statuses: JobStatus[]): JobStatus {
  if (statuses.length > 0 && statuses.every((s) => FINAL_STATUSES.has(s))) {
    if (statuses.every((s) => s === JobStatus.COMPLETED)) return JobStatus.COMPLETED;
    return statuses.includes(JobStatus.FAILED) ? JobStatus.FAILED : JobStatus.CANCELLED;
  }
  const started = statuses.some((s) => s === JobStatus.RUNNING || FINAL_STATUSES.has(s));
  return started ? JobStatus.RUNNING : JobStatus.PENDING;
}

export class WorkflowWatchState {
  workflowId = "";
  label = "";
  readonly nodes = new Map<string, NodeView>();
  /** The id of the last event applied: where a dropped stream resumes. */
  lastEventId = 0n;

  constructor(workflowId: string) {
    this.workflowId = workflowId;
  }

  /** Applies one stream message; the node it changed (undefined for a snapshot or a repeat). */
  apply(msg: WatchWorkflowResponse): NodeView | undefined {
    const u = msg.update;
    if (u.case === "snapshot") {
      this.load(u.value);
      return undefined;
    }
    if (u.case !== "event") return undefined;
    return this.applyEvent(u.value);
  }

  load(snapshot: GetWorkflowResponse | { workflow?: Workflow }): void {
    const w = snapshot.workflow;
    if (!w) return;
    this.workflowId = w.id || this.workflowId;
    this.label = w.name;
    const old = new Map(this.nodes);
    this.nodes.clear();
    for (const n of w.nodes) {
      const view = viewOf(n);
      // A snapshot after a reconnect keeps what the node's own job stream said since.
      const was = old.get(n.name);
      if (was && was.jobId === view.jobId && was.status === view.status) {
        view.failed = was.failed;
        view.fraction = was.fraction;
        view.completed = Math.max(view.completed, was.completed);
      }
      this.nodes.set(n.name, view);
    }
  }

  applyEvent(e: WorkflowEvent): NodeView | undefined {
    if (e.id <= this.lastEventId) return undefined;
    this.lastEventId = e.id;
    const node = this.nodes.get(e.node);
    if (!node) return undefined;
    node.status = e.status;
    // A node put back by a retry starts its count over; its job's stream tells the rest.
    if (!FINAL_STATUSES.has(e.status)) node.fraction = undefined;
    return node;
  }

  allFinal(): boolean {
    return this.nodes.size > 0 && [...this.nodes.values()].every((n) => FINAL_STATUSES.has(n.status));
  }

  status(): JobStatus {
    return derivedStatus([...this.nodes.values()].map((n) => n.status));
  }

  /** The nodes a waiting node still waits for (its parents in the workflow not final yet). */
  waitingFor(node: NodeView): string[] {
    return node.after.filter((p) => {
      const parent = this.nodes.get(p);
      return parent !== undefined && !FINAL_STATUSES.has(parent.status);
    });
  }

  /** "stitch   running    [######--------------]  3/10 tasks" */
  nodeLine(node: NodeView, nameWidth: number, barWidth = 20): string {
    const head = `${node.name.padEnd(nameWidth)}  ${jobStatusName(node.status).padEnd(9)}`;
    const f = node.fraction ?? (node.total > 0 ? node.completed / node.total : 0);
    const filled = Math.round(Math.min(1, Math.max(0, f)) * barWidth);
    const bar = `[${"#".repeat(filled)}${"-".repeat(barWidth - filled)}]`;
    const tasks = `${node.completed}/${node.total} tasks${node.failed > 0 ? `, ${node.failed} failed` : ""}`;
    let tail = "";
    if (node.status === JobStatus.WAITING) {
      const on = this.waitingFor(node);
      tail = on.length > 0 ? `  waits for ${on.join(", ")}` : "";
    } else if (node.status === JobStatus.CANCELLED && node.cancelReason) tail = `  ${node.cancelReason}`;
    else if (node.status === JobStatus.RUNNING && node.fraction !== undefined) tail = `  ${percent(node.fraction)}`;
    return `${head}  ${bar} ${tasks}${tail}`;
  }

  /**
   * The block a terminal shows, at most `maxLines` lines: a header, then a line per node in the
   * workflow's order; when they do not fit, the unfinished and unsuccessful nodes come first and
   * the completed ones are counted in a last line.
   */
  lines(maxLines = Infinity): string[] {
    const nodes = [...this.nodes.values()];
    const width = Math.min(24, Math.max(4, ...nodes.map((n) => n.name.length)));
    const done = nodes.filter((n) => n.status === JobStatus.COMPLETED).length;
    const header = `workflow ${this.workflowId}${this.label ? ` (${this.label})` : ""}: ${jobStatusName(this.status())}, ${done}/${nodes.length} nodes completed`;
    const room = Math.max(1, maxLines - 1);
    if (nodes.length <= room) return [header, ...nodes.map((n) => this.nodeLine(n, width))];
    const shown = nodes.filter((n) => n.status !== JobStatus.COMPLETED).slice(0, room - 1);
    const hidden = nodes.length - shown.length;
    return [header, ...shown.map((n) => this.nodeLine(n, width)), `… ${hidden} more node${hidden === 1 ? "" : "s"} (${done} completed)`];
  }

  /** One line for a node's status change, where no terminal redraws: "stitch: pending → running". */
  eventLine(e: WorkflowEvent, node: NodeView | undefined): string {
    const from = e.previousStatus === JobStatus.UNSPECIFIED ? "" : `${jobStatusName(e.previousStatus)} → `;
    const counts =
      node && FINAL_STATUSES.has(e.status)
        ? ` (${node.completed}/${node.total} tasks completed${node.failed ? `, ${node.failed} failed` : ""})`
        : "";
    const reason = node && e.status === JobStatus.CANCELLED && node.cancelReason ? `: ${node.cancelReason}` : "";
    return `${e.node}: ${from}${jobStatusName(e.status)}${counts}${reason}`;
  }
}
