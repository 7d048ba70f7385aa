// PostgresQueue: the QueueService on PostgreSQL, a facade over one file per operation (graphile-
// worker's src/sql/ shape). Each operation validates its input first (nothing invalid reaches
// SQL), then runs its statements, which live beside it, under the caller's deadline. The rooms,
// each importing only the ones below it:
//
//   operations/  one file per RPC family: its statements and the function that runs them
//                (create-job, claim, complete, lease, jobs, inspection, watch, workloads, flow-control,
//                workload-keys, accounts, account-usage, settlements, adjustments, schedules, task-stats)
//   coalescing/  concurrent single-task calls (and small CreateJobs) in one statement per kind
//   background/  the passes maintenance and the scheduler run (lease reaper, pending expiry,
//                retention, event partitions, usage rollup, schedule ticks, the horizon's source)
//   state/       what every operation gets (context.ts) and this coordinator's in-memory state
//                (workload cache, flow state, claim hints, due wakes, the watch hub, the LISTEN session)
//   schema/      migrations, plpgsql function files, readiness, embedded PostgreSQL
//   sql/         plumbing: defineQuery, the pool and deadlines, row mapping, arrays, COPY, shared fragments
//
// docs/architecture.md has the same map with a line for each file.

import type pg from "pg";
import { ParameterSchemas } from "../../queue/parameter-schemas.js";
import type { QueueService, SettlementBacklog, SettlementStatsSource } from "../../queue/service.js";
import type { SchedulerQueue } from "../../queue/scheduler.js";
import type { PutScheduleInput, PutScheduleResult, Schedule, ScheduleTickResult } from "../../queue/types.js";
import type {
  BatchCompletedAndClaimed,
  CallOptions,
  CancelJobInput,
  ClaimOutcome,
  ClaimTasksInput,
  CompletedAndClaimed,
  CompleteOutcome,
  CompleteTaskInput,
  CreateJobInput,
  CreateJobResult,
  ExpireLeasesResult,
  FailTaskInput,
  Job,
  JobStatusResult,
  JobUpdate,
  ListCompletedResultsInput,
  ListCompletedResultsResult,
  ListJobsInput,
  ListJobsResult,
  ListTasksInput,
  ListTasksResult,
  MaintenanceResult,
  PutWorkloadInput,
  RenewLeaseInput,
  ReportProgressInput,
  RetryJobInput,
  RetryJobResult,
  Task,
  TaskDetail,
  WatchOptions,
  Workload,
  WorkloadTaskStats,
  KeyLimit,
  ListWorkloadKeysInput,
  ListWorkloadKeysResult,
  PutKeyLimitInput,
} from "../../queue/types.js";
import type {
  Account,
  AccountUsage,
  AccountUsageInput,
  ListAdjustmentsInput,
  ListAdjustmentsResult,
  ListSettlementsInput,
  ListSettlementsResult,
  SettleAdjustmentInput,
  UsageAdjustment,
  PutAccountInput,
  SettleJobInput,
  CancelWorkflowInput,
  CancelWorkflowResult,
  CreateWorkflowInput,
  CreateWorkflowResult,
  ListWorkflowsInput,
  ListWorkflowsResult,
  RetryWorkflowInput,
  RetryWorkflowResult,
  Workflow,
  WorkflowUpdate,
} from "../../queue/types.js";
import { getAccount, listAccounts, putAccount } from "./operations/accounts.js";
import { getAccountUsage } from "./operations/account-usage.js";
import { claimTasks } from "./operations/claim.js";
import { Coalescer } from "./coalescing/coalescing.js";
import { completeTask, completeTaskAndClaim, completeTasks, completeTasksAndClaim } from "./operations/complete.js";
import type { StoreContext, StoreOptions } from "./state/context.js";
import { createJob } from "./operations/create-job.js";
import { pauseWorkload, putKeyLimit, resumeWorkload } from "./operations/flow-control.js";
import { FlowWorkloads, WorkerSightings } from "./state/flow-state.js";
import { RankHeads } from "./state/rank-heads.js";
import { listWorkloadKeys } from "./operations/workload-keys.js";
import { getTask, listTasks } from "./operations/inspection.js";
import { cancelJob, getJobStatus, listCompletedResults, listJobs, retryJob } from "./operations/jobs.js";
import { failTask, renewLease, reportProgress } from "./operations/lease.js";
import { LeaseReaper } from "./background/lease-reaper.js";
import { StoreMaintenance } from "./background/store-maintenance.js";
import { Scheduler } from "./background/schedule-ticks.js";
import { deleteSchedule, getSchedule, listSchedules, pauseSchedule, putSchedule, resumeSchedule } from "./operations/schedules.js";
import { ClaimHints } from "./state/claim-hints.js";
import { DueWakes } from "./state/due-wakes.js";
import { listSettlements, settlementBacklog, settleJob } from "./operations/settlements.js";
import { listAdjustments, settleAdjustment } from "./operations/adjustments.js";
import { taskStats } from "./operations/task-stats.js";
import { WATCH_READ_TIMEOUT_MS, WATCHER_TTL_SECONDS, watchJob } from "./operations/watch.js";
import { WatchHub } from "./state/watch-hub.js";
import { cancelWorkflow, createWorkflow, getWorkflow, listWorkflows } from "./operations/workflows.js";
import { retryWorkflow } from "./operations/workflow-retry.js";
import { watchWorkflow } from "./operations/workflow-watch.js";
import { listWorkloads, putWorkload } from "./operations/workloads.js";
import { WorkloadCache } from "./state/workload-cache.js";

