// Periodic schedules' types: a schedule, PutSchedule's input and answer, and what a scheduler
// pass did. Their rules and cron arithmetic: src/queue/schedule-rules.ts.

import type { CreateJobInput } from "./jobs.js";
import type { CreateWorkflowInput } from "./workflows.js";

export const OVERLAP_POLICIES = ["allow", "skip"] as const;

/** What a tick does while the previous tick's job is not final: create its job anyway, or skip it. */
export type OverlapPolicy = (typeof OVERLAP_POLICIES)[number];

export const CATCH_UP_POLICIES = ["skip", "one", "all"] as const;

/** What a schedule does with ticks missed while no scheduler ran (docs/schedules.md, "Catch-up"). */
export type CatchUpPolicy = (typeof CATCH_UP_POLICIES)[number];

export const SCHEDULE_DEFAULTS = { timezone: "UTC", overlap: "allow", catchUp: "one", maxCatchUp: 10 } as const;

/** Next fire times an answer lists. */
export const NEXT_FIRE_TIMES = 5;

export interface PutScheduleInput {
  name: string;
  cron: string;
  /** Absent or "": UTC. */
  timezone?: string;
  /** One of job and workflow: what each tick creates. */
  job?: CreateJobInput;
  workflow?: CreateWorkflowInput;
  overlap?: OverlapPolicy;
  catchUp?: CatchUpPolicy;
  maxCatchUp?: number;
}

export interface Schedule {
  name: string;
  cron: string;
  timezone: string;
  /** The job template; null for a schedule of workflows. */
  job: CreateJobInput | null;
  /** The workflow template; null for a schedule of jobs. */
  workflow: CreateWorkflowInput | null;
  overlap: OverlapPolicy;
  catchUp: CatchUpPolicy;
  maxCatchUp: number;
  paused: boolean;
  /** Earliest first; empty while paused or when the expression matches no later time. */
  nextFireTimes: Date[];
  lastFireAt: Date | null;
  lastJobId: string | null;
  /** The workflow made at lastFireAt, for a schedule of workflows. */
  lastWorkflowId: string | null;
  createdAt: Date;
  updatedAt: Date;
}

export interface PutScheduleResult {
  schedule: Schedule;
  created: boolean;
}

/** What one scheduler pass did, for metrics and logs, and when it should look again. */
export interface ScheduleTickResult {
  /** Ticks that created a job. */
  fired: number;
  /** Ticks that created none: overlap, catch-up, or a template CreateJob refused. */
  skipped: { overlap: number; catchUp: number; failed: number };
  /** Ticks whose template CreateJob refused, with its message (logged). */
  failures: { schedule: string; fireAt: Date; message: string }[];
  /** Milliseconds until the earliest next tick of an unpaused schedule (null: none). */
  nextDueInMs: number | null;
}
