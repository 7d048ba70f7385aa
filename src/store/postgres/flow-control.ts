// Flow control's statements besides the claim (which is queries.ts' claimCtes and the migration's
// leasehold_flow_claim): pause and resume, per-key caps, what an empty claim of a flow-controlled
// workload was refused by, why a pending task waits, and which labels workers claim with.
// The design: flow-control.md beside this file.

import type pg from "pg";
import { NotFoundError } from "../../queue/errors.js";
import { validatePutKeyLimit, waitingReason, type WaitingFacts } from "../../queue/flow-control.js";
import type { CallOptions, KeyLimit, Labels, PutKeyLimitInput, Task, Waiting, Workload } from "../../queue/types.js";
import { requireWorkloadName } from "../../queue/validation.js";
import { NOTIFY_CHANNEL } from "./channels.js";
import type { StoreContext } from "./context.js";
import { withClient } from "./db.js";
import { toWorkload, type WorkloadRow } from "./rows.js";

/** Wakes this many parked claims of a workload when it is resumed or a key's cap changes: all of them. */
const WAKE_ALL = 100_000;

export const PAUSE_WORKLOAD = `UPDATE workloads SET paused = true, updated_at = now() WHERE name = $1 RETURNING *`;

// Resumed: every claim parked on the workload is woken (the NOTIFY goes out at commit).
export const RESUME_WORKLOAD = `
WITH resumed AS (
  UPDATE workloads SET paused = false, updated_at = now() WHERE name = $1 RETURNING *
), woken AS (
  SELECT pg_notify('${NOTIFY_CHANNEL}', name || ':${WAKE_ALL}') FROM resumed
)
SELECT resumed.*, (SELECT count(*) FROM woken) AS notified FROM resumed`;

/*
 * A key's own cap, and the workload's has_key_limits (so its claims take the flow path). The
 * workload row is only written when the flag is not set yet: its xmin is CreateJob's check that a
 * cached workload is current. A raised cap may free slots: parked claims are woken.
 */
export const PUT_KEY_LIMIT = `
WITH w AS (
  SELECT name FROM workloads WHERE name = $1
), flagged AS (
  UPDATE workloads SET has_key_limits = true, updated_at = now() WHERE name = (SELECT name FROM w) AND NOT has_key_limits
), limited AS (
  INSERT INTO workload_key_limits (workload, key, max_leased) SELECT name, $2, $3 FROM w
  ON CONFLICT (workload, key) DO UPDATE SET max_leased = EXCLUDED.max_leased, updated_at = now()
  RETURNING workload, key, max_leased
), woken AS (
  SELECT pg_notify('${NOTIFY_CHANNEL}', workload || ':${WAKE_ALL}') FROM limited
)
SELECT limited.*, (SELECT count(*) FROM woken) AS notified FROM limited`;

/** Flow-controlled workloads: the coordinator's view, refreshed every few seconds. */
export const SELECT_FLOW_WORKLOADS = `SELECT name FROM workloads WHERE flow`;

/*
 * Why an empty claim of these workloads leased nothing, per workload: paused, its cap full (live
 * leases), or its rate limit out of tokens (and in how many ms the next is due). Read only after a
 * claim of a flow-controlled workload came back empty.
 */
export const FLOW_REFUSALS = `
SELECT w.name, w.paused,
  (w.max_leased IS NOT NULL AND (
    SELECT count(*) FROM tasks l WHERE l.status = 'leased' AND l.workload = w.name AND l.lease_expires_at > now()) >= w.max_leased) AS cap_full,
  (SELECT CASE WHEN x.tokens >= 1 THEN NULL ELSE ceil(1000 * (1 - x.tokens) / w.max_leases_per_second) END
   FROM workload_rate_buckets b,
     LATERAL (SELECT least(w.leases_burst, b.tokens + extract(epoch FROM now() - b.refreshed_at)::float8 * w.max_leases_per_second) AS tokens) x
   WHERE b.workload = w.name AND w.max_leases_per_second IS NOT NULL)::float8 AS rate_wait_ms
FROM workloads w WHERE w.name = ANY ($1::text[]) AND w.flow`;

