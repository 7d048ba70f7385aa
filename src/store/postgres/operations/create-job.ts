// CreateJob as the RPC runs it and as a schedule's tick runs it: both are the core of
// create-job-core.ts (validation, the workloads' rules, the insert, a run_at's and a finalizer's
// values) and differ only in their transaction and in what a stale cache or a used idempotency
// key does. With coalescing on, the RPC's small jobs share statements (coalesced-create.ts).

import type pg from "pg";
import { IdempotencyConflictError } from "../../../queue/errors.js";
import type { CallOptions, CreateJobInput, CreateJobResult } from "../../../queue/types.js";
import type { StoreContext } from "../state/context.js";
import { MARK_KEYED, prepareJob, writeJobs, type PreparedJob, type WriteOutcome } from "./create-job-core.js";
import { transaction, withClient } from "../sql/db.js";
import { createJobAfter } from "./dependencies.js";
import { isDelayed } from "../state/due-wakes.js";
import { defineQuery } from "../sql/query.js";
import { toJob, toTask, type JobRow, type TaskRow } from "../sql/rows.js";

// Idempotency keys are the account's (jobs_idempotency_key_idx, by its expression): another
// account's use of a key is neither found nor told.
export const SELECT_JOB_BY_IDEMPOTENCY_KEY = defineQuery<{ account: string; key: string }, JobRow & { request_sha256: string | null }>(
  null,
  `SELECT * FROM jobs WHERE coalesce(account, '') = $1 AND idempotency_key = $2`,
  (p) => [p.account, p.key],
);

// Through jobs_billing_key_idx: its expression, coalesce(account, ''), as the index has it.
export const SELECT_JOB_BY_BILLING_KEY = defineQuery<{ account: string; key: string }, JobRow & { request_sha256: string | null }>(
  null,
  `SELECT * FROM jobs WHERE coalesce(account, '') = $1 AND billing_key = $2`,
  (p) => [p.account, p.key],
);

export const SELECT_JOB_TASKS = defineQuery<{ jobId: string }, TaskRow>(
  null,
  `SELECT * FROM tasks WHERE job_id = $1 ORDER BY chunk_index`,
  (p) => [p.jobId],
);

/** A job of more tasks than this runs its own statement: its rows, not the statement, are its cost. */
export const COALESCED_JOB_MAX_TASKS = 100;

/** Whether a prepared job may share a statement with others (the rule: the header of coalescing/coalesced-create.ts). */
export function coalescable(ctx: StoreContext, p: PreparedJob): boolean {
  const { job } = p;
  if (p.needsTransaction || p.fingerprint !== null || job.billing !== undefined || job.concurrencyKey !== "") return false;
  if (job.tasks.length > COALESCED_JOB_MAX_TASKS) return false;
  for (const n of p.names) if (!ctx.workloads.has(n)) return false;
  return ctx.workloads.get(job.workload)?.keyed === false;
}

