// Flow control's statements besides the claim (which is claim.ts' claimCtes and
// migrations/functions/leasehold_flow_claim.sql): pause and resume, per-key caps, what an empty claim of a flow-controlled
// workload was refused by, why a pending task waits, and which labels workers claim with.
// The design: docs/flow-control-claim.md.

import type pg from "pg";
import { NotFoundError } from "../../../queue/errors.js";
import { validatePutKeyLimit, waitingReason, type WaitingFacts } from "../../../queue/flow-rules.js";
import type { CallOptions, KeyLimit, Labels, PutKeyLimitInput, Task, Waiting, Workload } from "../../../queue/types.js";
import { requireWorkloadName } from "../../../queue/validation.js";
import { NOTIFY_CHANNEL } from "../sql/channels.js";
import type { StoreContext } from "../state/context.js";
import { withClient } from "../sql/db.js";
import { defineQuery } from "../sql/query.js";
import { toWorkload, type WorkloadRow } from "../sql/rows.js";

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

/*
 * A key's own cap removed (PutKeyLimit with clear): the key falls back to the workload's
 * max_leased_per_key. has_key_limits stays set (a workload's claims take the flow path once it has
 * had one; the row's xmin stays CreateJob's check). The cap may have been the tighter one: parked
 * claims are woken when a row went.
 */
export const CLEAR_KEY_LIMIT = `
WITH w AS (
  SELECT name FROM workloads WHERE name = $1
), cleared AS (
  DELETE FROM workload_key_limits WHERE workload = (SELECT name FROM w) AND key = $2::text RETURNING workload
), woken AS (
  SELECT pg_notify('${NOTIFY_CHANNEL}', workload || ':${WAKE_ALL}') FROM cleared
)
SELECT w.name AS workload, $2::text AS key, 0 AS max_leased, (SELECT count(*) FROM woken) AS notified FROM w`;

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

/** What GetTask tells a pending task's waiting reason from (queue/flow-rules.ts, waitingReason). */
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
const pauseWorkloadQuery = defineQuery<{ name: string }, WorkloadRow>(null, PAUSE_WORKLOAD, (p) => [p.name]);
const resumeWorkloadQuery = defineQuery<{ name: string }, WorkloadRow>(null, RESUME_WORKLOAD, (p) => [p.name]);
const putKeyLimitQuery = defineQuery<
  { name: string; key: string; maxLeased: number },
  { workload: string; key: string; max_leased: number }
>(null, PUT_KEY_LIMIT, (p) => [p.name, p.key, p.maxLeased]);
const clearKeyLimitQuery = defineQuery<{ name: string; key: string }, { workload: string; key: string; max_leased: number }>(
  null,
  CLEAR_KEY_LIMIT,
  (p) => [p.name, p.key],
);
const flowRefusals = defineQuery<
  { workloads: string[] },
  { name: string; paused: boolean; cap_full: boolean; rate_wait_ms: number | null }
>("leasehold_flow_refusals", FLOW_REFUSALS, (p) => [p.workloads]);
interface WaitingFactsRow {
  now: Date;
  run_after: Date;
  paused: boolean;
  max_leased: number | null;
  concurrency_key: string;
  required_labels: Labels | null;
  leased: number;
  key_cap: number | null;
  key_leased: number;
  next_token_at: Date | null;
  workers_seen: boolean;
  labels_seen: boolean;
}
const waitingFacts = defineQuery<{ taskId: string }, WaitingFactsRow>(null, WAITING_FACTS, (p) => [p.taskId]);
export async function pauseWorkload(ctx: StoreContext, name: string, opts: CallOptions): Promise<Workload> {
  const n = requireWorkloadName("name", name);
  const row = await withClient(ctx.pool, opts.signal, (c) => pauseWorkloadQuery.maybe(c, { name: n }));
  if (!row) throw new NotFoundError("workload", n, "name");
  ctx.flow.workloads.mark(n, true);
  return toWorkload(row);
}

export async function resumeWorkload(ctx: StoreContext, name: string, opts: CallOptions): Promise<Workload> {
  const n = requireWorkloadName("name", name);
  const row = await withClient(ctx.pool, opts.signal, (c) => resumeWorkloadQuery.maybe(c, { name: n }));
  if (!row) throw new NotFoundError("workload", n, "name");
  return toWorkload(row);
}

export async function putKeyLimit(ctx: StoreContext, input: PutKeyLimitInput, opts: CallOptions): Promise<KeyLimit> {
  const limit = validatePutKeyLimit(input, requireWorkloadName);
  const row = await withClient(ctx.pool, opts.signal, (c) =>
    limit.clear ? clearKeyLimitQuery.maybe(c, limit) : putKeyLimitQuery.maybe(c, limit),
  );
  if (!row) throw new NotFoundError("workload", limit.name, "name");
  ctx.flow.workloads.mark(limit.name, true);
  return { name: row.workload, key: row.key, maxLeased: row.max_leased };
}

/**
 * An empty claim of a flow-controlled workload: counted by what refused it (metrics); answers, when
 * a rate limit had no token, how long until the next is due (the long poll waits that long).
 */
export async function explainRefusal(ctx: StoreContext, c: pg.PoolClient, workloads: string[]): Promise<number | undefined> {
  const rows = await flowRefusals.run(c, { workloads });
  let wait = Infinity;
  for (const r of rows) {
    if (r.cap_full) ctx.options.observer?.claimRefused?.(r.name, "cap");
    if (r.rate_wait_ms !== null) {
      ctx.options.observer?.claimRefused?.(r.name, "rate");
      wait = Math.min(wait, r.rate_wait_ms);
    }
  }
  return Number.isFinite(wait) ? Math.max(1, wait) : undefined;
}

/** Why a pending task waits; undefined for a task that is not pending. */
export async function waitingOf(c: pg.PoolClient, task: Task): Promise<Waiting | undefined> {
  if (task.status !== "pending") return undefined;
  const r = await waitingFacts.maybe(c, { taskId: task.id });
  if (!r) return undefined;
  const facts: WaitingFacts = {
    runAfter: r.run_after,
    now: r.now,
    paused: r.paused,
    maxLeased: r.max_leased ?? null,
    leased: r.leased,
    concurrencyKey: r.concurrency_key,
    keyCap: r.key_cap ?? null,
    keyLeased: r.key_leased,
    nextTokenAt: r.next_token_at ?? null,
    workersSeen: r.workers_seen,
    requiredLabels: r.required_labels ?? null,
    labelsSeen: r.labels_seen,
  };
  return waitingReason(facts);
}
