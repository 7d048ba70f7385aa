// Workloads: PutWorkload, ListWorkloads, and the cache of them that CreateJob validates against and
// claims check names with.

import type { CallOptions, PutWorkloadInput, Workload } from "../../../queue/types.js";
import { validatePutWorkload } from "../../../queue/validation.js";
import type { StoreContext } from "../state/context.js";
import { withClient } from "../sql/db.js";
import { defineQuery, type NoParams } from "../sql/query.js";
import { toWorkload, type WorkloadRow } from "../sql/rows.js";

export const SELECT_ALL_WORKLOADS = defineQuery<NoParams, WorkloadRow>(null, `SELECT * FROM workloads ORDER BY name`);
// The schedules' and CreateJob's unknown-workload answers name the registered workloads the same way.
export { SELECT_WORKLOAD_NAMES, unknownWorkload } from "../state/workload-cache.js";

interface UpsertWorkload {
  name: string;
  maxAttempts: number;
  leaseSeconds: number;
  /** jsonb text, null for none */
  parametersSchema: string | null;
  maxPendingSeconds: number | null;
  failurePolicy: Workload["failurePolicy"];
  maxFailedTasks: number;
  maxLeased: number | null;
  maxLeasedPerKey: number | null;
  maxLeasesPerSecond: number | null;
  leasesBurst: number | null;
}

// $8..$11 flow control: max_leased, max_leased_per_key, max_leases_per_second, leases_burst (null: none).
// Paused, keyed and has_key_limits are kept: they have operations of their own.
export const UPSERT_WORKLOAD = defineQuery<UpsertWorkload, WorkloadRow & { flow: boolean }>(
  null,
  `
INSERT INTO workloads (name, max_attempts, lease_seconds, parameters_schema, max_pending_seconds, failure_policy, max_failed_tasks,
  max_leased, max_leased_per_key, max_leases_per_second, leases_burst)
VALUES ($1, $2, $3, $4::jsonb, $5, $6::failure_policy, $7, $8, $9, $10, $11)
ON CONFLICT (name) DO UPDATE
  SET max_attempts = EXCLUDED.max_attempts,
      lease_seconds = EXCLUDED.lease_seconds,
      parameters_schema = EXCLUDED.parameters_schema,
      max_pending_seconds = EXCLUDED.max_pending_seconds,
      failure_policy = EXCLUDED.failure_policy,
      max_failed_tasks = EXCLUDED.max_failed_tasks,
      max_leased = EXCLUDED.max_leased,
      max_leased_per_key = EXCLUDED.max_leased_per_key,
      max_leases_per_second = EXCLUDED.max_leases_per_second,
      leases_burst = EXCLUDED.leases_burst,
      updated_at = now()
RETURNING *`,
  (p) => [
    p.name,
    p.maxAttempts,
    p.leaseSeconds,
    p.parametersSchema,
    p.maxPendingSeconds,
    p.failurePolicy,
    p.maxFailedTasks,
    p.maxLeased,
    p.maxLeasedPerKey,
    p.maxLeasesPerSecond,
    p.leasesBurst,
  ],
);

export async function putWorkload(ctx: StoreContext, input: PutWorkloadInput, opts: CallOptions): Promise<Workload> {
  const w = validatePutWorkload(input, { maxAttempts: ctx.options.defaultMaxAttempts, leaseSeconds: ctx.options.defaultLeaseSeconds });
  if (w.parametersSchema) ctx.schemas.check(w.parametersSchema);
  const row = await withClient(ctx.pool, opts.signal, (c) =>
    UPSERT_WORKLOAD.one(c, {
      name: w.name,
      maxAttempts: w.maxAttempts,
      leaseSeconds: w.leaseSeconds,
      parametersSchema: w.parametersSchema === null ? null : JSON.stringify(w.parametersSchema),
      maxPendingSeconds: w.maxPendingSeconds,
      failurePolicy: w.failurePolicy,
      maxFailedTasks: w.maxFailedTasks,
      maxLeased: w.flow.maxLeased,
      maxLeasedPerKey: w.flow.maxLeasedPerKey,
      maxLeasesPerSecond: w.flow.maxLeasesPerSecond,
      leasesBurst: w.flow.leasesBurst,
    }),
  );
  ctx.flow.workloads.mark(w.name, row.flow);
  return toWorkload(row);
}

export async function listWorkloads(ctx: StoreContext, opts: CallOptions): Promise<Workload[]> {
  const rows = await withClient(ctx.pool, opts.signal, (c) => SELECT_ALL_WORKLOADS.run(c));
  return rows.map(toWorkload);
}
