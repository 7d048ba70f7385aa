// The scheduler: one pass fires every due schedule's ticks. Every coordinator runs it (the loop
// with its start and stop is queue/scheduler.ts's SchedulerLoop). Each due schedule is handled in
// a transaction of its own that holds its row (FOR UPDATE SKIP LOCKED: another coordinator's pass
// takes the next schedule instead of waiting), creates the tick's job, records the tick under its
// unique key (schedule, tick time) and moves next_fire_at on, all committed together. So a tick
// creates exactly one job across all coordinators: a pass that dies before its commit leaves
// nothing, and the next pass (its own or another coordinator's) does the tick again.

import type pg from "pg";
import { QueueError } from "../../../queue/errors.js";
import { CronSchedule, planTicks } from "../../../queue/schedule-rules.js";
import { type ScheduleTickResult } from "../../../queue/types.js";
import type { QueueObserver } from "../../../queue/service.js";
import type { StoreContext } from "../state/context.js";
import { createJobInTransaction } from "../operations/create-job.js";
import { prepareWorkflow, writeWorkflow } from "../operations/workflows.js";
import { inTransaction, withClient } from "../sql/db.js";
import { defineQuery, type NoParams } from "../sql/query.js";
import type { ScheduleRow } from "../operations/schedules.js";

export interface SchedulerConfig {
  /**
   * A tick found due more than this after its time (at most half the schedule's interval) was
   * missed (no scheduler ran then) and is left to the schedule's catch-up policy; a tick found
   * due within it always fires. The loop wakes a millisecond after each tick, so its passes are
   * late by milliseconds (p50 6 ms, p95 150 ms on a loaded 2-core machine).
   */
  graceMs?: number;
  /** Schedules handled per pass at most (one transaction each); the loop comes back at once for the rest. */
  maxPerPass?: number;
  /** Told about every tick (metrics). */
  observer?: QueueObserver;
}

export const SCHEDULER_DEFAULTS = { graceMs: 1000, maxPerPass: 100 } as const;

/*
 * When is the next tick due: milliseconds from the database's clock (negative: due now). The
 * smallest next_fire_at of an unpaused schedule through schedules_due_idx, so a pass on an idle
 * database costs this one read, whatever the number of schedules.
 */
export const NEXT_SCHEDULE_DUE = defineQuery<NoParams, { ms: string | null }>(
  "leasehold_next_schedule_due",
  `
SELECT extract(epoch FROM (SELECT min(next_fire_at) FROM schedules WHERE NOT paused AND next_fire_at IS NOT NULL) - clock_timestamp()) * 1000 AS ms`,
);

/*
 * One due schedule, held until the transaction ends; SKIP LOCKED passes over one another
 * coordinator is firing. Through schedules_due_idx: the cost is the due rows', not the table's.
 */
export const TAKE_DUE_SCHEDULE = defineQuery<NoParams, ScheduleRow & { db_now: Date; next_fire_at: Date }>(
  "leasehold_take_due_schedule",
  `
SELECT *, now() AS db_now FROM schedules
WHERE NOT paused AND next_fire_at IS NOT NULL AND next_fire_at <= now()
ORDER BY next_fire_at
LIMIT 1
FOR UPDATE SKIP LOCKED`,
);

/** Whether every node of the previous tick's workflow is final (a workflow deleted by retention is). */
export const PREVIOUS_WORKFLOW_FINAL = defineQuery<{ workflowId: string }, { final: boolean }>(
  null,
  `SELECT NOT EXISTS (SELECT 1 FROM jobs WHERE workflow_id = $1 AND status IN ('pending', 'running')) AS final`,
  (p) => [p.workflowId],
);

// A tick's workflow: its nodes name the schedule and tick (ListJobs by schedule lists them), and the tick its workflow.
export const LINK_TICK_WORKFLOW = defineQuery<Tick & { workflowId: string }>(
  null,
  `
WITH nodes AS (UPDATE jobs SET schedule_name = $1, schedule_fire_at = $2 WHERE workflow_id = $3)
UPDATE schedule_ticks SET workflow_id = $3 WHERE schedule_name = $1 AND fire_at = $2`,
  (p) => [p.schedule, p.fireAt, p.workflowId],
);

/** Whether the job of the previous tick is final (a job deleted by retention is). */
export const PREVIOUS_JOB_FINAL = defineQuery<{ jobId: string }, { final: boolean }>(
  null,
  `SELECT coalesce((SELECT status IN ('completed', 'failed', 'cancelled') FROM jobs WHERE id = $1), true) AS final`,
  (p) => [p.jobId],
);

interface Tick {
  schedule: string;
  fireAt: Date;
}

