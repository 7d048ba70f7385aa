// The one CreateJob core, under the RPC and under every schedule tick: a job validated and given
// its ids (prepareJob), checked against its workloads (checkWorkloads), and written (writeJobs):
// the job and its tasks in one statement (CREATE_JOB), or for a large job the job row and then its
// tasks by COPY (CREATE_JOB_ALONE, COPY_TASKS), then a run_at's and a finalizer's values
// (DELAY_JOB). The callers only choose the transaction and what to do with a stale cache or a
// used idempotency key (create-job.ts).

import type pg from "pg";
import { requestFingerprint } from "../../../queue/idempotency.js";
import type { CallOptions, CreateJobInput, CreateJobResult } from "../../../queue/types.js";
import { validateCreateJob, type NormalizedCreateJob } from "../../../queue/validation.js";
import { countBy } from "../sql/arrays.js";
import type { PreparedJob, WriteOutcome } from "../state/prepared-job.js";
import { NOTIFY_CHANNEL } from "../sql/channels.js";
import type { StoreContext } from "../state/context.js";
import { copyIn } from "../sql/copy-in.js";
import { COPY_NULL, copyChunks, copyText } from "../sql/copy-text.js";
import { delayJob, isDelayed, needsDelayJob } from "../state/due-wakes.js";
import { defineQuery, namedQuery } from "../sql/query.js";
import { toJob, type JobRow } from "../sql/rows.js";
import { createdJob, taskArrays, taskLabels, taskRows, type TaskArrays } from "./new-job-rows.js";
import { uuidv7, uuidv7s } from "../sql/uuidv7.js";
import { accountGate } from "./accounts.js";
import { jobAccount, requireOwnConcurrencyKey } from "../../../queue/account-validation.js";
import type { CachedWorkload } from "../state/workload-cache.js";
import type { RankHeads } from "../state/rank-heads.js";
import { unknownWorkload } from "./workloads.js";

/*
 * CreateJob in one statement and one round trip (it took six: SELECT workloads, BEGIN, INSERT job,
 * INSERT tasks, NOTIFY, COMMIT). One statement is one transaction, so constraint failures still
 * abort all of it, and the NOTIFY still goes out only at commit, when the tasks are visible.
 * - fresh: the workloads the caller validated against (@workloadNames, @workloadXmins) are unchanged; if
 *   not, nothing is inserted and the caller tries again with them locked.
 * - ON CONFLICT DO NOTHING makes two racing submissions with one idempotency key (or one billing
 *   key of an account, jobs_billing_key_idx) safe: the loser gets no job row (after waiting for
 *   the winner's commit), so no tasks either, and reads the winner's job instead. No conflict
 *   target, as either unique index may be the one hit (the id, a new UUIDv7, never is).
 * - The tasks travel as parallel arrays through unnest, not as one jsonb document through
 *   jsonb_to_recordset, and come back as nothing: ids are made by the caller (time-ordered,
 *   so consecutive inserts share index pages), created_at and run_after are the job's now().
 *   Measured for 10,000 tasks on 2 cores (median of 5): jsonb_to_recordset + RETURNING * 389 ms,
 *   without RETURNING 334 ms, unnest 316 ms.
 * The one row always comes back (LEFT JOIN), saying which of the three happened.
 * The parameters are named (namedQuery, sql/query.ts): JobInsert's, JobPolicy's and TaskInsert's
 * fields below, each with what it holds.
 */
/*
 * Fair ranks (docs/flow-control-claim.md, "Fair share"): a job of a keyed workload takes `count` ranks from
 * its key's next_rank, starting no earlier than the head of the queue at the job's priority (or,
 * with nothing pending, the furthest any key has got, flow_keys_rank_idx). One upsert per job; its row
 * lock orders two jobs of one key. Nothing happens for a workload that never saw a key (ranked false).
 * The head is read from the one this session found last for the workload and priority (a session
 * setting per workload, `priority:rank` of its last eight priorities, so a workload of many
 * priorities does not grow a session's settings), not from the front of the index, where a long
 * transaction elsewhere keeps every task
 * claimed since as a dead entry (13,521 heap visits a job after two minutes at 400 tasks/s). That is
 * exact for every task never leased: ranks below a head found once are taken only by tasks that
 * were leased and came back (a retry); a new job starts at or after the head, and claims only take
 * from it. Such a task is claimed in its turn but does not pull the head back (flow-control-claim.md,
 * "Under a held horizon"). So a head any session found is a start for every session: the read starts
 * from the further of the session's own and @rankHead, the furthest this coordinator has found
 * (state/rank-heads.ts; a pooled session was last used many jobs ago), and the answer's rank_head
 * says where this one was. @rankHeads false (FLOW_CLAIM_HINTS=false): from the front, as before.
 * With nothing pending at the job's priority from the head on, the head is the furthest any key has
 * got (where this job starts, and every later job at or after it), and it is noted too: left as it
 * was, every CreateJob at that priority walked again from the old head through every task claimed
 * since (3,000 buffers a job after five minutes of bench:horizon's keyed shape held, whose backlog
 * is often empty at a priority).
 */
