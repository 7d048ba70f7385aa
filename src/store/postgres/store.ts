// PostgresQueue: the QueueService on PostgreSQL. Validation first (nothing invalid reaches SQL),
// then the statements of ./queries.ts under the caller's deadline.

import { randomBytes } from "node:crypto";
import type pg from "pg";
import {
  FailedPreconditionError,
  IdempotencyConflictError,
  NotFoundError,
  QueueError,
  ValidationError,
  type FieldViolation,
} from "../../queue/errors.js";
import { attemptsOf } from "../../queue/attempts.js";
import { leaseConflict, replayOrConflict } from "../../queue/fencing.js";
import { requestFingerprint } from "../../queue/idempotency.js";
import { ParameterSchemas } from "../../queue/parameter-schemas.js";
import type { QueueObserver, QueueService } from "../../queue/service.js";
import {
  TASK_STATUSES,
  type BatchCompletedAndClaimed,
  type CallOptions,
  type CancelJobInput,
  type ClaimTasksInput,
  type CompletedAndClaimed,
  type CompleteOutcome,
  type CompleteTaskInput,
  type CreateJobInput,
  type CreateJobResult,
  type ExpireLeasesResult,
  type FailTaskInput,
  type Job,
  type JobEvent,
  type JobStatusResult,
  type JobUpdate,
  type ListCompletedResultsInput,
  type ListCompletedResultsResult,
  type ListJobsInput,
  type ListJobsResult,
  type ListTasksInput,
  type ListTasksResult,
  type JobFailure,
  type TaskDetail,
  type WatchOptions,
  type MaintenanceResult,
  type PutWorkloadInput,
  type RenewLeaseInput,
  type ReportProgressInput,
  type RetryJobInput,
  type RetryJobResult,
  type WorkloadTaskStats,
  type Task,
  type TaskCounts,
  type Workload,
  type KeyLimit,
  type PutKeyLimitInput,
} from "../../queue/types.js";
import { validatePutKeyLimit } from "../../queue/flow-control.js";
import {
  LIMITS,
  encodeJobsPageToken,
  encodePageToken,
  encodeTasksPageToken,
  requireUuid,
  requireWorkloadName,
  validateListTasks,
  validateCancel,
  validateClaim,
  validateClaimNext,
  validateComplete,
  validateCreateJob,
  validateFail,
  validateListJobs,
  validateListResults,
  validatePutWorkload,
  validateRenew,
  validateReportProgress,
  validateRetryJob,
  violationsError,
  type NormalizedClaim,
  type NormalizedCreateJob,
} from "../../queue/validation.js";
import { intArrayLiteral, textArrayLiteral } from "./arrays.js";
import { copyIn } from "./copy-in.js";
import { COPY_NULL, copyChunks, copyText } from "./copy-text.js";
import { inTransaction, withClient } from "./db.js";
import * as flow from "./flow-control.js";
import * as sql from "./queries.js";
import { toJob, toJobEvent, toTask, toWorkload, type JobEventRow, type JobRow, type TaskRow } from "./rows.js";
import { WatchHub } from "./watch-hub.js";

export { createPool } from "./db.js";

export interface StoreOptions {
  defaultLeaseSeconds: number;
  defaultMaxAttempts: number;
  maxTasksPerJob: number;
  /** Told about claims, completions, failures and expired leases as they commit (metrics). */
  observer?: QueueObserver;
  /** Finished jobs older than this are deleted by maintain(); undefined: kept forever. */
  retentionDays?: number;
  /** How often the coordinator checks, in one statement for all its WatchJob streams, for events no notification announced (default 1000). */
  watchPollIntervalMs?: number;
  /** Wakes a WatchJob stream when its job has new events (the LISTEN connection); without it, streams poll. */
  jobWakes?: JobEventWakes;
}

/** Where WatchJob learns that a job has new events. */
export interface JobEventWakes {
  /** onWake: the job has new events; also called for every job after a reconnect (notifications may be lost). */
  subscribeJob(jobId: string, onWake: () => void): () => void;
}

const FINAL_JOB_STATUSES: readonly string[] = ["completed", "failed", "cancelled"];
/** A watch stream's job_watchers row lives this long unless refreshed (every third of it). */
const WATCHER_TTL_SECONDS = 60;
/** Each database read of a watch stream gets this long, whatever the stream's own life. */
const WATCH_READ_TIMEOUT_MS = 10_000;
/** Expired pending tasks failed per transaction; the loop repeats while batches come back full. */
const EXPIRY_BATCH = 1000;
/** Old jobs deleted per statement (each with all its tasks and events), and statements per pass. */
const RETENTION_BATCH_JOBS = 20;
const RETENTION_BATCHES_PER_PASS = 50;

/** Expired leases handled per reaper transaction; the loop repeats while batches come back full. */
const REAPER_BATCH = 1000;

export class PostgresQueue implements QueueService {
  private readonly schemas = new ParameterSchemas();
  /** Workloads as CreateJob last read them, with the row's xmin (CREATE_JOB checks it is still current). */
  private readonly workloadCache = new Map<string, { workload: Workload; xmin: string; keyed: boolean }>();

  /** The poll floor and watcher refresh of all this coordinator's WatchJob streams. */
  private readonly watchHub: WatchHub;
  /** Which labels workers claim with (flow-control.ts), written every few seconds, not per claim. */
  private readonly sightings = new flow.WorkerSightings();
  /** Which workloads have caps, a rate limit or are paused: their completions wake parked claims. */
  private readonly flowWorkloads: flow.FlowWorkloads;

  constructor(
    private readonly pool: pg.Pool,
    private readonly options: StoreOptions,
  ) {
    this.watchHub = new WatchHub(pool, {
      pollIntervalMs: options.watchPollIntervalMs ?? 1000,
      watcherTtlSeconds: WATCHER_TTL_SECONDS,
      readTimeoutMs: WATCH_READ_TIMEOUT_MS,
    });
    this.flowWorkloads = new flow.FlowWorkloads(pool);
  }

  async putWorkload(input: PutWorkloadInput, opts: CallOptions = {}): Promise<Workload> {
    const w = validatePutWorkload(input, { maxAttempts: this.options.defaultMaxAttempts, leaseSeconds: this.options.defaultLeaseSeconds });
    if (w.parametersSchema) this.schemas.check(w.parametersSchema);
    const { rows } = await withClient(this.pool, opts.signal, (c) =>
      c.query(sql.UPSERT_WORKLOAD, [
        w.name,
        w.maxAttempts,
        w.leaseSeconds,
        w.parametersSchema === null ? null : JSON.stringify(w.parametersSchema),
        w.maxPendingSeconds,
        w.flow.maxLeased,
        w.flow.maxLeasedPerKey,
        w.flow.maxLeasesPerSecond,
        w.flow.leasesBurst,
      ]),
    );
    this.flowWorkloads.mark(w.name, rows[0].flow as boolean);
    return toWorkload(rows[0]);
  }

