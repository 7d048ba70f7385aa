// Jobs that wait for others: CreateJob with after (a job's parents), the edges a workflow's nodes
// share (workflows.ts writes them through linkJobs), and the reads of a job's parents (GetJob,
// GetTask of a waiting task). What happens when a parent ends is the database's:
// migrations/functions/leasehold_job_status_changed.sql counts it, cancels what can no longer run
// and promotes what can (leasehold_promote_jobs.sql), in the statement that ends the parent.

import type pg from "pg";
import { FailedPreconditionError, NotFoundError } from "../../../queue/errors.js";
import type { CallOptions, CreateJobResult, DependencyPolicy, Job, JobParent, Task } from "../../../queue/types.js";
import type { NormalizedDependency } from "../../../queue/dependency-validation.js";
import type { StoreContext } from "../state/context.js";
import type { PreparedJob } from "../state/prepared-job.js";
import { transaction, withClient } from "../sql/db.js";
import { defineQuery } from "../sql/query.js";
import { accountScope } from "../sql/scope.js";
import { toJob, toJobParents, type JobRow, type ParentJson } from "../sql/rows.js";
import { isDelayed } from "../state/due-wakes.js";
import { accountGate } from "./accounts.js";
import { MARK_KEYED, writeJobs } from "./create-job-core.js";

const FINAL = new Set(["completed", "failed", "cancelled"]);

export interface ParentRow {
  id: string;
  status: Job["status"];
  workflow_id: string | null;
  workflow_node: string | null;
}

/*
 * A new job's parents, locked (FOR NO KEY UPDATE, the lock a status change takes) in id order, and
 * read as they are once the lock is held: a parent ending meanwhile is waited for and seen final,
 * and one that ends after waits for this transaction, whose edge it then finds (the trigger's
 * statements run with a fresh snapshot). So an edge is always counted by exactly one side: final
 * here (resolved), or by the parent's end. Only the new job's account's jobs (a job of another
 * account, like a missing one, is not found); $2 null: any job (single-tenant mode).
 */
export const LOCK_PARENTS = defineQuery<{ ids: string[]; account: string | null }, ParentRow>(
  null,
  `SELECT id, status, workflow_id, workflow_node FROM jobs
WHERE id = ANY ($1::uuid[]) AND ${accountScope("$2::text IS NULL OR account = $2")}
ORDER BY id FOR NO KEY UPDATE`,
  (p) => [p.ids, p.account],
);

// The jobs that now have a job after them: their status changes run the dependents' trigger.
export const MARK_DEPENDENTS = defineQuery<{ ids: string[] }>(
  null,
  `UPDATE jobs SET dependents = true WHERE id = ANY ($1::uuid[]) AND NOT dependents`,
  (p) => [p.ids],
);

// The edges, resolved where the parent was final when it was read under its lock.
export const INSERT_EDGES = defineQuery<{ parents: string[]; children: string[]; optional: boolean[]; resolved: boolean[] }>(
  null,
  `INSERT INTO job_dependencies (parent_id, child_id, optional, resolved)
SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::boolean[], $4::boolean[])`,
  (p) => [p.parents, p.children, p.optional, p.resolved],
);

// Each new job's policy, its count of unfinished parents, and its workflow (null: none).
export const LINK_JOBS = defineQuery<{
  ids: string[];
  policies: string[];
  waiting: number[];
  nodes: (string | null)[];
  workflowId: string | null;
}>(
  null,
  `UPDATE jobs j SET dependency_policy = x.policy::dependency_policy, waiting_on = x.waiting, workflow_id = $5::uuid, workflow_node = x.node
FROM unnest($1::uuid[], $2::text[], $3::int[], $4::text[]) AS x(id, policy, waiting, node)
WHERE j.id = x.id`,
  (p) => [p.ids, p.policies, p.waiting, p.nodes, p.workflowId],
);

// Jobs whose parents are final made pending; no waiting-to-pending events (announce false): the
// caller's statement just created or reopened them, and its own events say what they are.
export const PROMOTE_JOBS = defineQuery<{ ids: string[] }, { promoted: number }>(
  null,
  `SELECT leasehold_promote_jobs($1::uuid[], false) AS promoted`,
  (p) => [p.ids],
);

/**
 * A job's parents as JobParent reads them (ParentJson), now: each one's status, its node name when
 * both are nodes of one workflow, its task counts and the result of a parent of one completed task.
 * The same object leasehold_promote_jobs stores on a promoted task. `child` is the child's row.
 */