const createJobCtes = `fresh AS (
  SELECT count(*) = cardinality(@workloadNames::text[]) AS ok
  FROM workloads w JOIN unnest(@workloadNames::text[], @workloadXmins::text[]) AS v(name, x) ON w.name = v.name AND w.xmin::text = v.x
), job AS (
  INSERT INTO jobs (id, workload, input_uri, input_sha256, parameters, priority, idempotency_key, request_sha256, traceparent,
    failure_policy, max_failed_tasks, concurrency_key, required_labels, account, reserved_units, billing_key)
  SELECT @jobId, @workload, @inputUri, @inputSha256, @parameters::jsonb, @priority, @idempotencyKey, @requestSha256, @traceparent,
    @failurePolicy::failure_policy, @maxFailedTasks::int, @concurrencyKey, @requiredLabels::jsonb,
    @account::text, @reservedUnits::bigint, @billingKey::text
  FROM fresh WHERE fresh.ok
  ON CONFLICT DO NOTHING
  RETURNING *
), rank_head AS (
  SELECT r.setting, r.heads, r.priority, coalesce(r.vt, (SELECT max(o.next_rank) FROM flow_keys o WHERE o.workload = r.workload)) AS vt
  FROM (
    SELECT h.setting, h.heads, job.priority, job.workload, (SELECT t.fair_rank FROM tasks t WHERE t.status = 'pending' AND t.workload = job.workload AND t.priority = job.priority
        AND t.fair_rank >= coalesce(CASE WHEN @rankHeads::boolean THEN
            greatest((SELECT split_part(e, ':', 2)::bigint FROM unnest(h.heads) e WHERE split_part(e, ':', 1) = job.priority::text), @rankHead::bigint) END,
          '-9223372036854775808'::bigint)
       ORDER BY t.priority DESC, t.fair_rank LIMIT 1) AS vt
    FROM job CROSS JOIN LATERAL (
      SELECT s.setting, coalesce(string_to_array(nullif(current_setting(s.setting, true), ''), ','), '{}') AS heads
      FROM (SELECT 'leasehold.rank_head_' || md5(job.workload) AS setting) s) h
    WHERE @ranked::boolean) r
), rank_base AS (
  INSERT INTO flow_keys AS k (workload, key, next_rank)
  SELECT job.workload, job.concurrency_key, coalesce(h.vt, 0) + @taskCount::bigint
  FROM job, rank_head h
  ON CONFLICT (workload, key) DO UPDATE SET next_rank = greatest(k.next_rank, EXCLUDED.next_rank - @taskCount::bigint) + @taskCount::bigint
  RETURNING k.next_rank - @taskCount::bigint AS base,
    (SELECT set_config(h.setting, array_to_string(ARRAY[h.priority || ':' || h.vt]
        || ARRAY(SELECT e FROM unnest(h.heads) e WHERE split_part(e, ':', 1) <> h.priority::text LIMIT 7), ','), false)
     FROM rank_head h WHERE @rankHeads::boolean AND h.vt IS NOT NULL) AS head_noted
)`;
const createJobAnswer = `SELECT (SELECT ok FROM fresh) AS fresh, (SELECT count(*) FROM woken) AS notified,
  coalesce((SELECT base FROM rank_base), 0) AS rank_base, (SELECT h.vt FROM rank_head h)::text AS rank_head, job.*
FROM (SELECT 1) one LEFT JOIN job ON true`;