export { createPool } from "./sql/db.js";

/** A claim hint older than this is not used: the next claim scans from the front (claim-hints.ts). */
const CLAIM_HINT_MAX_AGE_MS = 15_000;
export type { JobEventWakes, StoreOptions } from "./state/context.js";

export class PostgresQueue implements QueueService, SchedulerQueue, SettlementStatsSource {
  private readonly ctx: StoreContext;
  /** The poll floor and watcher refresh of all this coordinator's WatchJob streams. */
  private readonly watchHub: WatchHub;
  private readonly reaper: LeaseReaper;
  private readonly maintenance: StoreMaintenance;
  private readonly scheduler: Scheduler;

  constructor(pool: pg.Pool, options: StoreOptions) {
    this.ctx = {
      pool,
      options,
      workloads: new WorkloadCache(),
      schemas: new ParameterSchemas(),
      flow: { workloads: new FlowWorkloads(pool), sightings: new WorkerSightings(), rankHeads: new RankHeads() },
      dueWakes: new DueWakes(pool),
      claimHints: new ClaimHints(
        CLAIM_HINT_MAX_AGE_MS,
        () => options.claimHints !== false && options.taskWakes?.listening === true,
        options.flowClaimHints !== false,
      ),
    };
    // Every announcement of claimable tasks moves the hints back; a reconnect (some may be lost) drops them.
    options.taskWakes?.subscribe(
      (workload, _count, head) => this.ctx.claimHints.heard(workload, head),
      () => this.ctx.claimHints.forget(),
    );
    if (options.coalescing) this.ctx.coalescer = new Coalescer(this.ctx, options.coalescing);
    this.watchHub = new WatchHub(pool, {
      pollIntervalMs: options.watchPollIntervalMs ?? 1000,
      watcherTtlSeconds: WATCHER_TTL_SECONDS,
      readTimeoutMs: WATCH_READ_TIMEOUT_MS,
      holdMs: options.watchHoldMs,
    });
    this.reaper = new LeaseReaper(pool, { observer: options.observer, onProbe: (expired) => this.ctx.claimHints.leasesProbed(expired) });
    this.maintenance = new StoreMaintenance(pool, {
      retention: { days: options.retentionDays },
      eventPartitions: options.eventPartitions,
      usageRollup: options.usageRollup,
    });
    this.scheduler = new Scheduler(this.ctx, { ...options.scheduler, observer: options.observer });
  }

  putSchedule(input: PutScheduleInput, opts: CallOptions = {}): Promise<PutScheduleResult> {
    return putSchedule(this.ctx, input, opts);
  }

  getSchedule(name: string, opts: CallOptions = {}): Promise<Schedule> {
    return getSchedule(this.ctx, name, opts);
  }

  listSchedules(opts: CallOptions = {}): Promise<Schedule[]> {
    return listSchedules(this.ctx, opts);
  }

