// Where a claim's index scan starts: past the pending tasks this coordinator has already seen
// claimed, so that a long transaction elsewhere on the database does not make every claim walk
// the dead row versions those claims left behind (docs/long-transactions.md).
//
// Why: a claimed task's pending version stays in tasks_claim_pending_idx until VACUUM removes
// it, and VACUUM removes nothing newer than the oldest snapshot any session holds. A claim that
// starts at the front of its workload's range checks each of those entries against the heap:
// with one snapshot held for minutes that was tens of thousands per claim, and the queue fell
// behind its arrivals (bench:horizon). Started at a hint it reads a few.
//
// A hint is a lower bound, in claim order (priority, then fair rank, creation time and chunk), of
// the pending tasks a claim with these workload and labels may take. It holds because every way a
// task becomes claimable announces it on the wake-up channel, and an announcement moves the hint
// back: a new job's tasks with their lowest key (CreateJob), anything else (a requeue, a retry, a
// due time, a task given back) by dropping the hint, so the next claim scans from the front. What
// an announcement cannot cover (a task locked by a claim that then rolled back, a retry's backoff
// running out, a notification lost with the LISTEN connection) is covered by age: a hint older
// than maxAgeMs is not used, and the claim that scans from the front sets it again.
// The hint only chooses where the scan starts; the claim statement still locks, skips and orders
// as before, so the guarantees of one claim (nothing taken twice, priorities, caps) are its own.
//
// Flow-controlled workloads (leasehold_flow_claim_hinted) keep hints of their own, in lanes apart
// (flow-hints.ts): such a claim may pass over pending tasks it could not take (a key at its cap), so
// where it leased last says nothing of what it left. The function says where the lane's next claim
// must start (each row's created_us is then a JSON object, flowReport), and only that sets the lane;
// announcements move it back as they move the others. A lane has no age: the function's stop never
// passes a task still pending that its claim did not lease, one another claim held locked included,
// so a claim that rolls back strands nothing (under a held horizon, a lane dropped for its age made
// the next claims read every dead entry from the front of each priority). The same report carries the floor from which
// its session counted the workload's live leases; the coordinator passes the furthest one it has
// heard of to its other sessions (leasehold_flow_live.sql says why any one is right).

import { FREED_HEAD } from "../sql/fragments.js";
import { afterStop, earlier, floorValue, type FlowHint, flowReport, movedBack } from "./flow-hints.js";
import { before, type HintKey, type HintRow, parseHead } from "./hint-keys.js";

/** After everything: a claim from here reads nothing (the workload had no claimable task). */
const END: HintKey = { p: -2147483648, r: "9223372036854775807", c: Infinity, i: 2147483647 };

interface Hint {
  key: HintKey;
  /** when the claim that scanned from the front, and set this hint, began */
  fullAt: number;
}

/** What a claim began with in a workload's flow lane: the announcements' count, and the lane's hint then (the one sent). */
interface FlowUse {
  gen: number;
  flow?: FlowHint;
}

/** One claim's use of the hints: the parameter it sends, and what it learns once it has run. */
export interface HintedClaim {
  /** The statement's hints parameter: jsonb text, workload → key; a workload missing scans from the front. */
  readonly json: string;
  /** Whether it tells the claim to leave out its arm of expired leases (`"~expired": false`). */
  readonly expiredOff: boolean;
  /**
   * Takes the claimed rows. `took` says whether the claim took everything its scans found
   * (fewer rows than its limit, and its claim ran): then nothing claimable was left, and every
   * workload it asked for is at its end until an announcement moves it back.
   */
  learn(rows: readonly HintRow[], took: boolean): void;
}

const NO_HINTS: HintedClaim = { json: "{}", expiredOff: false, learn: () => {} };
/** Announcements kept per workload for flow claims in flight (each job's CreateJob is one). */
const HEARD_KEPT = 256;
/** FLOW_CLAIM_HINTS=false: the flow claim runs leasehold_flow_claim, as before. */
const FLOW_OFF = { "~flow": "off" };
const NO_HINTS_FLOW_OFF: HintedClaim = { json: JSON.stringify(FLOW_OFF), expiredOff: false, learn: () => {} };

/** A retry's hint moves back this long after it falls due: the NOTIFY's own delivery, and a margin. */
const DUE_SLACK_MS = 50;

/**
 * A lease probe is recent this long: three passes of the reaper at its default interval
 * (REAPER_INTERVAL_MS, 1 s). With a longer interval the probes are never recent, and every claim
 * keeps its arm for expired leases.
 */
const LEASE_PROBE_FRESH_MS = 3000;

