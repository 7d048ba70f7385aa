// What the store keeps in memory for flow control: which workloads are flow-controlled (refreshed
// every few seconds), and which labels workers claim them with (written at most every few seconds).
// The operations of flow-control.ts and claim.ts reach them through the store's context.

import type pg from "pg";
import { defineQuery } from "../sql/query.js";
import type { RankHeads } from "./rank-heads.js";

/** Flow-controlled workloads: the coordinator's view, refreshed every few seconds. */
export const SELECT_FLOW_WORKLOADS = `SELECT name FROM workloads WHERE flow`;

// Which labels workers claim a workload with (worker_sightings), written at most every SIGHTING_MS per coordinator.
export const RECORD_SIGHTINGS = `
INSERT INTO worker_sightings (workload, labels, seen_at) SELECT w, $2::jsonb, now() FROM unnest($1::text[]) AS w
ON CONFLICT (workload, labels) DO UPDATE SET seen_at = now()`;

const selectFlowWorkloads = defineQuery<Record<never, never>, { name: string }>(null, SELECT_FLOW_WORKLOADS);
const recordSightings = defineQuery<{ workloads: string[]; labels: string }>("leasehold_record_sightings", RECORD_SIGHTINGS, (p) => [
  p.workloads,
  p.labels,
]);

/** What the store keeps for flow control. */
export interface FlowState {
  readonly workloads: FlowWorkloads;
  readonly sightings: WorkerSightings;
  /** The heads of fair ranks CreateJob found (rank-heads.ts). */
  readonly rankHeads: RankHeads;
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
      await recordSightings.run(c, { workloads, labels });
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
      this.reading = selectFlowWorkloads
        .run(this.pool)
        .then((rows) => {
          this.names = new Set(rows.map((r) => r.name));
          this.readAt = Date.now();
        })
        .catch(() => {})
        .finally(() => (this.reading = undefined));
    }
    return workloads.some((w) => this.names.has(w));
  }

  /**
   * Whether none of these is flow-controlled, as far as a read has said: false until the first read
   * is in, so a coordinator just started sends the full claim (claim.ts ClaimArms) until it knows.
   */
  noneOf(workloads: readonly string[]): boolean {
    const any = this.any(workloads);
    return this.readAt > 0 && !any;
  }

  /** Told by a statement that a workload's settings changed here, so this coordinator knows at once. */
  mark(name: string, flow: boolean): void {
    if (flow) this.names.add(name);
    else this.names.delete(name);
  }
}
