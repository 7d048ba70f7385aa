// Periodic schedules as their owners see them: PutSchedule, GetSchedule, ListSchedules,
// DeleteSchedule, PauseSchedule and ResumeSchedule. The ticks themselves are scheduler.ts's.

import { NotFoundError } from "../../../queue/errors.js";
import { CronSchedule, requireScheduleName, validatePutSchedule } from "../../../queue/schedule-rules.js";
import { NEXT_FIRE_TIMES, type PutScheduleInput, type PutScheduleResult, type Schedule } from "../../../queue/types.js";
import type { CallOptions, CreateJobInput, CreateWorkflowInput } from "../../../queue/types.js";
import { ValidationError } from "../../../queue/errors.js";
import { prepareWorkflow } from "./workflows.js";
import type { StoreContext } from "../state/context.js";
import { requireAccount } from "./accounts.js";
import { checkWorkloads, prepareJob } from "./create-job-core.js";
import { inTransaction, withClient } from "../sql/db.js";
import { defineQuery, type NoParams } from "../sql/query.js";

export const SELECT_DB_NOW = defineQuery<NoParams, { now: Date }>(null, `SELECT now() AS now`);

/*
 * Create or replace. Paused is kept (it has operations of its own). A schedule whose cron and
 * timezone are unchanged keeps its next_fire_at, so a deployment that declares its schedules at
 * every start does not drop the ticks a catch-up policy would fire; a changed expression starts
 * from its next tick after now ($8). xmax = 0: the row was inserted, not updated.
 * $1 name, $2 cron, $3 timezone, $4 job (jsonb), $5 overlap, $6 catch_up, $7 max_catch_up, $8 next_fire_at.
 */
interface UpsertSchedule {
  name: string;
  cron: string;
  timezone: string;
  /** the job template, as jsonb text */
  job: string;
  overlap: Schedule["overlap"];
  catchUp: Schedule["catchUp"];
  maxCatchUp: number;
  nextFireAt: Date | null;
  /** the workflow template, as jsonb text; null for a schedule of jobs */
  workflow: string | null;
}
export const UPSERT_SCHEDULE = defineQuery<UpsertSchedule, ScheduleRow & { created: boolean }>(
  null,
  `
INSERT INTO schedules AS s (name, cron, timezone, job, overlap, catch_up, max_catch_up, next_fire_at, workflow)
VALUES ($1, $2, $3, $4::jsonb, $5, $6, $7, $8, $9::jsonb)
ON CONFLICT (name) DO UPDATE
  SET cron = EXCLUDED.cron,
      timezone = EXCLUDED.timezone,
      job = EXCLUDED.job,
      workflow = EXCLUDED.workflow,
      overlap = EXCLUDED.overlap,
      catch_up = EXCLUDED.catch_up,
      max_catch_up = EXCLUDED.max_catch_up,
      next_fire_at = CASE WHEN s.cron = EXCLUDED.cron AND s.timezone = EXCLUDED.timezone AND s.next_fire_at IS NOT NULL
                       THEN s.next_fire_at ELSE EXCLUDED.next_fire_at END,
      updated_at = now()
RETURNING s.*, (s.xmax = 0) AS created`,
  (p) => [p.name, p.cron, p.timezone, p.job, p.overlap, p.catchUp, p.maxCatchUp, p.nextFireAt, p.workflow],
);

type ByName = { name: string };
const nameValue = (p: ByName) => [p.name];
export const SELECT_SCHEDULE = defineQuery<ByName, ScheduleRow>(null, `SELECT * FROM schedules WHERE name = $1`, nameValue);
export const SELECT_SCHEDULE_FOR_UPDATE = defineQuery<ByName, ScheduleRow & { db_now: Date }>(
  null,
  `SELECT *, now() AS db_now FROM schedules WHERE name = $1 FOR UPDATE`,
  nameValue,
);
export const SELECT_ALL_SCHEDULES = defineQuery<NoParams, ScheduleRow>(null, `SELECT * FROM schedules ORDER BY name`);
export const DELETE_SCHEDULE = defineQuery<ByName, ScheduleRow>(null, `DELETE FROM schedules WHERE name = $1 RETURNING *`, nameValue);
// Pausing a paused schedule changes nothing (not even updated_at).
export const PAUSE_SCHEDULE = defineQuery<ByName, ScheduleRow>(
  null,
  `
UPDATE schedules SET paused = true, updated_at = CASE WHEN paused THEN updated_at ELSE now() END
WHERE name = $1 RETURNING *`,
  nameValue,
);
// Resumed from its next tick after now ($2): the ticks of the pause are not caught up.
export const RESUME_SCHEDULE = defineQuery<{ name: string; nextFireAt: Date | null }, ScheduleRow>(
  null,
  `UPDATE schedules SET paused = false, next_fire_at = $2, updated_at = now() WHERE name = $1 RETURNING *`,
  (p) => [p.name, p.nextFireAt],
);

export interface ScheduleRow {
  name: string;
  cron: string;
  timezone: string;
  job: CreateJobInput;
  overlap: Schedule["overlap"];
  catch_up: Schedule["catchUp"];
  max_catch_up: number;
  paused: boolean;
  next_fire_at: Date | null;
  last_fire_at: Date | null;
  last_job_id: string | null;
  created_at: Date;
  updated_at: Date;
  /** a schedule of workflows' template (its job is then '{}'); absent before the dependencies migration */
  workflow?: CreateWorkflowInput | null;
  last_workflow_id?: string | null;
}

