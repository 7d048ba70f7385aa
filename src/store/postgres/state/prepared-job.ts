// A CreateJob between its validation (prepareJob, create-job-core.ts) and its write: what the
// one-job path and the coalesced lane (coalesced-create.ts) both take, and what each answers.

import type { CallOptions, CreateJobInput, CreateJobResult } from "../../../queue/types.js";
import type { NormalizedCreateJob } from "../../../queue/validation.js";

/** A CreateJob validated, with its ids made: what writeJobs writes. */
export interface PreparedJob {
  /** the request as given (whether it listed its tasks names a schema failure's field) */
  input: CreateJobInput;
  job: NormalizedCreateJob;
  /** the idempotency fingerprint; null without a key */
  fingerprint: string | null;
  /** every workload the job names: its own, its tasks', its finalizer's */
  names: string[];
  jobId: string;
  taskIds: string[];
  /** the wake-ups the insert sends, per workload (none for a delayed job: DELAY_JOB and due-wakes.ts send them) */
  perWorkload: Map<string, number>;
  /** DELAY_JOB runs after the insert (a run_at or a finalizer): the caller must hold a transaction */
  needsDelay: boolean;
  /** the caller must hold a transaction: DELAY_JOB runs after the insert, or the job's account is locked before it (accountGate) */
  needsTransaction: boolean;
  /** handed the result as soon as it is known, before a COPY ends (early-answer.ts); not for a delayed job */
  early?: CallOptions["prepared"];
  /** its tasks are inserted waiting (a job with parents: dependencies.ts promotes them), with no wake-up and no fair ranks yet */
  waiting?: boolean;
  /** the caller held the account's quota for it already (a workflow's nodes together, a job after others): writeJobs does not */
  gated?: boolean;
  /** names its fields under this prefix in errors ("nodes[2].job." in a workflow) */
  fieldPrefix?: string;
  /** the caller wants the job alone (CallOptions.withoutTasks): no task rows are made for the result */
  withoutTasks?: boolean;
}

/** A job written, or why not: "stale" (a workload changed since it was cached), "taken" (its idempotency key was used before). */
export type WriteOutcome = CreateJobResult | "stale" | "taken";