/** A job with a concurrency key makes its workload keyed (fair ranks from then on), once. */
export const MARK_KEYED = defineQuery<{ workload: string }>(
  null,
  `UPDATE workloads SET keyed = true WHERE name = $1 AND NOT keyed`,
  (p) => [p.workload],
);
/*
 * The wake-up names the new tasks' lowest claim-order key as its head (`priority;fair_rank;us`:
 * the job's priority, its first fair rank, and the transaction's start in microseconds since
 * the epoch, which is every task's created_at), so coordinators move their claim hints back only as far as
 * these tasks need (claim-hints.ts).
 */
const woken = `woken AS (
  SELECT pg_notify('${NOTIFY_CHANNEL}', x.w || ':' || x.n || ':' || job.priority || ';' || coalesce((SELECT base FROM rank_base), 0)
    || ';' || (extract(epoch FROM now()) * 1000000)::bigint)
  FROM job, unnest(@wakeWorkloads::text[], @wakeCounts::int[]) AS x(w, n)
)`;

/** The job row's values. */
export interface JobInsert {
  jobId: string;
  workload: string;
  inputUri: string;
  inputSha256: string | null;
  /** jsonb text */
  parameters: string;
  priority: number;
  idempotencyKey: string | null;
  requestSha256: string | null;
  traceparent: string | null;
  /** the workloads validated against, and the xmin of each as cached */
  workloadNames: string[];
  workloadXmins: string[];
  /** the job's account and billing context; null for none */
  account: string | null;
  reservedUnits: number | null;
  billingKey: string | null;
}
const JOB_INSERT = [
  "jobId",
  "workload",
  "inputUri",
  "inputSha256",
  "parameters",
  "priority",
  "idempotencyKey",
  "requestSha256",
  "traceparent",
  "workloadNames",
  "workloadXmins",
] as const satisfies readonly (keyof JobInsert)[];
const ACCOUNT = ["account", "reservedUnits", "billingKey"] as const satisfies readonly (keyof JobInsert)[];
/** The job's failure policy and flow-control values, as the caller validated them. */
export interface JobPolicy {
  failurePolicy: string;
  maxFailedTasks: number;
  concurrencyKey: string;
  /** jsonb text, null for none */
  requiredLabels: string | null;
  ranked: boolean;
  taskCount: number;
  /** read a priority's head of fair ranks from the last this session found (FLOW_CLAIM_HINTS) */
  rankHeads: boolean;
  /** bigint text: the furthest head this coordinator found for the job's workload and priority, null for none */
  rankHead: string | null;
}
const JOB_POLICY = [
  "failurePolicy",
  "maxFailedTasks",
  "concurrencyKey",
  "requiredLabels",
  "ranked",
  "taskCount",
] as const satisfies readonly (keyof JobPolicy)[];
/** The answer's one row: the job's columns are null when nothing was inserted (stale workloads, or a used idempotency key). */
type CreateJobAnswer = { fresh: boolean; notified: string; rank_base: string; rank_head: string | null } & (
  JobRow | { [K in keyof JobRow]: null }
);
/** The task arrays, as array literals (arrays.ts), and the wake-ups (workload, count); named apart from JobInsert's, as both go in one object. */
interface TaskInsert extends TaskArrays {
  wakeWorkloads: string[];
  wakeCounts: number[];
  /** each task's labels (jsonb text), or null when every task has the job's */
  taskLabels: (string | null)[] | null;
  /**
   * 'pending', or 'waiting' for a job with parents not final (dependencies.ts): inserted so, its
   * tasks never enter the claim's index until they are promoted, and leave nothing dead there.
   */
  taskStatus: "pending" | "waiting";
}

// The parameters keep the order they had as $1..$30 (and $1..$22 alone), so plans and snapshots of the text are as they were.
export const CREATE_JOB = namedQuery<JobInsert & JobPolicy & TaskInsert, CreateJobAnswer>(
  "leasehold_create_job",
  `
WITH ${createJobCtes}, tasks_in AS (
  INSERT INTO tasks (id, job_id, chunk_index, workload, input_uri, input_sha256, parameters, max_attempts, priority, traceparent,
    concurrency_key, required_labels, fair_rank, status)
  SELECT u.id, job.id, u.chunk_index, u.workload, u.input_uri, u.input_sha256, u.parameters::jsonb, u.max_attempts, job.priority, job.traceparent,
    job.concurrency_key, coalesce(u.required_labels::jsonb, job.required_labels), coalesce((SELECT base FROM rank_base) + u.n - 1, 0),
    @taskStatus::task_status
  FROM job, unnest(@taskIds::uuid[], @taskChunkIndexes::int[], @taskWorkloads::text[], @taskInputUris::text[], @taskInputSha256s::text[],
      @taskParameters::text[], @taskMaxAttempts::int[], @taskLabels::text[])
    WITH ORDINALITY AS u(id, chunk_index, workload, input_uri, input_sha256, parameters, max_attempts, required_labels, n)
), ${woken}
${createJobAnswer}`,
  [
    ...JOB_INSERT,
    "taskIds",
    "taskChunkIndexes",
    "taskWorkloads",
    "taskInputUris",
    "taskInputSha256s",
    "taskParameters",
    "taskMaxAttempts",
    "wakeWorkloads",
    "wakeCounts",
    ...JOB_POLICY,
    "taskLabels",
    ...ACCOUNT,
    "rankHeads",
    "taskStatus",
    "rankHead",
  ],
);

