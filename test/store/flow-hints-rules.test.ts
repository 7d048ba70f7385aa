// The rules of the flow claim's hints (src/store/postgres/state/flow-hints.ts, kept by claim-hints.ts)
// without a database: the bands a claim's stop leaves, what an announcement does to them, the earlier
// of two, and what a coordinator sends, learns and forgets (the floor of live leases with them).
import { describe, expect, it } from "vitest";
import { ClaimHints } from "../../src/store/postgres/state/claim-hints.js";
import type { HintKey, HintRow } from "../../src/store/postgres/state/hint-keys.js";
import { afterStop, earlier, movedBack } from "../../src/store/postgres/state/flow-hints.js";
import { FREED_HEAD } from "../../src/store/postgres/sql/fragments.js";

const k = (p: number, r: number, i = 0): HintKey => ({ p, r: String(r), c: 1_000_000, i });
/** A row of a flow claim of workload w: its created_us is the function's report. */
const flowRow = (stop: string | null, floor: string | null = null, over: Partial<HintRow> = {}): HintRow => ({
  workload: "w",
  priority: 2,
  fair_rank: "7",
  created_at: new Date(1_000),
  created_us: JSON.stringify({ s: stop, l: floor }),
  chunk_index: 0,
  pickup_seconds: 0.1,
  ...over,
});
const sent = (json: string) => JSON.parse(json) as Record<string, unknown>;

describe("flow hint bands", () => {
  it("a stop consumes every band above its priority, sets its own, and keeps those below", () => {
    expect(afterStop([], k(1, 5))).toEqual([k(1, 5)]);
    expect(afterStop([k(2, 9), k(1, 3), k(0, 4)], k(1, 5))).toEqual([k(1, 5), k(0, 4)]);
    // A stop at the top priority keeps where the lower ones were.
    expect(afterStop([k(1, 3), k(0, 4)], k(2, 1))).toEqual([k(2, 1), k(1, 3), k(0, 4)]);
  });

  it("an announcement moves its priority's band back, gives a done priority a band, and leaves the front alone", () => {
    const bands = [k(2, 9), k(0, 4)];
    expect(movedBack(bands, k(2, 3))).toEqual([k(2, 3), k(0, 4)]);
    expect(movedBack(bands, k(2, 12))).toEqual(bands); // after the band: nothing to move
    expect(movedBack(bands, k(1, 8))).toEqual([k(2, 9), k(1, 8), k(0, 4)]); // a priority that was done
    expect(movedBack(bands, k(5, 0))).toEqual([k(5, 0), k(2, 9), k(0, 4)]);
    expect(movedBack(bands, k(-1, 0))).toEqual(bands); // below the last band: scanned from the front anyway
    expect(movedBack([], k(3, 3))).toEqual([]);
  });

  it("the earlier of two hints at every priority, the front below the higher last band", () => {
    expect(earlier([k(2, 9), k(1, 3)], [k(2, 4)])).toEqual([k(2, 4)]);
    expect(earlier([k(2, 9), k(1, 3)], [k(2, 12), k(1, 1)])).toEqual([k(2, 9), k(1, 1)]);
    // A band beats a priority the other says is done.
    expect(earlier([k(3, 1), k(1, 3)], [k(2, 5), k(1, 4)])).toEqual([k(3, 1), k(2, 5), k(1, 3)]);
    expect(earlier([], [k(2, 4)])).toEqual([]);
  });
});

