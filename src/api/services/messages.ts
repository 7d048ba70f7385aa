// Domain objects (src/queue/types.ts) ↔ generated leasehold.queue.v1 messages: the pieces more
// than one family of services/ uses. The families' files and this one are the only places that
// know both shapes. Proto3 scalars cannot be null, so nullable domain strings become "" and
// nullable times/structs stay unset; in requests, "" and 0 mean "not given" wherever the proto
// has no presence.

import { create, type JsonObject as PbJsonObject } from "@bufbuild/protobuf";
import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import {
  BillingSchema,
  DependencyPolicy,
  FailurePolicy,
  FinalizerSchema,
  JobParentSchema,
  JobSchema,
  JobStatus,
  ResultManifestSchema,
  SettlementSchema,
  TaskStatus,
  type CreateJobRequest,
  type CreateWorkflowRequest,
  type Job as PbJob,
  type JobParent as PbJobParent,
  type Settlement as PbSettlement,
  type Task as PbTask,
} from "../../../gen/leasehold/queue/v1/queue_pb.js";
import type { Usage } from "../../queue/types.js";
import { ValidationError } from "../../queue/errors.js";
import type {
  CreateJobInput,
  CreateWorkflowInput,
  DependencyPolicy as DomainDependencyPolicy,
  FailurePolicy as DomainFailurePolicy,
  Job,
  JobParent,
  JobStatus as DomainJobStatus,
  JsonObject,
  Settlement,
  Task,
  TaskSpec,
  TaskStatus as DomainTaskStatus,
} from "../../queue/types.js";

// ---- small helpers ----

export function ts(d: Date | null | undefined): Timestamp | undefined {
  return d ? timestamp(d) : undefined;
}

/**
 * Timestamps made recently, by milliseconds: the tasks of one answer mostly share theirs (one
 * job's creation, one statement's now()), so most of an answer's Timestamps are one object each
 * (~0.2 µs, a BigInt and an object apiece otherwise). The messages only read them.
 */
const recentTimestamps = new Map<number, Timestamp>();
const MAX_RECENT = 512;

/** timestampFromDate without create()'s walk of the descriptor. */
function timestamp(d: Date): Timestamp {
  const ms = d.getTime();
  let t = recentTimestamps.get(ms);
  if (t === undefined) {
    if (recentTimestamps.size >= MAX_RECENT) recentTimestamps.clear();
    const seconds = Math.floor(ms / 1000);
    t = { $typeName: "google.protobuf.Timestamp", seconds: BigInt(seconds), nanos: (ms - seconds * 1000) * 1_000_000 };
    recentTimestamps.set(ms, t);
  }
  return t;
}

export function struct(o: JsonObject | null | undefined): PbJsonObject | undefined {
  return o ?? undefined;
}

export function domainJson(o: PbJsonObject | undefined): JsonObject | undefined {
  return o as JsonObject | undefined;
}

/** "" (the proto3 default) → undefined. */
export function opt(s: string): string | undefined {
  return s === "" ? undefined : s;
}

export const TASK_STATUS: Record<DomainTaskStatus, TaskStatus> = {
  pending: TaskStatus.PENDING,
  leased: TaskStatus.LEASED,
  completed: TaskStatus.COMPLETED,
  failed: TaskStatus.FAILED,
  cancelled: TaskStatus.CANCELLED,
  waiting: TaskStatus.WAITING,
};

export const JOB_STATUS: Record<DomainJobStatus, JobStatus> = {
  pending: JobStatus.PENDING,
  running: JobStatus.RUNNING,
  completed: JobStatus.COMPLETED,
  failed: JobStatus.FAILED,
  cancelled: JobStatus.CANCELLED,
  scheduled: JobStatus.SCHEDULED,
  waiting: JobStatus.WAITING,
};

export const DEPENDENCY_POLICY: Record<DomainDependencyPolicy, DependencyPolicy> = {
  all_completed: DependencyPolicy.ALL_COMPLETED,
  all_final: DependencyPolicy.ALL_FINAL,
};

/** UNSPECIFIED (0) is absent; an unknown number is passed on for validation to refuse. */
export function dependencyPolicyInput(p: DependencyPolicy): DomainDependencyPolicy | undefined {
  if (p === DependencyPolicy.UNSPECIFIED) return undefined;
  return (Object.entries(DEPENDENCY_POLICY).find(([, v]) => v === p)?.[0] ?? String(p)) as DomainDependencyPolicy;
}

export const FAILURE_POLICY: Record<DomainFailurePolicy, FailurePolicy> = {
  fail_fast: FailurePolicy.FAIL_FAST,
  continue: FailurePolicy.CONTINUE,
};

