// Retrying jobs that have parents: RetryWorkflow (a workflow's failed and cancelled nodes, and the
// nodes after them still waiting), and RetryJob of one job with parents (jobs.ts sends it here).
// A reopened job waits again until its parents are final, as its policy asks, or is pending at
// once when they are: its failed and cancelled tasks are put back waiting, with a fresh attempt
// budget (RetryJob's rule), and promoted in the same transaction when nothing is left to wait for.

import type pg from "pg";
import { FailedPreconditionError, NotFoundError } from "../../../queue/errors.js";
import type { CallOptions, RetryJobResult, RetryWorkflowInput, RetryWorkflowResult } from "../../../queue/types.js";
import { LIMITS, optionalInt, requireUuid } from "../../../queue/fields.js";
import type { StoreContext } from "../state/context.js";
import { inTransaction } from "../sql/db.js";
import { defineQuery } from "../sql/query.js";
import { toJob, type JobRow } from "../sql/rows.js";
import { quotaGate } from "./accounts.js";
import { PROMOTE_JOBS, withParents } from "./dependencies.js";
import { JOB_LOCKS } from "./job-end.js";
import { loadWorkflow, readWorkflow, WORKFLOW_NODES } from "./workflows.js";

/*
 * What the reopened jobs add to their account's quota (accounts.ts): the tasks put back (as
 * REOPEN_TASKS picks them) and a finalizer still to come. $1 jobs, $2 attempt cap.
 */
export const REOPEN_QUOTA = defineQuery<{ ids: string[]; attemptCap: number }, { account: string; tasks: number }>(
  null,
  `
SELECT j.account, sum((SELECT count(*) FROM tasks t WHERE t.job_id = j.id AND t.status IN ('failed', 'cancelled') AND t.attempt < $2::int)
  + CASE WHEN j.finalizer_workload IS NOT NULL AND j.finalizer_job_id IS NULL THEN 1 ELSE 0 END)::int AS tasks
FROM jobs j WHERE j.id = ANY ($1::uuid[]) AND j.account IS NOT NULL
GROUP BY j.account`,
  (p) => [p.ids, p.attemptCap],
);

/*
 * The count each job of $1 waits on once the jobs of $2 are reopened: an edge is resolved when its
 * parent is final and not among them. A job with no edge has no row (it waits on nothing).
 * blocked: a required parent (not optional, under all_completed) final and not completed, which
 * no retry here reopens: the job could never run.
 */
export const RECOUNT = defineQuery<{ ids: string[]; reopened: string[] }, { child_id: string; waiting: number; blocked: string | null }>(
  null,
  `
WITH e AS (
  UPDATE job_dependencies d
  SET resolved = p.status IN ('completed', 'failed', 'cancelled') AND NOT (p.id = ANY ($2::uuid[]))
  FROM jobs p
  WHERE d.child_id = ANY ($1::uuid[]) AND p.id = d.parent_id
  RETURNING d.child_id, d.parent_id, d.resolved, d.optional, p.status, p.workflow_node
)
SELECT e.child_id, (count(*) FILTER (WHERE NOT e.resolved))::int AS waiting,
  (array_agg('job ' || e.parent_id::text || coalesce(' (node "' || e.workflow_node || '")', '') || ' ended ' || e.status::text ORDER BY e.parent_id)
    FILTER (WHERE e.resolved AND e.status <> 'completed' AND NOT e.optional AND c.dependency_policy = 'all_completed'))[1] AS blocked
FROM e JOIN jobs c ON c.id = e.child_id
GROUP BY e.child_id`,
  (p) => [p.ids, p.reopened],
);

// The reopened jobs' failed and cancelled tasks back, waiting (RETRY_JOB's budget rule); how many per job.
export const REOPEN_TASKS = defineQuery<{ ids: string[]; maxAttempts: number | null; attemptCap: number }, { job_id: string; n: number }>(
  null,
  `
WITH reopened AS (
  UPDATE tasks t
  SET status = 'waiting',
      max_attempts = least(t.attempt + coalesce($2::int, wl.max_attempts), $3::int),
      run_after = now(), completed_at = NULL, lease_expires_at = NULL,
      error_code = NULL, error_message = NULL, version = t.version + 1
  FROM workloads wl
  WHERE t.job_id = ANY ($1::uuid[]) AND t.status IN ('failed', 'cancelled') AND wl.name = t.workload AND t.attempt < $3::int
  RETURNING t.job_id
)
SELECT job_id, count(*)::int AS n FROM reopened GROUP BY job_id`,
  (p) => [p.ids, p.maxAttempts, p.attemptCap],
);

// The reopened jobs pending again with their counts (waiting while above 0); the usage rollup counts them anew once final.
export const REOPEN_JOBS = defineQuery<{ ids: string[]; waiting: number[] }, JobRow>(
  null,
  `
UPDATE jobs j SET status = 'pending', waiting_on = x.waiting, completed_at = NULL, cancel_reason = NULL, updated_at = now(), rolled_up_at = NULL
FROM unnest($1::uuid[], $2::int[]) AS x(id, waiting)
WHERE j.id = x.id AND j.status IN ('failed', 'cancelled', 'completed') AND j.settled_at IS NULL
RETURNING j.*`,
  (p) => [p.ids, p.waiting],
);

// Jobs still waiting whose parents were reopened: their new counts.
export const SET_WAITING = defineQuery<{ ids: string[]; waiting: number[] }>(
  null,
  `UPDATE jobs j SET waiting_on = x.waiting, updated_at = now() FROM unnest($1::uuid[], $2::int[]) AS x(id, waiting)
WHERE j.id = x.id AND j.status = 'pending' AND j.waiting_on > 0`,
  (p) => [p.ids, p.waiting],
);

