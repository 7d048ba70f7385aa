// Workflows: CreateWorkflow (every node a job through CreateJob's core, with its edges, in one
// transaction), GetWorkflow, ListWorkflows and CancelWorkflow. RetryWorkflow is workflow-retry.ts,
// WatchWorkflow workflow-watch.ts; what a node's end does to the nodes after it is the database's
// (dependencies.ts says where).

import { createHash } from "node:crypto";
import type pg from "pg";
import { IdempotencyConflictError, NotFoundError, ValidationError } from "../../../queue/errors.js";
import { canonicalJson } from "../../../queue/idempotency.js";
import { jobAccount } from "../../../queue/account-validation.js";
import { validateCreateWorkflow, type NormalizedWorkflow } from "../../../queue/dependency-validation.js";
import { encodeJobsPageToken, validateListJobs } from "../../../queue/list-validation.js";
import { requireUuid } from "../../../queue/validation.js";
import { LIMITS } from "../../../queue/fields.js";
import type {
  CallOptions,
  CancelWorkflowInput,
  CancelWorkflowResult,
  CreateWorkflowInput,
  CreateWorkflowResult,
  DependencyPolicy,
  Job,
  JobStatus,
  ListWorkflowsInput,
  ListWorkflowsResult,
  Workflow,
  WorkflowNode,
  WorkflowNodeCounts,
} from "../../../queue/types.js";
import { JOB_STATUSES } from "../../../queue/types.js";
import type { JsonValue } from "@bufbuild/protobuf";
import type { StoreContext } from "../state/context.js";
import type { PreparedJob } from "../state/prepared-job.js";
import { inTransaction, transaction, withClient } from "../sql/db.js";
import { jobStatusIn } from "../sql/fragments.js";
import { defineQuery } from "../sql/query.js";
import { accountScope } from "../sql/scope.js";
import { uuidv7, uuidv7s } from "../sql/uuidv7.js";
import { isDelayed } from "../state/due-wakes.js";
import { accountGate } from "./accounts.js";
import { MARK_KEYED, prepareJob, writeJobs } from "./create-job-core.js";
import { linkJobs, lockParents, parentLabel, unfinishedParents, type NewEdges, type ParentRow } from "./dependencies.js";
import { JOB_LOCKS } from "./job-end.js";

export interface WorkflowRow {
  id: string;
  name: string;
  account: string | null;
  idempotency_key: string | null;
  request_sha256: string | null;
  schedule_name: string | null;
  schedule_fire_at: Date | null;
  created_at: Date;
}

export const INSERT_WORKFLOW = defineQuery<
  {
    id: string;
    name: string;
    account: string | null;
    idempotencyKey: string | null;
    requestSha256: string | null;
    scheduleName: string | null;
    scheduleFireAt: Date | null;
  },
  WorkflowRow
>(
  null,
  `INSERT INTO workflows (id, name, account, idempotency_key, request_sha256, schedule_name, schedule_fire_at)
VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING RETURNING *`,
  (p) => [p.id, p.name, p.account, p.idempotencyKey, p.requestSha256, p.scheduleName, p.scheduleFireAt],
);

// Idempotency keys are the account's, as CreateJob's are (workflows_idempotency_key_idx, by its expression).
export const SELECT_WORKFLOW_BY_KEY = defineQuery<{ account: string; key: string }, WorkflowRow>(
  null,
  `SELECT * FROM workflows WHERE coalesce(account, '') = $1 AND idempotency_key = $2`,
  (p) => [p.account, p.key],
);

// A workflow for a caller: another account's is not found, by the same statement as a missing one. $2 null: any.
export const SELECT_WORKFLOW = defineQuery<{ workflowId: string; account: string | null }, WorkflowRow>(
  null,
  `SELECT * FROM workflows WHERE id = $1 AND ${accountScope("$2::text IS NULL OR account = $2")}`,
  (p) => [p.workflowId, p.account],
);

// The same, locked: CancelWorkflow and RetryWorkflow of one workflow run one at a time.
export const LOCK_WORKFLOW = defineQuery<{ workflowId: string; account: string | null }, WorkflowRow>(
  null,
  `SELECT * FROM workflows WHERE id = $1 AND ${accountScope("$2::text IS NULL OR account = $2")} FOR UPDATE`,
  (p) => [p.workflowId, p.account],
);

interface NodeRow {
  id: string;
  workflow_node: string;
  status: Job["status"];
  waiting_on: number;
  run_at_ahead: boolean | null;
  workload: string;
  dependency_policy: DependencyPolicy | null;
  cancel_reason: string | null;
  completed_at: Date | null;
  settled_at: Date | null;
  total_tasks: number;
  completed_tasks: number;
  after: { node: string; optional: boolean }[];
}

