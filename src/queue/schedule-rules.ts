// Periodic schedules, the domain half: PutSchedule's validation and the cron
// arithmetic (which ticks a scheduler pass fires, skips or catches up). The cron expressions are
// read by croner (timezones, an optional seconds field, DST); nothing here touches the database.

import { Cron } from "croner";
import { ValidationError, type FieldViolation } from "./errors.js";
import {
  CATCH_UP_POLICIES,
  OVERLAP_POLICIES,
  SCHEDULE_DEFAULTS,
  type CatchUpPolicy,
  type CreateJobInput,
  type CreateWorkflowInput,
  type OverlapPolicy,
  type PutScheduleInput,
  type TaskSpec,
} from "./types.js";
import { LIMITS, requireText, validateCreateJob, violationsError, type NormalizedCreateJob } from "./validation.js";
import { validateCreateWorkflow } from "./dependency-validation.js";

export interface NormalizedSchedule {
  name: string;
  cron: string;
  timezone: string;
  /** The template as stored: a plain CreateJobInput (no transport's objects); undefined for a schedule of workflows. */
  job?: CreateJobInput;
  /** The template as CreateJob normalizes it (the store checks its workloads and parameters). */
  normalizedJob?: NormalizedCreateJob;
  /** A workflow template, as stored (its nodes' jobs checked by the store, as CreateWorkflow checks them). */
  workflow?: CreateWorkflowInput;
  overlap: OverlapPolicy;
  catchUp: CatchUpPolicy;
  maxCatchUp: number;
}

const SCHEDULE_NAME = /^[a-z][a-z0-9_-]{0,62}$/;

export function requireScheduleName(field: string, v: unknown): string {
  if (v === undefined || v === null || v === "") throw new ValidationError(field, "is required");
  if (typeof v !== "string" || !SCHEDULE_NAME.test(v)) throw new ValidationError(field, "must match ^[a-z][a-z0-9_-]{0,62}$");
  return v;
}

/** A cron expression in a timezone, as croner reads it: five fields, or six with seconds first. */
export class CronSchedule {
  private readonly cron: Cron;

  /** Throws croner's own error for an expression or timezone it cannot read. */
  constructor(expression: string, timezone: string) {
    this.cron = new Cron(expression, { timezone, mode: "5-or-6-parts" });
  }

  /** The first tick strictly after `after`, or null when there is none. */
  next(after: Date): Date | null {
    return this.cron.nextRun(after);
  }

  nextN(n: number, after: Date): Date[] {
    return this.cron.nextRuns(n, after);
  }

  /** The latest `n` ticks strictly before `before`, latest first. */
  previous(n: number, before: Date): Date[] {
    return this.cron.previousRuns(n, before);
  }
}

/** The IANA name as the runtime knows it, or a ValidationError naming the field. */
export function requireTimezone(field: string, v: unknown): string {
  if (v === undefined || v === null || v === "") return SCHEDULE_DEFAULTS.timezone;
  const tz = requireText(field, v, 64);
  try {
    return new Intl.DateTimeFormat("en-US", { timeZone: tz }).resolvedOptions().timeZone;
  } catch {
    throw new ValidationError(field, `unknown timezone ${JSON.stringify(tz)}: must be an IANA timezone such as Europe/Berlin or UTC`);
  }
}

/** A cron expression croner reads in the timezone and that matches some future time. */
export function requireCron(field: string, v: unknown, timezone: string): string {
  const expression = requireText(field, v, LIMITS.cronLength).trim();
  let cron: CronSchedule;
  try {
    cron = new CronSchedule(expression, timezone);
  } catch (err) {
    throw new ValidationError(field, `invalid cron expression: ${(err as Error).message}`);
  }
  if (cron.next(new Date()) === null) throw new ValidationError(field, "the expression matches no future time");
  return expression;
}

function oneOf<T extends string>(field: string, v: unknown, values: readonly T[], fallback: T): T {
  if (v === undefined || v === null || v === "") return fallback;
  if (typeof v !== "string" || !(values as readonly string[]).includes(v)) {
    throw new ValidationError(field, `must be one of ${values.join(", ")}`);
  }
  return v as T;
}

/**
 * PutSchedule's request, every rule CreateJob would apply to the template included (its
 * violations named `job.<field>`), before the store checks the template's workloads.
 */
