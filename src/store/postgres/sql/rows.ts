// The rows the store reads, one type and one mapper per table, so a column's type is stated once:
// here, against the migrations. node-postgres hands back timestamptz as Date, int as number, jsonb
// parsed, and bigint (task_events.id) as a string.
import type { Usage } from "../../../queue/types.js";
import type { DependencyPolicy, Job, JobEvent, JobParent, JsonObject, Labels, Task, Workload } from "../../../queue/types.js";

export interface WorkloadRow {
  name: string;
  max_attempts: number;
  lease_seconds: number;
  parameters_schema: JsonObject | null;
  max_pending_seconds: number | null;
  failure_policy: Workload["failurePolicy"];
  max_failed_tasks: number;
  max_leased: number | null;
  max_leased_per_key: number | null;
  max_leases_per_second: number | null;
  leases_burst: number | null;
  paused: boolean;
  keyed: boolean;
  created_at: Date;
  updated_at: Date;
}

export interface JobRow {
  id: string;
  workload: string;
  input_uri: string;
  input_sha256: string | null;
  parameters: JsonObject;
  status: Job["status"];
  priority: number;
  idempotency_key: string | null;
  traceparent: string | null;
  cancel_reason: string | null;
  created_at: Date;
  updated_at: Date;
  completed_at: Date | null;
  failure_policy: Job["failurePolicy"];
  max_failed_tasks: number;
  concurrency_key: string;
  required_labels: Labels | null;
  schedule_name?: string | null;
  schedule_fire_at?: Date | null;
  /** absent in a row read before the delayed_finalizer migration (a rolling upgrade) */
  run_at?: Date | null;
  finalizer_workload?: string | null;
  finalizer_parameters?: JsonObject | null;
  finalizer_on_failure?: boolean;
  finalizer_job_id?: string | null;
  parent_job_id?: string | null;
  /** run_at > now() by the database's clock, where the statement selects it (GetJob, ListJobs) */
  run_at_ahead?: boolean | null;
  /** absent in a row read before the accounts migration (a rolling upgrade); reserved_units is a bigint, as text */
  account?: string | null;
  reserved_units?: string | number | null;
  billing_key?: string | null;
  /** The settlement, once recorded (settled_units: bigint, as text). */
  settlement_key?: string | null;
  settled_units?: string | number | null;
  settled_at?: Date | null;
  /** The usage the settlement covered (absent before the usage_adjustments migration). */
  settled_usage?: Usage | null;
  /** Its parents' policy (null: none), the parents not final yet, and its workflow (absent before the dependencies migration). */
  dependency_policy?: DependencyPolicy | null;
  waiting_on?: number;
  workflow_id?: string | null;
  workflow_node?: string | null;
}

/** A parent as leasehold_promote_jobs stores it on a task (tasks.parents) and the parents' reads select it (json). */
export interface ParentJson {
  job_id: string;
  status: string;
  optional: boolean;
  node: string | null;
  total_tasks: number;
  completed_tasks: number;
  result: {
    chunk_index: number;
    task_id: string;
    result_uri: string;
    result_sha256: string;
    metrics: JsonObject | null;
    completed_at: string;
  } | null;
}

export interface TaskRow {
  id: string;
  job_id: string;
  chunk_index: number;
  workload: string;
  input_uri: string;
  input_sha256: string;
  parameters: JsonObject;
  status: Task["status"];
  attempt: number;
  max_attempts: number;
  priority: number;
  lease_owner: string | null;
  lease_expires_at: Date | null;
  result_uri: string | null;
  result_sha256: string | null;
  metrics: JsonObject | null;
  error_code: string | null;
  error_message: string | null;
  created_at: Date;
  started_at: Date | null;
  completed_at: Date | null;
  run_after: Date;
  version: number;
  traceparent: string | null;
  concurrency_key: string;
  required_labels: Labels | null;
  /** Usage summed over the task's accepted reports; null for none. */
  usage?: Usage | null;
  /** bigint, as text; the claim's order after priority (docs/flow-control-claim.md, "Fair share") */
  fair_rank?: string;
  /** Its job's parents when the job was made pending; null for a job without parents (absent before the dependencies migration). */
  parents?: ParentJson[] | null;
}