/*
 * A workflow's nodes in the order given (their ids are time-ordered in that order), through
 * jobs_workflow_node_idx, each with its task counts (through tasks_job_chunk_idx: a read of every
 * task of the workflow, as GetJob's counts are of a job's) and its edges to other nodes by name
 * (through job_dependencies_child_idx).
 */
export const WORKFLOW_NODES = defineQuery<{ workflowId: string }, NodeRow>(
  null,
  `
SELECT j.id, j.workflow_node, j.status, j.waiting_on, j.run_at > now() AS run_at_ahead, j.workload, j.dependency_policy,
  j.cancel_reason, j.completed_at, j.settled_at, n.total_tasks, n.completed_tasks,
  coalesce((SELECT json_agg(json_build_object('node', p.workflow_node, 'optional', d.optional) ORDER BY p.id)
            FROM job_dependencies d JOIN jobs p ON p.id = d.parent_id AND p.workflow_id = j.workflow_id
            WHERE d.child_id = j.id), '[]'::json) AS after
FROM jobs j
CROSS JOIN LATERAL (
  SELECT count(*)::int AS total_tasks, (count(*) FILTER (WHERE t.status = 'completed'))::int AS completed_tasks
  FROM tasks t WHERE t.job_id = j.id
) n
WHERE j.workflow_id = $1
ORDER BY j.id`,
  (p) => [p.workflowId],
);

type ListedRow = WorkflowRow & { created_at_cursor: string; counts: Record<string, number> | null; last_completed_at: Date | null };

/*
 * ListWorkflows, newest first, keyset-paginated on (created_at, id) as ListJobs is: through
 * workflows_created_idx, workflows_account_idx or workflows_schedule_idx by the filter given
 * (one statement: the filters are null when not given). Each with its nodes counted by status
 * (a waiting or scheduled node apart from pending), through jobs_workflow_node_idx.
 * $1 after created_at, $2 after id, $3 limit, $4 account (null: any), $5 schedule (null: any).
 */
export const LIST_WORKFLOWS = defineQuery<
  { afterCreatedAt: string; afterId: string; limit: number; account: string | null; schedule: string | null },
  ListedRow
>(
  null,
  `
SELECT w.*, to_char(w.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS created_at_cursor, c.counts, c.last_completed_at
FROM workflows w
CROSS JOIN LATERAL (
  SELECT jsonb_object_agg(s.status, s.n) AS counts, max(s.last) AS last_completed_at FROM (
    SELECT CASE WHEN j.status = 'pending' AND j.waiting_on > 0 THEN 'waiting'
                WHEN j.status = 'pending' AND j.run_at > now() THEN 'scheduled' ELSE j.status::text END AS status,
      count(*) AS n, max(j.completed_at) AS last
    FROM jobs j WHERE j.workflow_id = w.id GROUP BY 1) s
) c
WHERE (w.created_at, w.id) < ($1::timestamptz, $2::uuid)
  AND ${accountScope("$4::text IS NULL OR w.account = $4")} AND ($5::text IS NULL OR w.schedule_name = $5)
ORDER BY w.created_at DESC, w.id DESC
LIMIT $3`,
  (p) => [p.afterCreatedAt, p.afterId, p.limit, p.account, p.schedule],
);

function nodeStatus(r: Pick<NodeRow, "status" | "waiting_on" | "run_at_ahead">): JobStatus {
  if (r.status === "pending" && r.waiting_on > 0) return "waiting";
  if (r.status === "pending" && r.run_at_ahead) return "scheduled";
  return r.status;
}

const OPEN: ReadonlySet<JobStatus> = new Set(["pending", "running", "waiting", "scheduled"]);

/** A workflow's status from its nodes' counts (see the proto's Workflow.status). */
export function workflowStatus(counts: WorkflowNodeCounts): JobStatus {
  const open = counts.pending + counts.running + counts.waiting + counts.scheduled;
  const started = counts.running + counts.completed + counts.failed + counts.cancelled;
  if (open > 0) return started > 0 ? "running" : "pending";
  if (counts.failed > 0) return "failed";
  if (counts.cancelled > 0) return "cancelled";
  return "completed";
}

function emptyNodeCounts(): WorkflowNodeCounts {
  return Object.fromEntries(JOB_STATUSES.map((s) => [s, 0])) as WorkflowNodeCounts;
}

