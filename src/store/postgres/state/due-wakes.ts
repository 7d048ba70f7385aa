// Delayed jobs: what a CreateJob with run_at (or a finalizer) writes besides the job and its
// tasks (DELAY_JOB), and the wake-up of parked claimers at a due time (DueWakes).
//
// A task not yet due is a pending task whose run_after lies ahead, the column a retry's backoff
// uses: the claim passes it over inside its index and needs no change. What the claim cannot do
// is notice the moment it becomes due; without help a parked long poll would find it only at its
// poll floor (POLL_INTERVAL_MS). So each delayed CreateJob records its due times in due_wakeups,
// one row per (due time, workload), and every coordinator keeps one timer for the earliest row it
// knows of. At that time it deletes the rows now due and sends, for each, the NOTIFY a new job
// sends: parked claimers on every coordinator wake and claim. The DELETE takes each row once, so
// a due time is announced once however many coordinators' timers fire; the maintenance loop's
// refresh picks up rows written by other coordinators (and by one that died before its timer).

import type pg from "pg";
import type { NormalizedCreateJob } from "../../../queue/validation.js";
import { NOTIFY_CHANNEL } from "../sql/channels.js";
import { withClient } from "../sql/db.js";
import { defineQuery, type NoParams } from "../sql/query.js";
import type { JobRow } from "../sql/rows.js";

interface DelayJob {
  jobId: string;
  runAt: string | null;
  /** per task with a due time: its chunk_index, its own run_at (null: the job's) and workload */
  chunkIndexes: number[];
  runAts: (string | null)[];
  workloads: string[];
  taskCount: number;
  finalizerWorkload: string | null;
  /** jsonb text */
  finalizerParameters: string | null;
  finalizerOnFailure: boolean | null;
}

/*
 * Run in the CreateJob's transaction, after its insert. $1 job id, $2 the job's run_at (null:
 * none), $3/$4/$5 per task with a due time (its own, or the job's): chunk_index, run_at (null:
 * the job's), workload; $6 the job's task count; $7..$9 the finalizer (workload, parameters,
 * run_on_failure; nulls for none).
 * - delayed: tasks whose due time lies ahead by the database's clock get it as run_after (a time
 *   in the past means now, and leaves the task as inserted);
 * - wakes: their due times, one row per (time, workload);
 * - due_now: the tasks given a time already past are claimable at once, and get the wake-up
 *   CREATE_JOB would have sent them (the caller sent none for a delayed job);
 * - the job's run_at is its tasks' earliest due time when every task lies ahead (else it is
 *   claimable now, and not scheduled).
 */
export const DELAY_JOB = defineQuery<DelayJob, JobRow>(
  "leasehold_delay_job",
  `
WITH given AS (
  SELECT u.chunk_index, coalesce(u.run_at, $2::timestamptz) AS run_at, u.workload
  FROM unnest($3::int[], $4::timestamptz[], $5::text[]) AS u(chunk_index, run_at, workload)
), delayed AS (
  UPDATE tasks t SET run_after = g.run_at
  FROM given g
  WHERE t.job_id = $1 AND t.chunk_index = g.chunk_index AND g.run_at > now()
  RETURNING t.run_after, t.workload
), wakes AS (
  INSERT INTO due_wakeups (run_at, workload, tasks)
  SELECT run_after, workload, count(*) FROM delayed GROUP BY run_after, workload
), due_now AS (
  SELECT pg_notify('${NOTIFY_CHANNEL}', d.workload || ':' || d.n)
  FROM (SELECT workload, count(*) AS n FROM given WHERE run_at <= now() GROUP BY workload) d
)
UPDATE jobs j
SET run_at = CASE WHEN (SELECT count(*) FROM delayed) = $6::int THEN (SELECT min(run_after) FROM delayed) END,
    finalizer_workload = $7, finalizer_parameters = $8::jsonb, finalizer_on_failure = coalesce($9::boolean, false)
WHERE j.id = $1
RETURNING j.*, (SELECT count(*) FROM due_now) AS notified`,
  (p) => [
    p.jobId,
    p.runAt,
    p.chunkIndexes,
    p.runAts,
    p.workloads,
    p.taskCount,
    p.finalizerWorkload,
    p.finalizerParameters,
    p.finalizerOnFailure,
  ],
);

/** Whether a CreateJob needs DELAY_JOB: a run_at anywhere, or a finalizer. */
export function needsDelayJob(job: NormalizedCreateJob): boolean {
  return job.runAt !== undefined || job.finalizer !== undefined || job.tasks.some((t) => t.runAt !== undefined);
}

/** Whether any task of the job has a due time (its own or the job's). */
export function isDelayed(job: NormalizedCreateJob): boolean {
  return job.runAt !== undefined || job.tasks.some((t) => t.runAt !== undefined);
}