export async function createJob(ctx: StoreContext, input: CreateJobInput, opts: CallOptions): Promise<CreateJobResult> {
  const p: PreparedJob = { ...prepareJob(ctx, input, undefined, opts.account), early: opts.prepared, withoutTasks: opts.withoutTasks };
  const { job, names } = p;
  // A job after others waits for them (dependencies.ts): its own transaction, with its parents locked.
  if (job.after) {
    const after = await createJobAfter(ctx, p, opts);
    return after === "taken" ? withClient(ctx.pool, opts.signal, (c) => replayJob(c, p)) : after;
  }
  // A small job of cached workloads shares a statement with the CreateJob calls beside it; if a
  // workload changed since it was cached, it is written below, the one-job way.
  if (ctx.coalescer && coalescable(ctx, p)) {
    const result = await ctx.coalescer.createJob(p, opts.signal);
    if (result === "taken") throw new Error("a coalesced job has no key to find taken");
    // The shared statement's jobs are small (COALESCED_JOB_MAX_TASKS): their rows are made anyway.
    if (result !== "stale") return p.withoutTasks ? { ...result, tasks: [] } : result;
  }

  return withClient(ctx.pool, opts.signal, async (c) => {
    // The cached workloads are used as they are when CREATE_JOB finds them unchanged; a miss
    // reads them first. If they changed meanwhile (PutWorkload through any coordinator), the
    // second try reads them FOR SHARE in a transaction, so they cannot change again before the
    // insert: it always succeeds, however busy PutWorkload is.
    let refresh = names.some((n) => !ctx.workloads.has(n));
    // A job with a concurrency key makes its workload keyed (fair ranks from then on), once.
    if (job.concurrencyKey !== "" && ctx.workloads.get(job.workload)?.keyed !== true) {
      await MARK_KEYED.run(c, { workload: job.workload });
      refresh = true;
    }
    const write = async (locked: boolean, inTransaction: boolean): Promise<WriteOutcome> => {
      if (locked) await ctx.workloads.load(c, names, true);
      else if (refresh) await ctx.workloads.load(c, names, false);
      const [result] = await writeJobs(ctx, c, [p], inTransaction);
      return result;
    };
    // A run_at or a finalizer is written by DELAY_JOB after the insert, in its transaction, and a
    // job of an account holds the account's row (its quota) until its commit; a stale first try
    // in it rolls back (StaleWorkloads) before the locked one.
    let result = p.needsTransaction
      ? await transaction(c, async () => unlessStale(await write(false, true))).catch((err: unknown) => {
          if (err instanceof StaleWorkloads) return "stale" as const;
          throw err;
        })
      : await write(false, false);
    if (result === "stale") {
      result = await transaction(c, async () => {
        const locked = await write(true, true);
        if (locked === "stale") throw new Error("workloads changed while locked");
        return locked;
      });
    }
    if (result !== "taken" && isDelayed(job)) ctx.dueWakes.refreshSoon();
    return result === "taken" ? await replayJob(c, p) : result;
  });
}

/** Thrown inside a transaction to roll it back when the first try found the cached workloads stale. */
class StaleWorkloads extends Error {}

function unlessStale(result: WriteOutcome): Exclude<WriteOutcome, "stale"> {
  if (result === "stale") throw new StaleWorkloads("stale");
  return result;
}

/**
 * CreateJob inside the caller's transaction (a schedule's tick: the job and the tick's key commit
 * together or not at all), through the same core as the RPC. The workloads are read FOR SHARE
 * first, so the insert never finds them stale. No idempotency key: the schedule and the tick are
 * the job's key. A template is refused a run_at at PutSchedule (schedules.ts), so a tick's job is
 * never delayed and the due-time timer has nothing to learn from it.
 */
export async function createJobInTransaction(ctx: StoreContext, c: pg.PoolClient, input: CreateJobInput): Promise<CreateJobResult> {
  const p = prepareJob(ctx, { ...input, idempotencyKey: undefined });
  const { job } = p;
  if (job.concurrencyKey !== "" && ctx.workloads.get(job.workload)?.keyed !== true) await MARK_KEYED.run(c, { workload: job.workload });
  await ctx.workloads.load(c, p.names, true);
  const [result] = await writeJobs(ctx, c, [p], true);
  if (typeof result === "string") throw new Error(`CreateJob in a transaction found its workloads ${result}`);
  return result;
}

/**
 * A CreateJob whose idempotency key, or billing key in its account, was used before: the same
 * request is a replay, anything else a conflict naming the key's field.
 */
export async function replayJob(c: pg.PoolClient, p: PreparedJob): Promise<CreateJobResult> {
  const { idempotencyKey, account, billing } = p.job;
  let prior = idempotencyKey ? await SELECT_JOB_BY_IDEMPOTENCY_KEY.maybe(c, { account: account ?? "", key: idempotencyKey }) : undefined;
  let field = "idempotency_key";
  if (!prior && billing?.billingKey) {
    prior = await SELECT_JOB_BY_BILLING_KEY.maybe(c, { account: account ?? "", key: billing.billingKey });
    field = "billing.billing_key";
  }
  if (!prior || prior.request_sha256 !== p.fingerprint) {
    // Both keys are the account's, so the job named is the caller's own.
    throw new IdempotencyConflictError(`${field}: was used for a different request${prior ? ` (job ${prior.id})` : ""}`);
  }
  const taskRows = p.withoutTasks ? [] : await SELECT_JOB_TASKS.run(c, { jobId: prior.id });
  return { job: toJob(prior), tasks: taskRows.map(toTask), created: false };
}