/** A task_events row as the watch and attempt reads select it (created_at as text, for its microseconds). */
export interface JobEventRow {
  id: string | number;
  job_id: string;
  /** node_status: a workflow's event (job_id the workflow's, task_id the node's job, message its name) */
  kind: JobEvent["kind"] | "node_status";
  task_id: string | null;
  chunk_index: number | null;
  status: string | null;
  previous_status: string | null;
  attempt: number | null;
  worker_id: string | null;
  progress: number | null;
  message: string | null;
  partial_result_uri: string | null;
  error_code: string | null;
  error_message: string | null;
  /** What the report that ended the attempt said it used (a completion's or failure's event). */
  usage?: Usage | null;
  created_at: string;
  /** The writing transaction (xid8, as text or a number); WatchJob ends after the last event of the transaction that made the job final. */
  xid?: string | number;
  /** job_settled: the settlement recorded (settled_units: bigint, as text or a number through json) */
  settlement_key?: string | null;
  settled_units?: string | number | null;
}

export function toWorkload(r: WorkloadRow): Workload {
  return {
    name: r.name,
    maxAttempts: r.max_attempts,
    leaseSeconds: r.lease_seconds,
    parametersSchema: r.parameters_schema ?? null,
    maxPendingSeconds: r.max_pending_seconds ?? null,
    failurePolicy: r.failure_policy,
    maxFailedTasks: r.max_failed_tasks,
    maxLeased: r.max_leased ?? null,
    maxLeasedPerKey: r.max_leased_per_key ?? null,
    maxLeasesPerSecond: r.max_leases_per_second ?? null,
    leasesBurst: r.leases_burst ?? null,
    paused: r.paused ?? false,
    createdAt: r.created_at,
    updatedAt: r.updated_at,
  };
}

/**
 * A job not yet due is stored as pending with its run_at ahead, and shown as scheduled: by the
 * database's clock where the statement read run_at_ahead, else by this coordinator's (a job just
 * created, whose run_at is stored only when it lay ahead).
 */
function jobStatus(r: JobRow): Job["status"] {
  // Waiting for its parents: stored as pending with parents not final yet.
  if (r.status === "pending" && (r.waiting_on ?? 0) > 0) return "waiting";
  if (r.status !== "pending" || !r.run_at) return r.status;
  const ahead = r.run_at_ahead ?? r.run_at.getTime() > Date.now();
  return ahead ? "scheduled" : "pending";
}

export function toJob(r: JobRow): Job {
  return {
    id: r.id,
    workload: r.workload,
    inputUri: r.input_uri,
    inputSha256: r.input_sha256 ?? null,
    parameters: r.parameters,
    status: jobStatus(r),
    priority: r.priority,
    idempotencyKey: r.idempotency_key ?? null,
    traceparent: r.traceparent ?? null,
    cancelReason: r.cancel_reason ?? null,
    createdAt: r.created_at,
    updatedAt: r.updated_at,
    completedAt: r.completed_at ?? null,
    failurePolicy: r.failure_policy,
    maxFailedTasks: r.max_failed_tasks,
    concurrencyKey: r.concurrency_key ?? "",
    requiredLabels: r.required_labels ?? null,
    scheduleName: r.schedule_name ?? null,
    scheduleFireAt: r.schedule_fire_at ?? null,
    runAt: r.run_at ?? null,
    finalizer: r.finalizer_workload
      ? { workload: r.finalizer_workload, parameters: r.finalizer_parameters ?? {}, runOnFailure: r.finalizer_on_failure === true }
      : null,
    finalizerJobId: r.finalizer_job_id ?? null,
    parentJobId: r.parent_job_id ?? null,
    account: r.account ?? null,
    billing: jobBilling(r),
    settlement: r.settled_at
      ? {
          settlementKey: r.settlement_key ?? "",
          settledUnits: Number(r.settled_units ?? 0),
          settledAt: r.settled_at,
          usage: r.settled_usage ?? {},
        }
      : null,
    dependencyPolicy: r.dependency_policy ?? null,
    waitingParents: r.waiting_on ?? 0,
    workflowId: r.workflow_id ?? null,
    workflowNode: r.workflow_node ?? null,
  };
}