  async putKeyLimit(input: PutKeyLimitInput, opts: CallOptions = {}): Promise<KeyLimit> {
    const limit = validatePutKeyLimit(input, requireWorkloadName);
    const done = await withClient(this.pool, opts.signal, (c) => flow.putKeyLimit(c, limit));
    this.flowWorkloads.mark(limit.name, true);
    return done;
  }

  async pauseWorkload(name: string, opts: CallOptions = {}): Promise<Workload> {
    const n = requireWorkloadName("name", name);
    const w = await withClient(this.pool, opts.signal, (c) => flow.pauseWorkload(c, n));
    this.flowWorkloads.mark(n, true);
    return w;
  }

  async resumeWorkload(name: string, opts: CallOptions = {}): Promise<Workload> {
    const n = requireWorkloadName("name", name);
    return withClient(this.pool, opts.signal, (c) => flow.resumeWorkload(c, n));
  }

  async listWorkloads(opts: CallOptions = {}): Promise<Workload[]> {
    const { rows } = await withClient(this.pool, opts.signal, (c) => c.query(sql.SELECT_ALL_WORKLOADS));
    return rows.map(toWorkload);
  }

  async createJob(input: CreateJobInput, opts: CallOptions = {}): Promise<CreateJobResult> {
    const job = validateCreateJob(input, this.options.maxTasksPerJob);
    const fingerprint = job.idempotencyKey ? requestFingerprint(job) : null;
    const names = [...new Set([job.workload, ...job.tasks.map((t) => t.workload)])];
    const jobId = uuidv7();
    const ids = uuidv7s(job.tasks.length);
    const perWorkload = countBy(job.tasks.map((t) => t.workload));

    return withClient(this.pool, opts.signal, async (c) => {
      // The cached workloads are used as they are when CREATE_JOB finds them unchanged; a miss
      // reads them first. If they changed meanwhile (PutWorkload through any coordinator), the
      // second try reads them FOR SHARE in a transaction, so they cannot change again before the
      // insert: it always succeeds, however busy PutWorkload is.
      let refresh = names.some((n) => !this.workloadCache.has(n));
      // A job with a concurrency key makes its workload keyed (fair ranks from then on), once.
      if (job.concurrencyKey !== "" && this.workloadCache.get(job.workload)?.keyed !== true) {
        await c.query(flow.MARK_KEYED, [job.workload]);
        refresh = true;
      }
      let locked = false;
      try {
        for (;;) {
          if (locked) {
            await c.query("BEGIN");
            await this.loadWorkloads(c, names, true);
          } else if (refresh) {
            await this.loadWorkloads(c, names, false);
          }
          const result = await this.insertJob(c, input, job, fingerprint, names, jobId, ids, perWorkload, locked, opts.prepared);
          if (result === "stale") {
            if (locked) throw new Error("workloads changed while locked");
            locked = true;
            continue;
          }
          if (locked) {
            locked = false;
            await c.query("COMMIT");
          }
          return result === "taken" ? await this.replayJob(c, job.idempotencyKey!, fingerprint) : result;
        }
      } catch (err) {
        if (locked) await c.query("ROLLBACK").catch(() => {});
        throw err;
      }
    });
  }

  /** CREATE_JOB against the cached workloads: the new job, "stale" if they changed, "taken" if the idempotency key was used before. */
  private async insertJob(
    c: pg.PoolClient,
    input: CreateJobInput,
    job: NormalizedCreateJob,
    fingerprint: string | null,
    names: string[],
    jobId: string,
    ids: string[],
    perWorkload: Map<string, number>,
    inTransaction: boolean,
    prepared: CallOptions["prepared"],
  ): Promise<CreateJobResult | "stale" | "taken"> {
    const workloads = new Map(names.flatMap((n) => (this.workloadCache.has(n) ? [[n, this.workloadCache.get(n)!] as const] : [])));
    if (!workloads.has(job.workload)) throw new NotFoundError("workload", job.workload, "workload");
    const ranked = workloads.get(job.workload)!.keyed;
    const jobLabels = job.requiredLabels === null ? null : JSON.stringify(job.requiredLabels);
    const maxAttempts = new Array<number>(job.tasks.length);
    const own = input.tasks?.length ? true : false;
    for (let i = 0; i < job.tasks.length; i++) {
      const t = job.tasks[i];
      const w = workloads.get(t.workload)?.workload;
      if (!w) throw new NotFoundError("workload", t.workload, `tasks[${i}].workload`);
      // The field's name is made only for a workload with a schema (10,000 names cost ~3 ms).
      if (w.parametersSchema) this.schemas.validate(w, t.parameters, own ? `tasks[${i}].parameters` : "parameters");
      maxAttempts[i] = job.maxAttempts ?? w.maxAttempts;
    }
    const jobValues = [
      jobId,
      job.workload,
      job.inputUri,
      job.inputSha256,
      JSON.stringify(job.parameters),
      job.priority,
      job.idempotencyKey,
      fingerprint,
      job.traceparent,
      names,
      names.map((n) => workloads.get(n)!.xmin),
    ];
    const flowValues = [job.concurrencyKey, jobLabels, ranked, job.tasks.length];
    if (job.tasks.length >= COPY_MIN_TASKS)
      return this.insertJobByCopy(c, job, jobValues, flowValues, ids, maxAttempts, perWorkload, inTransaction, prepared);
    // Sent now; the answer's tasks are made while PostgreSQL inserts them (the other core).
    const inserting = c.query({
      name: "leasehold_create_job",
      text: sql.CREATE_JOB,
      values: [
        ...jobValues,
        // The task arrays as literals made here (arrays.ts: a third of pg's cost for 10,000 tasks).
        textArrayLiteral(ids),
        intArrayLiteral(job.tasks.map((t) => t.chunkIndex)),
        textArrayLiteral(job.tasks.map((t) => t.workload)),
        textArrayLiteral(job.tasks.map((t) => t.inputUri)),
        textArrayLiteral(job.tasks.map((t) => t.inputSha256)),
        textArrayLiteral(parametersJson(job.tasks)),
        intArrayLiteral(maxAttempts),
        [...perWorkload.keys()],
        [...perWorkload.values()],
        ...flowValues,
        taskLabels(job),
      ],
    });
    const tasks = taskRows(job, jobId, ids, maxAttempts);
    const { rows } = await inserting;
    const row = rows[0];
    if (!row.fresh) return "stale";
    if (row.id === null) return "taken"; // the idempotency key was used before
    return createdJob(row, tasks);
  }