export const parentsJson = (child: string) => `coalesce((
  SELECT jsonb_agg(jsonb_build_object(
      'job_id', p.id, 'status', CASE WHEN p.status = 'pending' AND p.waiting_on > 0 THEN 'waiting' ELSE p.status::text END,
      'optional', d.optional, 'node', CASE WHEN p.workflow_id = ${child}.workflow_id THEN p.workflow_node END,
      'total_tasks', n.total, 'completed_tasks', n.completed,
      'result', CASE WHEN n.total = 1 AND n.completed = 1 THEN (
        SELECT jsonb_build_object('chunk_index', r.chunk_index, 'task_id', r.id, 'result_uri', r.result_uri,
          'result_sha256', r.result_sha256, 'metrics', r.metrics, 'completed_at', r.completed_at)
        FROM tasks r WHERE r.job_id = p.id AND r.status = 'completed') END)
    ORDER BY p.id)
  FROM job_dependencies d JOIN jobs p ON p.id = d.parent_id
  CROSS JOIN LATERAL (
    SELECT count(*) AS total, count(*) FILTER (WHERE t.status = 'completed') AS completed FROM tasks t WHERE t.job_id = p.id
  ) n
  WHERE d.child_id = ${child}.id), '[]'::jsonb)`;

// One job's parents now (GetJob; GetTask and ListTasks of a waiting task); through job_dependencies_child_idx.
export const JOB_PARENTS = defineQuery<{ jobId: string }, { parents: ParentJson[] }>(
  null,
  `SELECT ${parentsJson("c")} AS parents FROM jobs c WHERE c.id = $1`,
  (p) => [p.jobId],
);

/** A job's parents now; [] for a job without. */
export async function readParents(c: pg.PoolClient, jobId: string): Promise<JobParent[]> {
  const row = await JOB_PARENTS.maybe(c, { jobId });
  return row ? toJobParents(row.parents) : [];
}

/** A job row with its parents filled in (GetJob, CreateJob's answer) when it has any. */
export async function withParents(c: pg.PoolClient, job: Job): Promise<Job> {
  if (!job.dependencyPolicy) return job;
  return { ...job, parents: await readParents(c, job.id) };
}

/** A waiting task's reason, with the parents now (GetTask). */
export async function waitingForParents(c: pg.PoolClient, task: Task): Promise<{ task: Task; detail: string }> {
  const parents = await readParents(c, task.jobId);
  const open = parents.filter((p) => !FINAL.has(p.status));
  const first = open[0];
  const detail =
    open.length === 0
      ? `its job's parents are final; it is made pending in their last end's transaction`
      : `waiting for ${open.length} of ${parents.length} parents to be final (the first: job ${first.jobId}${first.node ? ` "${first.node}"` : ""}, ${first.status})`;
  return { task: { ...task, parents }, detail };
}

/** One new job's edges: its parents as read under their locks, and whether each was final then. */
export interface NewEdges {
  childId: string;
  policy: DependencyPolicy;
  /** the workflow node's name; null outside a workflow */
  node: string | null;
  parents: { id: string; optional: boolean; status: Job["status"]; label: string }[];
}

/**
 * The count a new job waits on and whether it could ever run: a required parent (not optional,
 * under all_completed) already failed or cancelled means never, which is FAILED_PRECONDITION
 * naming the field (`field(i)` for the i-th parent) and writes nothing.
 */
export function unfinishedParents(e: NewEdges, field: (i: number) => string): number {
  let waiting = 0;
  e.parents.forEach((p, i) => {
    if (!FINAL.has(p.status)) waiting++;
    else if (p.status !== "completed" && !p.optional && e.policy === "all_completed") {
      throw new FailedPreconditionError(
        `${field(i)}: ${p.label} ended ${p.status}; under dependency_policy all_completed a job after it could never run ` +
          `(mark it optional, or use all_final)`,
      );
    }
  });
  return waiting;
}

/**
 * The edges of new jobs written in the caller's transaction, after the jobs themselves (their
 * tasks waiting): the edges, each job's policy, count and workflow, the parents marked, and the
 * jobs with nothing left to wait for promoted at once. Returns the ids promoted.
 */