function toWorkflow(w: WorkflowRow, nodes: WorkflowNode[], counts: WorkflowNodeCounts, lastCompletedAt: Date | null): Workflow {
  const status = workflowStatus(counts);
  return {
    id: w.id,
    name: w.name,
    status,
    nodes,
    nodeCounts: counts,
    idempotencyKey: w.idempotency_key,
    createdAt: w.created_at,
    completedAt: OPEN.has(status) ? null : lastCompletedAt,
    scheduleName: w.schedule_name,
    scheduleFireAt: w.schedule_fire_at,
    account: w.account,
  };
}

/** A workflow with its nodes, on `c`. */
export async function readWorkflow(c: pg.PoolClient, w: WorkflowRow): Promise<Workflow> {
  const rows = await WORKFLOW_NODES.run(c, { workflowId: w.id });
  const counts = emptyNodeCounts();
  let last: Date | null = null;
  const nodes = rows.map((r): WorkflowNode => {
    const status = nodeStatus(r);
    counts[status]++;
    if (r.completed_at && (!last || r.completed_at > last)) last = r.completed_at;
    return {
      name: r.workflow_node,
      jobId: r.id,
      status,
      workload: r.workload,
      after: r.after.map((a) => ({ node: a.node, optional: a.optional })),
      dependencyPolicy: r.dependency_policy,
      waitingParents: r.waiting_on,
      totalTasks: r.total_tasks,
      completedTasks: r.completed_tasks,
      cancelReason: r.cancel_reason,
      completedAt: r.completed_at,
    };
  });
  return toWorkflow(w, nodes, counts, last);
}

/** A caller's workflow, or NOT_FOUND (another account's included). */
export async function loadWorkflow(c: pg.PoolClient, workflowId: string, account: string | undefined, lock = false): Promise<WorkflowRow> {
  const q = lock ? LOCK_WORKFLOW : SELECT_WORKFLOW;
  const row = await q.maybe(c, { workflowId, account: account ?? null });
  if (!row) throw new NotFoundError("workflow", workflowId, "workflow_id");
  return row;
}

export async function getWorkflow(ctx: StoreContext, workflowId: string, opts: CallOptions): Promise<Workflow> {
  const id = requireUuid("workflow_id", workflowId);
  return withClient(ctx.pool, opts.signal, async (c) => readWorkflow(c, await loadWorkflow(c, id, opts.account)));
}

export async function listWorkflows(ctx: StoreContext, input: ListWorkflowsInput, opts: CallOptions): Promise<ListWorkflowsResult> {
  const q = validateListJobs({
    pageSize: input.pageSize,
    pageToken: input.pageToken,
    scheduleName: input.scheduleName,
    account: input.account,
  });
  // A bound token lists its own account's workflows: naming another lists nothing.
  if (opts.account !== undefined && q.account !== null && q.account !== opts.account) return { workflows: [], nextPageToken: "" };
  const rows = await withClient(ctx.pool, opts.signal, (c) =>
    LIST_WORKFLOWS.run(c, {
      afterCreatedAt: q.after?.createdAt ?? "infinity",
      afterId: q.after?.id ?? "ffffffff-ffff-ffff-ffff-ffffffffffff",
      limit: q.pageSize + 1,
      account: opts.account ?? q.account,
      schedule: q.scheduleName,
    }),
  );
  const page = rows.slice(0, q.pageSize);
  const last = page[page.length - 1];
  return {
    workflows: page.map((r) => {
      const counts = emptyNodeCounts();
      for (const [s, n] of Object.entries(r.counts ?? {})) if (s in counts) counts[s as JobStatus] = Number(n);
      return toWorkflow(r, [], counts, r.last_completed_at);
    }),
    nextPageToken: rows.length > q.pageSize ? encodeJobsPageToken(last.created_at_cursor, last.id) : "",
  };
}

/** A node's validation errors named under its place in the request (nodes[2].job.workload). */
function underNode<T>(i: number, fn: () => T): T {
  try {
    return fn();
  } catch (err) {
    if (!(err instanceof ValidationError)) throw err;
    const prefix = `nodes[${i}].job.`;
    const violations = err.violations.map((v) => ({ field: prefix + v.field, description: v.description }));
    throw new ValidationError(violations[0].field, err.detail, violations);
  }
}

/** What a workflow's idempotency key compares: the request as normalized, nodes and edges included. */
function workflowFingerprint(w: NormalizedWorkflow, prepared: readonly PreparedJob[]): string {
  const request = {
    name: w.name,
    account: w.account ?? null,
    nodes: w.nodes.map((n, i) => {
      const { traceparent: _trace, ...job } = prepared[i].job;
      return { name: n.name, job, after: n.after.map((a) => ({ node: w.nodes[a.node].name, optional: a.optional })) };
    }),
  };
  return createHash("sha256")
    .update(canonicalJson(request as unknown as JsonValue))
    .digest("hex");
}

