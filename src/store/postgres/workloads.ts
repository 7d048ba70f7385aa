// Workloads: PutWorkload, ListWorkloads, and the cache of them that CreateJob validates against and
// claims check names with.

import type pg from "pg";
import { NotFoundError } from "../../queue/errors.js";
import type { CallOptions, PutWorkloadInput, Workload } from "../../queue/types.js";
import { validatePutWorkload } from "../../queue/validation.js";
import type { StoreContext } from "./context.js";
import { withClient } from "./db.js";
import { toWorkload } from "./rows.js";

export const SELECT_ALL_WORKLOADS = `SELECT * FROM workloads ORDER BY name`;
export const SELECT_WORKLOAD_NAMES = `SELECT name FROM workloads ORDER BY name`;

export const UPSERT_WORKLOAD = `
INSERT INTO workloads (name, max_attempts, lease_seconds, parameters_schema, max_pending_seconds, failure_policy, max_failed_tasks)
VALUES ($1, $2, $3, $4::jsonb, $5, $6::failure_policy, $7)
ON CONFLICT (name) DO UPDATE
  SET max_attempts = EXCLUDED.max_attempts,
      lease_seconds = EXCLUDED.lease_seconds,
      parameters_schema = EXCLUDED.parameters_schema,
      max_pending_seconds = EXCLUDED.max_pending_seconds,
      failure_policy = EXCLUDED.failure_policy,
      max_failed_tasks = EXCLUDED.max_failed_tasks,
      updated_at = now()
RETURNING *`;

// With xmin, which changes whenever the row is written: CreateJob's cached copy of a workload is
// current exactly when its xmin still matches (CREATE_JOB checks that in the inserting statement).
export const SELECT_WORKLOADS_WITH_XMIN = `SELECT *, xmin::text AS row_xmin FROM workloads WHERE name = ANY($1::text[])`;
// The same, holding them unchanged until the transaction ends (PutWorkload waits).
export const SELECT_WORKLOADS_WITH_XMIN_FOR_SHARE = `${SELECT_WORKLOADS_WITH_XMIN} ORDER BY name FOR SHARE`;

/** Workloads as CreateJob last read them, with the row's xmin (CREATE_JOB checks it is still current). */
export class WorkloadCache {
  private readonly byName = new Map<string, { workload: Workload; xmin: string }>();

  has(name: string): boolean {
    return this.byName.has(name);
  }

  get(name: string): { workload: Workload; xmin: string } | undefined {
    return this.byName.get(name);
  }

  /** Reads these workloads into the cache (and drops the ones that do not exist). */
  async load(c: pg.PoolClient, names: string[], forShare: boolean): Promise<void> {
    const { rows } = await c.query(forShare ? SELECT_WORKLOADS_WITH_XMIN_FOR_SHARE : SELECT_WORKLOADS_WITH_XMIN, [names]);
    for (const n of names) this.byName.delete(n);
    for (const r of rows) this.byName.set(r.name as string, { workload: toWorkload(r), xmin: r.row_xmin as string });
  }

  /**
   * Every workload a claim names must exist: a claim that found nothing checks, and a result
   * report's claim_next checks before the result is written, so a mistaken claim_next writes
   * nothing. Workloads are never deleted, so one seen (cached) once exists for good, and only a
   * name not seen yet costs a read, which caches what it finds: a coordinator that serves a
   * workload's workers but never its CreateJob would otherwise read the workloads table again on
   * every report, and on every claim of an empty queue.
   */
  async require(c: pg.PoolClient, names: string[], field: string): Promise<void> {
    if (names.every((n) => this.byName.has(n))) return;
    await this.load(c, names, false);
    const unknown = names.find((n) => !this.byName.has(n));
    if (unknown) throw await unknownWorkload(c, unknown, `${field}[${names.indexOf(unknown)}]`);
  }
}

/** The error of an unknown workload, naming the registered ones (a misspelt name is then plain to see). */
export async function unknownWorkload(c: pg.PoolClient, name: string, field: string): Promise<NotFoundError> {
  const { rows } = await c.query(SELECT_WORKLOAD_NAMES);
  return new NotFoundError(
    "workload",
    name,
    field,
    rows.map((r) => r.name as string),
  );
}

export async function putWorkload(ctx: StoreContext, input: PutWorkloadInput, opts: CallOptions): Promise<Workload> {
  const w = validatePutWorkload(input, { maxAttempts: ctx.options.defaultMaxAttempts, leaseSeconds: ctx.options.defaultLeaseSeconds });
  if (w.parametersSchema) ctx.schemas.check(w.parametersSchema);
  const { rows } = await withClient(ctx.pool, opts.signal, (c) =>
    c.query(UPSERT_WORKLOAD, [
      w.name,
      w.maxAttempts,
      w.leaseSeconds,
      w.parametersSchema === null ? null : JSON.stringify(w.parametersSchema),
      w.maxPendingSeconds,
      w.failurePolicy,
      w.maxFailedTasks,
    ]),
  );
  return toWorkload(rows[0]);
}

export async function listWorkloads(ctx: StoreContext, opts: CallOptions): Promise<Workload[]> {
  const { rows } = await withClient(ctx.pool, opts.signal, (c) => c.query(SELECT_ALL_WORKLOADS));
  return rows.map(toWorkload);
}