/** DELAY_JOB on `c`, in the caller's transaction; the job's row as it now is. */
export async function delayJob(c: pg.PoolClient, jobId: string, job: NormalizedCreateJob): Promise<JobRow> {
  const timed = job.tasks.filter((t) => t.runAt !== undefined || job.runAt !== undefined);
  return DELAY_JOB.one(c, {
    jobId,
    runAt: job.runAt ?? null,
    chunkIndexes: timed.map((t) => t.chunkIndex),
    runAts: timed.map((t) => t.runAt ?? null),
    workloads: timed.map((t) => t.workload),
    taskCount: job.tasks.length,
    finalizerWorkload: job.finalizer?.workload ?? null,
    finalizerParameters: job.finalizer ? JSON.stringify(job.finalizer.parameters) : null,
    finalizerOnFailure: job.finalizer?.runOnFailure ?? null,
  });
}

// Milliseconds from the database's now() to the earliest due time recorded (null: none).
export const NEXT_DUE = defineQuery<NoParams, { in_ms: number | null }>(
  "leasehold_next_due",
  `SELECT (extract(epoch FROM min(run_at) - now()) * 1000)::float8 AS in_ms FROM due_wakeups`,
);

/*
 * The due rows, deleted, and their wake-ups sent (at commit, when the tasks are claimable by every
 * later statement's now()). A row another coordinator is deleting is waited for and then gone.
 */
export const FIRE_DUE = defineQuery<NoParams, { notified: string }>(
  "leasehold_fire_due",
  `
WITH due AS (
  DELETE FROM due_wakeups WHERE run_at <= now() RETURNING workload, tasks
)
SELECT count(pg_notify('${NOTIFY_CHANNEL}', d.workload || ':' || d.n)) AS notified
FROM (SELECT workload, sum(tasks) AS n FROM due GROUP BY workload) d`,
);

/** Longest a firing may take, so a stuck database never holds a pooled connection for long. */
const FIRE_DEADLINE_MS = 5000;
/** A timer set for a time this close is set for now (and a due time another coordinator just took is looked up again no sooner). */
const MIN_DELAY_MS = 5;
/** setTimeout's longest delay; a due time further ahead is looked up again then (or by the maintenance loop before). */
const MAX_DELAY_MS = 2 ** 31 - 1;

/**
 * The coordinator's one timer for the earliest due time it knows of. Armed by a delayed CreateJob
 * on this coordinator and by the maintenance loop (refresh), both from the database; at the time
 * it fires FIRE_DUE and arms itself for the next.
 */
export class DueWakes {
  private timer: NodeJS.Timeout | undefined;
  /** When the timer fires (this process's clock, ms); Infinity: not armed. */
  private at = Infinity;
  private firing: Promise<void> | undefined;

  constructor(
    private readonly pool: pg.Pool,
    private readonly onError: (err: unknown) => void = () => {},
  ) {}

  /** Reads the earliest due time on `c` (or a pooled client) and arms the timer for it, if sooner than the one set. */
  async refresh(c?: pg.PoolClient, signal?: AbortSignal): Promise<void> {
    const read = (q: pg.PoolClient) => NEXT_DUE.maybe(q);
    const inMs = (c ? await read(c) : await withClient(this.pool, signal, read))?.in_ms;
    if (inMs !== null && inMs !== undefined) this.arm(Date.now() + Math.max(inMs, 0));
  }

  /** refresh() without waiting for it; a failure is reported, and the maintenance loop's next refresh tries again. */
  refreshSoon(): void {
    this.refresh(undefined, AbortSignal.timeout(FIRE_DEADLINE_MS)).catch(this.onError);
  }

  stop(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.at = -Infinity;
  }

  private arm(atMs: number): void {
    if (atMs >= this.at) return;
    clearTimeout(this.timer);
    this.at = atMs;
    const delay = Math.min(Math.max(atMs - Date.now(), MIN_DELAY_MS), MAX_DELAY_MS);
    this.timer = setTimeout(() => this.fire(), delay);
    // A timer alone keeps no process alive (tests, a CLI run in-process).
    this.timer.unref();
  }

  private fire(): void {
    this.timer = undefined;
    this.at = Infinity;
    if (this.firing) {
      // Due while the last firing runs: once it is done, at once.
      void this.firing.then(() => this.arm(Date.now()));
      return;
    }
    this.firing = withClient(this.pool, AbortSignal.timeout(FIRE_DEADLINE_MS), async (c) => {
      await FIRE_DUE.run(c);
      // The next one; a due time this coordinator's clock reached before the database's is still
      // there, and read again in MIN_DELAY_MS.
      await this.refresh(c);
    })
      .catch(this.onError)
      .finally(() => {
        this.firing = undefined;
      });
  }
}