/*
 * The tick's unique key. A conflict means the tick was handled already: it never happens while
 * next_fire_at moves on in the same transaction, and if it did, the tick would still create no
 * second job. $1 schedule, $2 tick, $3 outcome, $4 detail.
 */
export const INSERT_TICK = defineQuery<Tick & { outcome: "fired" | "skipped" | "failed"; detail: string | null }, { inserted: number }>(
  null,
  `
INSERT INTO schedule_ticks (schedule_name, fire_at, outcome, detail) VALUES ($1, $2, $3, $4)
ON CONFLICT (schedule_name, fire_at) DO NOTHING
RETURNING 1 AS inserted`,
  (p) => [p.schedule, p.fireAt, p.outcome, p.detail],
);

// The job created for a tick names its schedule and tick, and the tick its job. $1 schedule, $2 tick, $3 job id.
export const LINK_TICK_JOB = defineQuery<Tick & { jobId: string }>(
  null,
  `
WITH job AS (UPDATE jobs SET schedule_name = $1, schedule_fire_at = $2 WHERE id = $3)
UPDATE schedule_ticks SET job_id = $3 WHERE schedule_name = $1 AND fire_at = $2`,
  (p) => [p.schedule, p.fireAt, p.jobId],
);

// $1 schedule, $2 next_fire_at (null: no later tick), $3 last tick that created a job (or a workflow),
// $4 its job, $5 its workflow (null: unchanged).
export const ADVANCE_SCHEDULE = defineQuery<{
  schedule: string;
  nextFireAt: Date | null;
  lastFireAt: Date | null;
  lastJobId: string | null;
  lastWorkflowId: string | null;
}>(
  null,
  `
UPDATE schedules SET next_fire_at = $2, last_fire_at = coalesce($3, last_fire_at), last_job_id = coalesce($4, last_job_id),
  last_workflow_id = coalesce($5, last_workflow_id)
WHERE name = $1`,
  (p) => [p.schedule, p.nextFireAt, p.lastFireAt, p.lastJobId, p.lastWorkflowId],
);

// Ticks a day older than the one handled: long past any tick a pass could handle again.
export const PRUNE_TICKS = defineQuery<Tick>(
  null,
  `DELETE FROM schedule_ticks WHERE schedule_name = $1 AND fire_at < $2::timestamptz - interval '1 day'`,
  (p) => [p.schedule, p.fireAt],
);

/** What one schedule's transaction did (counted once it has committed). */
interface ScheduleOutcome {
  schedule: string;
  fired: number;
  overlap: number;
  catchUp: number;
  failures: ScheduleTickResult["failures"];
}

export class Scheduler {
  private readonly graceMs: number;
  private readonly maxPerPass: number;

  constructor(
    private readonly ctx: StoreContext,
    private readonly config: SchedulerConfig = {},
  ) {
    this.graceMs = config.graceMs ?? SCHEDULER_DEFAULTS.graceMs;
    this.maxPerPass = config.maxPerPass ?? SCHEDULER_DEFAULTS.maxPerPass;
    if (!(this.graceMs >= 0)) throw new RangeError(`scheduler graceMs must be at least 0, not ${this.graceMs}`);
  }

  /** One pass: every due schedule (up to maxPerPass), each in its own transaction. */
  async runOnce(signal: AbortSignal | undefined): Promise<ScheduleTickResult> {
    const result: ScheduleTickResult = { fired: 0, skipped: { overlap: 0, catchUp: 0, failed: 0 }, failures: [], nextDueInMs: null };
    const due = await this.nextDue(signal);
    if (due !== null && due <= 0) {
      for (let n = 0; n < this.maxPerPass; n++) {
        const done = await inTransaction(this.ctx.pool, signal, (c) => this.fireOne(c));
        if (done === null) break; // nothing left, or what is due is held by another coordinator's pass
        // Counted once committed: a tick rolled back is counted by the pass that fires it.
        result.fired += done.fired;
        result.skipped.overlap += done.overlap;
        result.skipped.catchUp += done.catchUp;
        result.skipped.failed += done.failures.length;
        result.failures.push(...done.failures);
        const counts = [
          ["fired", done.fired],
          ["overlap", done.overlap],
          ["catch_up", done.catchUp],
          ["failed", done.failures.length],
        ] as const;
        for (const [outcome, n] of counts) if (n > 0) this.config.observer?.scheduleTicks?.(done.schedule, outcome, n);
      }
    }
    result.nextDueInMs = await this.nextDue(signal);
    return result;
  }