export function validatePutSchedule(input: PutScheduleInput, maxTasksPerJob: number): NormalizedSchedule {
  if (input === null || typeof input !== "object") throw new ValidationError("request", "must be an object");
  const violations: FieldViolation[] = [];
  const check = <T>(fn: () => T): T | undefined => {
    try {
      return fn();
    } catch (err) {
      if (!(err instanceof ValidationError)) throw err;
      violations.push(...err.violations);
      return undefined;
    }
  };
  const name = check(() => requireScheduleName("name", input.name));
  const timezone = check(() => requireTimezone("timezone", input.timezone));
  const cron = timezone === undefined ? undefined : check(() => requireCron("cron", input.cron, timezone));
  const overlap = check(() => oneOf("overlap", input.overlap, OVERLAP_POLICIES, SCHEDULE_DEFAULTS.overlap));
  const catchUp = check(() => oneOf("catch_up", input.catchUp, CATCH_UP_POLICIES, SCHEDULE_DEFAULTS.catchUp));
  const maxCatchUp = check(() =>
    input.maxCatchUp === undefined || input.maxCatchUp === null
      ? SCHEDULE_DEFAULTS.maxCatchUp
      : integerWithin("max_catch_up", input.maxCatchUp, LIMITS.maxCatchUp.min, LIMITS.maxCatchUp.max),
  );
  const given = (v: unknown) => v !== undefined && v !== null;
  if (given(input.job) && given(input.workflow)) {
    violations.push({
      field: "workflow",
      description: "must be empty when job is given: a schedule creates a job or a workflow on each tick",
    });
  }
  const ofWorkflows = given(input.workflow) && !given(input.job);
  const job = ofWorkflows ? undefined : check(() => jobTemplate(input.job));
  const normalizedJob = job === undefined ? undefined : check(() => templateRules(job, maxTasksPerJob));
  const workflow = ofWorkflows ? check(() => workflowTemplate(input.workflow)) : undefined;
  if (violations.length > 0) throw violationsError(violations);
  return {
    name: name!,
    cron: cron!,
    timezone: timezone!,
    ...(job === undefined ? {} : { job, normalizedJob: normalizedJob! }),
    ...(workflow === undefined ? {} : { workflow }),
    overlap: overlap!,
    catchUp: catchUp!,
    maxCatchUp: maxCatchUp!,
  };
}

function integerWithin(field: string, v: unknown, min: number, max: number): number {
  if (typeof v !== "number" || !Number.isInteger(v)) throw new ValidationError(field, "must be an integer");
  if (v < min || v > max) throw new ValidationError(field, `must be between ${min} and ${max}`);
  return v;
}

/**
 * CreateJob's checks on the template, each violation named under `job.`, and the fields a
 * repeating template cannot mean: an idempotency key (every tick creates a job of its own; the
 * schedule and tick are its key) and a run_at, the job's or a task's (an absolute time would be
 * in the past from the second tick on; a tick's time is its cron expression's).
 */
function templateRules(job: CreateJobInput, maxTasksPerJob: number): NormalizedCreateJob {
  const refused: FieldViolation[] = [];
  if (job.idempotencyKey) {
    refused.push({
      field: "job.idempotency_key",
      description: "must be empty: every tick creates a job of its own (the schedule and tick are its key)",
    });
  }
  if (job.runAt !== undefined && job.runAt !== null) refused.push({ field: "job.run_at", description: RUN_AT_REFUSED });
  if (job.billing !== null && typeof job.billing === "object" && job.billing.billingKey) {
    refused.push({
      field: "job.billing.billing_key",
      description: "must be empty: a billing key is one job's, and every tick creates a job of its own",
    });
  }
  if (Array.isArray(job.tasks)) {
    job.tasks.forEach((t, i) => {
      if (t !== null && typeof t === "object" && t.runAt !== undefined && t.runAt !== null) {
        refused.push({ field: `job.tasks[${i}].run_at`, description: RUN_AT_REFUSED });
      }
    });
  }
  if (job.after !== undefined && job.after !== null) refused.push({ field: "job.after", description: AFTER_REFUSED });
  if (job.dependencyPolicy) {
    refused.push({
      field: "job.dependency_policy",
      description: "must be empty: a schedule's job has no parents (a workflow template's nodes have)",
    });
  }
  if (refused.length > 0) throw violationsError(refused);
  try {
    return validateCreateJob(job, maxTasksPerJob);
  } catch (err) {
    if (!(err instanceof ValidationError)) throw err;
    throw violationsError(err.violations.map((v) => ({ field: `job.${v.field}`, description: v.description })));
  }
}