  /**
   * insertJob for a large job: CREATE_JOB_ALONE, then its tasks by COPY (queries.ts), in one
   * transaction (the caller's, when it holds one). The COPY's rows are made as they are sent; the
   * result is known once the job row is back, and goes to `prepared` while PostgreSQL copies (REST encodes its answer then, on this process's core, early-answer.ts).
   */
  private async insertJobByCopy(
    c: pg.PoolClient,
    job: NormalizedCreateJob,
    jobValues: unknown[],
    flowValues: unknown[],
    ids: string[],
    maxAttempts: number[],
    perWorkload: Map<string, number>,
    inTransaction: boolean,
    prepared: CallOptions["prepared"],
  ): Promise<CreateJobResult | "stale" | "taken"> {
    const jobId = jobValues[0] as string;
    const begun = inTransaction ? undefined : c.query("BEGIN");
    const inserting = c.query({
      name: "leasehold_create_job_alone",
      text: sql.CREATE_JOB_ALONE,
      values: [...jobValues, [...perWorkload.keys()], [...perWorkload.values()], ...flowValues],
    });
    try {
      const [, { rows }] = await Promise.all([begun, inserting]);
      const row = rows[0];
      if (!row.fresh || row.id === null) {
        if (!inTransaction) await c.query("ROLLBACK");
        return row.fresh ? "taken" : "stale";
      }
      // The rows are made chunk by chunk as copyIn sends them: PostgreSQL copies the first while
      // the next are made (made before the job row was back they only overlapped its round trips).
      // Escaped like every text column, though validation allows only hex and dashes there.
      const tail = "\t" + job.priority + "\t" + (job.traceparent === null ? COPY_NULL : copyText(job.traceparent));
      // With a key, labels or fair ranks, three columns more (COPY_FLOW_TASKS).
      const withFlow = job.concurrencyKey !== "" || job.tasks.some((t) => t.requiredLabels !== null) || flowValues[2] === true;
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
          (withFlow ? flowTail(i) : "")
        );
      });
      const copying = copyIn(c, withFlow ? sql.COPY_FLOW_TASKS : sql.COPY_TASKS, chunks);
      const result = createdJob(row, taskRows(job, jobId, ids, maxAttempts));
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

  /** A CreateJob whose idempotency key was used before: the same request is a replay, anything else a conflict. */
  private async replayJob(c: pg.PoolClient, key: string, fingerprint: string | null): Promise<CreateJobResult> {
    const { rows: prior } = await c.query(sql.SELECT_JOB_BY_IDEMPOTENCY_KEY, [key]);
    if (prior[0]?.request_sha256 !== fingerprint) {
      throw new IdempotencyConflictError(`idempotency_key: was used for a different request (job ${prior[0]?.id})`);
    }
    const { rows: taskRows } = await c.query(sql.SELECT_JOB_TASKS, [prior[0].id]);
    return { job: toJob(prior[0]), tasks: taskRows.map(toTask), created: false };
  }

  /** Reads these workloads into the cache (and drops the ones that do not exist). */
  private async loadWorkloads(c: pg.PoolClient, names: string[], forShare: boolean): Promise<void> {
    const { rows } = await c.query(forShare ? sql.SELECT_WORKLOADS_WITH_XMIN_FOR_SHARE : sql.SELECT_WORKLOADS_WITH_XMIN, [names]);
    for (const n of names) this.workloadCache.delete(n);
    for (const r of rows)
      this.workloadCache.set(r.name as string, { workload: toWorkload(r), xmin: r.row_xmin as string, keyed: r.keyed as boolean });
  }

  async claimTasks(input: ClaimTasksInput, opts: CallOptions = {}): Promise<Task[]> {
    const claim = validateClaim(input);
    return withClient(this.pool, opts.signal, (c) => this.claimWith(c, claim, "workloads", opts));
  }

  private async claimWith(c: pg.PoolClient, claim: NormalizedClaim, field: string, opts: CallOptions = {}): Promise<Task[]> {
    const one = claim.maxTasks === 1;
    const { rows } = await c.query({
      name: one ? "leasehold_claim_task" : "leasehold_claim_tasks",
      text: one ? sql.CLAIM_TASK : sql.CLAIM_TASKS,
      values: [claim.workloads, claim.maxTasks, claim.workerId, claim.leaseSeconds ?? null, claim.labels],
    });
    await this.sightings.seen(c, claim.workloads, claim.labels);
    if (rows.length === 0) {
      // Only an empty answer pays for this check, so the hot path stays one statement.
      await this.requireWorkloads(c, claim.workloads, field);
      if (this.flowWorkloads.any(claim.workloads)) await this.explainRefusal(c, claim.workloads, opts);
      return [];
    }
    return this.claimed(rows);
  }

  /**
   * An empty claim of a flow-controlled workload: counted by what refused it (metrics), and, when a
   * rate limit had no token, opts.claimRetryAfterMs says when the next is due (the long poll waits that long).
   */
  private async explainRefusal(c: pg.PoolClient, workloads: string[], opts: CallOptions): Promise<void> {
    const { rows } = await c.query({ name: "leasehold_flow_refusals", text: flow.FLOW_REFUSALS, values: [workloads] });
    let wait = Infinity;
    for (const r of rows) {
      if (r.cap_full) this.options.observer?.claimRefused?.(r.name as string, "cap");
      if (r.rate_wait_ms !== null) {
        this.options.observer?.claimRefused?.(r.name as string, "rate");
        wait = Math.min(wait, r.rate_wait_ms as number);
      }
    }
    if (Number.isFinite(wait)) opts.claimRetryAfterMs = Math.max(1, wait);
  }

  /** Tasks of flow-controlled workloads stopped holding their slots: wake claims parked on those workloads (any coordinator). */
  private freedSlots(workloads: readonly string[]): void {
    const capped = [...new Set(workloads)].filter((w) => this.flowWorkloads.any([w]));
    if (capped.length === 0) return;
    this.pool.query(sql.NOTIFY_WORKLOADS, [capped, capped.map(() => 1)]).catch(() => {});
  }

  private claimed(rows: (TaskRow & { pickup_seconds: number | null })[]): Task[] {
    if (rows.length === 0) return [];
    this.options.observer?.tasksClaimed(
      rows.length,
      rows.flatMap((r) => (r.pickup_seconds === null ? [] : [r.pickup_seconds])),
    );
    return rows.map(toTask);
  }

  /**
   * Every workload a claim names must exist: a claim that found nothing checks, and a result
   * report's claim_next checks before the result is written, so a mistaken claim_next writes
   * nothing. Workloads are never deleted, so one seen (cached) once exists for good, and only a
   * name not seen yet costs a read, which caches what it finds: a coordinator that serves a
   * workload's workers but never its CreateJob would otherwise read the workloads table again on
   * every report, and on every claim of an empty queue.
   */
  private async requireWorkloads(c: pg.PoolClient, names: string[], field: string): Promise<void> {
    if (names.every((n) => this.workloadCache.has(n))) return;
    await this.loadWorkloads(c, names, false);
    const unknown = names.find((n) => !this.workloadCache.has(n));
    if (unknown) throw new NotFoundError("workload", unknown, `${field}[${names.indexOf(unknown)}]`);
  }

  async renewLease(input: RenewLeaseInput, opts: CallOptions = {}): Promise<Task> {
    const renew = validateRenew(input);
    return withClient(this.pool, opts.signal, async (c) => {
      const { rows } = await c.query({
        name: "leasehold_renew_lease",
        text: sql.RENEW_LEASE,
        values: [renew.taskId, renew.workerId, renew.attempt, renew.leaseSeconds ?? null],
      });
      if (rows.length === 1) return toTask(rows[0]);
      throw leaseConflict(await this.loadTask(c, renew.taskId), renew);
    });
  }

  async completeTask(input: CompleteTaskInput, opts: CallOptions = {}): Promise<Task> {
    const done = validateComplete(input);
    return withClient(this.pool, opts.signal, (c) => this.completeWith(c, done));
  }

  // One statement completes and claims (COMPLETE_TASK_AND_CLAIM). When it accepted nothing, the
  // result was refused (thrown, nothing claimed) or is a replay, which claims on its own.
  async completeTaskAndClaim(input: CompleteTaskInput, next: ClaimTasksInput, opts: CallOptions = {}): Promise<CompletedAndClaimed> {
    const done = validateComplete(input);
    const claim = validateClaimNext(next);
    return withClient(this.pool, opts.signal, async (c) => {
      await this.requireWorkloads(c, claim.workloads, "claim_next.workloads");
      const one = claim.maxTasks === 1;
      const { rows } = await c.query({
        name: one ? "leasehold_complete_task_and_claim_one" : "leasehold_complete_task_and_claim",
        text: one ? sql.COMPLETE_TASK_AND_CLAIM_ONE : sql.COMPLETE_TASK_AND_CLAIM,
        values: [...completeValues(done), claim.workloads, claim.maxTasks, claim.workerId, claim.leaseSeconds ?? null, claim.labels],
      });
      const accepted = rows.find((r) => r.part === 0);
      if (!accepted) {
        const task = replayOrConflict(await this.loadTask(c, done.taskId), done);
        return { task, next: await this.claimWith(c, claim, "claim_next.workloads") };
      }
      const task = await this.completed(c, accepted);
      return { task, next: this.claimed(rows.filter((r) => r.part === 1)) };
    });
  }

  private async completeWith(c: pg.PoolClient, done: CompleteTaskInput): Promise<Task> {
    const { rows } = await c.query({ name: "leasehold_complete_task", text: sql.COMPLETE_TASK, values: completeValues(done) });
    if (rows.length === 1) return this.completed(c, rows[0]);
    return replayOrConflict(await this.loadTask(c, done.taskId), done);
  }

  /** A task the completion accepted; its job is re-checked after commit when the statement could not decide. */
  private async completed(c: pg.PoolClient, row: TaskRow & { recheck_job: boolean }): Promise<Task> {
    this.options.observer?.tasksCompleted(1);
    this.freedSlots([row.workload]);
    if (row.recheck_job) await c.query({ name: "leasehold_finish_jobs", text: sql.FINISH_JOBS_IF_DONE, values: [[row.job_id]] });
    return toTask(row);
  }

  async completeTasks(inputs: CompleteTaskInput[], opts: CallOptions = {}): Promise<CompleteOutcome[]> {
    const batch = validateBatch(inputs);
    return withClient(this.pool, opts.signal, (c) => this.completeBatchWith(c, batch));
  }

  async completeTasksAndClaim(
    inputs: CompleteTaskInput[],
    next: ClaimTasksInput,
    opts: CallOptions = {},
  ): Promise<BatchCompletedAndClaimed> {
    const batch = validateBatch(inputs);
    const claim = validateClaimNext(next);
    return withClient(this.pool, opts.signal, async (c) => {
      await this.requireWorkloads(c, claim.workloads, "claim_next.workloads");
      const { rows } = await c.query({
        name: "leasehold_complete_tasks_and_claim",
        text: sql.COMPLETE_TASKS_AND_CLAIM,
        values: [...batchValues(batch), claim.workloads, claim.maxTasks, claim.workerId, claim.leaseSeconds ?? null, claim.labels],
      });
      const claimedRows = rows.filter((r) => r.part === 1);
      // A job one of whose tasks this statement claimed has unfinished work (that task), so it
      // cannot be done; its last completion will check. A worker chained through one large job
      // thus never pays for FINISH_JOBS_IF_DONE.
      const busy = new Set(claimedRows.map((r) => r.job_id as string));
      const outcomes = await this.batchOutcomes(
        c,
        batch,
        rows.filter((r) => r.part === 0),
        busy,
      );
      return { outcomes, next: this.claimed(claimedRows) };
    });
  }

  private async completeBatchWith(c: pg.PoolClient, batch: CompleteTaskInput[]): Promise<CompleteOutcome[]> {
    const { rows } = await c.query({ name: "leasehold_complete_tasks", text: sql.COMPLETE_TASKS, values: batchValues(batch) });
    return this.batchOutcomes(c, batch, rows);
  }

  /**
   * Each result's outcome, from the rows the completion accepted; the others are replays or
   * refusals. The completed tasks' jobs are finished if done, except those known to be busy.
   */
  private async batchOutcomes(
    c: pg.PoolClient,
    batch: CompleteTaskInput[],
    rows: TaskRow[],
    busy: ReadonlySet<string> = new Set(),
  ): Promise<CompleteOutcome[]> {
    const completed = new Map(rows.map((r) => [r.id, toTask(r)]));
    if (completed.size > 0) this.options.observer?.tasksCompleted(completed.size);
    this.freedSlots(rows.map((r) => r.workload));
    const jobs = [...new Set(rows.map((r) => r.job_id))].filter((j) => !busy.has(j));
    if (jobs.length > 0) await c.query({ name: "leasehold_finish_jobs", text: sql.FINISH_JOBS_IF_DONE, values: [jobs] });
    const outcomes: CompleteOutcome[] = [];
    for (const b of batch) {
      const task = completed.get(b.taskId);
      if (task) {
        outcomes.push({ task });
        continue;
      }
      try {
        outcomes.push({ task: replayOrConflict(await this.loadTask(c, b.taskId), b) });
      } catch (err) {
        if (!(err instanceof QueueError)) throw err;
        outcomes.push({ error: err });
      }
    }
    return outcomes;
  }

  async failTask(input: FailTaskInput, opts: CallOptions = {}): Promise<Task> {
    const f = validateFail(input);
    return withClient(this.pool, opts.signal, async (c) => {
      const { rows } = await c.query({
        name: "leasehold_fail_task",
        text: sql.FAIL_TASK,
        values: [f.taskId, f.workerId, f.attempt, f.errorCode, f.retryable, f.errorMessage, f.retryAfterSeconds ?? null],
      });
      if (rows.length === 1) {
        this.options.observer?.taskFailed(rows[0].status === "pending");
        this.freedSlots([rows[0].workload as string]);
        return toTask(rows[0]);
      }
      throw leaseConflict(await this.loadTask(c, f.taskId), f);
    });
  }

  async expireLeases(opts: CallOptions = {}): Promise<ExpireLeasesResult> {
    const total: ExpireLeasesResult = { requeued: 0, failed: 0 };
    const due = (await withClient(this.pool, opts.signal, (c) => c.query({ name: "leasehold_reaper_due", text: sql.REAPER_DUE }))).rows[0];
    while (due.leases) {
      const batch = await inTransaction(this.pool, opts.signal, async (c) => {
        const { rows } = await c.query(sql.EXPIRE_LEASES, [REAPER_BATCH]);
        const failedJobs = [...new Set(rows.filter((r) => r.status === "failed").map((r) => r.job_id as string))];
        if (failedJobs.length > 0) await c.query(sql.FAIL_JOBS_AND_CANCEL_REST, [failedJobs]);
        const requeued = countBy(rows.filter((r) => r.status === "pending").map((r) => r.workload as string));
        if (requeued.size > 0) await c.query(sql.NOTIFY_WORKLOADS, [[...requeued.keys()], [...requeued.values()]]);
        return rows;
      });
      for (const r of batch) total[r.status === "pending" ? "requeued" : "failed"]++;
      if (batch.length < REAPER_BATCH) break;
    }
    if (due.stalled_jobs) await withClient(this.pool, opts.signal, (c) => c.query(sql.FINISH_STALLED_JOBS));
    if (total.requeued + total.failed > 0) this.options.observer?.leasesExpired(total.requeued + total.failed);
    return total;
  }

  async getJobStatus(jobId: string, opts: CallOptions = {}): Promise<JobStatusResult> {
    const id = requireUuid("job_id", jobId);
    return withClient(this.pool, opts.signal, (c) => this.readJobStatus(c, id));
  }

  private async readJobStatus(c: pg.PoolClient, id: string): Promise<JobStatusResult> {
    const { rows } = await c.query(sql.SELECT_JOB, [id]);
    if (rows.length === 0) throw new NotFoundError("job", id);
    const { rows: counts } = await c.query(sql.COUNT_JOB_TASKS, [id]);
    const taskCounts = emptyCounts();
    for (const r of counts) taskCounts[r.status as keyof TaskCounts] = r.n as number;
    const totalTasks = counts.reduce((n, r) => n + (r.n as number), 0);
    const job = toJob(rows[0]);
    const failure = job.status === "failed" ? await this.readJobFailure(c, id) : null;
    return { job, taskCounts, totalTasks, progress: totalTasks === 0 ? 0 : taskCounts.completed / totalTasks, failure };
  }

  async listCompletedResults(input: ListCompletedResultsInput, opts: CallOptions = {}): Promise<ListCompletedResultsResult> {
    const q = validateListResults(input);
    return withClient(this.pool, opts.signal, async (c) => {
      // One row past the page tells whether another page exists.
      const { rows } = await c.query(sql.LIST_COMPLETED_RESULTS, [q.jobId, q.afterChunk, q.pageSize + 1]);
      if (rows.length === 0) {
        const { rows: found } = await c.query(sql.JOB_EXISTS, [q.jobId]);
        if (!found[0].found) throw new NotFoundError("job", q.jobId);
      }
      const page = rows.slice(0, q.pageSize);
      return {
        results: page.map((r) => ({
          chunkIndex: r.chunk_index,
          taskId: r.id,
          resultUri: r.result_uri,
          resultSha256: r.result_sha256,
          metrics: r.metrics ?? null,
          completedAt: r.completed_at,
        })),
        nextPageToken: rows.length > q.pageSize ? encodePageToken(page[page.length - 1].chunk_index) : "",
      };
    });
  }

  async cancelJob(input: CancelJobInput, opts: CallOptions = {}): Promise<Job> {
    const cancel = validateCancel(input);
    return inTransaction(this.pool, opts.signal, async (c) => {
      const { rows: existing } = await c.query(sql.SELECT_JOB, [cancel.jobId]);
      if (existing.length === 0) throw new NotFoundError("job", cancel.jobId);
      // A finished job stays as it is: cancelling it again (or after it ended) is a no-op.
      if (!["pending", "running"].includes(existing[0].status)) return toJob(existing[0]);
      await c.query(sql.CANCEL_JOB_TASKS, [cancel.jobId]);
      const { rows } = await c.query(sql.CANCEL_JOB, [cancel.jobId, cancel.reason]);
      if (rows.length === 1) return toJob(rows[0]);
      // It finished between our read and our update; report what it is now.
      const { rows: now } = await c.query(sql.SELECT_JOB, [cancel.jobId]);
      return toJob(now[0]);
    });
  }

  async reportProgress(input: ReportProgressInput, opts: CallOptions = {}): Promise<Task> {
    const p = validateReportProgress(input);
    return withClient(this.pool, opts.signal, async (c) => {
      const { rows } = await c.query({
        name: "leasehold_report_progress",
        text: sql.REPORT_PROGRESS,
        values: [p.taskId, p.workerId, p.attempt, p.leaseSeconds ?? null, p.progress, p.message ?? null, p.partialResultUri ?? null],
      });
      if (rows.length === 1) return toTask(rows[0]);
      throw leaseConflict(await this.loadTask(c, p.taskId), p);
    });
  }

  async retryJob(input: RetryJobInput, opts: CallOptions = {}): Promise<RetryJobResult> {
    const r = validateRetryJob(input);
    return withClient(this.pool, opts.signal, async (c) => {
      const { rows } = await c.query(sql.RETRY_JOB, [r.jobId, r.maxAttempts, LIMITS.attempt.max]);
      if (rows.length === 1) return { job: toJob(rows[0]), retriedTasks: rows[0].retried_tasks as number };
      const { rows: jobs } = await c.query(sql.SELECT_JOB, [r.jobId]);
      if (jobs.length === 0) throw new NotFoundError("job", r.jobId);
      const status = jobs[0].status as string;
      if (status !== "failed" && status !== "cancelled") {
        throw new FailedPreconditionError(`job ${r.jobId} is ${status}: only a failed or cancelled job can be retried`);
      }
      throw new FailedPreconditionError(
        `job ${r.jobId} has no task left to retry (each is completed or has used ${LIMITS.attempt.max} attempts)`,
      );
    });
  }

  async listJobs(input: ListJobsInput, opts: CallOptions = {}): Promise<ListJobsResult> {
    const q = validateListJobs(input);
    // One row past the page tells whether another page exists.
    const values: unknown[] = [
      q.after?.createdAt ?? "infinity",
      q.after?.id ?? "ffffffff-ffff-ffff-ffff-ffffffffffff",
      q.pageSize + 1,
      q.workload ?? "",
    ];
    const { rows } = await withClient(this.pool, opts.signal, (c) =>
      q.status ? c.query(sql.LIST_JOBS_BY_STATUS, [...values, q.status]) : c.query(sql.LIST_JOBS, values),
    );
    const page = rows.slice(0, q.pageSize);
    const last = page[page.length - 1];
    return {
      jobs: page.map(toJob),
      nextPageToken: rows.length > q.pageSize ? encodeJobsPageToken(last.created_at_cursor as string, last.id as string) : "",
    };
  }

  /*
   * The stream registers itself (so the events trigger NOTIFYs for the job) before it reads the
   * snapshot, and reads every later batch as "committed since the previous read's snapshot"
   * (JOB_EVENTS_SINCE): nothing is missed or repeated whatever order transactions commit in. A
   * NOTIFY only says when to read; the floor under lost notifications is the coordinator's
   * WatchHub, one statement per poll interval for all its streams.
   */
  async *watchJob(jobId: string, opts: WatchOptions = {}): AsyncGenerator<JobUpdate> {
    const id = requireUuid("job_id", jobId);
    const after = opts.afterEventId === undefined || opts.afterEventId === "0" ? undefined : opts.afterEventId;
    if (after !== undefined && !/^[1-9]\d{0,18}$/.test(after))
      throw new ValidationError("after_event_id", "must be an event id (a positive integer)");
    const signal = opts.signal;
    const wakes = new Wakes();
    const unsubscribe = this.options.jobWakes?.subscribeJob(id, () => wakes.wake());
    const read = <T>(fn: (c: pg.PoolClient) => Promise<T>, begin?: string) => {
      const readSignal = signal
        ? AbortSignal.any([signal, AbortSignal.timeout(WATCH_READ_TIMEOUT_MS)])
        : AbortSignal.timeout(WATCH_READ_TIMEOUT_MS);
      return begin ? inTransaction(this.pool, readSignal, fn, begin) : withClient(this.pool, readSignal, fn);
    };
    let watcherId: string | undefined;
    let leaveHub: (() => void) | undefined;
    try {
      watcherId = (await read((c) => c.query(sql.INSERT_JOB_WATCHER, [id, WATCHER_TTL_SECONDS]))).rows[0].id as string;
      const { status, snapshot, missed } = await read(async (c) => {
        const status = await this.readJobStatus(c, id);
        const { rows } = await c.query(sql.CURRENT_SNAPSHOT);
        // A resumed stream: what was written after the client's last event, up to this snapshot.
        const missed = after === undefined ? [] : (await c.query(sql.JOB_EVENTS_AFTER, [id, after])).rows.map(toJobEvent);
        return { status, snapshot: rows[0].snapshot as string, missed };
      }, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY");
      if (after === undefined) yield { snapshot: status };
      for (const event of missed) {
        yield { event };
        if (event.kind === "job_status" && FINAL_JOB_STATUSES.includes(event.status ?? "")) return;
      }
      // Final already (for a resumed stream: the client saw the final event before it left).
      if (FINAL_JOB_STATUSES.includes(status.job.status)) return;
      const stream = { jobId: id, since: snapshot, watcherId, wake: () => wakes.wake() };
      leaveHub = this.watchHub.add(stream);
      for (;;) {
        // No timeout of its own: the hub wakes the stream when its job has news.
        await wakes.next(Infinity, signal);
        if (signal?.aborted) {
          // Shutdown ends the stream with its reason (UNAVAILABLE: watch again); a client that left needs nothing.
          if (signal.reason instanceof QueueError) throw signal.reason;
          return;
        }
        const { rows } = await read((c) => c.query(sql.JOB_EVENTS_SINCE, [id, stream.since]));
        stream.since = rows[0].snapshot as string;
        for (const e of rows[0].events as JobEventRow[]) {
          const event = toJobEvent(e);
          yield { event };
          if (event.kind === "job_status" && FINAL_JOB_STATUSES.includes(event.status ?? "")) return;
        }
      }
    } finally {
      leaveHub?.();
      unsubscribe?.();
      if (watcherId) {
        const done = watcherId;
        await withClient(this.pool, AbortSignal.timeout(WATCH_READ_TIMEOUT_MS), (c) => c.query(sql.DELETE_JOB_WATCHER, [done])).catch(
          () => {},
        );
      }
    }
  }

  /** Open watch streams and the floor checks run for them (one statement each, whatever their number). */
  watchStats(): { streams: number; checks: number } {
    return { streams: this.watchHub.size, checks: this.watchHub.checks };
  }

  async maintain(opts: CallOptions = {}): Promise<MaintenanceResult> {
    const result: MaintenanceResult = { expiredPending: 0, deletedJobs: 0 };
    const days = this.options.retentionDays;
    const due = (
      await withClient(this.pool, opts.signal, (c) =>
        c.query({ name: "leasehold_maintenance_due", text: sql.MAINTENANCE_DUE, values: [days ?? null] }),
      )
    ).rows[0];
    while (due.pending) {
      const expired = await inTransaction(this.pool, opts.signal, async (c) => {
        const { rows } = await c.query(sql.EXPIRE_PENDING, [EXPIRY_BATCH]);
        const jobs = [...new Set(rows.map((r) => r.job_id as string))];
        if (jobs.length > 0) await c.query(sql.FAIL_JOBS_AND_CANCEL_REST, [jobs]);
        return rows.length;
      });
      result.expiredPending += expired;
      if (expired < EXPIRY_BATCH) break;
    }
    if (due.watchers) await withClient(this.pool, opts.signal, (c) => c.query(sql.DELETE_EXPIRED_JOB_WATCHERS));
    if (days !== undefined && due.retention) {
      for (let i = 0; i < RETENTION_BATCHES_PER_PASS; i++) {
        const { rowCount } = await withClient(this.pool, opts.signal, (c) => c.query(sql.DELETE_OLD_JOBS, [days, RETENTION_BATCH_JOBS]));
        result.deletedJobs += rowCount ?? 0;
        if ((rowCount ?? 0) < RETENTION_BATCH_JOBS) break;
      }
    }
    return result;
  }

  async taskStats(scope: "unfinished" | "all", opts: CallOptions = {}): Promise<WorkloadTaskStats[]> {
    const rows = await withClient(this.pool, opts.signal, async (c) => {
      const unfinished = (await c.query(sql.UNFINISHED_TASK_STATS)).rows;
      if (scope === "unfinished") return unfinished;
      // The pool turns sequential scans off for the hot path; a count of everything wants one.
      await c.query("BEGIN");
      try {
        await c.query("SET LOCAL enable_seqscan = on");
        const all = (await c.query(sql.ALL_TASK_STATS)).rows;
        await c.query("COMMIT");
        // Counts from the full scan; the oldest-pending ages from the unfinished query.
        return [...all, ...unfinished.map((r) => ({ ...r, n: 0 }))];
      } catch (err) {
        await c.query("ROLLBACK").catch(() => {});
        throw err;
      }
    });
    const byWorkload = new Map<string, WorkloadTaskStats>();
    for (const r of rows) {
      const name = r.workload as string;
      let stats = byWorkload.get(name);
      if (!stats) byWorkload.set(name, (stats = { workload: name, counts: emptyCounts(), oldestPendingSeconds: 0 }));
      stats.counts[r.status as keyof TaskCounts] += r.n as number;
      stats.oldestPendingSeconds = Math.max(stats.oldestPendingSeconds, r.oldest_pending_seconds as number);
    }
    return [...byWorkload.values()].sort((a, b) => a.workload.localeCompare(b.workload));
  }

  // ---- task inspection ----

  async listTasks(input: ListTasksInput, opts: CallOptions = {}): Promise<ListTasksResult> {
    const q = validateListTasks(input);
    return withClient(this.pool, opts.signal, async (c) => {
      // One row past the page tells whether another page exists.
      const values = [q.jobId, q.afterChunk, q.pageSize + 1];
      const { rows } =
        q.status === null
          ? await c.query(sql.LIST_TASKS, values)
          : q.status === "failed"
            ? await c.query(sql.LIST_FAILED_TASKS, values)
            : await c.query(sql.LIST_TASKS_BY_STATUS, [...values, q.status]);
      if (rows.length === 0) {
        const { rows: found } = await c.query(sql.JOB_EXISTS, [q.jobId]);
        if (!found[0].found) throw new NotFoundError("job", q.jobId);
      }
      const page = rows.slice(0, q.pageSize).map(toTask);
      return {
        tasks: await this.withAttempts(c, q.jobId, page),
        nextPageToken: rows.length > q.pageSize ? encodeTasksPageToken(q.status, page[page.length - 1].chunkIndex) : "",
      };
    });
  }

  async getTask(taskId: string, opts: CallOptions = {}): Promise<TaskDetail> {
    const id = requireUuid("task_id", taskId);
    return withClient(this.pool, opts.signal, async (c) => {
      const task = await this.loadTask(c, id);
      const detail = (await this.withAttempts(c, task.jobId, [task]))[0];
      const waiting = await flow.waitingOf(c, task);
      return waiting ? { ...detail, waiting } : detail;
    });
  }

  /** Tasks of one job with their attempts, from one read of the job's events. */
  private async withAttempts(c: pg.PoolClient, jobId: string, tasks: Task[]): Promise<TaskDetail[]> {
    if (tasks.length === 0) return [];
    const { rows } = await c.query(sql.TASK_ATTEMPT_EVENTS, [jobId, tasks.map((t) => t.id)]);
    const byTask = new Map<string, JobEvent[]>();
    for (const r of rows) {
      const e = toJobEvent(r);
      const list = byTask.get(e.taskId ?? "");
      if (list) list.push(e);
      else byTask.set(e.taskId ?? "", [e]);
    }
    return tasks.map((task) => ({ task, attempts: attemptsOf(task, byTask.get(task.id) ?? []) }));
  }

  private async readJobFailure(c: pg.PoolClient, jobId: string): Promise<JobFailure | null> {
    const { rows } = await c.query(sql.JOB_FAILURE, [jobId]);
    const r = rows[0];
    if (!r) return null;
    return {
      taskId: r.id as string,
      chunkIndex: r.chunk_index as number,
      errorCode: (r.error_code as string | null) ?? null,
      errorMessage: (r.error_message as string | null) ?? null,
      attempt: r.attempt as number,
      workerId: (r.lease_owner as string | null) ?? null,
      failedAt: (r.completed_at as Date | null) ?? null,
    };
  }

  private async loadTask(c: pg.PoolClient, taskId: string): Promise<Task> {
    const { rows } = await c.query(sql.SELECT_TASK, [taskId]);
    if (rows.length === 0) throw new NotFoundError("task", taskId);
    return toTask(rows[0]);
  }
}

