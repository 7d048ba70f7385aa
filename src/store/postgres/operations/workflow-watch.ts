// WatchWorkflow: a workflow's snapshot, then its nodes' status changes as they commit. A node's
// change is an event of the workflow in the event log (kind node_status, job_id the workflow's id;
// written by leasehold_job_status_changed and leasehold_promote_jobs), so the stream reads the log
// as WatchJob does (watch.ts: the same statements, registration, NOTIFY and poll floor, keyed by
// the workflow's id), and ends after the transaction that left no node unfinished.

import type pg from "pg";
import { QueueError, ValidationError } from "../../../queue/errors.js";
import type { JobStatus, WatchOptions, Workflow, WorkflowEvent, WorkflowUpdate } from "../../../queue/types.js";
import { requireUuid } from "../../../queue/validation.js";
import type { StoreContext } from "../state/context.js";
import { inTransaction, withClient } from "../sql/db.js";
import { EventOrder } from "../state/event-order.js";
import type { JobEventRow } from "../sql/rows.js";
import type { WatchHub } from "../state/watch-hub.js";
import {
  CURRENT_SNAPSHOT,
  DELETE_JOB_WATCHER,
  INSERT_JOB_WATCHER,
  JOB_EVENTS_AFTER,
  JOB_EVENTS_SINCE,
  WATCH_READ_TIMEOUT_MS,
  WATCHER_TTL_SECONDS,
} from "./watch.js";
import { loadWorkflow, readWorkflow } from "./workflows.js";

const FINAL: ReadonlySet<string> = new Set(["completed", "failed", "cancelled"]);
const HELD_RETRY_MS = 10;
const HELD_RETRY_MAX_MS = 250;

/** A node_status row as the stream sends it. */
function toWorkflowEvent(r: JobEventRow): WorkflowEvent {
  return {
    id: String(r.id),
    node: r.message ?? "",
    jobId: r.task_id ?? "",
    status: (r.status ?? "pending") as JobStatus,
    previousStatus: (r.previous_status as JobStatus | null) ?? null,
    createdAt: new Date(r.created_at),
  };
}

/** The nodes' statuses as the stream follows them: which are unfinished. */
class Nodes {
  private readonly open = new Set<string>();

  constructor(w: Workflow) {
    for (const n of w.nodes) if (!FINAL.has(n.status)) this.open.add(n.jobId);
  }

  get done(): boolean {
    return this.open.size === 0;
  }

  apply(r: JobEventRow): void {
    if (r.kind !== "node_status" || !r.task_id) return;
    if (FINAL.has(r.status ?? "")) this.open.delete(r.task_id);
    else this.open.add(r.task_id);
  }
}

export async function* watchWorkflow(
  ctx: StoreContext,
  hub: WatchHub,
  workflowId: string,
  opts: WatchOptions,
): AsyncGenerator<WorkflowUpdate> {
  const id = requireUuid("workflow_id", workflowId);
  const after = opts.afterEventId === undefined || opts.afterEventId === "0" ? undefined : opts.afterEventId;
  if (after !== undefined && !/^[1-9]\d{0,18}$/.test(after))
    throw new ValidationError("after_event_id", "must be an event id (a positive integer)");
  const signal = opts.signal;
  let woken = false;
  let wake: (() => void) | undefined;
  const onWake = () => {
    woken = true;
    wake?.();
  };
  const unsubscribe = ctx.options.jobWakes?.subscribeJob(id, onWake);
  const read = <T>(fn: (c: pg.PoolClient) => Promise<T>, begin?: string) => {
    const readSignal = signal
      ? AbortSignal.any([signal, AbortSignal.timeout(WATCH_READ_TIMEOUT_MS)])
      : AbortSignal.timeout(WATCH_READ_TIMEOUT_MS);
    return begin ? inTransaction(ctx.pool, readSignal, fn, begin) : withClient(ctx.pool, readSignal, fn);
  };
  let watcherId: string | undefined;
  let leaveHub: (() => void) | undefined;
  try {
    // Not found (or another account's) before anything is registered.
    await read((c) => loadWorkflow(c, id, opts.account));
    watcherId = (await read((c) => INSERT_JOB_WATCHER.one(c, { jobId: id, ttlSeconds: WATCHER_TTL_SECONDS }))).id;
    const { workflow, snapshot, missed } = await read(async (c) => {
      const workflow = await readWorkflow(c, await loadWorkflow(c, id, opts.account));
      const { snapshot } = await CURRENT_SNAPSHOT.one(c);
      const missed = after === undefined ? [] : await JOB_EVENTS_AFTER.run(c, { jobId: id, afterEventId: after });
      return { workflow, snapshot, missed };
    }, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY");
    if (after === undefined) yield { snapshot: workflow };
    const nodes = new Nodes(workflow);
    // Every node final already: a resumed stream gets the events it missed, then the end.
    if (nodes.done) {
      for (const r of missed) if (r.kind === "node_status") yield { event: toWorkflowEvent(r) };
      return;
    }
    const order = new EventOrder(BigInt(after ?? 0), hub.inProgress, hub.holdMs);
    if (yield* send(order.add(snapshot, missed), new Nodes(workflow), true)) return;
    const stream = { jobId: id, since: snapshot, watcherId, wake: onWake };
    leaveHub = hub.add(stream);
    let retryMs = HELD_RETRY_MS;
    for (;;) {
      if (!woken && !signal?.aborted) {
        let timer: NodeJS.Timeout | undefined;
        await new Promise<void>((resolve) => {
          wake = resolve;
          if (order.holding) timer = setTimeout(resolve, retryMs);
          signal?.addEventListener("abort", () => resolve(), { once: true });
        });
        clearTimeout(timer);
        wake = undefined;
      }
      woken = false;
      if (signal?.aborted) {
        if (signal.reason instanceof QueueError) throw signal.reason;
        return;
      }
      const { snapshot: next, events } = await read(async (c) => {
        await hub.floors.refresh(c);
        return JOB_EVENTS_SINCE.one(c, { jobId: id, since: stream.since, floor: hub.floors.floor(stream.since) });
      });
      stream.since = next;
      const ready = order.add(next, events);
      retryMs = ready.length > 0 || events.length > 0 ? HELD_RETRY_MS : Math.min(retryMs * 2, HELD_RETRY_MAX_MS);
      if (yield* send(ready, nodes, false)) return;
    }
  } finally {
    leaveHub?.();
    unsubscribe?.();
    if (watcherId) {
      const done = watcherId;
      await withClient(ctx.pool, AbortSignal.timeout(WATCH_READ_TIMEOUT_MS), (c) => DELETE_JOB_WATCHER.run(c, { watcherId: done })).catch(
        () => {},
      );
    }
  }

  /**
   * Sends a batch (in id order) as the nodes' statuses follow it; returns true once the batch left
   * no node unfinished, after the last event of the transaction that did (the stream then ends).
   * `replay`: events the snapshot already counts (a resumed stream's missed ones): sent, not applied.
   */
  async function* send(rows: readonly JobEventRow[], nodes: Nodes, replay: boolean): AsyncGenerator<WorkflowUpdate, boolean> {
    let finalXid: string | undefined;
    for (const r of rows) {
      if (r.kind !== "node_status") continue;
      if (finalXid !== undefined && String(r.xid) !== finalXid) continue;
      if (!replay) nodes.apply(r);
      yield { event: toWorkflowEvent(r) };
      if (!replay && finalXid === undefined && nodes.done) finalXid = String(r.xid);
    }
    return finalXid !== undefined;
  }
}