/*
 * A large CreateJob (COPY_MIN_TASKS and up) in a transaction of its own: CREATE_JOB's job row,
 * freshness check, idempotency and wake-ups, then the tasks by COPY_TASKS (copy-in.ts) when the
 * job row was inserted, then COMMIT. The NOTIFY still goes out at the commit, when the tasks are
 * visible; a failure rolls all of it back. COPY inserts the rows in batches (one WAL record per
 * heap page, not per row) and reads them as text, with no arrays to parse and unnest: for 10,000
 * tasks the backends' CPU fell by ~15% (scratch measurement, 16 alternating runs each, 88 against
 * 74 ms per job). The answer's rank_base is the first task's fair rank.
 */
export const CREATE_JOB_ALONE = namedQuery<JobInsert & JobPolicy & Pick<TaskInsert, "wakeWorkloads" | "wakeCounts">, CreateJobAnswer>(
  "leasehold_create_job_alone",
  `
WITH ${createJobCtes}, ${woken}
${createJobAnswer}`,
  [...JOB_INSERT, "wakeWorkloads", "wakeCounts", ...JOB_POLICY, ...ACCOUNT, "rankHeads", "rankHead"],
);

/** The tasks of a CREATE_JOB_ALONE, in COPY's text format (copy-text.ts), columns in this order; the rest are their defaults. */
export const COPY_TASKS = `COPY tasks (id, job_id, chunk_index, workload, input_uri, input_sha256, parameters, max_attempts, priority, traceparent) FROM STDIN`;
/** COPY_TASKS for a job with a concurrency key, required labels or fair ranks: those three columns as well. */
export const COPY_FLOW_TASKS = `COPY tasks (id, job_id, chunk_index, workload, input_uri, input_sha256, parameters, max_attempts, priority, traceparent,
  concurrency_key, required_labels, fair_rank) FROM STDIN`;
/** Either, for the tasks of a waiting job (PreparedJob.waiting): the status column last. */
const copyWaiting = (copy: string) => copy.replace(") FROM STDIN", ", status) FROM STDIN");

/**
 * CreateJob's validation (every rule that needs no database) and the ids: the same for the RPC
 * and a schedule's tick. `job` is passed when the caller validated already (PutSchedule).
 * `boundAccount` is the caller's (CallOptions.account): the job's account when the request names
 * none, and naming another, or a concurrency key outside the account's, is PERMISSION_DENIED.
 */
export function prepareJob(ctx: StoreContext, input: CreateJobInput, job?: NormalizedCreateJob, boundAccount?: string): PreparedJob {
  if (boundAccount !== undefined) input = { ...input, account: jobAccount(input.account, boundAccount) };
  job ??= validateCreateJob(input, ctx.options.maxTasksPerJob, ctx.options.maxRunAtAheadDays);
  if (boundAccount !== undefined) requireOwnConcurrencyKey(job.concurrencyKey, boundAccount);
  const finalizer = job.finalizer?.workload;
  const needsDelay = needsDelayJob(job);
  return {
    input,
    job,
    // A billing key answers a second CreateJob as an idempotency key does, so it keeps the fingerprint too.
    fingerprint: job.idempotencyKey || job.billing?.billingKey ? requestFingerprint(job) : null,
    names: [...new Set([job.workload, ...job.tasks.map((t) => t.workload), ...(finalizer ? [finalizer] : [])])],
    jobId: uuidv7(),
    taskIds: uuidv7s(job.tasks.length),
    // A delayed job's tasks are announced by DELAY_JOB (those due now) and at their due time (due-wakes.ts), not
    // by the insert; a waiting job's by its promotion (leasehold_promote_jobs).
    perWorkload: isDelayed(job) || job.after ? new Map<string, number>() : countBy(job.tasks.map((t) => t.workload)),
    needsDelay,
    needsTransaction: needsDelay || job.account !== undefined || job.after !== undefined,
    waiting: job.after !== undefined,
  };
}