describe("flow lanes of a coordinator", () => {
  it("are set only by the function's report, kept apart from the plain lane, and carry the furthest floor", () => {
    const h = new ClaimHints(5000, () => true);
    const first = h.begin(["w"], "{}", 0);
    expect(sent(first.json)).toEqual({});
    first.learn([flowRow("2;7;1000000;0", "900|")], true);
    // The plain lane learned nothing (no end marker from `took`), the flow lane the stop, the floor kept.
    expect(sent(h.begin(["w"], "{}", 1).json)).toEqual({ "~f": { w: [{ p: 2, r: "7", c: "1000000", i: 0 }] }, "~l": { w: "900|" } });
    // A later claim's stop in a lower priority consumes the top band; an older floor is not kept.
    h.begin(["w"], "{}", 2).learn([flowRow("1;3;1000000;4", "850|")], false);
    expect(sent(h.begin(["w"], "{}", 3).json)).toEqual({ "~f": { w: [{ p: 1, r: "3", c: "1000000", i: 4 }] }, "~l": { w: "900|" } });
    // A report without a stop (no task from pending) moves nothing.
    h.begin(["w"], "{}", 4).learn([flowRow(null, "950|a")], false);
    expect(sent(h.begin(["w"], "{}", 5).json)).toEqual({ "~f": { w: [{ p: 1, r: "3", c: "1000000", i: 4 }] }, "~l": { w: "950|a" } });
  });

  it("a claim in flight replays the announcements heard meanwhile; a wake without a head keeps it from learning", () => {
    const h = new ClaimHints(5000, () => true);
    h.begin(["w"], "{}", 0).learn([flowRow("1;5;1000000;0")], false);
    const inFlight = h.begin(["w"], "{}", 1);
    h.heard("w", "2;4;1000000"); // a job of priority 2 while the claim ran
    inFlight.learn([flowRow("1;9;1000000;0")], false);
    expect(sent(h.begin(["w"], "{}", 2).json)["~f"]).toEqual({
      w: [
        { p: 2, r: "4", c: "1000000", i: 0 },
        { p: 1, r: "9", c: "1000000", i: 0 },
      ],
    });
    // A freed slot names no task: no hint moves.
    h.heard("w", FREED_HEAD);
    expect(sent(h.begin(["w"], "{}", 3).json)["~f"]).toEqual({
      w: [
        { p: 2, r: "4", c: "1000000", i: 0 },
        { p: 1, r: "9", c: "1000000", i: 0 },
      ],
    });
    const again = h.begin(["w"], "{}", 4);
    h.heard("w"); // a requeue, a retry of a job: anywhere
    again.learn([flowRow("0;1;1000000;0")], false);
    expect(sent(h.begin(["w"], "{}", 5).json)["~f"]).toBeUndefined();
  });

  it("a lane has no age: a claim long after the last one still starts at its bands, while the plain lane's hint expires", () => {
    const h = new ClaimHints(5000, () => true);
    h.begin(["w"], "{}", 0).learn([flowRow("1;5;1000000;0")], false);
    expect(sent(h.begin(["w"], "{}", 60_000).json)["~f"]).toEqual({ w: [{ p: 1, r: "5", c: "1000000", i: 0 }] });
    // The plain lane of a workload without flow control: its hint is not used past its age.
    h.begin(["p"], "{}", 0).learn([{ ...flowRow(null), workload: "p", created_us: "1000000" }], false);
    expect(sent(h.begin(["p"], "{}", 1).json).p).toBeDefined();
    expect(sent(h.begin(["p"], "{}", 60_000).json).p).toBeUndefined();
  });

  it("two claims of a lane ending in either order keep the earlier place; a reconnect forgets lanes and floors", () => {
    const h = new ClaimHints(5000, () => true);
    const a = h.begin(["w"], "{}", 0);
    const b = h.begin(["w"], "{}", 0);
    b.learn([flowRow("1;20;1000000;0", "500|")], false);
    a.learn([flowRow("1;12;1000000;0")], false); // it left a task at rank 12 that b could not see
    expect(sent(h.begin(["w"], "{}", 1).json)["~f"]).toEqual({ w: [{ p: 1, r: "12", c: "1000000", i: 0 }] });
    h.forget();
    expect(sent(h.begin(["w"], "{}", 2).json)).toEqual({});
  });

  it("FLOW_CLAIM_HINTS=false sends the flow claim as before, with or without the plain hints", () => {
    const h = new ClaimHints(5000, () => true, false);
    expect(sent(h.begin(["w"], "{}", 0).json)).toEqual({ "~flow": "off" });
    const off = new ClaimHints(5000, () => false, false);
    expect(sent(off.begin(["w"], "{}", 0).json)).toEqual({ "~flow": "off" });
  });
});