function emptyCounts(): TaskCounts {
  return Object.fromEntries(TASK_STATUSES.map((s) => [s, 0])) as TaskCounts;
}

/** A task_events row as json_agg renders it (JOB_EVENTS_SINCE). */

/** Wake-ups of one watch stream: a wake that comes while nobody waits is kept for the next wait. */
class Wakes {
  private pending = false;
  private resolve: (() => void) | undefined;

  wake(): void {
    this.pending = true;
    this.resolve?.();
  }

  /** Resolves on a wake (or one that came since the last call), after ms (Infinity: never), or when signal aborts. */
  async next(ms: number, signal?: AbortSignal): Promise<void> {
    if (!this.pending && !signal?.aborted) {
      let timer: NodeJS.Timeout | undefined;
      const done = () => this.resolve?.();
      await new Promise<void>((resolve) => {
        this.resolve = resolve;
        if (Number.isFinite(ms)) timer = setTimeout(resolve, ms); // setTimeout would read Infinity as 1 ms
        signal?.addEventListener("abort", done, { once: true });
      });
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      this.resolve = undefined;
    }
    this.pending = false;
  }
}

/*
 * Time-ordered UUIDs (version 7: 48 bits of Unix milliseconds, a counter, random bits). Rows inserted
 * together land on the same primary-key pages instead of 10,000 random ones, so an insert dirties
 * (and, after a checkpoint, writes in full to the WAL) a few index pages, not one per row.
 */