/** What checkWorkloads found: the job's own workload and each task's attempts. */
export interface Checked {
  workloads: Map<string, CachedWorkload>;
  own: CachedWorkload;
  maxAttempts: number[];
  /** the store's FLOW_CLAIM_HINTS (JobPolicy's rankHeads) */
  rankHeads: boolean;
  /** the coordinator's heads of fair ranks, with FLOW_CLAIM_HINTS */
  heads: RankHeads | undefined;
}

/**
 * The rules that need the workloads, against the cache as it is (the caller loads it): every
 * workload the job names is registered (else NOT_FOUND naming the field, with the registered
 * ones), each task's parameters pass its workload's schema, and the finalizer's parameters pass
 * its workload's schema as its task will have them (with parent_job_id and parent_status), so a
 * finalizer is refused now, not when the job ends. `prefix` names the fields of a template
 * ("job." at PutSchedule).
 */
export async function checkWorkloads(ctx: StoreContext, c: pg.PoolClient, p: PreparedJob, prefix = ""): Promise<Checked> {
  const { job } = p;
  const workloads = new Map(p.names.flatMap((n) => (ctx.workloads.has(n) ? [[n, ctx.workloads.get(n)!] as const] : [])));
  const own = workloads.get(job.workload);
  if (!own) throw await unknownWorkload(c, job.workload, `${prefix}workload`);
  const maxAttempts = new Array<number>(job.tasks.length);
  const listed = p.input.tasks?.length ? true : false;
  for (let i = 0; i < job.tasks.length; i++) {
    const t = job.tasks[i];
    const w = workloads.get(t.workload)?.workload;
    if (!w) throw await unknownWorkload(c, t.workload, `${prefix}tasks[${i}].workload`);
    // The field's name is made only for a workload with a schema (10,000 names cost ~3 ms).
    if (w.parametersSchema) ctx.schemas.validate(w, t.parameters, prefix + (listed ? `tasks[${i}].parameters` : "parameters"));
    maxAttempts[i] = job.maxAttempts ?? w.maxAttempts;
  }
  if (job.finalizer) {
    const w = workloads.get(job.finalizer.workload)?.workload;
    if (!w) throw await unknownWorkload(c, job.finalizer.workload, `${prefix}finalizer.workload`);
    if (w.parametersSchema) {
      const parameters = { ...job.finalizer.parameters, parent_job_id: "00000000-0000-0000-0000-000000000000", parent_status: "completed" };
      ctx.schemas.validate(w, parameters, `${prefix}finalizer.parameters`);
    }
  }
  const rankHeads = ctx.options.flowClaimHints !== false;
  return { workloads, own, maxAttempts, rankHeads, heads: rankHeads ? ctx.flow.rankHeads : undefined };
}

/**
 * The core: each prepared job checked against the cached workloads and written on `c`, in order,
 * one outcome per job. `inTransaction`: the caller holds a transaction on `c` (required when a
 * job needsDelay; without one, a large job's COPY opens its own). A failure throws, and the
 * caller's transaction is to be rolled back. The one-job path calls it with one job; the coalesced
 * lane (coalescing/coalesced-create.ts) writes its batches with its own statement, from the same
 * checks (checkWorkloads) and values (jobValues).
 */
export async function writeJobs(
  ctx: StoreContext,
  c: pg.PoolClient,
  jobs: readonly PreparedJob[],
  inTransaction: boolean,
): Promise<WriteOutcome[]> {
  const out: WriteOutcome[] = [];
  for (const p of jobs) {
    if (p.needsTransaction && !inTransaction)
      throw new Error("a delayed job, one with a finalizer or one of an account is written in a transaction");
    const account = p.job.account;
    if (account !== undefined && !p.gated) {
      const billingKey = p.job.billing?.billingKey ?? null;
      // A finalizer's task counts from now: held for it, so that its enqueue at the job's end is never refused.
      const tasks = p.job.tasks.length + (p.job.finalizer ? 1 : 0);
      const { priority } = await accountGate(c, { account, tasks, idempotencyKey: p.job.idempotencyKey, billingKey });
      // Priority 0 is the account's (its tier); the fingerprint was taken from the request as given.
      if (p.job.priority === 0 && priority !== 0) p.job = { ...p.job, priority };
    }
    const checked = await checkWorkloads(ctx, c, p, p.fieldPrefix);
    const result = await insertJob(c, p, checked, inTransaction);
    if (p.needsDelay && result !== "taken" && result !== "stale") delayed(result, await delayJob(c, p.jobId, p.job), p.job);
    out.push(result);
  }
  return out;
}

