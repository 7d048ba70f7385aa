// Coalescing: the single-task calls of many workers that arrive together go to PostgreSQL as one
// statement per kind (group commit, group-commit.ts). Most of a single task's database cost is per
// statement (plan start-up, tuple descriptors, index descents, the commit), not per row, so a busy
// coordinator pays it once for a batch; an idle one runs each call at once, as before.
//
// Kinds: claims (ClaimTasks), results with claim_next (one, or a CompleteTasks batch: the same
// lane), results, lease renewals, failures, and small jobs (CreateJob; coalesced-create.ts). A claim batch shares its workloads, labels and
// lease length (the key of its lane); the result kinds mix every worker. Each item keeps its own outcome exactly as its one-caller statement gives it:
// the fences are per item, a refused item is explained alone, and a batch never fails because one
// item is stale. Claims of flow-controlled workloads coalesce too: leasehold_flow_claim is called
// once for the batch's slots, so a cap, rate or fair share is counted over all of its callers.
//
// Results without claim_next ride with claims (COALESCE_MIX, on by default): a result that arrives
// while a claim statement is in flight goes with the next one (COALESCED_COMPLETE_THEN_CLAIM), so
// workers that claim and then report in two calls keep one statement in flight, not two. Measured
// in the log (docs/performance-log.md, "results ride with claims").

import type pg from "pg";
import { leaseConflict } from "../../../queue/fencing.js";
import type {
  BatchCompletedAndClaimed,
  ClaimOutcome,
  CompletedAndClaimed,
  CompleteTaskInput,
  RenewLeaseInput,
  Task,
} from "../../../queue/types.js";
import type { NormalizedClaim, NormalizedFail } from "../../../queue/validation.js";
import { claimed, claimWith } from "../operations/claim.js";
import { createJobs } from "./coalesced-create.js";
import {
  COALESCED_CLAIM,
  COALESCED_COMPLETE_AND_CLAIM,
  COALESCED_COMPLETE_AND_CLAIM_LEAN,
  COALESCED_COMPLETE_THEN_CLAIM,
  COALESCED_FAIL,
  COALESCED_RENEW,
  GIVE_BACK,
  type CoalescedClaimRow,
} from "./coalesced-statements.js";
import { batchOutcomes, completeBatchWith, outcomesOf, refusedOrLate, type CompletedRow } from "../operations/complete.js";
import type { CoalescedCalls, CoalescingOptions, StoreContext } from "../state/context.js";
import { toQueueError, withClient } from "../sql/db.js";
import { explainRefusal } from "../operations/flow-control.js";
import { GroupCommit, type Outcome } from "./group-commit.js";
import { loadTask } from "../operations/inspection.js";
import type { PreparedJob, WriteOutcome } from "../state/prepared-job.js";
import { resultRecord } from "../sql/result-params.js";
import { toTask, type TaskRow } from "../sql/rows.js";
import { endJob, finishJobsAfterCommit } from "../operations/job-end.js";

/** The kinds of coalesced statements, as the batch-size metric names them. */
export type CoalescedKind = "claim" | "complete_and_claim" | "complete" | "complete_then_claim" | "renew" | "fail" | "create";

interface ClaimItem {
  claim: NormalizedClaim;
}
/** A call of the mixed lanes (COALESCE_MIX): a claim, or a result riding with claims. */
type WorkItem = { claim: NormalizedClaim; done?: undefined } | { done: CompleteTaskInput; claim?: undefined };
type WorkValue = ClaimOutcome | Task;
/**
 * Results with claim_next: one (CompleteTask, whose claim waits on its result being accepted) or a
 * batch (CompleteTasks, `batch`: the claim runs whatever the results' outcomes). Both kinds share a
 * lane: most of a batched report's database cost is per statement too (measured in
 * docs/performance-log.md, "batched reports share a statement").
 */
interface ResultClaimItem {
  done: CompleteTaskInput[];
  claim: NormalizedClaim;
  batch: boolean;
}
type ResultClaimValue = CompletedAndClaimed | BatchCompletedAndClaimed;