/** A schedule's tick: the workflow carries the schedule and tick (schedule-ticks.ts). */
export interface WorkflowOrigin {
  scheduleName: string;
  scheduleFireAt: Date;
}

export async function createWorkflow(ctx: StoreContext, input: CreateWorkflowInput, opts: CallOptions): Promise<CreateWorkflowResult> {
  const w = prepareWorkflow(ctx, input, opts.account);
  return withClient(ctx.pool, opts.signal, (c) => transaction(c, () => writeWorkflow(ctx, c, w)));
}

/** A CreateWorkflow validated whole and each node prepared as CreateJob prepares a job (nothing read yet). */
export interface PreparedWorkflow {
  w: NormalizedWorkflow;
  nodes: PreparedJob[];
  id: string;
  fingerprint: string | null;
  origin?: WorkflowOrigin;
}

export function prepareWorkflow(
  ctx: StoreContext,
  input: CreateWorkflowInput,
  boundAccount: string | undefined,
  origin?: WorkflowOrigin,
): PreparedWorkflow {
  const account = jobAccount(input?.account, boundAccount);
  const w = validateCreateWorkflow({ ...input, ...(account === undefined ? {} : { account }) });
  const ids = uuidv7s(w.nodes.length);
  const nodes = w.nodes.map((n, i) => {
    const p = underNode(i, () => prepareJob(ctx, { ...n.job, account }, undefined, boundAccount));
    // Ids in the order given, so the nodes read back in that order; a node with parents (its
    // edges, or its job's after) is written waiting, with no wake-up, and promoted when they end.
    const waiting = n.after.length > 0 || p.job.after !== undefined;
    return {
      ...p,
      jobId: ids[i],
      waiting,
      gated: true,
      fieldPrefix: `nodes[${i}].job.`,
      perWorkload: waiting ? new Map<string, number>() : p.perWorkload,
    };
  });
  const fingerprint = w.idempotencyKey ? workflowFingerprint(w, nodes) : null;
  return { w, nodes, id: uuidv7(), fingerprint, ...(origin ? { origin } : {}) };
}

/**
 * A prepared workflow written on `c` inside the caller's transaction (the RPC's own, or a
 * schedule tick's): the workflow row (a used idempotency key answers the workflow it made), the
 * account's quota for every node's tasks together (locked before any job row, the order RetryJob
 * keeps), the jobs the nodes wait for outside the workflow locked and read, every node through
 * CreateJob's core, then the edges, and the nodes with nothing to wait for pending at commit.
 */