export class ClaimHints {
  /** By workload and labels: the claims of other labels may pass over tasks these cannot take. */
  private readonly hints = new Map<string, Hint>();
  /** The flow claim's lanes, by workload and labels (flow-hints.ts). */
  private readonly flowHints = new Map<string, FlowHint>();
  /** By workload: the furthest floor of live leases a flow claim's session reported (`F|ids`). */
  private readonly floors = new Map<string, string>();
  /** By workload: its last announcements (generation, head), which a flow claim in flight replays. */
  private readonly heardSince = new Map<string, { gen: number; key?: HintKey }[]>();
  /** By workload: bumped by each announcement, so a claim in flight does not undo one. */
  private readonly generations = new Map<string, number>();
  /** Bumped by forget(), so a claim in flight across a reconnect learns nothing. */
  private epoch = 0;
  /** The lease reaper's last probe: when, and whether it found an expired lease. */
  private leaseProbe: { at: number; expired: boolean } | undefined;

  /**
   * @param maxAgeMs a hint set by a claim from the front this long ago is not used
   * @param live whether announcements arrive now (the LISTEN connection is up, and hints are on)
   * @param flow whether flow-controlled claims take their hints (FLOW_CLAIM_HINTS), else they run as before
   */
  constructor(
    private readonly maxAgeMs: number,
    private readonly live: () => boolean,
    private readonly flow = true,
  ) {}

  /**
   * The lease reaper probed for expired leases. While its last probe is recent and found none, the
   * claim leaves out its arm for expired leases (`"~expired": false`): that arm reads the lease index
   * from the bottom, through every dead lease a held MVCC horizon keeps, and a lease that expires
   * after the probe is requeued by the reaper's next pass, whose announcement wakes the claims.
   */
  leasesProbed(expired: boolean, now = Date.now()): void {
    this.leaseProbe = { at: now, expired };
  }

  /**
   * A wake-up for `workload`: its tasks from `head` on (or, without one, anywhere) are claimable,
   * now or, for a retry in backoff, once it falls due (a timer moves the hint back then; the delay
   * is the database's, so the two clocks need not agree).
   */
  heard(workload: string, head?: string): void {
    if (head === FREED_HEAD) return; // a slot freed: no task became pending (fragments.ts)
    const parsed = parseHead(head);
    if (parsed && parsed.inMs > 0) {
      setTimeout(() => this.moveBack(workload, parsed.key), parsed.inMs + DUE_SLACK_MS).unref();
      return;
    }
    this.moveBack(workload, parsed?.key);
  }

  private moveBack(workload: string, key: HintKey | undefined): void {
    this.generations.set(workload, (this.generations.get(workload) ?? 0) + 1);
    for (const [lane, hint] of this.hints) {
      if (!lane.startsWith(workload + "\u0000")) continue;
      if (key === undefined) this.hints.delete(lane);
      else if (before(key, hint.key)) hint.key = key;
    }
    for (const [lane, hint] of this.flowHints) {
      if (!lane.startsWith(workload + "\u0000")) continue;
      if (key === undefined) this.flowHints.delete(lane);
      else hint.bands = movedBack(hint.bands, key); // in place: a new object is a claim's
    }
    const heard = this.heardSince.get(workload) ?? [];
    heard.push({ gen: this.generations.get(workload)!, key });
    if (heard.length > HEARD_KEPT) heard.splice(0, heard.length - HEARD_KEPT);
    this.heardSince.set(workload, heard);
  }

  /**
   * A flow claim's rows of workload `w` (flowReport): the floor of its live leases, kept when further
   * on than the one known, and where the lane's next claim starts. That is set as said when nothing
   * touched the lane since the claim began. Otherwise an announcement, or another claim of the lane
   * that ended first, may have moved it back (to a task this claim could not see: one the other held
   * locked and then left): the earlier of the two is kept at every priority, and a lane an
   * announcement emptied stays empty. True when the rows were a flow claim's (its plain lane learns
   * nothing from them).
   */
  private learnFlow(w: string, labels: string, u: FlowUse, rows: readonly HintRow[]): boolean {
    let stop: HintKey | undefined;
    let flow = false;
    for (const r of rows) {
      if (r.workload !== w) continue;
      const report = flowReport(r);
      if (report === undefined) continue;
      flow = true;
      if (report.stop && (stop === undefined || before(report.stop, stop))) stop = report.stop;
      const known = this.floors.get(w);
      if (report.floor && (known === undefined || floorValue(report.floor) > floorValue(known))) this.floors.set(w, report.floor);
    }
    if (stop === undefined) return flow;
    // The claim's own view, with what was announced while it ran (a flow claim waits for its
    // workload's gates, so announcements during one are the rule): each head moves it back; a
    // wake-up without a head, or more of them than are kept, leaves the lane as it is.
    let mine = afterStop(u.flow?.bands ?? [], stop);
    const gen = this.generations.get(w) ?? 0;
    if (gen !== u.gen) {
      const heard = (this.heardSince.get(w) ?? []).filter((h) => h.gen > u.gen);
      if (heard.length !== gen - u.gen) return true;
      for (const h of heard) {
        if (h.key === undefined) return true;
        mine = movedBack(mine, h.key);
      }
    }
    const name = flowLane(w, labels);
    const current = this.flowHints.get(name);
    // Announcements change a lane in place (replayed above); another claim's learning sets a new one.
    if (current === u.flow) this.flowHints.set(name, { bands: mine });
    else if (current !== undefined) this.flowHints.set(name, { bands: earlier(current.bands, mine) });
    return true;
  }