export class Coalescer implements CoalescedCalls {
  private readonly claims: GroupCommit<ClaimItem, ClaimOutcome>;
  private readonly resultClaims: GroupCommit<ResultClaimItem, ResultClaimValue>;
  private readonly results: GroupCommit<CompleteTaskInput, Task>;
  private readonly renewals: GroupCommit<RenewLeaseInput, Task>;
  private readonly failures: GroupCommit<NormalizedFail, Task>;
  private readonly creates: GroupCommit<PreparedJob, WriteOutcome>;
  /** Claims and results in one group commit, results as riders (COALESCE_MIX); undefined: two lanes, as above. */
  private readonly work: GroupCommit<WorkItem, WorkValue> | undefined;

  constructor(
    private readonly ctx: StoreContext,
    options: CoalescingOptions,
  ) {
    const batched = (kind: CoalescedKind) => (size: number) => ctx.options.observer?.statementBatched?.(kind, size);
    this.claims = new GroupCommit(
      {
        run: (_key, items, signal) => this.runClaims(items, signal),
        abandon: (item, outcome) => this.giveBack(outcome.tasks),
        batched: batched("claim"),
      },
      options,
    );
    this.resultClaims = new GroupCommit(
      {
        run: (_key, items, signal) => this.runResultClaims(items, signal),
        conflict: (a, b) => a.done.some((x) => b.done.some((y) => x.taskId === y.taskId)),
        // The result has committed (a retry is answered as a replay); the tasks it claimed go back.
        abandon: (item, value) => this.giveBack(value.next),
        batched: batched("complete_and_claim"),
        // A statement holds at most maxBatch results, whichever calls they came in.
        weight: (item) => item.done.length,
        returning: true,
      },
      options,
    );
    this.results = new GroupCommit(
      {
        run: (_key, items, signal) => this.runResults(items, signal),
        conflict: (a, b) => a.taskId === b.taskId,
        batched: batched("complete"),
      },
      options,
    );
    this.renewals = new GroupCommit(
      {
        run: (_key, items, signal) => this.runRenewals(items, signal),
        conflict: (a, b) => a.taskId === b.taskId,
        batched: batched("renew"),
      },
      options,
    );
    this.failures = new GroupCommit(
      {
        run: (_key, items, signal) => this.runFailures(items, signal),
        conflict: (a, b) => a.taskId === b.taskId,
        batched: batched("fail"),
      },
      options,
    );
    this.creates = new GroupCommit({ run: (_key, items, signal) => createJobs(ctx, items, signal), batched: batched("create") }, options);
    this.work =
      options.mixResults !== false
        ? new GroupCommit<WorkItem, WorkValue>(
            {
              run: (_key, items, signal) => this.runWork(items, signal),
              conflict: (a, b) => a.done !== undefined && b.done !== undefined && a.done.taskId === b.done.taskId,
              abandon: (item, value) => {
                if (item.claim) this.giveBack((value as ClaimOutcome).tasks);
              },
            },
            options,
          )
        : undefined;
  }

  claim(claim: NormalizedClaim, signal?: AbortSignal): Promise<ClaimOutcome> {
    if (this.work) return this.work.submit(claimKey(claim), { claim }, signal) as Promise<ClaimOutcome>;
    return this.claims.submit(claimKey(claim), { claim }, signal);
  }

  completeAndClaim(done: CompleteTaskInput, claim: NormalizedClaim, signal?: AbortSignal): Promise<CompletedAndClaimed> {
    return this.resultClaims.submit(claimKey(claim), { done: [done], claim, batch: false }, signal) as Promise<CompletedAndClaimed>;
  }

  completeBatchAndClaim(batch: CompleteTaskInput[], claim: NormalizedClaim, signal?: AbortSignal): Promise<BatchCompletedAndClaimed> {
    return this.resultClaims.submit(claimKey(claim), { done: batch, claim, batch: true }, signal) as Promise<BatchCompletedAndClaimed>;
  }