/** The job row's values for a checked job: its own failure policy, else its workload's, as validated. */
export function jobValues(p: PreparedJob, { workloads, own: ownCached, rankHeads, heads }: Checked): JobInsert & JobPolicy {
  const { job, names } = p;
  const own = ownCached.workload;
  return {
    jobId: p.jobId,
    workload: job.workload,
    inputUri: job.inputUri,
    inputSha256: job.inputSha256,
    parameters: JSON.stringify(job.parameters),
    priority: job.priority,
    idempotencyKey: job.idempotencyKey,
    requestSha256: p.fingerprint,
    traceparent: job.traceparent,
    workloadNames: names,
    workloadXmins: names.map((n) => workloads.get(n)!.xmin),
    account: job.account ?? null,
    reservedUnits: job.billing?.reservedUnits ?? null,
    billingKey: job.billing?.billingKey ?? null,
    failurePolicy: job.failurePolicy ?? own.failurePolicy,
    maxFailedTasks: job.maxFailedTasks ?? own.maxFailedTasks,
    concurrencyKey: job.concurrencyKey,
    requiredLabels: job.requiredLabels === null ? null : JSON.stringify(job.requiredLabels),
    // A waiting job takes its fair ranks when it is promoted (leasehold_promote_jobs), not now.
    ranked: ownCached.keyed && !p.waiting,
    taskCount: job.tasks.length,
    rankHeads,
    rankHead: heads?.get(job.workload, job.priority) ?? null,
  };
}

/** CREATE_JOB (or CREATE_JOB_ALONE and COPY) for a checked job: the new job, "stale" if its workloads changed, "taken" if its idempotency key was used before. */
async function insertJob(c: pg.PoolClient, p: PreparedJob, checked: Checked, inTransaction: boolean): Promise<WriteOutcome> {
  const { job, jobId, taskIds: ids, perWorkload } = p;
  // A delayed job's answer is known only after DELAY_JOB: no early answer.
  const prepared = p.needsDelay ? undefined : p.early;
  const insert = jobValues(p, checked);
  const { maxAttempts } = checked;
  if (job.tasks.length >= COPY_MIN_TASKS)
    return insertJobByCopy(
      c,
      job,
      insert,
      ids,
      maxAttempts,
      perWorkload,
      inTransaction,
      prepared,
      p.waiting === true,
      p.withoutTasks === true,
      checked.heads,
    );
  // Sent now; the answer's tasks are made while PostgreSQL inserts them (the other core).
  const inserting = CREATE_JOB.one(c, {
    ...insert,
    ...taskArrays(job.tasks, ids, maxAttempts),
    wakeWorkloads: [...perWorkload.keys()],
    wakeCounts: [...perWorkload.values()],
    taskLabels: taskLabels(job),
    taskStatus: p.waiting ? "waiting" : "pending",
  });
  // The job alone (withoutTasks): no task objects, nor their Dates, for an answer that leaves them out.
  const tasks = p.withoutTasks ? [] : taskRows(job, jobId, ids, maxAttempts);
  const row = await inserting;
  checked.heads?.learn(job.workload, job.priority, row.rank_head);
  if (!row.fresh) return "stale";
  if (row.id === null) return "taken"; // the idempotency key was used before
  return createdJob(row, tasks);
}

/**
 * insertJob for a large job: CREATE_JOB_ALONE, then its tasks by COPY (COPY_TASKS), in one
 * transaction (the caller's, when it holds one). The COPY's rows are made as they are sent; the
 * result is known once the job row is back, and goes to `prepared` while PostgreSQL copies (REST encodes its answer then, on this process's core, early-answer.ts).
 */