const AFTER_REFUSED =
  "must be empty in a schedule's template: every tick would wait for the same jobs (a schedule of workflows orders its own nodes)";

/**
 * A workflow template as stored (each node's job through jobTemplate), and the fields a repeating
 * template cannot mean, as for a job template: the workflow's idempotency key, a node's run_at
 * (its job's or a task's), a node's billing key, and a node's after (jobs outside the workflow,
 * the same ones on every tick). The nodes' names, edges and cycles are CreateWorkflow's rules,
 * applied here named under `workflow.`; their jobs are checked by the store (prepareWorkflow).
 */
function workflowTemplate(v: unknown): CreateWorkflowInput {
  if (typeof v !== "object" || v === null || Array.isArray(v)) throw new ValidationError("workflow", "must be an object");
  const w = v as CreateWorkflowInput;
  const refused: FieldViolation[] = [];
  if (w.idempotencyKey) {
    refused.push({
      field: "workflow.idempotency_key",
      description: "must be empty: every tick creates a workflow of its own (the schedule and tick are its key)",
    });
  }
  const nodes = Array.isArray(w.nodes)
    ? w.nodes.map((n, i) => {
        if (n === null || typeof n !== "object") return n;
        const at = `workflow.nodes[${i}].job`;
        let job = n.job;
        if (n.job !== undefined && n.job !== null) {
          try {
            job = jobTemplate(n.job);
          } catch (err) {
            if (!(err instanceof ValidationError)) throw err;
            refused.push(...err.violations.map((x) => ({ field: `workflow.nodes[${i}].${x.field}`, description: x.description })));
          }
          if (job.runAt !== undefined && job.runAt !== null) refused.push({ field: `${at}.run_at`, description: RUN_AT_REFUSED });
          (job.tasks ?? []).forEach((t, k) => {
            if (t !== null && typeof t === "object" && t.runAt !== undefined && t.runAt !== null)
              refused.push({ field: `${at}.tasks[${k}].run_at`, description: RUN_AT_REFUSED });
          });
          if (job.billing !== null && typeof job.billing === "object" && job.billing.billingKey) {
            refused.push({
              field: `${at}.billing.billing_key`,
              description: "must be empty: a billing key is one job's, and every tick creates nodes of its own",
            });
          }
          if (job.after !== undefined && job.after !== null) refused.push({ field: `${at}.after`, description: AFTER_REFUSED });
        }
        return {
          name: n.name,
          job,
          ...(Array.isArray(n.after)
            ? { after: n.after.map((a) => ({ node: a.node, optional: a.optional === true })) }
            : { after: n.after }),
        };
      })
    : w.nodes;
  if (refused.length > 0) throw violationsError(refused);
  const out: CreateWorkflowInput = { nodes: nodes as CreateWorkflowInput["nodes"] };
  if (w.name) out.name = w.name;
  if (w.account) out.account = w.account;
  try {
    validateCreateWorkflow(out);
  } catch (err) {
    if (!(err instanceof ValidationError)) throw err;
    throw violationsError(err.violations.map((x) => ({ field: `workflow.${x.field}`, description: x.description })));
  }
  return out;
}

const RUN_AT_REFUSED =
  "must be empty in a schedule's template: a tick's job is due at the tick (for a later time, move the cron expression)";

/**
 * The template as a plain object of CreateJobInput's fields (what is stored and fired), whatever
 * object the transport made. Every field is kept as given, so templateRules sees each one and
 * either it reaches every tick's job or PutSchedule refuses it: none is accepted and dropped
 * (test/api/schedules-template.test.ts walks CreateJobRequest's fields to hold that).
 */