/** A row as the API answers it, with its next fire times (computed: none while paused). */
export function toSchedule(r: ScheduleRow): Schedule {
  let nextFireTimes: Date[] = [];
  if (!r.paused && r.next_fire_at !== null) {
    nextFireTimes = [r.next_fire_at, ...new CronSchedule(r.cron, r.timezone).nextN(NEXT_FIRE_TIMES - 1, r.next_fire_at)];
  }
  return {
    name: r.name,
    cron: r.cron,
    timezone: r.timezone,
    job: r.workflow ? null : r.job,
    workflow: r.workflow ?? null,
    overlap: r.overlap,
    catchUp: r.catch_up,
    maxCatchUp: r.max_catch_up,
    paused: r.paused,
    nextFireTimes,
    lastFireAt: r.last_fire_at,
    lastJobId: r.last_job_id,
    lastWorkflowId: r.last_workflow_id ?? null,
    createdAt: r.created_at,
    updatedAt: r.updated_at,
  };
}

export async function putSchedule(ctx: StoreContext, input: PutScheduleInput, opts: CallOptions): Promise<PutScheduleResult> {
  const s = validatePutSchedule(input, ctx.options.maxTasksPerJob);
  // The template through CreateJob's own core (create-job-core.ts): what a tick's job will be
  // checked against is checked now, each field named under "job.", and an unknown workload
  // (the job's, a task's, the finalizer's) is NOT_FOUND as it is from CreateJob. A workflow
  // template: every node so, named under "workflow.nodes[i].job.".
  const templates = s.workflow
    ? underWorkflow(() => prepareWorkflow(ctx, s.workflow!, undefined)).nodes.map((p) => ({ p, prefix: `workflow.${p.fieldPrefix ?? ""}` }))
    : [{ p: prepareJob(ctx, s.job!, s.normalizedJob), prefix: "job." }];
  return withClient(ctx.pool, opts.signal, async (c) => {
    for (const { p, prefix } of templates) {
      await ctx.workloads.load(c, p.names, false);
      await checkWorkloads(ctx, c, p, prefix);
      if (p.job.account !== undefined) await requireAccount(c, p.job.account, `${prefix}account`);
    }
    const { now } = await SELECT_DB_NOW.one(c);
    const next = new CronSchedule(s.cron, s.timezone).next(now);
    const row = await UPSERT_SCHEDULE.one(c, {
      name: s.name,
      cron: s.cron,
      timezone: s.timezone,
      job: JSON.stringify(s.job ?? {}),
      workflow: s.workflow ? JSON.stringify(s.workflow) : null,
      overlap: s.overlap,
      catchUp: s.catchUp,
      maxCatchUp: s.maxCatchUp,
      nextFireAt: next,
    });
    return { schedule: toSchedule(row), created: row.created };
  });
}

export async function getSchedule(ctx: StoreContext, name: string, opts: CallOptions): Promise<Schedule> {
  const n = requireScheduleName("name", name);
  const row = await withClient(ctx.pool, opts.signal, (c) => SELECT_SCHEDULE.maybe(c, { name: n }));
  if (!row) throw new NotFoundError("schedule", n, "name");
  return toSchedule(row);
}

export async function listSchedules(ctx: StoreContext, opts: CallOptions): Promise<Schedule[]> {
  const rows = await withClient(ctx.pool, opts.signal, (c) => SELECT_ALL_SCHEDULES.run(c));
  return rows.map(toSchedule);
}

export async function deleteSchedule(ctx: StoreContext, name: string, opts: CallOptions): Promise<Schedule> {
  const n = requireScheduleName("name", name);
  const row = await withClient(ctx.pool, opts.signal, (c) => DELETE_SCHEDULE.maybe(c, { name: n }));
  if (!row) throw new NotFoundError("schedule", n, "name");
  return toSchedule(row);
}

export async function pauseSchedule(ctx: StoreContext, name: string, opts: CallOptions): Promise<Schedule> {
  const n = requireScheduleName("name", name);
  const row = await withClient(ctx.pool, opts.signal, (c) => PAUSE_SCHEDULE.maybe(c, { name: n }));
  if (!row) throw new NotFoundError("schedule", n, "name");
  return toSchedule(row);
}

export async function resumeSchedule(ctx: StoreContext, name: string, opts: CallOptions): Promise<Schedule> {
  const n = requireScheduleName("name", name);
  return inTransaction(ctx.pool, opts.signal, async (c) => {
    const row = await SELECT_SCHEDULE_FOR_UPDATE.maybe(c, { name: n });
    if (!row) throw new NotFoundError("schedule", n, "name");
    // Resuming a running schedule changes nothing.
    if (!row.paused) return toSchedule(row);
    const next = new CronSchedule(row.cron, row.timezone).next(row.db_now);
    return toSchedule(await RESUME_SCHEDULE.one(c, { name: n, nextFireAt: next }));
  });
}

/** A workflow template's validation errors named under "workflow." (its nodes' jobs are CreateJob's rules). */
function underWorkflow<T>(fn: () => T): T {
  try {
    return fn();
  } catch (err) {
    if (!(err instanceof ValidationError)) throw err;
    const violations = err.violations.map((v) => ({ field: `workflow.${v.field}`, description: v.description }));
    throw new ValidationError(violations[0].field, err.detail, violations);
  }
}