function uuidv7s(n: number): string[] {
  const random = randomBytes(6 * n);
  const ms = Date.now().toString(16).padStart(12, "0");
  // Written as text into one buffer and read out as one flat string each: no hex string, slices and
  // template per id (10,000 ids: ~3 -> ~1.5 ms, with the later flattening of those concatenations).
  const head = Buffer.from(`${ms.slice(0, 8)}-${ms.slice(8)}-7000-8000-`, "latin1");
  const text = Buffer.allocUnsafe(36 * n);
  const hex = (at: number, byte: number) => {
    text[at] = HEX_DIGITS[byte >> 4];
    text[at + 1] = HEX_DIGITS[byte & 15];
  };
  const out: string[] = new Array(n);
  for (let i = 0; i < n; i++) {
    const o = 36 * i;
    head.copy(text, o);
    // After the milliseconds a 26-bit counter (RFC 9562's method 1: rand_a and the first bits of
    // rand_b, after the version and variant), then 48 random bits: one call's ids ascend, so a
    // job's tasks go into the primary key at its right edge, one leaf after the other, not
    // scattered over the pages of their millisecond (which split half-full).
    hex(o + 14, 0x70 | ((i >>> 22) & 0x0f));
    hex(o + 16, (i >>> 14) & 0xff);
    hex(o + 19, 0x80 | ((i >>> 8) & 0x3f));
    hex(o + 21, i & 0xff);
    for (let k = 0; k < 6; k++) hex(o + 24 + 2 * k, random[6 * i + k]);
    out[i] = text.toString("latin1", o, o + 36);
  }
  return out;
}