  complete(done: CompleteTaskInput, signal?: AbortSignal): Promise<Task> {
    if (this.work) return this.work.submitRider({ done }, signal) as Promise<Task>;
    return this.results.submit("", done, signal);
  }

  renew(renew: RenewLeaseInput, signal?: AbortSignal): Promise<Task> {
    return this.renewals.submit("", renew, signal);
  }

  fail(f: NormalizedFail, signal?: AbortSignal): Promise<Task> {
    return this.failures.submit("", f, signal);
  }

  createJob(p: PreparedJob, signal?: AbortSignal): Promise<WriteOutcome> {
    return this.creates.submit("", p, signal);
  }

  private runClaims(items: ClaimItem[], signal: AbortSignal): Promise<Outcome<ClaimOutcome>[]> {
    const ctx = this.ctx;
    const first = items[0].claim;
    const { owners, callers } = slots(items);
    return withClient(ctx.pool, signal, async (c) => {
      const hinted = ctx.claimHints.begin(first.workloads, first.labels);
      const rows = await COALESCED_CLAIM.run(c, { ...shape(first), hints: hinted.json, owners, callers });
      const taken = rows.filter((r): r is CoalescedClaimRow & { flow_workloads: string[] | null } => r.id !== null);
      return this.answerClaims(c, items, taken, rows[0]?.flow_workloads, hinted, owners.length);
    });
  }

  /**
   * Each claim's answer from the rows its statement leased (`flow`: the requested workloads the
   * statement found flow-controlled), as CLAIM_TASKS' caller gives it.
   */
  private async answerClaims(
    c: pg.PoolClient,
    items: ClaimItem[],
    taken: CoalescedClaimRow[],
    flow: string[] | null | undefined,
    hinted: ReturnType<StoreContext["claimHints"]["begin"]>,
    slotCount: number,
  ): Promise<Outcome<ClaimOutcome>[]> {
    const ctx = this.ctx;
    const first = items[0].claim;
    hinted.learn(taken, taken.length < slotCount);
    await ctx.flow.sightings.seen(c, first.workloads, first.labels);
    const per = byCaller(items.length, taken);
    // Only an empty answer pays for this check (once for the batch): an unknown workload is the caller's mistake.
    if (per.some((r) => r.length === 0)) await ctx.workloads.require(c, first.workloads, "workloads");
    const answers = per.map((r) => claimed(ctx, r));
    const retryAfterMs = await this.explainEmpty(c, flow, items, answers);
    return answers.map((tasks) => ({ value: tasks.length === 0 && retryAfterMs !== undefined ? { tasks, retryAfterMs } : { tasks } }));
  }

  /**
   * A statement of the mixed lanes: claims alone (COALESCED_CLAIM), results alone (COMPLETE_TASKS),
   * or both (COALESCED_COMPLETE_THEN_CLAIM). Each kind's answers are made as its own statement's
   * caller makes them, and a failure while making one kind's answers is that kind's alone: the
   * other's work has committed.
   */
  private async runWork(items: WorkItem[], signal: AbortSignal): Promise<Outcome<WorkValue>[]> {
    const observer = this.ctx.options.observer;
    const claims: ClaimItem[] = [];
    const results: CompleteTaskInput[] = [];
    for (const it of items) {
      if (it.claim) claims.push({ claim: it.claim });
      else results.push(it.done);
    }
    if (claims.length === 0) {
      observer?.statementBatched?.("complete", results.length);
      return this.runResults(results, signal);
    }
    if (results.length === 0) {
      observer?.statementBatched?.("claim", claims.length);
      return this.runClaims(claims, signal);
    }
    observer?.statementBatched?.("complete_then_claim", items.length);
    const ctx = this.ctx;
    const first = claims[0].claim;
    const { owners, callers } = slots(claims);
    return withClient(ctx.pool, signal, async (c) => {
      const hinted = ctx.claimHints.begin(first.workloads, first.labels);
      const rows = await COALESCED_COMPLETE_THEN_CLAIM.run(c, {
        ...shape(first),
        hints: hinted.json,
        owners,
        callers,
        results: JSON.stringify(results.map(resultRecord)),
        taskIds: results.map((r) => r.taskId),
      });
      const claimRows = rows.filter((r) => r.part === 1);
      const claimAnswers = await outcomesOrError(claims.length, () =>
        this.answerClaims(c, claims, claimRows, rows[0].flow_workloads, hinted, owners.length),
      );
      const doneRows = rows.filter((r): r is typeof r & CompletedRow => r.part === 0);
      const resultAnswers = await outcomesOrError(results.length, async () =>
        (await batchOutcomes(ctx, c, results, doneRows)).map((o): Outcome<Task> => (o.task ? { value: o.task } : { error: o.error })),
      );
      let nextClaim = 0;
      let nextResult = 0;
      return items.map((it) => (it.claim ? claimAnswers[nextClaim++] : resultAnswers[nextResult++]));
    });
  }