/** Parents as stored on a task or read with a job (ParentJson) in the domain's shape. */
export function toJobParents(rows: readonly ParentJson[]): JobParent[] {
  return rows.map((p) => ({
    jobId: p.job_id,
    status: p.status as JobParent["status"],
    optional: p.optional === true,
    node: p.node ?? null,
    totalTasks: Number(p.total_tasks ?? 0),
    completedTasks: Number(p.completed_tasks ?? 0),
    result: p.result
      ? {
          chunkIndex: p.result.chunk_index,
          taskId: p.result.task_id,
          resultUri: p.result.result_uri,
          resultSha256: p.result.result_sha256,
          metrics: p.result.metrics ?? null,
          completedAt: new Date(p.result.completed_at),
        }
      : null,
  }));
}

/** A job's billing context: null when CreateJob gave none (neither reserved units nor a key stored). */
function jobBilling(r: JobRow): Job["billing"] {
  const reserved = r.reserved_units ?? null;
  const key = r.billing_key ?? null;
  if (reserved === null && key === null) return null;
  return { reservedUnits: reserved === null ? 0 : Number(reserved), billingKey: key };
}

export function toTask(r: TaskRow): Task {
  return {
    id: r.id,
    jobId: r.job_id,
    chunkIndex: r.chunk_index,
    workload: r.workload,
    inputUri: r.input_uri,
    inputSha256: r.input_sha256,
    parameters: r.parameters,
    status: r.status,
    attempt: r.attempt,
    maxAttempts: r.max_attempts,
    priority: r.priority,
    leaseOwner: r.lease_owner ?? null,
    leaseExpiresAt: r.lease_expires_at ?? null,
    resultUri: r.result_uri ?? null,
    resultSha256: r.result_sha256 ?? null,
    metrics: r.metrics ?? null,
    errorCode: r.error_code ?? null,
    errorMessage: r.error_message ?? null,
    createdAt: r.created_at,
    startedAt: r.started_at ?? null,
    completedAt: r.completed_at ?? null,
    runAfter: r.run_after,
    version: r.version,
    traceparent: r.traceparent ?? null,
    concurrencyKey: r.concurrency_key ?? "",
    requiredLabels: r.required_labels ?? null,
    usage: r.usage ?? undefined,
    parents: r.parents ? toJobParents(r.parents) : undefined,
  };
}

export function toJobEvent(r: JobEventRow): JobEvent {
  return {
    id: String(r.id),
    jobId: r.job_id,
    kind: r.kind as JobEvent["kind"],
    taskId: r.task_id ?? null,
    chunkIndex: r.chunk_index ?? null,
    status: r.status ?? null,
    previousStatus: r.previous_status ?? null,
    attempt: r.attempt ?? null,
    workerId: r.worker_id ?? null,
    progress: r.progress ?? null,
    message: r.message ?? null,
    partialResultUri: r.partial_result_uri ?? null,
    errorCode: r.error_code ?? null,
    errorMessage: r.error_message ?? null,
    usage: r.usage ?? undefined,
    createdAt: new Date(r.created_at),
    ...(r.kind === "job_settled" ? { settlementKey: r.settlement_key ?? "", settledUnits: Number(r.settled_units ?? 0) } : {}),
  };
}