async function insertJobByCopy(
  c: pg.PoolClient,
  job: NormalizedCreateJob,
  insert: JobInsert & JobPolicy,
  ids: string[],
  maxAttempts: number[],
  perWorkload: Map<string, number>,
  inTransaction: boolean,
  prepared: CallOptions["prepared"],
  waiting: boolean,
  withoutTasks: boolean,
  heads: RankHeads | undefined,
): Promise<WriteOutcome> {
  const jobId = insert.jobId;
  const begun = inTransaction ? undefined : c.query("BEGIN");
  const inserting = CREATE_JOB_ALONE.one(c, { ...insert, wakeWorkloads: [...perWorkload.keys()], wakeCounts: [...perWorkload.values()] });
  try {
    const [, row] = await Promise.all([begun, inserting]);
    heads?.learn(job.workload, job.priority, row.rank_head);
    if (!row.fresh || row.id === null) {
      if (!inTransaction) await c.query("ROLLBACK");
      return row.fresh ? "taken" : "stale";
    }
    // The rows are made chunk by chunk as copyIn sends them: PostgreSQL copies the first while
    // the next are made (made before the job row was back they only overlapped its round trips).
    // Escaped like every text column, though validation allows only hex and dashes there.
    const tail = "\t" + job.priority + "\t" + (job.traceparent === null ? COPY_NULL : copyText(job.traceparent));
    // With a key, labels or fair ranks, three columns more (COPY_FLOW_TASKS).
    const withFlow = job.concurrencyKey !== "" || job.tasks.some((t) => t.requiredLabels !== null) || insert.ranked;
    const rankBase = Number(row.rank_base);
    const flowTail = (i: number) => {
      const labels = job.tasks[i].requiredLabels;
      return (
        "\t" +
        copyText(job.concurrencyKey) +
        "\t" +
        (labels === null ? COPY_NULL : copyText(JSON.stringify(labels))) +
        "\t" +
        (rankBase + i)
      );
    };
    let lastParameters: object | undefined;
    let parametersText = "";
    const chunks = copyChunks(job.tasks.length, (i) => {
      const t = job.tasks[i];
      // Tasks that share the job's parameters share one text.
      if (t.parameters !== lastParameters) {
        lastParameters = t.parameters;
        parametersText = copyText(JSON.stringify(t.parameters));
      }
      return (
        ids[i] +
        "\t" +
        jobId +
        "\t" +
        t.chunkIndex +
        "\t" +
        copyText(t.workload) +
        "\t" +
        copyText(t.inputUri) +
        "\t" +
        t.inputSha256 +
        "\t" +
        parametersText +
        "\t" +
        maxAttempts[i] +
        tail +
        (withFlow ? flowTail(i) : "") +
        (waiting ? "\twaiting" : "")
      );
    });
    const columns = withFlow ? COPY_FLOW_TASKS : COPY_TASKS;
    const copying = copyIn(c, waiting ? copyWaiting(columns) : columns, chunks);
    const result = createdJob(row, withoutTasks ? [] : taskRows(job, jobId, ids, maxAttempts));
    // Handed over while PostgreSQL copies; a callback that throws fails the call once the COPY
    // has settled, and the transaction is rolled back.
    let refused: unknown;
    try {
      prepared?.(result);
    } catch (err) {
      refused = err ?? new Error("prepared() threw");
    }
    const copied = await copying;
    if (refused !== undefined) throw refused;
    if (copied !== job.tasks.length) throw new Error(`COPY of a job's tasks wrote ${copied} of ${job.tasks.length} rows`);
    if (!inTransaction) await c.query("COMMIT");
    return result;
  } catch (err) {
    if (!inTransaction) await c.query("ROLLBACK").catch(() => {});
    throw err;
  }
}

/** A created job's answer after DELAY_JOB: its row as that left it, and its delayed tasks' run_after. */
function delayed(result: CreateJobResult, row: JobRow, job: NormalizedCreateJob): void {
  result.job = toJob(row);
  const created = result.job.createdAt.getTime();
  const own = new Map(job.tasks.flatMap((t) => (t.runAt === undefined ? [] : [[t.chunkIndex, t.runAt] as const])));
  for (const t of result.tasks) {
    // DELAY_JOB's run_after: the due time when it lay ahead of the job's now(), else that now().
    const at = own.get(t.chunkIndex) ?? job.runAt;
    const ms = at === undefined ? NaN : Date.parse(at);
    if (ms > created) t.runAfter = new Date(ms);
  }
}

/** From this many tasks a CreateJob inserts them by COPY (insertJobByCopy): three more round trips, less work per row. */
export const COPY_MIN_TASKS = 1000;

export type { PreparedJob, WriteOutcome };