  private runResultClaims(items: ResultClaimItem[], signal: AbortSignal): Promise<Outcome<ResultClaimValue>[]> {
    const ctx = this.ctx;
    const first = items[0].claim;
    // One row a result; a caller's claim rides on its first row (claim_n), the rest claim nothing.
    const payload = JSON.stringify(
      items.flatMap(({ done, claim, batch }, i) =>
        done.map((d, k) => ({
          ...resultRecord(d),
          caller: i,
          claim_worker: claim.workerId,
          claim_n: k === 0 ? claim.maxTasks : 0,
          claim_always: batch,
        })),
      ),
    );
    return withClient(ctx.pool, signal, async (c) => {
      await ctx.workloads.require(c, first.workloads, "claim_next.workloads");
      const hinted = ctx.claimHints.begin(first.workloads, first.labels);
      // The lean statement when neither an expired lease nor a flow-controlled workload can be taken.
      const lean = hinted.expiredOff && ctx.flow.workloads.noneOf(first.workloads);
      const rows = await (lean ? COALESCED_COMPLETE_AND_CLAIM_LEAN : COALESCED_COMPLETE_AND_CLAIM).run(c, {
        ...shape(first),
        hints: hinted.json,
        items: payload,
        taskIds: items.flatMap((it) => it.done.map((d) => d.taskId)),
      });
      const doneRows = rows.filter((r) => r.part === 0);
      const claimedRows = rows.filter((r) => r.part === 1);
      // The claim ran for the batches' slots and the accepted single results' (none: it did not run).
      const accepted = new Map(doneRows.map((r) => [r.id, r]));
      const slots = items.reduce((n, it) => n + (it.batch || accepted.has(it.done[0].taskId) ? it.claim.maxTasks : 0), 0);
      hinted.learn(claimedRows, slots > 0 && claimedRows.length < slots);
      await this.finishCompleted(c, doneRows);
      const per = byCaller(items.length, claimedRows);
      const next = per.map((r) => claimed(ctx, r));
      const flow = rows[0]?.flow_workloads ?? [];
      for (const name of flow) ctx.flow.workloads.mark(name, true);
      if (lean && flow.length > 0) await this.topUp(c, items, accepted, next);
      const outcomes: Outcome<ResultClaimValue>[] = [];
      for (const [i, { done, claim, batch }] of items.entries()) {
        if (batch) {
          // Each result's outcome as COMPLETE_TASKS_AND_CLAIM's caller gives it; the claim has run.
          const completed = new Map<string, Task>();
          for (const d of done) {
            const row = accepted.get(d.taskId);
            if (row) completed.set(d.taskId, toTask(row));
          }
          outcomes.push(await settled(async () => ({ outcomes: await outcomesOf(ctx, c, done, completed), next: next[i] })));
          continue;
        }
        const row = accepted.get(done[0].taskId);
        if (row) {
          outcomes.push({ value: { task: toTask(row), next: next[i] } });
          continue;
        }
        // Refused, replayed or late, as the one-caller path explains it; a replay claims on its own.
        outcomes.push(
          await settled(async () => {
            const task = await refusedOrLate(ctx, c, done[0]);
            return { task, next: (await claimWith(ctx, c, claim, "claim_next.workloads")).tasks };
          }),
        );
      }
      return outcomes;
    });
  }