function jobTemplate(v: unknown): CreateJobInput {
  if (v === undefined || v === null) throw new ValidationError("job", "is required");
  if (typeof v !== "object" || Array.isArray(v)) throw new ValidationError("job", "must be an object");
  const j = v as CreateJobInput;
  const out: CreateJobInput = { workload: j.workload };
  const keys = [
    "inputUri",
    "inputSha256",
    "parameters",
    "priority",
    "maxAttempts",
    "idempotencyKey",
    "traceparent",
    "failurePolicy",
    "maxFailedTasks",
    "concurrencyKey",
    "runAt",
    "account",
    "after",
    "dependencyPolicy",
  ] as const;
  for (const k of keys) if (present(j[k])) (out as unknown as Record<string, unknown>)[k] = j[k];
  if (j.requiredLabels && Object.keys(j.requiredLabels).length > 0) out.requiredLabels = { ...j.requiredLabels };
  // Passed on as given (validation refuses what is not a billing context), the key for templateRules to refuse.
  if (j.billing !== undefined && j.billing !== null) out.billing = typeof j.billing === "object" ? { ...j.billing } : j.billing;
  if (j.finalizer !== undefined && j.finalizer !== null) {
    const f = j.finalizer;
    // A finalizer that is not an object is passed on as it is, for validation to refuse.
    out.finalizer =
      typeof f === "object" && !Array.isArray(f)
        ? { workload: f.workload, parameters: f.parameters ?? {}, runOnFailure: f.runOnFailure === true }
        : f;
  }
  if (Array.isArray(j.tasks) && j.tasks.length > 0) {
    out.tasks = j.tasks.map((t: TaskSpec) => {
      if (t === null || typeof t !== "object") return t;
      const spec: TaskSpec = { chunkIndex: t.chunkIndex, inputUri: t.inputUri, inputSha256: t.inputSha256 };
      if (present(t.parameters)) spec.parameters = t.parameters;
      if (t.workload) spec.workload = t.workload;
      if (t.requiredLabels && Object.keys(t.requiredLabels).length > 0) spec.requiredLabels = { ...t.requiredLabels };
      if (present(t.runAt)) spec.runAt = t.runAt;
      return spec;
    });
  } else if (j.tasks !== undefined && j.tasks !== null && !Array.isArray(j.tasks)) {
    out.tasks = j.tasks;
  }
  return out;
}

function present(v: unknown): boolean {
  return v !== undefined && v !== null && v !== "";
}

/** Missed ticks counted (for the skipped metric) at most: croner takes ~0.3 ms a tick on a busy machine. */
const MISSED_COUNT_CAP = 100;
/** On-time ticks fired in one pass at most (a per-second schedule has a grace's worth). */
const ON_TIME_CAP = 1000;

export interface TickPlan {
  /** Ticks to fire, earliest first: the caught-up missed ones, then the on-time ones. */
  fire: Date[];
  /** Missed ticks not fired (the catch-up policy's, or past its bound); counted up to MISSED_COUNT_CAP. */
  missedSkipped: number;
  /** The first tick after `now` (null: none), the schedule's next_fire_at. */
  next: Date | null;
}

/**
 * What a due schedule does now. A tick found due more than the grace after its time is missed (no
 * scheduler ran at its time): the catch-up policy decides (skip: none, one: the latest, all: the
 * latest maxCatchUp). A tick within the grace is late but on time, and always fires, so a pass
 * that runs a little late drops nothing. The grace is `graceMs`, at most half the schedule's
 * interval (500 ms for a per-second schedule), so "skip" never fires a tick that another tick of
 * the schedule has already followed.
 */
export function planTicks(
  cron: CronSchedule,
  policy: { catchUp: CatchUpPolicy; maxCatchUp: number },
  nextFireAt: Date,
  now: Date,
  graceMs: number,
): TickPlan {
  const following = cron.next(nextFireAt);
  const grace = following === null ? graceMs : Math.min(graceMs, (following.getTime() - nextFireAt.getTime()) / 2);
  const late = new Date(now.getTime() - grace);
  const fire: Date[] = [];
  let missedSkipped = 0;
  if (nextFireAt < late) {
    const bound = policy.catchUp === "all" ? policy.maxCatchUp : policy.catchUp === "one" ? 1 : 0;
    const caught = bound > 0 ? cron.previous(bound, late).filter((t) => t >= nextFireAt) : [];
    fire.push(...caught.reverse());
    let missed = 0;
    for (let t: Date | null = nextFireAt; t !== null && t < late && missed < MISSED_COUNT_CAP + caught.length; t = cron.next(t)) missed++;
    missedSkipped = Math.max(0, missed - caught.length);
  }
  // The first tick at or after `late` (ticks are whole seconds; next() is strictly after a second).
  let t: Date | null = nextFireAt >= late ? nextFireAt : cron.next(new Date(late.getTime() - 1));
  let onTime = 0;
  while (t !== null && t <= now && onTime < ON_TIME_CAP) {
    fire.push(t);
    onTime++;
    t = cron.next(t);
  }
  return { fire, missedSkipped, next: t };
}