// Which labels workers claim a workload with (worker_sightings), written at most every SIGHTING_MS per coordinator.
export const RECORD_SIGHTINGS = `
INSERT INTO worker_sightings (workload, labels, seen_at) SELECT w, $2::jsonb, now() FROM unnest($1::text[]) AS w
ON CONFLICT (workload, labels) DO UPDATE SET seen_at = now()`;

/** What GetTask tells a pending task's waiting reason from (queue/flow-control.ts, waitingReason). */
export const WAITING_FACTS = `
SELECT now() AS now, t.run_after, w.paused, w.max_leased, t.concurrency_key, t.required_labels,
  (SELECT count(*)::int FROM tasks l WHERE l.status = 'leased' AND l.workload = t.workload AND l.lease_expires_at > now()) AS leased,
  coalesce(o.max_leased, w.max_leased_per_key) AS key_cap,
  (SELECT count(*)::int FROM tasks l
   WHERE l.status = 'leased' AND l.workload = t.workload AND l.concurrency_key = t.concurrency_key AND l.lease_expires_at > now()) AS key_leased,
  (SELECT CASE WHEN x.tokens >= 1 THEN NULL ELSE now() + make_interval(secs => (1 - x.tokens) / w.max_leases_per_second) END
   FROM workload_rate_buckets b,
     LATERAL (SELECT least(w.leases_burst, b.tokens + extract(epoch FROM now() - b.refreshed_at)::float8 * w.max_leases_per_second) AS tokens) x
   WHERE b.workload = t.workload AND w.max_leases_per_second IS NOT NULL) AS next_token_at,
  EXISTS (SELECT 1 FROM worker_sightings s WHERE s.workload = t.workload AND s.seen_at > now() - interval '1 minute') AS workers_seen,
  (t.required_labels IS NULL OR EXISTS (
    SELECT 1 FROM worker_sightings s
    WHERE s.workload = t.workload AND s.seen_at > now() - interval '1 minute' AND t.required_labels <@ s.labels)) AS labels_seen
FROM tasks t
JOIN workloads w ON w.name = t.workload
LEFT JOIN workload_key_limits o ON o.workload = t.workload AND o.key = t.concurrency_key
WHERE t.id = $1`;

// Wakes the claims parked on workloads whose tasks stopped holding a slot (any coordinator).
const NOTIFY_FREED = `SELECT pg_notify('${NOTIFY_CHANNEL}', w || ':1') FROM unnest($1::text[]) AS w`;

export async function pauseWorkload(ctx: StoreContext, name: string, opts: CallOptions): Promise<Workload> {
  const n = requireWorkloadName("name", name);
  const { rows } = await withClient(ctx.pool, opts.signal, (c) => c.query(PAUSE_WORKLOAD, [n]));
  if (rows.length === 0) throw new NotFoundError("workload", n, "name");
  ctx.flow.workloads.mark(n, true);
  return toWorkload(rows[0] as WorkloadRow);
}

export async function resumeWorkload(ctx: StoreContext, name: string, opts: CallOptions): Promise<Workload> {
  const n = requireWorkloadName("name", name);
  const { rows } = await withClient(ctx.pool, opts.signal, (c) => c.query(RESUME_WORKLOAD, [n]));
  if (rows.length === 0) throw new NotFoundError("workload", n, "name");
  return toWorkload(rows[0] as WorkloadRow);
}

export async function putKeyLimit(ctx: StoreContext, input: PutKeyLimitInput, opts: CallOptions): Promise<KeyLimit> {
  const limit = validatePutKeyLimit(input, requireWorkloadName);
  const { rows } = await withClient(ctx.pool, opts.signal, (c) => c.query(PUT_KEY_LIMIT, [limit.name, limit.key, limit.maxLeased]));
  if (rows.length === 0) throw new NotFoundError("workload", limit.name, "name");
  ctx.flow.workloads.mark(limit.name, true);
  return { name: rows[0].workload as string, key: rows[0].key as string, maxLeased: rows[0].max_leased as number };
}

/**
 * An empty claim of a flow-controlled workload: counted by what refused it (metrics), and, when a
 * rate limit had no token, opts.claimRetryAfterMs says when the next is due (the long poll waits that long).
 */
