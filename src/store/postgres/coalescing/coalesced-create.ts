// CreateJob calls that arrive together, in one statement: coalescing's lane for them
// (coalescing.ts). Sixteen submitters of one-task jobs paid a plan start-up, a round trip and a
// commit each; a busy coordinator now pays them once per batch, as results and claims already do,
// and an idle one still runs each call at once.
//
// Only a job whose whole write is its insert takes this way (create-job.ts, coalescable): no transaction of its
// own (no run_at, finalizer or account), no idempotency key nor billing context (two coordinators'
// batches would insert keys in their own orders, and could deadlock on each other's), no fair ranks (a
// concurrency key or a keyed workload: one upsert per job orders the ranks), every workload in
// the cache, and at most COALESCED_JOB_MAX_TASKS tasks. Every other job runs its own statement
// (create-job.ts), with the same core: the workloads' rules (checkWorkloads) and the job's values
// (jobValues) are create-job-core.ts's.
//
// Each job keeps its own outcome: one that fails the workloads' rules is refused alone, before the
// statement. If a workload changed since it was cached, the statement inserts nothing and every
// job of the batch goes the one-job way, which reads the workloads locked.

import { intArrayLiteral, textArrayLiteral } from "../sql/arrays.js";
import { NOTIFY_CHANNEL } from "../sql/channels.js";
import type { StoreContext } from "../state/context.js";
import { checkWorkloads, jobValues, type Checked } from "../operations/create-job-core.js";
import { withClient } from "../sql/db.js";
import type { Outcome } from "./group-commit.js";
import { createdJob, taskArrays, taskLabels, taskRows, type TaskArrays } from "../operations/new-job-rows.js";
import type { PreparedJob, WriteOutcome } from "../state/prepared-job.js";
import { defineQuery } from "../sql/query.js";
import type { JobRow } from "../sql/rows.js";

interface CreateJobsParams extends TaskArrays {
  /** every workload the batch names, and the xmin of each as cached */
  workloadNames: string[];
  workloadXmins: string[];
  /** the jobs, as array literals (arrays.ts), one element per job */
  jobIds: string;
  workloads: string;
  inputUris: string;
  inputSha256s: string;
  parameters: string;
  priorities: string;
  traceparents: string;
  failurePolicies: string;
  maxFailedTasks: string;
  requiredLabels: string;
  /** each task's job (the task columns themselves are TaskArrays, of every job's tasks in a row) */
  taskJobIds: string;
  /** each task's labels (jsonb text), or null for its job's */
  taskLabels: string;
  /** the wake-ups, one element per job and workload: the job, the workload, how many tasks */
  wakeJobIds: string;
  wakeWorkloads: string;
  wakeCounts: string;
}

type CreateJobsRow = { fresh: boolean; notified: string } & (JobRow | { [K in keyof JobRow]: null });

/*
 * CREATE_JOB (create-job-core.ts) for many jobs: the same freshness check over every workload the
 * batch names, the jobs and then their tasks by unnest, and one row back per job in the order
 * sent (the job's row, or nulls when the workloads were stale and nothing was inserted). None of
 * these jobs has a key, concurrency key or fair rank, so those columns keep their defaults.
 * The wake-ups are summed per workload and priority: PostgreSQL sends identical payloads of one
 * transaction once, and a count is how many parked claims the tasks may wake. The head key is
 * the priority, fair rank 0 and the transaction's start in microseconds (claim-hints.ts).
 */
export const CREATE_JOBS = defineQuery<CreateJobsParams, CreateJobsRow>(
  "leasehold_create_jobs",
  `
WITH fresh AS (
  SELECT count(*) = cardinality($1::text[]) AS ok
  FROM workloads w JOIN unnest($1::text[], $2::text[]) AS v(name, x) ON w.name = v.name AND w.xmin::text = v.x
), job AS (
  INSERT INTO jobs (id, workload, input_uri, input_sha256, parameters, priority, traceparent, failure_policy, max_failed_tasks, required_labels)
  SELECT j.id, j.workload, j.input_uri, j.input_sha256, j.parameters::jsonb, j.priority, j.traceparent,
    j.failure_policy::failure_policy, j.max_failed_tasks, j.required_labels::jsonb
  FROM fresh, unnest($3::uuid[], $4::text[], $5::text[], $6::text[], $7::text[], $8::int[], $9::text[], $10::text[], $11::int[], $12::text[])
    AS j(id, workload, input_uri, input_sha256, parameters, priority, traceparent, failure_policy, max_failed_tasks, required_labels)
  WHERE fresh.ok
  RETURNING *
), tasks_in AS (
  INSERT INTO tasks (id, job_id, chunk_index, workload, input_uri, input_sha256, parameters, max_attempts, priority, traceparent, required_labels)
  SELECT u.id, job.id, u.chunk_index, u.workload, u.input_uri, u.input_sha256, u.parameters::jsonb, u.max_attempts, job.priority, job.traceparent,
    coalesce(u.required_labels::jsonb, job.required_labels)
  FROM unnest($13::uuid[], $14::uuid[], $15::int[], $16::text[], $17::text[], $18::text[], $19::text[], $20::int[], $21::text[])
    AS u(id, job_id, chunk_index, workload, input_uri, input_sha256, parameters, max_attempts, required_labels)
  JOIN job ON job.id = u.job_id
), woken AS (
  SELECT pg_notify('${NOTIFY_CHANNEL}', x.w || ':' || sum(x.n) || ':' || job.priority || ';0;' || (extract(epoch FROM now()) * 1000000)::bigint)
  FROM unnest($22::uuid[], $23::text[], $24::int[]) AS x(job_id, w, n) JOIN job ON job.id = x.job_id
  GROUP BY x.w, job.priority
)
SELECT (SELECT ok FROM fresh) AS fresh, (SELECT count(*) FROM woken) AS notified, job.*
FROM unnest($3::uuid[]) WITH ORDINALITY AS v(id, n) LEFT JOIN job ON job.id = v.id
ORDER BY v.n`,
  (p) => [
    p.workloadNames,
    p.workloadXmins,
    p.jobIds,
    p.workloads,
    p.inputUris,
    p.inputSha256s,
    p.parameters,
    p.priorities,
    p.traceparents,
    p.failurePolicies,
    p.maxFailedTasks,
    p.requiredLabels,
    p.taskIds,
    p.taskJobIds,
    p.taskChunkIndexes,
    p.taskWorkloads,
    p.taskInputUris,
    p.taskInputSha256s,
    p.taskParameters,
    p.taskMaxAttempts,
    p.taskLabels,
    p.wakeJobIds,
    p.wakeWorkloads,
    p.wakeCounts,
  ],
);