export async function linkJobs(
  c: pg.PoolClient,
  jobs: readonly NewEdges[],
  waiting: readonly number[],
  workflowId: string | null,
): Promise<string[]> {
  const edges = jobs.flatMap((j) =>
    j.parents.map((p) => ({ parent: p.id, child: j.childId, optional: p.optional, resolved: FINAL.has(p.status) })),
  );
  if (edges.length > 0) {
    await INSERT_EDGES.run(c, {
      parents: edges.map((e) => e.parent),
      children: edges.map((e) => e.child),
      optional: edges.map((e) => e.optional),
      resolved: edges.map((e) => e.resolved),
    });
    await MARK_DEPENDENTS.run(c, { ids: [...new Set(edges.map((e) => e.parent))] });
  }
  await LINK_JOBS.run(c, {
    ids: jobs.map((j) => j.childId),
    policies: jobs.map((j) => j.policy),
    waiting: [...waiting],
    nodes: jobs.map((j) => j.node),
    workflowId,
  });
  const ready = jobs.filter((_, i) => waiting[i] === 0).map((j) => j.childId);
  if (ready.length > 0) await PROMOTE_JOBS.one(c, { ids: ready });
  return ready;
}

/** The parents named by `after`, locked and read; NOT_FOUND naming the first one missing (another account's included). */
export async function lockParents(
  c: pg.PoolClient,
  after: readonly NormalizedDependency[],
  account: string | null,
  field: (i: number) => string,
): Promise<Map<string, ParentRow>> {
  const rows = await LOCK_PARENTS.run(c, { ids: after.map((d) => d.jobId), account });
  const found = new Map(rows.map((r) => [r.id, r]));
  const missing = after.findIndex((d) => !found.has(d.jobId));
  if (missing >= 0) throw new NotFoundError("job", after[missing].jobId, field(missing));
  return found;
}

/** How an error names a parent: its node name when it has one. */
export const parentLabel = (r: ParentRow) => (r.workflow_node ? `job ${r.id} (node "${r.workflow_node}")` : `job ${r.id}`);

/**
 * CreateJob with after, in one transaction: the account's quota first (its row locked, as every
 * CreateJob and RetryJob of the account takes it, before any job row: the order RetryJob keeps),
 * then the parents locked and read, then the job with its tasks waiting, its edges, and its
 * promotion when every parent was final already (its tasks pending in the same commit). "taken":
 * its idempotency or billing key was used before (the caller answers the replay).
 */
export async function createJobAfter(ctx: StoreContext, p: PreparedJob, opts: CallOptions): Promise<CreateJobResult | "taken"> {
  const { job } = p;
  const after = job.after!;
  const result = await withClient(ctx.pool, opts.signal, (c) =>
    transaction(c, async () => {
      if (job.concurrencyKey !== "" && ctx.workloads.get(job.workload)?.keyed !== true) await MARK_KEYED.run(c, { workload: job.workload });
      // Read FOR SHARE: they cannot change before the insert, which then never finds them stale.
      await ctx.workloads.load(c, p.names, true);
      if (job.account !== undefined) {
        const tasks = job.tasks.length + (job.finalizer ? 1 : 0);
        const billingKey = job.billing?.billingKey ?? null;
        const { priority } = await accountGate(c, { account: job.account, tasks, idempotencyKey: job.idempotencyKey, billingKey });
        if (job.priority === 0 && priority !== 0) p.job = { ...p.job, priority };
      }
      const field = (i: number) => `after[${i}].job_id`;
      const parents = await lockParents(c, after, job.account ?? opts.account ?? null, field);
      const edges: NewEdges = {
        childId: p.jobId,
        policy: job.dependencyPolicy ?? "all_completed",
        node: null,
        parents: after.map((d) => {
          const r = parents.get(d.jobId)!;
          return { id: d.jobId, optional: d.optional, status: r.status, label: parentLabel(r) };
        }),
      };
      const waiting = unfinishedParents(edges, field);
      // No early answer: the statuses and parents are known only once it is linked.
      const [written] = await writeJobs(ctx, c, [{ ...p, gated: true, early: undefined }], true);
      if (written === "taken" || written === "stale") return written;
      const promoted = (await linkJobs(c, [edges], [waiting], null)).length > 0;
      const row = await SELECT_LINKED_JOB.one(c, { jobId: p.jobId });
      const linked = await withParents(c, toJob(row));
      const taskParents = promoted ? linked.parents : undefined;
      for (const t of written.tasks) {
        t.status = promoted ? "pending" : "waiting";
        t.parents = taskParents;
      }
      return { ...written, job: linked };
    }),
  );
  if (result === "stale") throw new Error("CreateJob found its workloads changed while they were locked");
  if (result === "taken") return result;
  if (isDelayed(job)) ctx.dueWakes.refreshSoon();
  return result;
}

// The new job as linked (its waiting count, policy and workflow), by the database's clock for run_at.
const SELECT_LINKED_JOB = defineQuery<{ jobId: string }, JobRow>(
  null,
  `SELECT *, run_at > now() AS run_at_ahead FROM jobs WHERE id = $1`,
  (p) => [p.jobId],
);