const HEX_DIGITS = Buffer.from("0123456789abcdef", "latin1");

function uuidv7(): string {
  return uuidv7s(1)[0];
}

/** Each task's parameters as JSON text; tasks without parameters of their own share the job's object, written once. */
function parametersJson(tasks: readonly { parameters: object }[]): string[] {
  const out = new Array<string>(tasks.length);
  let last: object | undefined;
  let lastJson = "";
  for (let i = 0; i < tasks.length; i++) {
    const p = tasks[i].parameters;
    if (p !== last) {
      last = p;
      lastJson = JSON.stringify(p);
    }
    out[i] = lastJson;
  }
  return out;
}

/** Each task's required labels as jsonb text for CREATE_JOB (null when no task has labels of its own beyond the job's). */
function taskLabels(job: NormalizedCreateJob): (string | null)[] | null {
  if (!job.tasks.some((t) => t.requiredLabels !== job.requiredLabels)) return null;
  return job.tasks.map((t) => (t.requiredLabels === null ? null : JSON.stringify(t.requiredLabels)));
}

/** A task's created_at and run_after until the insert says what its now() was. */
const NOT_YET = new Date(NaN);

/** From this many tasks a CreateJob inserts them by COPY (insertJobByCopy): three more round trips, less work per row. */
const COPY_MIN_TASKS = 1000;