/** UNSPECIFIED (0) is absent; an unknown number is passed on for validation to refuse. */
export function failurePolicyInput(p: FailurePolicy): DomainFailurePolicy | undefined {
  if (p === FailurePolicy.UNSPECIFIED) return undefined;
  return (Object.entries(FAILURE_POLICY).find(([, v]) => v === p)?.[0] ?? String(p)) as DomainFailurePolicy;
}

// ---- int64 fields and usage counters ----
// int64 fields arrive as bigint; the domain keeps numbers, so a value past Number.MAX_SAFE_INTEGER
// is refused here, naming its field, before the queue sees it.

/** Usage counters as the message's map<string, int64>. */
export function usageMessage(u: Usage | undefined): { [key: string]: bigint } {
  const m: { [key: string]: bigint } = {};
  if (u) for (const [k, v] of Object.entries(u)) m[k] = BigInt(v);
  return m;
}

/** An int64 field as a number; beyond what a number holds exactly is INVALID_ARGUMENT naming it. */
export function int64Number(field: string, v: bigint): number {
  if (v > BigInt(Number.MAX_SAFE_INTEGER) || v < BigInt(Number.MIN_SAFE_INTEGER))
    throw new ValidationError(field, `must be within ±${Number.MAX_SAFE_INTEGER}`);
  return Number(v);
}

/** A map<string, int64> of usage counters; undefined when empty. Their rules are checked by the queue. */
export function usageInput(field: string, m: { [key: string]: bigint }): Usage | undefined {
  const keys = Object.keys(m);
  if (keys.length === 0) return undefined;
  const u: Usage = {};
  for (const k of keys) u[k] = int64Number(`${field}.${k}`, m[k]);
  return u;
}

// ---- CreateJob's request: the RPC's, and a schedule's job template ----

export function createJobInput(r: CreateJobRequest): CreateJobInput {
  return {
    workload: r.workload,
    inputUri: opt(r.inputUri),
    inputSha256: opt(r.inputSha256),
    parameters: domainJson(r.parameters),
    priority: r.priority,
    maxAttempts: r.maxAttempts,
    idempotencyKey: opt(r.idempotencyKey),
    traceparent: opt(r.traceparent),
    // The request's own TaskSpec messages, not a copy of each (10,000 in a big job): they have the
    // domain's fields, and validation reads the proto3 default "" of an unset workload as unset.
    tasks: taskSpecs(r.tasks),
    failurePolicy: failurePolicyInput(r.failurePolicy),
    maxFailedTasks: r.maxFailedTasks,
    concurrencyKey: opt(r.concurrencyKey),
    requiredLabels: r.requiredLabels,
    runAt: r.runAt ? timestampDate(r.runAt) : undefined,
    finalizer: r.finalizer
      ? { workload: r.finalizer.workload, parameters: domainJson(r.finalizer.parameters), runOnFailure: r.finalizer.runOnFailure }
      : undefined,
    account: opt(r.account),
    billing: r.billing
      ? { reservedUnits: int64Number("billing.reserved_units", r.billing.reservedUnits), billingKey: opt(r.billing.billingKey) }
      : undefined,
    after: r.after.length > 0 ? r.after.map((d) => ({ jobId: d.jobId, optional: d.optional })) : undefined,
    dependencyPolicy: dependencyPolicyInput(r.dependencyPolicy),
  };
}

/** A CreateWorkflow request (the RPC's, and a schedule's workflow template). */
export function createWorkflowInput(r: CreateWorkflowRequest): CreateWorkflowInput {
  return {
    nodes: r.nodes.map((n) => ({
      name: n.name,
      // A node without its job is refused by validation, naming it.
      job: n.job ? createJobInput(n.job) : (undefined as unknown as CreateJobInput),
      after: n.after.map((a) => ({ node: a.node, optional: a.optional })),
    })),
    name: opt(r.name),
    idempotencyKey: opt(r.idempotencyKey),
    account: opt(r.account),
  };
}

/** The TaskSpec messages as they are, but for a run_at (a Timestamp message), which becomes a Date on a copy of its task. */
function taskSpecs(specs: CreateJobRequest["tasks"]): TaskSpec[] {
  if (!specs.some((t) => t.runAt !== undefined)) return specs as unknown as TaskSpec[];
  return specs.map((t) => (t.runAt === undefined ? t : { ...t, runAt: timestampDate(t.runAt) })) as unknown as TaskSpec[];
}

// ---- the Job and Task messages ----