  deleteSchedule(name: string, opts: CallOptions = {}): Promise<Schedule> {
    return deleteSchedule(this.ctx, name, opts);
  }

  pauseSchedule(name: string, opts: CallOptions = {}): Promise<Schedule> {
    return pauseSchedule(this.ctx, name, opts);
  }

  resumeSchedule(name: string, opts: CallOptions = {}): Promise<Schedule> {
    return resumeSchedule(this.ctx, name, opts);
  }

  fireSchedules(opts: CallOptions = {}): Promise<ScheduleTickResult> {
    return this.scheduler.runOnce(opts.signal);
  }

  putWorkload(input: PutWorkloadInput, opts: CallOptions = {}): Promise<Workload> {
    return putWorkload(this.ctx, input, opts);
  }

  listWorkloads(opts: CallOptions = {}): Promise<Workload[]> {
    return listWorkloads(this.ctx, opts);
  }

  putKeyLimit(input: PutKeyLimitInput, opts: CallOptions = {}): Promise<KeyLimit> {
    return putKeyLimit(this.ctx, input, opts);
  }

  pauseWorkload(name: string, opts: CallOptions = {}): Promise<Workload> {
    return pauseWorkload(this.ctx, name, opts);
  }

  resumeWorkload(name: string, opts: CallOptions = {}): Promise<Workload> {
    return resumeWorkload(this.ctx, name, opts);
  }

  listWorkloadKeys(input: ListWorkloadKeysInput, opts: CallOptions = {}): Promise<ListWorkloadKeysResult> {
    return listWorkloadKeys(this.ctx, input, opts);
  }

  putAccount(input: PutAccountInput, opts: CallOptions = {}): Promise<Account> {
    return putAccount(this.ctx, input, opts);
  }

  getAccount(name: string, opts: CallOptions = {}): Promise<Account> {
    return getAccount(this.ctx, name, opts);
  }

  listAccounts(opts: CallOptions = {}): Promise<Account[]> {
    return listAccounts(this.ctx, opts);
  }

  getAccountUsage(input: AccountUsageInput, opts: CallOptions = {}): Promise<AccountUsage> {
    return getAccountUsage(this.ctx, input, opts);
  }

  listSettlements(input: ListSettlementsInput, opts: CallOptions = {}): Promise<ListSettlementsResult> {
    return listSettlements(this.ctx, input, opts);
  }

  settleJob(input: SettleJobInput, opts: CallOptions = {}): Promise<Job> {
    return settleJob(this.ctx, input, opts);
  }

  listAdjustments(input: ListAdjustmentsInput, opts: CallOptions = {}): Promise<ListAdjustmentsResult> {
    return listAdjustments(this.ctx, input, opts);
  }

  settleAdjustment(input: SettleAdjustmentInput, opts: CallOptions = {}): Promise<UsageAdjustment> {
    return settleAdjustment(this.ctx, input, opts);
  }

  createJob(input: CreateJobInput, opts: CallOptions = {}): Promise<CreateJobResult> {
    return createJob(this.ctx, input, opts);
  }

  /** A claim's tasks and, when a rate limit refused it, when to try again (what a long poll needs). */
  claim(input: ClaimTasksInput, opts: CallOptions = {}): Promise<ClaimOutcome> {
    return claimTasks(this.ctx, input, opts);
  }

  async claimTasks(input: ClaimTasksInput, opts: CallOptions = {}): Promise<Task[]> {
    return (await claimTasks(this.ctx, input, opts)).tasks;
  }

  renewLease(input: RenewLeaseInput, opts: CallOptions = {}): Promise<Task> {
    return renewLease(this.ctx, input, opts);
  }

  completeTask(input: CompleteTaskInput, opts: CallOptions = {}): Promise<Task> {
    return completeTask(this.ctx, input, opts);
  }

  completeTaskAndClaim(input: CompleteTaskInput, next: ClaimTasksInput, opts: CallOptions = {}): Promise<CompletedAndClaimed> {
    return completeTaskAndClaim(this.ctx, input, next, opts);
  }

  completeTasks(inputs: CompleteTaskInput[], opts: CallOptions = {}): Promise<CompleteOutcome[]> {
    return completeTasks(this.ctx, inputs, opts);
  }