export async function explainRefusal(ctx: StoreContext, c: pg.PoolClient, workloads: string[], opts: CallOptions): Promise<void> {
  const { rows } = await c.query({ name: "leasehold_flow_refusals", text: FLOW_REFUSALS, values: [workloads] });
  let wait = Infinity;
  for (const r of rows) {
    if (r.cap_full) ctx.options.observer?.claimRefused?.(r.name as string, "cap");
    if (r.rate_wait_ms !== null) {
      ctx.options.observer?.claimRefused?.(r.name as string, "rate");
      wait = Math.min(wait, r.rate_wait_ms as number);
    }
  }
  if (Number.isFinite(wait)) opts.claimRetryAfterMs = Math.max(1, wait);
}

/**
 * Tasks of these workloads stopped holding their slots (completed, failed): claims parked on the
 * flow-controlled ones among them are woken, on every coordinator. Uncapped workloads pay nothing.
 */
export function freedSlots(ctx: StoreContext, workloads: readonly string[]): void {
  const capped = [...new Set(workloads)].filter((w) => ctx.flow.workloads.any([w]));
  if (capped.length === 0) return;
  ctx.pool.query(NOTIFY_FREED, [capped]).catch(() => {});
}

/** What the store keeps for flow control. */
export interface FlowState {
  readonly workloads: FlowWorkloads;
  readonly sightings: WorkerSightings;
}

/** Why a pending task waits; undefined for a task that is not pending. */
export async function waitingOf(c: pg.PoolClient, task: Task): Promise<Waiting | undefined> {
  if (task.status !== "pending") return undefined;
  const { rows } = await c.query(WAITING_FACTS, [task.id]);
  const r = rows[0];
  if (!r) return undefined;
  const facts: WaitingFacts = {
    runAfter: r.run_after as Date,
    now: r.now as Date,
    paused: r.paused as boolean,
    maxLeased: (r.max_leased as number | null) ?? null,
    leased: r.leased as number,
    concurrencyKey: r.concurrency_key as string,
    keyCap: (r.key_cap as number | null) ?? null,
    keyLeased: r.key_leased as number,
    nextTokenAt: (r.next_token_at as Date | null) ?? null,
    workersSeen: r.workers_seen as boolean,
    requiredLabels: (r.required_labels as Labels | null) ?? null,
    labelsSeen: r.labels_seen as boolean,
  };
  return waitingReason(facts);
}

/** How often a coordinator records that workers claim a workload with some labels (per workload and labels). */
const SIGHTING_MS = 10_000;
/** How often the coordinator re-reads which workloads are flow-controlled. */
const FLOW_REFRESH_MS = 2_000;

/** Records, at most every SIGHTING_MS per (workloads, labels), that a worker claimed them with these labels. */
export class WorkerSightings {
  private readonly last = new Map<string, number>();

  async seen(c: pg.PoolClient, workloads: string[], labels: string): Promise<void> {
    const key = labels + "\u0000" + workloads.join(",");
    const now = Date.now();
    const at = this.last.get(key);
    if (at !== undefined && now - at < SIGHTING_MS) return;
    this.last.set(key, now);
    if (this.last.size > 10_000) this.last.clear();
    try {
      await c.query({ name: "leasehold_record_sightings", text: RECORD_SIGHTINGS, values: [workloads, labels] });
    } catch (err) {
      // A lost sighting only makes a waiting reason less precise; the claim stands.
      this.last.delete(key);
      if ((err as { code?: string }).code === undefined) throw err;
    }
  }
}

/** Which workloads have caps, a rate limit or are paused, as of a read at most FLOW_REFRESH_MS old. */
export class FlowWorkloads {
  private names = new Set<string>();
  private readAt = 0;
  private reading: Promise<void> | undefined;

  constructor(private readonly pool: pg.Pool) {}

  /** Whether any of these is flow-controlled (refreshing the view in the background when it is old). */
  any(workloads: readonly string[]): boolean {
    if (Date.now() - this.readAt > FLOW_REFRESH_MS && !this.reading) {
      this.reading = this.pool
        .query(SELECT_FLOW_WORKLOADS)
        .then(({ rows }) => {
          this.names = new Set(rows.map((r) => r.name as string));
          this.readAt = Date.now();
        })
        .catch(() => {})
        .finally(() => (this.reading = undefined));
    }
    return workloads.some((w) => this.names.has(w));
  }

  /** Told by a statement that a workload's settings changed here, so this coordinator knows at once. */
  mark(name: string, flow: boolean): void {
    if (flow) this.names.add(name);
    else this.names.delete(name);
  }
}