  /**
   * A lean statement (no flow claim) ran while a requested workload had become flow-controlled, which
   * this coordinator had not seen yet: each caller whose claim ran short claims the rest on its own,
   * through the full claim, as it would have in the statement.
   */
  private async topUp(c: pg.PoolClient, items: ResultClaimItem[], accepted: Map<string, unknown>, next: Task[][]): Promise<void> {
    for (const [i, { done, claim, batch }] of items.entries()) {
      const missing = claim.maxTasks - next[i].length;
      if (missing <= 0 || !(batch || accepted.has(done[0].taskId))) continue;
      next[i] = [...next[i], ...(await claimWith(this.ctx, c, { ...claim, maxTasks: missing }, "claim_next.workloads")).tasks];
    }
  }

  /**
   * Callers of a flow-controlled workload that got nothing learn why, as on the one-caller path:
   * the refusal is counted once for the batch (cap, rate), and a rate limit's next token tells
   * each empty caller's long poll when to try again (the answer: how long until it is due). The
   * coordinator's view of which workloads are flow-controlled is refreshed every few seconds; the
   * statement's answer updates it now.
   */
  private async explainEmpty(
    c: pg.PoolClient,
    flow: string[] | null | undefined,
    items: ClaimItem[],
    answers: Task[][],
  ): Promise<number | undefined> {
    if (!flow || flow.length === 0) return undefined;
    for (const name of flow) this.ctx.flow.workloads.mark(name, true);
    if (answers.every((a) => a.length > 0)) return undefined;
    // Only metrics and a hint ride on this read: were it to fail, the batch's leases (committed)
    // must still reach their callers, who would otherwise wait for them to expire.
    return explainRefusal(this.ctx, c, items[0].claim.workloads).catch(() => undefined);
  }

  /** Metrics, and the jobs the completions may have finished (recheck_job: not those a claim just gave work, nor any with pending tasks). */
  private async finishCompleted(c: pg.PoolClient, doneRows: Array<TaskRow & { recheck_job: boolean }>): Promise<void> {
    if (doneRows.length === 0) return;
    this.ctx.options.observer?.tasksCompleted(doneRows.length);
    const jobs = [...new Set(doneRows.filter((r) => r.recheck_job).map((r) => r.job_id))];
    await finishJobsAfterCommit(c, jobs);
  }

  private runResults(items: CompleteTaskInput[], signal: AbortSignal): Promise<Outcome<Task>[]> {
    return withClient(this.ctx.pool, signal, async (c) => {
      const outcomes = await completeBatchWith(this.ctx, c, items);
      return outcomes.map((o): Outcome<Task> => (o.task ? { value: o.task } : { error: o.error }));
    });
  }

  private runRenewals(items: RenewLeaseInput[], signal: AbortSignal): Promise<Outcome<Task>[]> {
    const payload = JSON.stringify(
      items.map((r) => ({ task_id: r.taskId, worker_id: r.workerId, attempt: r.attempt, lease_seconds: r.leaseSeconds ?? null })),
    );
    return withClient(this.ctx.pool, signal, async (c) => {
      const rows = await COALESCED_RENEW.run(c, { items: payload, taskIds: items.map((r) => r.taskId) });
      const renewed = new Map(rows.map((r) => [r.id, r]));
      const outcomes: Outcome<Task>[] = [];
      for (const r of items) {
        const row = renewed.get(r.taskId);
        outcomes.push(row ? { value: toTask(row) } : await refused(c, r));
      }
      return outcomes;
    });
  }