export async function writeWorkflow(ctx: StoreContext, c: pg.PoolClient, pw: PreparedWorkflow): Promise<CreateWorkflowResult> {
  const { w, nodes } = pw;
  const account = w.account;
  const inserted = await INSERT_WORKFLOW.maybe(c, {
    id: pw.id,
    name: w.name,
    account: account ?? null,
    idempotencyKey: w.idempotencyKey,
    requestSha256: pw.fingerprint,
    scheduleName: pw.origin?.scheduleName ?? null,
    scheduleFireAt: pw.origin?.scheduleFireAt ?? null,
  });
  if (!inserted) {
    const prior = await SELECT_WORKFLOW_BY_KEY.maybe(c, { account: account ?? "", key: w.idempotencyKey ?? "" });
    if (!prior || prior.request_sha256 !== pw.fingerprint)
      throw new IdempotencyConflictError(`idempotency_key: was used for a different request${prior ? ` (workflow ${prior.id})` : ""}`);
    return { workflow: await readWorkflow(c, prior), created: false };
  }
  const names = [...new Set(nodes.flatMap((p) => p.names))];
  for (const p of nodes) {
    if (p.job.concurrencyKey !== "" && ctx.workloads.get(p.job.workload)?.keyed !== true) {
      await MARK_KEYED.run(c, { workload: p.job.workload });
    }
  }
  // Read FOR SHARE: they cannot change before the inserts, which then never find them stale.
  await ctx.workloads.load(c, names, true);
  if (account !== undefined) {
    const tasks = nodes.reduce((n, p) => n + p.job.tasks.length + (p.job.finalizer ? 1 : 0), 0);
    const { priority } = await accountGate(c, { account, tasks, idempotencyKey: null, billingKey: null });
    if (priority !== 0) for (const p of nodes) if (p.job.priority === 0) p.job = { ...p.job, priority };
  }
  // Every job the nodes wait for outside the workflow, locked once, in id order.
  const external = [...new Map(nodes.flatMap((p) => p.job.after ?? []).map((d) => [d.jobId, d])).values()];
  const where = new Map<string, string>();
  nodes.forEach((p, i) => p.job.after?.forEach((d, k) => where.has(d.jobId) || where.set(d.jobId, `nodes[${i}].job.after[${k}].job_id`)));
  const outside: Map<string, ParentRow> =
    external.length > 0
      ? await lockParents(c, external, account ?? null, (k) => where.get(external[k].jobId)!)
      : new Map<string, ParentRow>();
  const edges: NewEdges[] = w.nodes.map((n, i) => ({
    childId: nodes[i].jobId,
    policy: nodes[i].job.dependencyPolicy ?? "all_completed",
    node: n.name,
    parents: [
      ...n.after.map((a) => ({
        id: nodes[a.node].jobId,
        optional: a.optional,
        status: "pending" as const,
        label: `node "${w.nodes[a.node].name}"`,
      })),
      ...(nodes[i].job.after ?? []).map((d) => {
        const r = outside.get(d.jobId)!;
        return { id: d.jobId, optional: d.optional, status: r.status, label: parentLabel(r) };
      }),
    ],
  }));
  const waiting = edges.map((e, i) =>
    unfinishedParents(e, (k) =>
      k < w.nodes[i].after.length ? `nodes[${i}].after[${k}]` : `nodes[${i}].job.after[${k - w.nodes[i].after.length}].job_id`,
    ),
  );
  const written = await writeJobs(ctx, c, nodes, true);
  written.forEach((r, i) => {
    if (r === "taken")
      throw new IdempotencyConflictError(`nodes[${i}].job.billing.billing_key: was used before, by another job of the account`);
    if (r === "stale") throw new Error("CreateWorkflow found its workloads changed while they were locked");
  });
  await linkJobs(c, edges, waiting, pw.id);
  if (nodes.some((p) => isDelayed(p.job))) ctx.dueWakes.refreshSoon();
  return { workflow: await readWorkflow(c, inserted), created: true };
}

// ---- CancelWorkflow ----

export const OPEN_NODES = defineQuery<{ workflowId: string }, { id: string }>(
  null,
  `SELECT id FROM jobs WHERE workflow_id = $1 AND status IN ('pending', 'running') ORDER BY id`,
  (p) => [p.workflowId],
);

// Tasks first, then the jobs: the lock order of the claim and of CancelJob. A leased task keeps its lease (late-result.ts).
export const CANCEL_NODE_TASKS = defineQuery<{ ids: string[] }>(
  null,
  `UPDATE tasks SET status = 'cancelled', completed_at = now(), version = version + 1
WHERE job_id = ANY ($1::uuid[]) AND status IN ('pending', 'leased', 'waiting')`,
  (p) => [p.ids],
);

export const CANCEL_NODES = defineQuery<{ ids: string[]; reason: string | null }, { id: string }>(
  null,
  `UPDATE jobs SET status = 'cancelled', cancel_reason = $2, completed_at = now(), updated_at = now()
WHERE id = ANY ($1::uuid[]) AND ${jobStatusIn("status", "pending", "running")} RETURNING id`,
  (p) => [p.ids, p.reason],
);

export async function cancelWorkflow(ctx: StoreContext, input: CancelWorkflowInput, opts: CallOptions): Promise<CancelWorkflowResult> {
  const id = requireUuid("workflow_id", input.workflowId);
  let reason: string | null = null;
  if (input.reason) {
    if (typeof input.reason !== "string" || input.reason.length > LIMITS.reasonLength)
      throw new ValidationError("reason", `must be at most ${LIMITS.reasonLength} characters`);
    reason = input.reason;
  }
  return inTransaction(ctx.pool, opts.signal, async (c) => {
    const w = await loadWorkflow(c, id, opts.account, true);
    const open = (await OPEN_NODES.run(c, { workflowId: id })).map((r) => r.id);
    let cancelled = 0;
    if (open.length > 0) {
      // One at a time with each node's ends, cancels and retries (job-end.ts' JOB_LOCK), in id order.
      await JOB_LOCKS.run(c, { ids: open });
      await CANCEL_NODE_TASKS.run(c, { ids: open });
      cancelled = (await CANCEL_NODES.run(c, { ids: open, reason: reason ?? "the workflow was cancelled" })).length;
    }
    return { workflow: await readWorkflow(c, w), cancelledNodes: cancelled };
  });
}