interface Reopen {
  /** the jobs to reopen (final now) */
  reopen: string[];
  /** jobs still waiting whose counts change (their parents are reopened) */
  recount: string[];
  maxAttempts: number | null;
  /** how an error names a job */
  label: (id: string) => string;
}

/** Reopens jobs with parents on `c` (in the caller's transaction); the tasks put back per job. */
async function reopen(c: pg.PoolClient, r: Reopen): Promise<{ tasks: number; rows: JobRow[] }> {
  const attemptCap = LIMITS.attempt.max;
  for (const q of await REOPEN_QUOTA.run(c, { ids: r.reopen, attemptCap })) await quotaGate(c, q.account, q.tasks, "account");
  await JOB_LOCKS.run(c, { ids: r.reopen });
  const all = [...r.reopen, ...r.recount];
  const counts = new Map((await RECOUNT.run(c, { ids: all, reopened: r.reopen })).map((x) => [x.child_id, x]));
  for (const id of r.reopen) {
    const blocked = counts.get(id)?.blocked;
    if (blocked) throw new FailedPreconditionError(`${r.label(id)} cannot run: its parent ${blocked}; retry that first`);
  }
  const put = new Map((await REOPEN_TASKS.run(c, { ids: r.reopen, maxAttempts: r.maxAttempts, attemptCap })).map((x) => [x.job_id, x.n]));
  const none = r.reopen.find((id) => !put.has(id));
  if (none) {
    throw new FailedPreconditionError(`${r.label(none)} has no task left to retry (each is completed or has used ${attemptCap} attempts)`);
  }
  const waiting = (id: string) => counts.get(id)?.waiting ?? 0;
  const rows = await REOPEN_JOBS.run(c, { ids: r.reopen, waiting: r.reopen.map(waiting) });
  if (r.recount.length > 0) await SET_WAITING.run(c, { ids: r.recount, waiting: r.recount.map(waiting) });
  const ready = all.filter((id) => waiting(id) === 0);
  if (ready.length > 0) await PROMOTE_JOBS.one(c, { ids: ready });
  return { tasks: [...put.values()].reduce((a, b) => a + b, 0), rows };
}

const FINAL_OR_FAILED = new Set(["failed", "cancelled"]);

export async function retryWorkflow(ctx: StoreContext, input: RetryWorkflowInput, opts: CallOptions): Promise<RetryWorkflowResult> {
  const id = requireUuid("workflow_id", input.workflowId);
  const maxAttempts = optionalInt("max_attempts", input.maxAttempts, LIMITS.maxAttempts.min, LIMITS.maxAttempts.max) ?? null;
  return inTransaction(ctx.pool, opts.signal, async (c) => {
    const w = await loadWorkflow(c, id, opts.account, true);
    const nodes = await WORKFLOW_NODES.run(c, { workflowId: id });
    const byName = new Map(nodes.map((n) => [n.workflow_node, n]));
    const children = new Map<string, string[]>();
    for (const n of nodes) for (const a of n.after) children.set(a.node, [...(children.get(a.node) ?? []), n.workflow_node]);
    const failed = nodes.filter((n) => FINAL_OR_FAILED.has(n.status));
    if (failed.length === 0) throw new FailedPreconditionError(`workflow ${id} has no failed or cancelled node to retry`);
    const settled = failed.find((n) => n.settled_at !== null);
    if (settled) {
      throw new FailedPreconditionError(
        `node "${settled.workflow_node}" (job ${settled.id}) is settled: settled jobs are not retried; create a new workflow`,
      );
    }
    // Downstream of the failed and cancelled nodes: those still waiting count their reopened parents again.
    const seen = new Set<string>();
    const queue = failed.map((n) => n.workflow_node);
    while (queue.length > 0) {
      const name = queue.pop()!;
      for (const child of children.get(name) ?? []) {
        if (seen.has(child)) continue;
        seen.add(child);
        queue.push(child);
      }
    }
    const recount = [...seen].map((n) => byName.get(n)!).filter((n) => n.status === "pending" && n.waiting_on > 0);
    const label = (jobId: string) => {
      const n = nodes.find((x) => x.id === jobId);
      return n ? `node "${n.workflow_node}" (job ${jobId})` : `job ${jobId}`;
    };
    const { tasks } = await reopen(c, {
      reopen: failed.map((n) => n.id),
      recount: recount.map((n) => n.id),
      maxAttempts,
      label,
    });
    return { workflow: await readWorkflow(c, w), retriedNodes: failed.length, retriedTasks: tasks };
  });
}

/**
 * RetryJob of a job with parents, on `c` inside RetryJob's transaction (its JOB_LOCK held): the
 * job alone is reopened (waiting again while a parent is unfinished; refused while a required
 * parent stays failed or cancelled). Jobs after it that its end cancelled stay cancelled
 * (RetryWorkflow, or their own RetryJob, reopens them); those still waiting count it again.
 * Undefined when the job is not the caller's or not retryable (RetryJob then says why).
 */
export async function retryJobWithParents(c: pg.PoolClient, job: JobRow, maxAttempts: number | null): Promise<RetryJobResult | undefined> {
  if (job.settled_at || !["failed", "cancelled", "completed"].includes(job.status)) return undefined;
  const { tasks, rows } = await reopen(c, {
    reopen: [job.id],
    recount: [],
    maxAttempts,
    label: (id) => (job.workflow_node ? `node "${job.workflow_node}" (job ${id})` : `job ${id}`),
  });
  if (rows.length === 0) throw new NotFoundError("job", job.id);
  return { job: await withParents(c, toJob(rows[0])), retriedTasks: tasks };
}
