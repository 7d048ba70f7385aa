// The access test's table: for every RPC of ACCESS (auth.ts), what it acts on and a request for
// it. Typed over every RPC, so a new RPC does not compile until it has a row here, and the
// access test (tenancy.test.ts) runs it for every role.
import type { MethodName } from "../../src/api/auth.js";
import { sha } from "../support/queue.js";

/** A fresh job of one task, made for one call (owned by the account the case needs). */
export interface Fixture {
  jobId: string;
  taskId: string;
  /** for a "workflow" case: a workflow of one node (the job), of the account the case needs */
  workflowId: string;
}

export interface AccessCase {
  /**
   * What the call reads or changes: "job" or "task" (one job's; a bound token answers NOT_FOUND
   * for another account's), "list" (ListJobs: a bound token lists its own account's jobs only),
   * "none" (not an account's data: only who may call it is asserted), "workflow" (one workflow's: a
   * bound token answers NOT_FOUND for another account's).
   */
  target: "job" | "task" | "list" | "none" | "workflow";
  /** Readies the fixture's job so the call succeeds on it (RetryJob needs a cancelled job). */
  ready?: "cancelled";
  /** The request as proto JSON; `account` is the account the case targets (own or foreign). */
  request: (f: Fixture, account: string) => Record<string, unknown>;
}

/** Worker RPCs act as this worker_id, under the worker token's prefix. */
export const WORKER_ID = "tenancy-w-1";
export const WORKER_PREFIX = "tenancy-w-";
/** A workload with no pending task: claims answer empty at once. */
export const IDLE_WORKLOAD = "tenancy_idle";
export const WORKLOAD = "tenancy";

const lease = (f: Fixture) => ({ taskId: f.taskId, workerId: WORKER_ID, attempt: 1 });
const result = (f: Fixture) => ({ ...lease(f), resultUri: "s3://out/tenancy", resultSha256: sha("out") });

export const CASES: { [M in MethodName]: AccessCase } = {
  createJob: { target: "none", request: () => ({ workload: WORKLOAD, inputUri: "s3://in/created", inputSha256: sha("created") }) },
  getJob: { target: "job", request: (f) => ({ jobId: f.jobId }) },
  listCompletedResults: { target: "job", request: (f) => ({ jobId: f.jobId, pageSize: 10 }) },
  cancelJob: { target: "job", request: (f) => ({ jobId: f.jobId, reason: "access test" }) },
  // A final job: the stream sends its snapshot and ends.
  watchJob: { target: "job", ready: "cancelled", request: (f) => ({ jobId: f.jobId }) },
  retryJob: { target: "job", ready: "cancelled", request: (f) => ({ jobId: f.jobId }) },
  listJobs: { target: "list", request: (_f, account) => ({ account, pageSize: 1000 }) },
  listTasks: { target: "job", request: (f) => ({ jobId: f.jobId, pageSize: 10 }) },
  getTask: { target: "task", request: (f) => ({ taskId: f.taskId }) },
  claimTasks: { target: "none", request: () => ({ workerId: WORKER_ID, workloads: [IDLE_WORKLOAD], maxTasks: 1, waitSeconds: 0 }) },
  renewLease: { target: "none", request: (f) => lease(f) },
  completeTask: { target: "none", request: (f) => result(f) },
  completeTasks: { target: "none", request: (f) => ({ results: [result(f)] }) },
  failTask: { target: "none", request: (f) => ({ ...lease(f), errorCode: "E", errorMessage: "access test" }) },
  reportProgress: { target: "none", request: (f) => ({ ...lease(f), progress: 0.5 }) },
  putWorkload: { target: "none", request: () => ({ name: "tenancy_put" }) },
  listWorkloads: { target: "none", request: () => ({}) },
  putKeyLimit: { target: "none", request: () => ({ name: "tenancy_put", key: "k", maxLeased: 1 }) },
  pauseWorkload: { target: "none", request: () => ({ name: "tenancy_paused" }) },
  resumeWorkload: { target: "none", request: () => ({ name: "tenancy_paused" }) },
  listWorkloadKeys: { target: "none", request: () => ({ name: "tenancy_put" }) },
  putSchedule: { target: "none", request: () => ({ name: "tenancy_schedule" }) },
  getSchedule: { target: "none", request: () => ({ name: "tenancy_schedule" }) },
  listSchedules: { target: "none", request: () => ({}) },
  deleteSchedule: { target: "none", request: () => ({ name: "tenancy_schedule" }) },
  pauseSchedule: { target: "none", request: () => ({ name: "tenancy_schedule" }) },
  resumeSchedule: { target: "none", request: () => ({ name: "tenancy_schedule" }) },
  putAccount: { target: "none", request: () => ({ name: "tenancy_put" }) },
  getAccount: { target: "none", request: (_f, account) => ({ name: account }) },
  listAccounts: { target: "none", request: () => ({}) },
  getAccountUsage: { target: "none", request: (_f, account) => ({ account }) },
  listSettlements: { target: "none", request: () => ({}) },
  settleJob: { target: "none", request: (f) => ({ jobId: f.jobId, settlementKey: "access-test", settledUnits: "1" }) },
  listAdjustments: { target: "none", request: () => ({}) },
  settleAdjustment: { target: "none", request: (f) => ({ adjustmentId: f.jobId, settlementKey: "access-test", settledUnits: "1" }) },
  createWorkflow: {
    target: "none",
    request: () => ({ nodes: [{ name: "a", job: { workload: WORKLOAD, inputUri: "s3://in/a", inputSha256: sha("a") } }] }),
  },
  getWorkflow: { target: "workflow", request: (f) => ({ workflowId: f.workflowId }) },
  // ListWorkflows by a bound token: tenancy.test.ts' own case.
  listWorkflows: { target: "none", request: () => ({}) },
  // A final workflow: the stream sends its snapshot and ends.
  watchWorkflow: { target: "workflow", ready: "cancelled", request: (f) => ({ workflowId: f.workflowId }) },
  cancelWorkflow: { target: "workflow", request: (f) => ({ workflowId: f.workflowId }) },
  retryWorkflow: { target: "workflow", ready: "cancelled", request: (f) => ({ workflowId: f.workflowId }) },
};