interface Checked1 {
  /** the item's place in the batch */
  i: number;
  p: PreparedJob;
  checked: Checked;
}

/** One batch of coalescable jobs: each one's outcome, in order ("stale": run it the one-job way). */
export function createJobs(ctx: StoreContext, items: readonly PreparedJob[], signal: AbortSignal): Promise<Outcome<WriteOutcome>[]> {
  return withClient(ctx.pool, signal, async (c) => {
    const outcomes = new Array<Outcome<WriteOutcome>>(items.length);
    const jobs: Checked1[] = [];
    for (const [i, p] of items.entries()) {
      try {
        jobs.push({ i, p, checked: await checkWorkloads(ctx, c, p) });
      } catch (error) {
        outcomes[i] = { error };
      }
    }
    if (jobs.length === 0) return outcomes;
    const rows = await CREATE_JOBS.run(c, createJobsParams(jobs));
    rows.forEach((row, k) => {
      const { i, p, checked } = jobs[k];
      if (!row.fresh) outcomes[i] = { value: "stale" };
      else if (row.id === null) outcomes[i] = { error: new Error(`CREATE_JOBS inserted no row for job ${p.jobId}`) };
      else outcomes[i] = { value: createdJob(row, taskRows(p.job, p.jobId, p.taskIds, checked.maxAttempts)) };
    });
    return outcomes;
  });
}

function createJobsParams(jobs: readonly Checked1[]): CreateJobsParams {
  const names = new Map<string, string>();
  const values = jobs.map(({ p, checked }) => jobValues(p, checked));
  for (const v of values) v.workloadNames.forEach((n, k) => names.set(n, v.workloadXmins[k]));
  const tasks = jobs.flatMap(({ p }) => p.job.tasks);
  const taskJobIds = jobs.flatMap(({ p }) => p.job.tasks.map(() => p.jobId));
  const labels = jobs.flatMap(({ p }) => taskLabels(p.job) ?? p.job.tasks.map(() => null));
  const wakes = jobs.flatMap(({ p }) => [...p.perWorkload].map(([w, n]) => ({ jobId: p.jobId, w, n })));
  return {
    workloadNames: [...names.keys()],
    workloadXmins: [...names.values()],
    jobIds: textArrayLiteral(values.map((v) => v.jobId)),
    workloads: textArrayLiteral(values.map((v) => v.workload)),
    inputUris: textArrayLiteral(values.map((v) => v.inputUri)),
    inputSha256s: textArrayLiteral(values.map((v) => v.inputSha256)),
    parameters: textArrayLiteral(values.map((v) => v.parameters)),
    priorities: intArrayLiteral(values.map((v) => v.priority)),
    traceparents: textArrayLiteral(values.map((v) => v.traceparent)),
    failurePolicies: textArrayLiteral(values.map((v) => v.failurePolicy)),
    maxFailedTasks: intArrayLiteral(values.map((v) => v.maxFailedTasks)),
    requiredLabels: textArrayLiteral(values.map((v) => v.requiredLabels)),
    ...taskArrays(
      tasks,
      jobs.flatMap(({ p }) => p.taskIds),
      jobs.flatMap(({ checked }) => checked.maxAttempts),
    ),
    taskJobIds: textArrayLiteral(taskJobIds),
    taskLabels: textArrayLiteral(labels),
    wakeJobIds: textArrayLiteral(wakes.map((x) => x.jobId)),
    wakeWorkloads: textArrayLiteral(wakes.map((x) => x.w)),
    wakeCounts: intArrayLiteral(wakes.map((x) => x.n)),
  };
}