  private runFailures(items: NormalizedFail[], signal: AbortSignal): Promise<Outcome<Task>[]> {
    const ctx = this.ctx;
    const payload = JSON.stringify(
      items.map((f) => ({
        task_id: f.taskId,
        worker_id: f.workerId,
        attempt: f.attempt,
        error_code: f.errorCode,
        retryable: f.retryable,
        error_message: f.errorMessage,
        retry_after_seconds: f.retryAfterSeconds ?? null,
        usage: f.usage ?? null,
      })),
    );
    return withClient(ctx.pool, signal, async (c) => {
      const rows = await COALESCED_FAIL.run(c, { items: payload, taskIds: items.map((f) => f.taskId) });
      for (const row of rows) ctx.options.observer?.taskFailed(row.status === "pending");
      // Failed for good (committed): each job's failure policy decides what becomes of it.
      for (const jobId of [...new Set(rows.filter((r) => r.status === "failed").map((r) => r.job_id))].sort()) {
        await endJob(c, jobId);
      }
      const failed = new Map(rows.map((r) => [r.id, r]));
      const outcomes: Outcome<Task>[] = [];
      for (const f of items) {
        const row = failed.get(f.taskId);
        outcomes.push(row ? { value: toTask(row) } : await refused(c, f));
      }
      return outcomes;
    });
  }

  /** Tasks leased for a caller that is no longer waiting: back to pending, attempt unspent. */
  private giveBack(tasks: Task[]): void {
    if (tasks.length === 0) return;
    const payload = JSON.stringify(tasks.map((t) => ({ task_id: t.id, worker_id: t.leaseOwner, attempt: t.attempt })));
    // Best effort: a task not given back is reclaimed when its lease expires.
    GIVE_BACK.run(this.ctx.pool, { items: payload, taskIds: tasks.map((t) => t.id) }).catch(() => {});
  }
}

/** A batch's claim slots: as many per claim as it asked for, laid out caller by caller. */
function slots(items: ClaimItem[]): { owners: string[]; callers: number[] } {
  const owners: string[] = [];
  const callers: number[] = [];
  items.forEach(({ claim }, i) => {
    for (let k = 0; k < claim.maxTasks; k++) {
      owners.push(claim.workerId);
      callers.push(i);
    }
  });
  return { owners, callers };
}

/** `count` outcomes from `fn`, or its error as each one's. */
async function outcomesOrError<T>(count: number, fn: () => Promise<Outcome<T>[]>): Promise<Outcome<T>[]> {
  try {
    return await fn();
  } catch (err) {
    return Array.from({ length: count }, () => ({ error: err }));
  }
}

/** A claim's lane key as the statements take it. */
function shape(claim: NormalizedClaim) {
  return { workloads: claim.workloads, leaseSeconds: claim.leaseSeconds ?? null, labels: claim.labels };
}

/** Claims share a statement when they ask for the same workloads with the same labels and lease length. */
function claimKey(claim: NormalizedClaim): string {
  return `${claim.workloads.join("\u0000")}\u0001${claim.labels}\u0001${claim.leaseSeconds ?? ""}`;
}

/** The claimed rows of each caller, in claim order. */
function byCaller<R extends { caller: number; rn: string }>(count: number, rows: R[]): R[][] {
  const per: R[][] = Array.from({ length: count }, () => []);
  for (const r of [...rows].sort((a, b) => Number(a.rn) - Number(b.rn))) per[r.caller].push(r);
  return per;
}

/** Why a renewal or failure was refused, from the task as it is. */
async function refused(c: pg.PoolClient, ref: RenewLeaseInput | NormalizedFail): Promise<Outcome<Task>> {
  try {
    return { error: leaseConflict(await loadTask(c, ref.taskId), ref) };
  } catch (err) {
    return { error: toQueueError(err) };
  }
}

async function settled<T>(fn: () => Promise<T>): Promise<Outcome<T>> {
  try {
    return { value: await fn() };
  } catch (err) {
    return { error: toQueueError(err) };
  }
}