  /** Announcements may have been lost: every claim scans from the front again, and none in flight sets a hint. */
  forget(): void {
    this.hints.clear();
    this.flowHints.clear();
    // A reconnect may also be to a database restored to an earlier point, where transaction ids
    // were handed out again: floors learned before are not kept.
    this.floors.clear();
    this.heardSince.clear();
    this.epoch++;
  }

  begin(workloads: readonly string[], labels: string, now = Date.now()): HintedClaim {
    if (!this.live()) return this.flow ? NO_HINTS : NO_HINTS_FLOW_OFF;
    const epoch = this.epoch;
    const used = new Map<string, FlowUse & { hint?: Hint }>();
    const sent = (key: HintKey) => ({ ...key, c: key.c === Infinity ? "Infinity" : String(key.c) });
    const send: Record<string, unknown> = this.flow ? {} : { ...FLOW_OFF };
    const flowSend: Record<string, unknown> = {};
    const floorSend: Record<string, string> = {};
    if (this.leaseProbe && !this.leaseProbe.expired && now - this.leaseProbe.at < LEASE_PROBE_FRESH_MS) send["~expired"] = false;
    for (const w of workloads) {
      const hint = this.hints.get(lane(w, labels));
      const fresh = hint && now - hint.fullAt < this.maxAgeMs ? hint : undefined;
      // A flow lane has no age: its claims' stops never pass a task still pending that they did not
      // lease, locked by another claim or not (leasehold_flow_claim_hinted.sql), so no rollback strands one.
      const flowHint = this.flowHints.get(flowLane(w, labels));
      used.set(w, { gen: this.generations.get(w) ?? 0, hint: fresh, flow: flowHint });
      if (fresh) send[w] = sent(fresh.key);
      if (flowHint && this.flow) flowSend[w] = flowHint.bands.map(sent);
      const floor = this.floors.get(w);
      if (floor && this.flow) floorSend[w] = floor;
    }
    if (Object.keys(flowSend).length > 0) send["~f"] = flowSend;
    if (Object.keys(floorSend).length > 0) send["~l"] = floorSend;
    return {
      json: JSON.stringify(send),
      expiredOff: send["~expired"] === false,
      learn: (rows, took) => {
        if (this.epoch !== epoch) return;
        for (const [w, u] of used) {
          if (this.learnFlow(w, labels, u, rows)) continue;
          if ((this.generations.get(w) ?? 0) !== u.gen) continue; // announced meanwhile: keep what that set
          let last: HintKey | undefined;
          for (const r of rows) {
            if (r.workload !== w || r.pickup_seconds === null) continue;
            const k = rowKey(r);
            if (last === undefined || before(last, k)) last = k;
          }
          // Took less than its limit: nothing claimable was left past what it took.
          const key = took ? END : last;
          if (key === undefined) continue;
          this.hints.set(lane(w, labels), { key, fullAt: u.hint?.fullAt ?? now });
        }
      },
    };
  }
}

function lane(workload: string, labels: string): string {
  return workload + "\u0000" + labels;
}

/** The flow claim's lane of a workload and labels (starts as lane() does, so moveBack finds it). */
function flowLane(workload: string, labels: string): string {
  return lane(workload, labels) + "\u0000f";
}

function rowKey(r: HintRow): HintKey {
  // Without the microseconds, the millisecond rounded down less one: a bound still at or below the row.
  const c = r.created_us ? Number(r.created_us) : (r.created_at.getTime() - 1) * 1000;
  return { p: r.priority, r: String(r.fair_rank ?? 0), c, i: r.chunk_index };
}
