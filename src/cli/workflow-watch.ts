// `workflow watch` (and `workflow create --watch`): a WatchWorkflow stream applied to the nodes the
// CLI knows. On a terminal, a block of one line per node (status, a bar, task counts) redrawn in
// place, with each running node's own WatchJob stream (a few at a time) moving its bar; elsewhere
// one stderr line per node status change. A stream the coordinator ends early (a restart) is
// opened again after the last event it delivered. The exit code is the workflow's outcome.
import { Code, ConnectError } from "@connectrpc/connect";
import { JobStatus, TaskStatus, WatchWorkflowResponseSchema, type Workflow } from "../../gen/leasehold/queue/v1/queue_pb.js";
import type { Invocation } from "./command.js";
import { CliError } from "./errors.js";
import { failureLine, jobStatusName, jsonOf, out, printJson } from "./format.js";
import { exitCodeOf, WatchState } from "./watch.js";
import { FINAL_STATUSES, WorkflowWatchState, type NodeView } from "./workflow-state.js";

/** Job streams open at once for the running nodes' bars (the others show their counts as of their last change). */
const FOLLOWED_JOBS = 8;
/** Redraws of the terminal block at most this often. */
const REDRAW_MS = 100;

/** Follows the running nodes' jobs, at most FOLLOWED_JOBS at once, for their task counts. */
class JobFollowers {
  private readonly open = new Map<string, AbortController>();

  constructor(
    private readonly inv: Invocation,
    private readonly state: WorkflowWatchState,
    private readonly changed: () => void,
  ) {}

  /** Starts following running nodes not followed yet, while there is room. */
  fill(): void {
    for (const node of this.state.nodes.values()) {
      if (this.open.size >= FOLLOWED_JOBS) return;
      if (node.status === JobStatus.RUNNING && !this.open.has(node.name)) this.follow(node);
    }
  }

  private follow(node: NodeView): void {
    const abort = new AbortController();
    this.open.set(node.name, abort);
    const job = new WatchState();
    void (async () => {
      try {
        for await (const msg of this.inv.client.watchJob({ jobId: node.jobId }, { signal: abort.signal })) {
          job.apply(msg);
          node.total = job.total;
          node.completed = job.count(TaskStatus.COMPLETED);
          node.failed = job.count(TaskStatus.FAILED);
          node.fraction = job.fraction();
          this.changed();
        }
      } catch {
        // A bar that stops moving is all a broken job stream costs: the node's own events still come.
      } finally {
        this.open.delete(node.name);
        if (!abort.signal.aborted) this.fill();
      }
    })();
  }

  stop(): void {
    for (const abort of this.open.values()) abort.abort();
    this.open.clear();
  }
}

/** The terminal block, redrawn in place (cursor up over the lines drawn before). */
class Screen {
  private drawn = 0;
  private timer: NodeJS.Timeout | undefined;
  /** Set by finish(): a late redraw (a node's counts read after the stream ended) would move over the outcome. */
  private finished = false;

  constructor(private readonly state: WorkflowWatchState) {}

  schedule(): void {
    if (this.finished) return;
    this.timer ??= setTimeout(() => {
      this.timer = undefined;
      this.draw();
    }, REDRAW_MS);
  }

  draw(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    if (this.finished) return;
    // A terminal that reports no size (0, as some ptys do) is taken as 24 × 120.
    const rows = process.stderr.rows || 24;
    const width = process.stderr.columns || 120;
    const lines = this.state.lines(Math.max(3, rows - 2)).map((l) => (l.length > width - 1 ? `${l.slice(0, width - 2)}…` : l));
    let text = this.drawn > 0 ? `\x1b[${this.drawn}A\r` : "";
    for (const l of lines) text += `${l}\x1b[K\n`;
    // A block shorter than the last one (a collapsed line) leaves nothing below it.
    text += "\x1b[J";
    process.stderr.write(text);
    this.drawn = lines.length;
  }

  /** The last drawing; nothing is drawn after it. */
  finish(): void {
    this.draw();
    this.finished = true;
  }
}

/** A node's counts (and cancel reason) from its job, read once it is final. */
async function settleNode(inv: Invocation, node: NodeView): Promise<void> {
  const res = await inv.client.getJob({ jobId: node.jobId }, inv.callOptions);
  node.total = res.totalTasks;
  node.completed = res.taskCounts?.completed ?? node.completed;
  node.failed = res.taskCounts?.failed ?? node.failed;
  node.fraction = undefined;
  node.cancelReason = res.job?.cancelReason ?? node.cancelReason;
}

