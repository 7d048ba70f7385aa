// Workflows in the client's terms: a node as `createWorkflow` takes it (a job as `createJob` takes it,
// with the nodes it runs after by name), its request, and when a watched workflow is done.
import type { MessageInitShape } from "@bufbuild/protobuf";
import {
  JobStatus,
  type CreateJobRequestSchema,
  type CreateWorkflowRequestSchema,
  type DependencySchema,
  type NodeDependencySchema,
  type TaskSpecSchema,
  type WatchWorkflowResponse,
  type Workflow,
} from "./gen/leasehold/queue/v1/queue_pb.js";

/** A parent job: its id, or `{ jobId, optional }` (optional: under ALL_COMPLETED the job runs whatever its end). */
export type DependencyInit = string | MessageInitShape<typeof DependencySchema>;

/** An edge of a workflow: the parent node's name, or `{ node, optional }`. */
export type NodeDependencyInit = string | MessageInitShape<typeof NodeDependencySchema>;

type JobInit = Omit<MessageInitShape<typeof CreateJobRequestSchema>, "$typeName" | "after" | "idempotencyKey" | "account">;

/**
 * One node of `createWorkflow`: its job as `createJob` takes it (`workload`, `tasks` or
 * `inputUri`/`inputSha256`, `parameters`, `dependencyPolicy`, …; the workflow's account and
 * idempotency key are every node's), and `after`: the nodes it runs after, by name (or
 * `{ node, optional: true }`), and jobs outside the workflow (`{ jobId }`).
 */
export type WorkflowNodeInit = JobInit & {
  workload: string;
  tasks?: MessageInitShape<typeof TaskSpecSchema>[];
  after?: (NodeDependencyInit | { jobId: string; optional?: boolean })[];
};

/** A workflow's own settings besides its nodes. */
export interface WorkflowOptions {
  /** A label for people (the console, the CLI). */
  name?: string;
  /** The same request again answers the workflow created the first time. */
  idempotencyKey?: string;
  /** Every node's account (a token bound to an account creates under it). */
  account?: string;
}

/** `after` of createJob in the message's terms. */
export function dependencies(after: DependencyInit[] | undefined): MessageInitShape<typeof DependencySchema>[] | undefined {
  return after?.map((d) => (typeof d === "string" ? { jobId: d } : d));
}

/** CreateWorkflow's request from nodes by name: each node's edges apart from the parents outside the workflow. */
export function workflowRequest(
  nodes: Record<string, WorkflowNodeInit>,
  options: WorkflowOptions,
): MessageInitShape<typeof CreateWorkflowRequestSchema> {
  return {
    ...options,
    nodes: Object.entries(nodes).map(([name, { after = [], ...job }]) => {
      const edges: MessageInitShape<typeof NodeDependencySchema>[] = [];
      const outside: MessageInitShape<typeof DependencySchema>[] = [];
      for (const d of after) {
        if (typeof d === "string") edges.push({ node: d });
        else if ("jobId" in d && d.jobId !== undefined) outside.push(d);
        else edges.push(d);
      }
      return { name, after: edges, job: { ...job, after: outside } };
    }),
  };
}

const FINAL: readonly JobStatus[] = [JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED];

/** Whether a workflow's every node is final. */
export function workflowFinished(w: Workflow): boolean {
  return FINAL.includes(w.status);
}

/**
 * Each node's status as a watch has seen it: the snapshot's, moved by every event. A stream that
 * resumes after its last event sends no second snapshot, so the watch knows when every node is
 * final even across reconnects.
 */
export class NodeStatuses {
  readonly #status = new Map<string, JobStatus>();

  apply(u: WatchWorkflowResponse): void {
    if (u.update.case === "snapshot") {
      this.#status.clear();
      for (const n of u.update.value.workflow?.nodes ?? []) this.#status.set(n.name, n.status);
    } else if (u.update.case === "event") this.#status.set(u.update.value.node, u.update.value.status);
  }

  get allFinal(): boolean {
    return this.#status.size > 0 && [...this.#status.values()].every((s) => FINAL.includes(s));
  }
}