export function jobMessage(j: Job): PbJob {
  return create(JobSchema, {
    id: j.id,
    workload: j.workload,
    inputUri: j.inputUri,
    inputSha256: j.inputSha256 ?? "",
    parameters: struct(j.parameters),
    status: JOB_STATUS[j.status] ?? JobStatus.UNSPECIFIED,
    priority: j.priority,
    idempotencyKey: j.idempotencyKey ?? "",
    traceparent: j.traceparent ?? "",
    cancelReason: j.cancelReason ?? "",
    createdAt: ts(j.createdAt),
    updatedAt: ts(j.updatedAt),
    completedAt: ts(j.completedAt),
    failurePolicy: FAILURE_POLICY[j.failurePolicy] ?? FailurePolicy.UNSPECIFIED,
    maxFailedTasks: j.maxFailedTasks,
    concurrencyKey: j.concurrencyKey,
    requiredLabels: j.requiredLabels ?? {},
    scheduleName: j.scheduleName ?? "",
    scheduleFireTime: ts(j.scheduleFireAt),
    runAt: ts(j.runAt),
    finalizer: j.finalizer
      ? create(FinalizerSchema, {
          workload: j.finalizer.workload,
          parameters: struct(j.finalizer.parameters),
          runOnFailure: j.finalizer.runOnFailure,
        })
      : undefined,
    finalizerJobId: j.finalizerJobId ?? "",
    parentJobId: j.parentJobId ?? "",
    account: j.account ?? "",
    billing: j.billing
      ? create(BillingSchema, { reservedUnits: BigInt(j.billing.reservedUnits), billingKey: j.billing.billingKey ?? "" })
      : undefined,
    usage: usageMessage(j.usage),
    settlement: j.settlement ? settlementMessage(j.settlement) : undefined,
    dependencyPolicy: j.dependencyPolicy ? DEPENDENCY_POLICY[j.dependencyPolicy] : DependencyPolicy.UNSPECIFIED,
    parents: j.parents?.map(jobParentMessage) ?? [],
    waitingParents: j.waitingParents ?? 0,
    workflowId: j.workflowId ?? "",
    workflowNode: j.workflowNode ?? "",
  });
}

/** A job's parent, with its result when it is one of a single completed task. */
export function jobParentMessage(p: JobParent): PbJobParent {
  return create(JobParentSchema, {
    jobId: p.jobId,
    status: JOB_STATUS[p.status] ?? JobStatus.UNSPECIFIED,
    optional: p.optional,
    node: p.node ?? "",
    totalTasks: p.totalTasks,
    completedTasks: p.completedTasks,
    result: p.result
      ? create(ResultManifestSchema, {
          chunkIndex: p.result.chunkIndex,
          taskId: p.result.taskId,
          resultUri: p.result.resultUri,
          resultSha256: p.result.resultSha256,
          metrics: struct(p.result.metrics),
          completedAt: ts(p.result.completedAt),
        })
      : undefined,
  });
}

/** A job's or an adjustment's settlement, with the usage it covered. */
export function settlementMessage(s: Settlement): PbSettlement {
  return create(SettlementSchema, {
    settlementKey: s.settlementKey,
    settledUnits: BigInt(s.settledUnits),
    settledAt: ts(s.settledAt),
    usage: usageMessage(s.usage),
  });
}

/**
 * A Task message as create(TaskSchema, {…}) makes it, built as a literal: create() walks the
 * descriptor per call (~5 µs a task), and a claim answers with tasks, a 10,000-task CreateJob
 * with 10,000 of them. test/api/json-writer.test.ts checks it against create().
 */
export function taskMessage(t: Task): PbTask {
  const m: PbTask = {
    $typeName: "leasehold.queue.v1.Task",
    id: t.id,
    jobId: t.jobId,
    chunkIndex: t.chunkIndex,
    workload: t.workload,
    inputUri: t.inputUri,
    inputSha256: t.inputSha256,
    status: TASK_STATUS[t.status] ?? TaskStatus.UNSPECIFIED,
    attempt: t.attempt,
    maxAttempts: t.maxAttempts,
    priority: t.priority,
    leaseOwner: t.leaseOwner ?? "",
    resultUri: t.resultUri ?? "",
    resultSha256: t.resultSha256 ?? "",
    errorCode: t.errorCode ?? "",
    errorMessage: t.errorMessage ?? "",
    version: t.version,
    traceparent: t.traceparent ?? "",
    concurrencyKey: t.concurrencyKey ?? "",
    requiredLabels: t.requiredLabels ?? {},
    usage: usageMessage(t.usage),
    parents: t.parents ? t.parents.map(jobParentMessage) : [],
  };
  // Message fields are absent when unset, as create() leaves them.
  if (t.parameters) m.parameters = t.parameters as PbJsonObject;
  if (t.leaseExpiresAt) m.leaseExpiresAt = timestamp(t.leaseExpiresAt);
  if (t.metrics) m.metrics = t.metrics as PbJsonObject;
  if (t.createdAt) m.createdAt = timestamp(t.createdAt);
  if (t.startedAt) m.startedAt = timestamp(t.startedAt);
  if (t.completedAt) m.completedAt = timestamp(t.completedAt);
  return m;
}
