// The workloads a coordinator has read (CreateJob's validation, claims' existence checks), with
// each row's xmin so CREATE_JOB can check its cached copy is still current.

import type pg from "pg";
import { NotFoundError } from "../../../queue/errors.js";
import type { Workload } from "../../../queue/types.js";
import { defineQuery, type NoParams } from "../sql/query.js";
import { toWorkload, type WorkloadRow } from "../sql/rows.js";

export const SELECT_WORKLOAD_NAMES = defineQuery<NoParams, { name: string }>(null, `SELECT name FROM workloads ORDER BY name`);

// With xmin, which changes whenever the row is written: CreateJob's cached copy of a workload is
// current exactly when its xmin still matches (CREATE_JOB checks that in the inserting statement).
const WITH_XMIN = `SELECT *, xmin::text AS row_xmin FROM workloads WHERE name = ANY($1::text[])`;
type WorkloadWithXmin = WorkloadRow & { row_xmin: string };
export const SELECT_WORKLOADS_WITH_XMIN = defineQuery<{ names: string[] }, WorkloadWithXmin>(null, WITH_XMIN, (p) => [p.names]);
// The same, holding them unchanged until the transaction ends (PutWorkload waits).
export const SELECT_WORKLOADS_WITH_XMIN_FOR_SHARE = defineQuery<{ names: string[] }, WorkloadWithXmin>(
  null,
  `${WITH_XMIN} ORDER BY name FOR SHARE`,
  (p) => [p.names],
);

/** A workload as CreateJob last read it; keyed: its jobs get fair ranks (docs/flow-control-claim.md). */
export interface CachedWorkload {
  workload: Workload;
  xmin: string;
  keyed: boolean;
}

/** Workloads as CreateJob last read them, with the row's xmin (CREATE_JOB checks it is still current). */
export class WorkloadCache {
  private readonly byName = new Map<string, CachedWorkload>();

  has(name: string): boolean {
    return this.byName.has(name);
  }

  get(name: string): CachedWorkload | undefined {
    return this.byName.get(name);
  }

  /** Reads these workloads into the cache (and drops the ones that do not exist). */
  async load(c: pg.PoolClient, names: string[], forShare: boolean): Promise<void> {
    const rows = await (forShare ? SELECT_WORKLOADS_WITH_XMIN_FOR_SHARE : SELECT_WORKLOADS_WITH_XMIN).run(c, { names });
    for (const n of names) this.byName.delete(n);
    for (const r of rows) this.byName.set(r.name, { workload: toWorkload(r), xmin: r.row_xmin, keyed: r.keyed });
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
  const rows = await SELECT_WORKLOAD_NAMES.run(c);
  return new NotFoundError(
    "workload",
    name,
    field,
    rows.map((r) => r.name),
  );
}
