// The hints of flow-controlled claims (leasehold_flow_claim_hinted), which claim-hints.ts keeps in
// lanes of their own: where in each priority a claim of the lane starts its scan of pending tasks,
// and the floor from which the workload's live leases are counted.
//
// Why bands, one per priority: a plain hint is one place in claim order, and a claim below its
// priority scans the lower ones from their fronts. With several priorities in use that is every
// time the top one runs dry, and an announcement at the top (a new job) moves the one place back up
// and forgets where the lower ones were: under a held MVCC horizon those fronts are every task
// claimed since, and the keyed workload of bench:horizon read 9,000 buffers a claim in them.
//
// A lane's hint is its bands, highest priority first. Priority p of the lane is:
// - a band's place, for a priority with a band: nothing before it in that priority is claimable;
// - DONE, for a priority above the last band without a band: nothing there is claimable;
// - FRONT, below the last band: unknown, scanned from the front.
// A lane with no band is FRONT everywhere (no hint). Claims and announcements only ever move it as
// the rules below say, so it never lies past a claimable task (but for what claim-hints.ts covers by
// age: a task locked by a claim that then rolled back).

import { before, type HintKey, type HintRow, parseHead } from "./hint-keys.js";

export interface FlowHint {
  /** highest priority first, one per priority */
  bands: HintKey[];
}

/** What a flow claim's row says (leasehold_flow_claim_hinted's `hint`, carried in created_us). */
export interface FlowReport {
  /** where the lane's next claim starts: every place before it is consumed */
  stop?: HintKey;
  /** the floor of the workload's live leases its session counted from next (`F|ids`) */
  floor?: string;
}

export function flowReport(r: HintRow): FlowReport | undefined {
  if (!r.created_us?.startsWith("{")) return undefined;
  const j = JSON.parse(r.created_us) as { s?: string | null; l?: string | null };
  return { stop: j.s ? parseHead(j.s)?.key : undefined, floor: j.l ?? undefined };
}

/** The floor's own position (its F), for keeping the furthest one a coordinator has seen. */
export function floorValue(floor: string): bigint {
  return BigInt(floor.split("|")[0]);
}

/**
 * A claim that began with `bands` stopped at `stop`: every place before it in claim order is
 * consumed (its bands above stop's priority go, the scan having read them out), stop's priority
 * starts at stop, and the bands below are as they were (the claim did not reach them).
 */
export function afterStop(bands: readonly HintKey[], stop: HintKey): HintKey[] {
  return [stop, ...bands.filter((b) => b.p < stop.p)];
}

/**
 * Tasks at `key` and after are claimable (an announcement): its priority's band moves back to it;
 * a priority above the last band without a band (DONE) gets one; below the last band (FRONT) needs none.
 */
export function movedBack(bands: readonly HintKey[], key: HintKey): HintKey[] {
  const at = bands.findIndex((b) => b.p === key.p);
  if (at >= 0) return bands.map((b, i) => (i === at && before(key, b) ? key : b));
  if (bands.length === 0 || key.p < bands[bands.length - 1].p) return [...bands];
  return [...bands, key].sort((a, b) => b.p - a.p);
}

/**
 * The earlier of two hints at every priority (what both say may be claimable): FRONT below the
 * higher of their last bands, and above it each priority's earlier band (DONE gives way to a band).
 */
export function earlier(a: readonly HintKey[], b: readonly HintKey[]): HintKey[] {
  const last = (x: readonly HintKey[]) => (x.length === 0 ? Infinity : x[x.length - 1].p);
  const floor = Math.max(last(a), last(b));
  const out = new Map<number, HintKey>();
  for (const k of [...a, ...b]) {
    if (k.p < floor) continue;
    const had = out.get(k.p);
    if (had === undefined || before(k, had)) out.set(k.p, k);
  }
  return [...out.values()].sort((x, y) => y.p - x.p);
}