/** Whether a stream's failure is one to open it again after (the coordinator went away or ended it). */
function resumable(err: unknown): boolean {
  return ConnectError.from(err).code === Code.Unavailable;
}

/** Follows a workflow until every node is final; the exit code of its outcome (as `job watch`'s). */
export async function watchWorkflow(inv: Invocation, workflowId: string): Promise<number> {
  const state = new WorkflowWatchState(workflowId);
  const tty = !inv.json && process.stderr.isTTY === true;
  const screen = tty ? new Screen(state) : undefined;
  const followers = tty ? new JobFollowers(inv, state, () => screen?.schedule()) : undefined;
  const deadline = inv.callOptions.timeoutMs === undefined ? undefined : Date.now() + inv.callOptions.timeoutMs;
  let backoff = 250;
  let snapshotSeen = false;
  // The final nodes' counts being read on a terminal: the last drawing waits for them, or a node that
  // ended last would show the counts of its last change.
  const settling: Promise<unknown>[] = [];
  try {
    for (;;) {
      const timeoutMs = deadline === undefined ? undefined : Math.max(1, deadline - Date.now());
      try {
        const stream = inv.client.watchWorkflow({ workflowId, afterEventId: state.lastEventId }, { timeoutMs });
        for await (const msg of stream) {
          backoff = 250;
          const node = state.apply(msg);
          if (msg.update.case === "snapshot") snapshotSeen = true;
          if (inv.json) {
            printJson(jsonOf(WatchWorkflowResponseSchema, msg));
            continue;
          }
          if (node && FINAL_STATUSES.has(node.status)) {
            // The final counts of a node's tasks come from its job: a terminal's redraw need not wait for them.
            const settled = settleNode(inv, node);
            if (tty)
              settling.push(
                settled.then(
                  () => screen?.schedule(),
                  () => undefined,
                ),
              );
            else await settled;
          }
          if (tty) {
            followers?.fill();
            if (msg.update.case === "snapshot") screen?.draw();
            else screen?.schedule();
          } else if (msg.update.case === "event") process.stderr.write(`${state.eventLine(msg.update.value, node)}\n`);
          else process.stderr.write(`${state.lines().join("\n")}\n`);
        }
        if (snapshotSeen && state.allFinal()) break;
      } catch (err) {
        if (!resumable(err) || (deadline !== undefined && Date.now() >= deadline)) throw err;
      }
      if (deadline !== undefined && Date.now() >= deadline) {
        throw new CliError(`the stream of workflow ${workflowId} ended before every node was final (${jobStatusName(state.status())})`);
      }
      await new Promise((r) => setTimeout(r, backoff));
      backoff = Math.min(backoff * 2, 5000);
    }
  } finally {
    followers?.stop();
    await Promise.all(settling);
    screen?.finish();
  }
  const final = (await inv.client.getWorkflow({ workflowId }, inv.callOptions)).workflow;
  const status = final?.status ?? state.status();
  const code = exitCodeOf(status);
  if (code === undefined) throw new CliError(`workflow ${workflowId} is ${jobStatusName(status)} after its stream ended`);
  if (!inv.json && final) await summary(inv, final);
  return code;
}

/** The outcome on stdout: a line for the workflow, then one for each node that did not complete, saying why. */
async function summary(inv: Invocation, w: Workflow): Promise<void> {
  const done = w.nodes.filter((n) => n.status === JobStatus.COMPLETED).length;
  out(`workflow ${w.id} ${jobStatusName(w.status)}: ${done}/${w.nodes.length} nodes completed`);
  for (const n of w.nodes) {
    if (n.status === JobStatus.FAILED) {
      const job = await inv.client.getJob({ jobId: n.jobId }, inv.callOptions);
      out(`  ${n.name} failed (job ${n.jobId})${job.failure ? `: ${failureLine(job.failure)}` : ""}`);
    } else if (n.status === JobStatus.CANCELLED) {
      out(`  ${n.name} cancelled (job ${n.jobId})${n.cancelReason ? `: ${n.cancelReason}` : ""}`);
    }
  }
}
