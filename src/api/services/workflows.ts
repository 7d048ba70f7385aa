// The workflows' RPCs of the QueueService (CreateWorkflow, GetWorkflow, ListWorkflows,
// WatchWorkflow, CancelWorkflow, RetryWorkflow): each handler with its request's decoding and its
// answer's encoding.

import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import {
  CancelWorkflowResponseSchema,
  CreateWorkflowResponseSchema,
  DependencyPolicy,
  GetWorkflowResponseSchema,
  JobStatus,
  ListWorkflowsResponseSchema,
  RetryWorkflowResponseSchema,
  WatchWorkflowResponseSchema,
  WorkflowEventSchema,
  WorkflowNodeCountsSchema,
  WorkflowNodeSchema,
  WorkflowSchema,
  type QueueService as QueueServiceDesc,
  type WatchWorkflowResponse,
  type Workflow as PbWorkflow,
} from "../../../gen/leasehold/queue/v1/queue_pb.js";
import type { ParkingCalls } from "../../queue/long-poll.js";
import type { ApiQueue } from "../../queue/service.js";
import type { Workflow, WorkflowUpdate } from "../../queue/types.js";
import { traceparentHeader } from "../../telemetry/tracing.js";
import { requestInfoKey } from "../request-info.js";
import { call, scope } from "./call-options.js";
import { createWorkflowInput, DEPENDENCY_POLICY, JOB_STATUS, opt, ts } from "./messages.js";

type WorkflowsImpl = Pick<
  ServiceImpl<typeof QueueServiceDesc>,
  "createWorkflow" | "getWorkflow" | "listWorkflows" | "watchWorkflow" | "cancelWorkflow" | "retryWorkflow"
>;

/** `parking`: where watches go (they end at shutdown); the queue itself without one. */
export function workflowsService(queue: ApiQueue, parking: ParkingCalls): WorkflowsImpl {
  return {
    async createWorkflow(req, ctx) {
      const input = createWorkflowInput(req);
      // Without a traceparent on a node, the caller's traceparent header.
      const header = traceparentHeader(ctx.requestHeader);
      if (header) for (const n of input.nodes) n.job.traceparent ||= header;
      const r = await queue.createWorkflow(input, call(ctx));
      const info = ctx.values.get(requestInfoKey);
      if (info) info.created = r.created;
      return create(CreateWorkflowResponseSchema, { workflow: workflowMessage(r.workflow) });
    },

    async getWorkflow(req, ctx) {
      return create(GetWorkflowResponseSchema, { workflow: workflowMessage(await queue.getWorkflow(req.workflowId, call(ctx))) });
    },

    async listWorkflows(req, ctx) {
      const r = await queue.listWorkflows(
        { pageSize: req.pageSize, pageToken: opt(req.pageToken), scheduleName: opt(req.scheduleName), account: opt(req.account) },
        call(ctx),
      );
      return create(ListWorkflowsResponseSchema, { workflows: r.workflows.map(workflowMessage), nextPageToken: r.nextPageToken });
    },

    // As WatchJob: no request deadline for the stream; each database read inside has its own.
    async *watchWorkflow(req, ctx) {
      const options = req.afterEventId === 0n ? {} : { afterEventId: req.afterEventId.toString() };
      for await (const u of parking.watchWorkflow(req.workflowId, { signal: ctx.signal, ...scope(ctx), ...options }))
        yield watchWorkflowResponse(u);
    },

    async cancelWorkflow(req, ctx) {
      const r = await queue.cancelWorkflow({ workflowId: req.workflowId, reason: opt(req.reason) }, call(ctx));
      return create(CancelWorkflowResponseSchema, { workflow: workflowMessage(r.workflow), cancelledNodes: r.cancelledNodes });
    },

    async retryWorkflow(req, ctx) {
      const r = await queue.retryWorkflow({ workflowId: req.workflowId, maxAttempts: req.maxAttempts }, call(ctx));
      return create(RetryWorkflowResponseSchema, {
        workflow: workflowMessage(r.workflow),
        retriedNodes: r.retriedNodes,
        retriedTasks: r.retriedTasks,
      });
    },
  };
}

// ---- domain results → messages ----

export function workflowMessage(w: Workflow): PbWorkflow {
  const c = w.nodeCounts;
  return create(WorkflowSchema, {
    id: w.id,
    name: w.name,
    status: JOB_STATUS[w.status] ?? JobStatus.UNSPECIFIED,
    nodes: w.nodes.map((n) =>
      create(WorkflowNodeSchema, {
        name: n.name,
        jobId: n.jobId,
        status: JOB_STATUS[n.status] ?? JobStatus.UNSPECIFIED,
        workload: n.workload,
        after: n.after.map((a) => ({ node: a.node, optional: a.optional })),
        dependencyPolicy: n.dependencyPolicy ? DEPENDENCY_POLICY[n.dependencyPolicy] : DependencyPolicy.UNSPECIFIED,
        waitingParents: n.waitingParents,
        totalTasks: n.totalTasks,
        completedTasks: n.completedTasks,
        cancelReason: n.cancelReason ?? "",
        completedAt: ts(n.completedAt),
      }),
    ),
    nodeCounts: create(WorkflowNodeCountsSchema, {
      waiting: c.waiting,
      pending: c.pending,
      running: c.running,
      completed: c.completed,
      failed: c.failed,
      cancelled: c.cancelled,
      scheduled: c.scheduled,
    }),
    idempotencyKey: w.idempotencyKey ?? "",
    createdAt: ts(w.createdAt),
    completedAt: ts(w.completedAt),
    scheduleName: w.scheduleName ?? "",
    scheduleFireTime: ts(w.scheduleFireAt),
    account: w.account ?? "",
  });
}

export function watchWorkflowResponse(u: WorkflowUpdate): WatchWorkflowResponse {
  if (u.snapshot) {
    return create(WatchWorkflowResponseSchema, {
      update: { case: "snapshot", value: create(GetWorkflowResponseSchema, { workflow: workflowMessage(u.snapshot) }) },
    });
  }
  const e = u.event;
  return create(WatchWorkflowResponseSchema, {
    update: {
      case: "event",
      value: create(WorkflowEventSchema, {
        id: BigInt(e.id),
        node: e.node,
        jobId: e.jobId,
        status: JOB_STATUS[e.status] ?? JobStatus.UNSPECIFIED,
        previousStatus: e.previousStatus ? (JOB_STATUS[e.previousStatus] ?? JobStatus.UNSPECIFIED) : JobStatus.UNSPECIFIED,
        createdAt: ts(e.createdAt),
      }),
    },
  });
}