  completeTasksAndClaim(inputs: CompleteTaskInput[], next: ClaimTasksInput, opts: CallOptions = {}): Promise<BatchCompletedAndClaimed> {
    return completeTasksAndClaim(this.ctx, inputs, next, opts);
  }

  failTask(input: FailTaskInput, opts: CallOptions = {}): Promise<Task> {
    return failTask(this.ctx, input, opts);
  }

  reportProgress(input: ReportProgressInput, opts: CallOptions = {}): Promise<Task> {
    return reportProgress(this.ctx, input, opts);
  }

  getJobStatus(jobId: string, opts: CallOptions = {}): Promise<JobStatusResult> {
    return getJobStatus(this.ctx, jobId, opts);
  }

  listCompletedResults(input: ListCompletedResultsInput, opts: CallOptions = {}): Promise<ListCompletedResultsResult> {
    return listCompletedResults(this.ctx, input, opts);
  }

  cancelJob(input: CancelJobInput, opts: CallOptions = {}): Promise<Job> {
    return cancelJob(this.ctx, input, opts);
  }

  retryJob(input: RetryJobInput, opts: CallOptions = {}): Promise<RetryJobResult> {
    return retryJob(this.ctx, input, opts);
  }

  listJobs(input: ListJobsInput, opts: CallOptions = {}): Promise<ListJobsResult> {
    return listJobs(this.ctx, input, opts);
  }

  listTasks(input: ListTasksInput, opts: CallOptions = {}): Promise<ListTasksResult> {
    return listTasks(this.ctx, input, opts);
  }

  getTask(taskId: string, opts: CallOptions = {}): Promise<TaskDetail> {
    return getTask(this.ctx, taskId, opts);
  }

  watchJob(jobId: string, opts: WatchOptions = {}): AsyncGenerator<JobUpdate> {
    return watchJob(this.ctx, this.watchHub, jobId, opts);
  }

  createWorkflow(input: CreateWorkflowInput, opts: CallOptions = {}): Promise<CreateWorkflowResult> {
    return createWorkflow(this.ctx, input, opts);
  }

  getWorkflow(workflowId: string, opts: CallOptions = {}): Promise<Workflow> {
    return getWorkflow(this.ctx, workflowId, opts);
  }

  listWorkflows(input: ListWorkflowsInput, opts: CallOptions = {}): Promise<ListWorkflowsResult> {
    return listWorkflows(this.ctx, input, opts);
  }

  watchWorkflow(workflowId: string, opts: WatchOptions = {}): AsyncGenerator<WorkflowUpdate> {
    return watchWorkflow(this.ctx, this.watchHub, workflowId, opts);
  }

  cancelWorkflow(input: CancelWorkflowInput, opts: CallOptions = {}): Promise<CancelWorkflowResult> {
    return cancelWorkflow(this.ctx, input, opts);
  }

  retryWorkflow(input: RetryWorkflowInput, opts: CallOptions = {}): Promise<RetryWorkflowResult> {
    return retryWorkflow(this.ctx, input, opts);
  }

  /** Open watch streams and the floor checks run for them (one statement each, whatever their number). */
  watchStats(): { streams: number; checks: number } {
    return { streams: this.watchHub.size, checks: this.watchHub.checks };
  }

  expireLeases(opts: CallOptions = {}): Promise<ExpireLeasesResult> {
    return this.reaper.runOnce(opts.signal);
  }

  async maintain(opts: CallOptions = {}): Promise<MaintenanceResult> {
    // Due times written through other coordinators (or one that died before its timer fired).
    await this.ctx.dueWakes.refresh(undefined, opts.signal);
    return this.maintenance.runOnce(opts.signal);
  }

  /** Stops the due-time timer (the pool's owner ends the pool). */
  stopTimers(): void {
    this.ctx.dueWakes.stop();
  }

  taskStats(scope: "unfinished" | "all", opts: CallOptions = {}): Promise<WorkloadTaskStats[]> {
    return taskStats(this.ctx, scope, opts);
  }

  settlementBacklog(opts: CallOptions = {}): Promise<SettlementBacklog> {
    return settlementBacklog(this.ctx, opts);
  }
}
