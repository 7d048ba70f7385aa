// Workflows: jobs (nodes) created together with the edges between them, and what the workflow
// RPCs take and answer.

import type { CreateJobInput, DependencyPolicy, JobStatus } from "./jobs.js";

/** An edge as a node names it: the parent node runs first. */
export interface NodeDependency {
  node: string;
  optional?: boolean;
}

export interface WorkflowNodeSpec {
  name: string;
  job: CreateJobInput;
  after?: NodeDependency[];
}

export interface CreateWorkflowInput {
  nodes: WorkflowNodeSpec[];
  name?: string;
  idempotencyKey?: string;
  /** A registered account; the bound token's when unset (CallOptions.account). */
  account?: string;
}

/** A workflow's nodes counted by status (a node's status as a job's: waiting and scheduled apart from pending). */
export type WorkflowNodeCounts = Record<JobStatus, number>;

export interface WorkflowNode {
  name: string;
  jobId: string;
  status: JobStatus;
  workload: string;
  /** its edges as created: the nodes it runs after */
  after: Required<NodeDependency>[];
  /** null for a node without parents */
  dependencyPolicy: DependencyPolicy | null;
  waitingParents: number;
  totalTasks: number;
  completedTasks: number;
  cancelReason: string | null;
  completedAt: Date | null;
}

export interface Workflow {
  id: string;
  /** "" when none */
  name: string;
  /** derived from the nodes (see the proto's Workflow.status) */
  status: JobStatus;
  /** in the order given; empty in a listing */
  nodes: WorkflowNode[];
  nodeCounts: WorkflowNodeCounts;
  idempotencyKey: string | null;
  createdAt: Date;
  /** when its last node became final; null while any is unfinished */
  completedAt: Date | null;
  scheduleName: string | null;
  scheduleFireAt: Date | null;
  account: string | null;
}

export interface CreateWorkflowResult {
  workflow: Workflow;
  /** false for an idempotent replay */
  created: boolean;
}

export interface ListWorkflowsInput {
  pageSize?: number;
  pageToken?: string;
  scheduleName?: string;
  account?: string;
}

export interface ListWorkflowsResult {
  workflows: Workflow[];
  nextPageToken: string;
}

export interface CancelWorkflowInput {
  workflowId: string;
  reason?: string;
}

export interface CancelWorkflowResult {
  workflow: Workflow;
  cancelledNodes: number;
}

export interface RetryWorkflowInput {
  workflowId: string;
  maxAttempts?: number;
}

export interface RetryWorkflowResult {
  workflow: Workflow;
  retriedNodes: number;
  retriedTasks: number;
}

/** A node's status change, as WatchWorkflow streams it. */
export interface WorkflowEvent {
  id: string;
  node: string;
  jobId: string;
  status: JobStatus;
  previousStatus: JobStatus | null;
  createdAt: Date;
}

/** What WatchWorkflow streams: one snapshot first, then events. */
export type WorkflowUpdate = { snapshot: Workflow; event?: undefined } | { event: WorkflowEvent; snapshot?: undefined };