/**
 * A new job's tasks as the database holds them, without reading them back: every column is either
 * what was sent or a default of the inserting transaction (now() is the job's created_at, set by
 * createdJob), in chunk order.
 */
function taskRows(job: NormalizedCreateJob, jobId: string, ids: readonly string[], maxAttempts: readonly number[]): Task[] {
  const tasks: Task[] = job.tasks.map((t, i) => ({
    id: ids[i],
    jobId,
    chunkIndex: t.chunkIndex,
    workload: t.workload,
    inputUri: t.inputUri,
    inputSha256: t.inputSha256,
    parameters: t.parameters,
    status: "pending",
    attempt: 0,
    maxAttempts: maxAttempts[i],
    priority: job.priority,
    leaseOwner: null,
    leaseExpiresAt: null,
    resultUri: null,
    resultSha256: null,
    metrics: null,
    errorCode: null,
    errorMessage: null,
    createdAt: NOT_YET,
    startedAt: null,
    completedAt: null,
    runAfter: NOT_YET,
    version: 0,
    traceparent: job.traceparent,
    concurrencyKey: job.concurrencyKey,
    requiredLabels: t.requiredLabels,
  }));
  if (!inChunkOrder(tasks)) tasks.sort((a, b) => a.chunkIndex - b.chunkIndex);
  return tasks;
}

