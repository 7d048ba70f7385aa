// What every operation of the store works with: the pool, the options, the workload cache and the
// parameter schemas. PostgresQueue (store.ts) makes one and hands it to the operation files.

import type pg from "pg";
import type { ParameterSchemas } from "../../../queue/parameter-schemas.js";
import type { QueueObserver } from "../../../queue/service.js";
import type {
  BatchCompletedAndClaimed,
  ClaimOutcome,
  CompletedAndClaimed,
  CompleteTaskInput,
  RenewLeaseInput,
  Task,
} from "../../../queue/types.js";
import type { NormalizedClaim, NormalizedFail } from "../../../queue/validation.js";
import type { ClaimHints } from "./claim-hints.js";
import type { DueWakes } from "./due-wakes.js";
import type { FlowState } from "./flow-state.js";
import type { PreparedJob, WriteOutcome } from "./prepared-job.js";
import type { WorkloadCache } from "./workload-cache.js";

export interface StoreOptions {
  defaultLeaseSeconds: number;
  defaultMaxAttempts: number;
  maxTasksPerJob: number;
  /** How far ahead a CreateJob's run_at may lie, in days (default 365). */
  maxRunAtAheadDays?: number;
  /** Told about claims, completions, failures and expired leases as they commit (metrics). */
  observer?: QueueObserver;
  /** Finished jobs older than this are deleted by maintain(); undefined: kept forever. */
  retentionDays?: number;
  /** The event log's partitions (event-partitions.ts): hours each, and how many kept ahead. */
  eventPartitions?: { intervalHours?: number; ahead?: number };
  /** The usage rollup's batch sizes (usage-rollup.ts), run by maintain(). */
  usageRollup?: { batchJobs?: number; batchesPerPass?: number };
  /** How often the coordinator checks, in one statement for all its WatchJob streams, for events no notification announced (default 1000). */
  watchPollIntervalMs?: number;
  /** A transaction in progress longer than this no longer holds a watch stream's events back (event-order.ts; default 1000). */
  watchHoldMs?: number;
  /** The scheduler's settings (background/schedule-ticks.ts); its observer is `observer`. */
  scheduler?: { graceMs?: number; maxPerPass?: number };
  /**
   * Single-task claims, results, renewals and failures that arrive together share one statement
   * per kind (coalescing.ts); false: each call runs its own statement. Required, so every store says
   * which it runs: the coordinator passes the configuration's (COALESCE, COALESCE_MAX_BATCH), tests
   * theirs (test/support/switches.ts).
   */
  coalescing: CoalescingOptions | false;
  /** Wakes a WatchJob stream when its job has new events (the LISTEN connection); without it, streams poll. */
  jobWakes?: JobEventWakes;
  /**
   * Announcements of claimable tasks (the LISTEN connection). While they arrive, a claim starts its
   * scan of pending tasks at a hint (claim-hints.ts); without them, from the front every time.
   */
  taskWakes?: TaskWakes;
  /** Claim hints on (default) or off (CLAIM_HINTS=off: every claim scans from the front). */
  claimHints?: boolean;
  /**
   * Flow-controlled claims and fair ranks that read past a held MVCC horizon (default), or as before
   * (FLOW_CLAIM_HINTS=false: leasehold_flow_claim, and a priority's head of fair ranks from the front).
   */
  flowClaimHints?: boolean;
}

/** Where the store hears that tasks became claimable. */
export interface TaskWakes {
  /** head: the lowest claim-order key of the tasks announced, when the announcement names one. */
  subscribe(onWake: (workload: string, count: number, head?: string) => void, onReconnect: () => void): () => void;
  readonly listening: boolean;
}

/** Where WatchJob learns that a job has new events. */
export interface JobEventWakes {
  /** onWake: the job has new events; also called for every job after a reconnect (notifications may be lost). */
  subscribeJob(jobId: string, onWake: () => void): () => void;
}

/** Coalescing's setting: at most this many calls of one kind share a statement; the rest wait for the next. */
export interface CoalescingOptions {
  maxBatch: number;
  /** Results without claim_next ride with claims' statements (COALESCE_MIX; unset: true); false: each kind its own statements. */
  mixResults?: boolean;
  /** How long a lane of results with claim_next waits for its workers to come back (COALESCE_LINGER_MS; group-commit.ts); 0: not at all. */
  lingerMs?: number;
}

/** The single-task calls that coalescing (coalescing.ts) runs together, as the operation files call them. */
export interface CoalescedCalls {
  claim(claim: NormalizedClaim, signal?: AbortSignal): Promise<ClaimOutcome>;
  completeAndClaim(done: CompleteTaskInput, claim: NormalizedClaim, signal?: AbortSignal): Promise<CompletedAndClaimed>;
  /** CompleteTasks with claim_next (validated): the claim runs whatever the results' outcomes. */
  completeBatchAndClaim(batch: CompleteTaskInput[], claim: NormalizedClaim, signal?: AbortSignal): Promise<BatchCompletedAndClaimed>;
  complete(done: CompleteTaskInput, signal?: AbortSignal): Promise<Task>;
  renew(renew: RenewLeaseInput, signal?: AbortSignal): Promise<Task>;
  fail(f: NormalizedFail, signal?: AbortSignal): Promise<Task>;
  /** A small job's insert (coalescable, coalesced-create.ts); "stale": write it the one-job way. */
  createJob(p: PreparedJob, signal?: AbortSignal): Promise<WriteOutcome>;
}

export interface StoreContext {
  readonly pool: pg.Pool;
  readonly options: StoreOptions;
  /** Workloads as this coordinator last read them (CreateJob's validation, claims' existence checks). */
  readonly workloads: WorkloadCache;
  readonly schemas: ParameterSchemas;
  /** Which workloads are flow-controlled, and which labels workers claim with (flow-control.ts). */
  readonly flow: FlowState;
  /** The timer that wakes parked claimers when delayed tasks fall due (due-wakes.ts). */
  readonly dueWakes: DueWakes;
  /** Where claims start their scans (claim-hints.ts). */
  readonly claimHints: ClaimHints;
  /** Set when coalescing is on (store.ts makes it once the context exists). */
  coalescer?: CoalescedCalls;
}
