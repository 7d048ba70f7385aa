// Retention: finished jobs older than RETENTION_DAYS are deleted, with their tasks, a few per
// statement. Run by StoreMaintenance (store-maintenance.ts) when its probe finds any. Their events go
// with the event log's partitions (event-partitions.ts), dropped whole once past the same retention.

import type pg from "pg";
import { withClient } from "../sql/db.js";
import { defineQuery } from "../sql/query.js";

export interface RetentionConfig {
  /** Finished jobs older than this are deleted; undefined: kept forever. */
  days?: number;
  /** Old jobs deleted per statement (each with all its tasks and events). */
  batchJobs?: number;
  /** Statements per pass, so one pass stays short however much is due. */
  batchesPerPass?: number;
}

export const RETENTION_DEFAULTS = { batchJobs: 20, batchesPerPass: 50 } as const;

/** Workflows deleted per statement: each may hold LIMITS.maxWorkflowNodes nodes. */
const WORKFLOWS_PER_BATCH = 2;

/**
 * A job retention may delete: settled, or not billable (no account, no billing context). An
 * unsettled billable job is kept however old, with its tasks, until SettleJob records it: its
 * usage and billing context are what the settlement reads (settlements.ts). DELETE_OLD_WORKFLOWS
 * writes the same condition on its nodes (j.).
 */
export const SETTLED_OR_UNBILLED = `(settled_at IS NOT NULL OR (account IS NULL AND reserved_units IS NULL AND billing_key IS NULL))`;

/*
 * Retention: a few old finished jobs per statement (each may hold thousands of tasks), with their
 * tasks (no foreign key cascades them: see migrations/1764490000000_lean_hot_path.sql;
 * tasks_job_chunk_idx finds a job's tasks). SKIP LOCKED keeps coordinators apart.
 * Not their events: those are in time partitions dropped whole past the same retention, at most one
 * partition interval after the job (a job's events are all older than its completion). Deleting
 * them here, row by row, was the WAL and the bloat the partitions are there to avoid (a million
 * events: docs/scaling.md); until its partition goes, a deleted job's events are read by nothing
 * (every read of events starts from the job or its task).
 * $1 days, $2 jobs per batch.
 */
export const DELETE_OLD_JOBS = defineQuery<{ days: number; batchJobs: number }, { id: string }>(
  null,
  `
WITH old AS (
  SELECT id FROM jobs
  WHERE status IN ('completed', 'failed', 'cancelled') AND completed_at < now() - make_interval(days => $1)
    AND ${SETTLED_OR_UNBILLED} AND workflow_id IS NULL
  ORDER BY completed_at
  LIMIT $2
  FOR UPDATE SKIP LOCKED
), job_tasks AS (
  DELETE FROM tasks WHERE job_id = ANY (ARRAY(SELECT id FROM old))
), job_edges AS (
  DELETE FROM job_dependencies WHERE parent_id = ANY (ARRAY(SELECT id FROM old)) OR child_id = ANY (ARRAY(SELECT id FROM old))
)
DELETE FROM jobs WHERE id = ANY (ARRAY(SELECT id FROM old)) RETURNING id`,
  (p) => [p.days, p.batchJobs],
);

/*
 * A workflow is deleted whole, once every node is as DELETE_OLD_JOBS would delete it (final past the
 * retention, settled or not billable): its nodes with their tasks and edges, then the workflow. A
 * node is never deleted alone (DELETE_OLD_JOBS passes nodes over), so GetWorkflow never shows a
 * workflow with holes. Oldest first through workflows_created_idx, a few per statement (each may
 * hold 1,000 nodes); each candidate's nodes through jobs_workflow_node_idx. SKIP LOCKED keeps
 * coordinators apart. $1 days, $2 workflows per batch.
 */
export const DELETE_OLD_WORKFLOWS = defineQuery<{ days: number; batchWorkflows: number }, { id: string }>(
  null,
  `
WITH old AS (
  SELECT w.id FROM workflows w
  WHERE w.created_at < now() - make_interval(days => $1)
    AND NOT EXISTS (
      SELECT 1 FROM jobs j WHERE j.workflow_id = w.id
        AND NOT (j.status IN ('completed', 'failed', 'cancelled') AND j.completed_at < now() - make_interval(days => $1)
                 AND (j.settled_at IS NOT NULL OR (j.account IS NULL AND j.reserved_units IS NULL AND j.billing_key IS NULL))))
  ORDER BY w.created_at
  LIMIT $2
  FOR UPDATE SKIP LOCKED
), nodes AS (
  SELECT j.id FROM jobs j WHERE j.workflow_id = ANY (ARRAY(SELECT id FROM old)) FOR UPDATE
), node_tasks AS (
  DELETE FROM tasks WHERE job_id = ANY (ARRAY(SELECT id FROM nodes))
), node_edges AS (
  DELETE FROM job_dependencies WHERE parent_id = ANY (ARRAY(SELECT id FROM nodes)) OR child_id = ANY (ARRAY(SELECT id FROM nodes))
), node_jobs AS (
  DELETE FROM jobs WHERE id = ANY (ARRAY(SELECT id FROM nodes))
)
DELETE FROM workflows WHERE id = ANY (ARRAY(SELECT id FROM old)) RETURNING id`,
  (p) => [p.days, p.batchWorkflows],
);

export class Retention {
  readonly days: number | undefined;
  private readonly batchJobs: number;
  private readonly batchesPerPass: number;

  constructor(
    private readonly pool: pg.Pool,
    config: RetentionConfig = {},
  ) {
    this.days = config.days;
    this.batchJobs = config.batchJobs ?? RETENTION_DEFAULTS.batchJobs;
    this.batchesPerPass = config.batchesPerPass ?? RETENTION_DEFAULTS.batchesPerPass;
  }

  /** One pass; returns how many jobs were deleted (workflows' nodes not counted). */
  async runOnce(signal: AbortSignal | undefined): Promise<number> {
    const days = this.days;
    if (days === undefined) return 0;
    let deleted = 0;
    for (let i = 0; i < this.batchesPerPass; i++) {
      const gone = await withClient(this.pool, signal, (c) => DELETE_OLD_JOBS.run(c, { days, batchJobs: this.batchJobs }));
      deleted += gone.length;
      if (gone.length < this.batchJobs) break;
    }
    for (let i = 0; i < this.batchesPerPass; i++) {
      const gone = await withClient(this.pool, signal, (c) => DELETE_OLD_WORKFLOWS.run(c, { days, batchWorkflows: WORKFLOWS_PER_BATCH }));
      if (gone.length < WORKFLOWS_PER_BATCH) break;
    }
    return deleted;
  }
}