/** The result of an inserted job: its row, and its tasks' created_at and run_after (the row's now()). */
function createdJob(row: JobRow, tasks: Task[]): CreateJobResult {
  const created = toJob(row);
  for (const t of tasks) {
    t.createdAt = created.createdAt;
    t.runAfter = created.createdAt;
  }
  return { job: created, tasks, created: true };
}

function inChunkOrder(tasks: readonly Task[]): boolean {
  for (let i = 1; i < tasks.length; i++) if (tasks[i - 1].chunkIndex > tasks[i].chunkIndex) return false;
  return true;
}

function countBy(keys: string[]): Map<string, number> {
  const counts = new Map<string, number>();
  for (const k of keys) counts.set(k, (counts.get(k) ?? 0) + 1);
  return counts;
}

/** A CompleteTasks batch, checked whole before anything is written. */
function validateBatch(inputs: CompleteTaskInput[]): CompleteTaskInput[] {
  if (!Array.isArray(inputs) || inputs.length === 0) throw new ValidationError("results", "must hold at least one result");
  if (inputs.length > LIMITS.maxClaimBatch) throw new ValidationError("results", `must hold at most ${LIMITS.maxClaimBatch} results`);
  // Every result is checked, and every violation named by its place in the batch.
  const violations: FieldViolation[] = [];
  const batch = inputs.map((input, i) => {
    try {
      return validateComplete(input);
    } catch (err) {
      if (!(err instanceof ValidationError)) throw err;
      violations.push(...err.violations.map((v) => ({ field: `results[${i}].${v.field}`, description: v.description })));
      return input;
    }
  });
  if (violations.length > 0) throw violationsError(violations);
  const ids = batch.map((b) => b.taskId);
  if (new Set(ids).size !== ids.length) throw new ValidationError("results", "names one task twice");
  return batch;
}

/** COMPLETE_TASK's parameters, $1..$6. */
function completeValues(done: CompleteTaskInput): unknown[] {
  return [
    done.taskId,
    done.workerId,
    done.attempt,
    done.resultUri,
    done.resultSha256,
    done.metrics === undefined ? null : JSON.stringify(done.metrics),
  ];
}

/** COMPLETE_TASKS' parameters: the results as one jsonb recordset, and their ids. */
function batchValues(batch: CompleteTaskInput[]): unknown[] {
  const payload = JSON.stringify(
    batch.map((b) => ({
      task_id: b.taskId,
      worker_id: b.workerId,
      attempt: b.attempt,
      result_uri: b.resultUri,
      result_sha256: b.resultSha256,
      metrics: b.metrics ?? null,
    })),
  );
  return [payload, batch.map((b) => b.taskId)];
}