  private async nextDue(signal: AbortSignal | undefined): Promise<number | null> {
    // numeric: pg hands it over as text.
    const { ms } = await withClient(this.ctx.pool, signal, (c) => NEXT_SCHEDULE_DUE.one(c));
    return ms === null ? null : Number(ms);
  }

  /** Fires the ticks of one due schedule; null when none was due (or every due one is held). */
  private async fireOne(c: pg.PoolClient): Promise<ScheduleOutcome | null> {
    const s = await TAKE_DUE_SCHEDULE.maybe(c);
    if (!s) return null;
    const done: ScheduleOutcome = { schedule: s.name, fired: 0, overlap: 0, catchUp: 0, failures: [] };
    const plan = planTicks(
      new CronSchedule(s.cron, s.timezone),
      { catchUp: s.catch_up, maxCatchUp: s.max_catch_up },
      s.next_fire_at,
      s.db_now,
      this.graceMs,
    );
    done.catchUp = plan.missedSkipped;
    let lastFireAt: Date | null = null;
    let lastJobId: string | null = null;
    let lastWorkflowId: string | null = null;
    let previousFinal: boolean | undefined;
    const ofWorkflows = s.workflow !== null && s.workflow !== undefined;
    const what = ofWorkflows ? "workflow" : "job";
    for (const tick of plan.fire) {
      if (s.overlap === "skip") {
        previousFinal ??= ofWorkflows
          ? !s.last_workflow_id || (await PREVIOUS_WORKFLOW_FINAL.one(c, { workflowId: s.last_workflow_id })).final
          : s.last_job_id === null || (await PREVIOUS_JOB_FINAL.one(c, { jobId: s.last_job_id })).final;
        if (!previousFinal) {
          if (await this.recordTick(c, s.name, tick, "skipped", `the previous tick's ${what} is not final (overlap: skip)`)) done.overlap++;
          continue;
        }
      }
      const madeId = await this.fireTick(c, s, tick, done);
      if (madeId !== null) {
        lastFireAt = tick;
        lastJobId = ofWorkflows ? null : madeId;
        lastWorkflowId = ofWorkflows ? madeId : null;
        previousFinal = false; // the job (or workflow) just created is not final
      }
    }
    await ADVANCE_SCHEDULE.run(c, { schedule: s.name, nextFireAt: plan.next, lastFireAt, lastJobId, lastWorkflowId });
    if (plan.fire.length > 0) await PRUNE_TICKS.run(c, { schedule: s.name, fireAt: plan.fire[plan.fire.length - 1] });
    return done;
  }

  /**
   * The tick's key, then its job (or workflow), under a savepoint: a template that CreateJob now refuses (its
   * workload's schema changed since PutSchedule) records the tick failed and lets the schedule
   * go on, instead of failing the pass again on every tick. The job's (or workflow's) id, or null.
   */
  private async fireTick(c: pg.PoolClient, s: ScheduleRow, tick: Date, done: ScheduleOutcome): Promise<string | null> {
    await c.query("SAVEPOINT leasehold_tick");
    try {
      if (!(await this.recordTick(c, s.name, tick, "fired", null))) {
        await c.query("RELEASE SAVEPOINT leasehold_tick");
        return null;
      }
      let made: string;
      if (s.workflow) {
        // A schedule of workflows: CreateWorkflow's own core, in this transaction.
        const prepared = prepareWorkflow(this.ctx, s.workflow, undefined, { scheduleName: s.name, scheduleFireAt: tick });
        made = (await writeWorkflow(this.ctx, c, prepared)).workflow.id;
        await LINK_TICK_WORKFLOW.run(c, { schedule: s.name, fireAt: tick, workflowId: made });
      } else {
        made = (await createJobInTransaction(this.ctx, c, s.job)).job.id;
        await LINK_TICK_JOB.run(c, { schedule: s.name, fireAt: tick, jobId: made });
      }
      await c.query("RELEASE SAVEPOINT leasehold_tick");
      done.fired++;
      return made;
    } catch (err) {
      if (!(err instanceof QueueError) || err.kind === "unavailable" || err.kind === "deadline_exceeded") throw err;
      await c.query("ROLLBACK TO SAVEPOINT leasehold_tick");
      await this.recordTick(c, s.name, tick, "failed", err.message);
      await c.query("RELEASE SAVEPOINT leasehold_tick");
      done.failures.push({ schedule: s.name, fireAt: tick, message: err.message });
      return null;
    }
  }

  private async recordTick(
    c: pg.PoolClient,
    name: string,
    tick: Date,
    outcome: "fired" | "skipped" | "failed",
    detail: string | null,
  ): Promise<boolean> {
    const rows = await INSERT_TICK.run(c, { schedule: name, fireAt: tick, outcome, detail });
    return rows.length === 1;
  }
}
