// The rules of claim hints (src/store/postgres/state/claim-hints.ts) without a database: what a claim
// sends, what it learns, and what an announcement, a reconnect or age does to it.
import { describe, expect, it, vi } from "vitest";
import { ClaimHints } from "../../src/store/postgres/state/claim-hints.js";
import { before, type HintRow, parseHead } from "../../src/store/postgres/state/hint-keys.js";

const row = (chunk: number, over: Partial<HintRow> = {}): HintRow => ({
  workload: "w",
  priority: 0,
  fair_rank: "0",
  created_at: new Date(1_000),
  created_us: "1000000",
  chunk_index: chunk,
  pickup_seconds: 0.1,
  ...over,
});
const sent = (json: string) => JSON.parse(json) as Record<string, unknown>;

describe("claim hint rules", () => {
  it("orders keys as the claim does: priority high first, then fair rank, creation time, chunk", () => {
    expect(before({ p: 5, r: "9", c: 9, i: 9 }, { p: 0, r: "0", c: 0, i: 0 })).toBe(true);
    expect(before({ p: 0, r: "1", c: 0, i: 0 }, { p: 0, r: "2", c: 0, i: 0 })).toBe(true);
    expect(before({ p: 0, r: "0", c: 1, i: 9 }, { p: 0, r: "0", c: 2, i: 0 })).toBe(true);
    expect(before({ p: 0, r: "0", c: 1, i: 3 }, { p: 0, r: "0", c: 1, i: 3 })).toBe(false);
    expect(parseHead("-3;7;1700000000000000")).toEqual({ key: { p: -3, r: "7", c: 1700000000000000, i: 0 }, inMs: 0 });
    expect(parseHead("0;0;1700000000000000;12;1500")).toEqual({ key: { p: 0, r: "0", c: 1700000000000000, i: 12 }, inMs: 1500 });
    expect(parseHead("x;1;2")).toBeUndefined();
    expect(parseHead(undefined)).toBeUndefined();
  });

  it("learns the last fresh row claimed, the end when a claim took less than its limit, and nothing while announcements do not arrive", () => {
    let live = true;
    const h = new ClaimHints(5000, () => live);
    const first = h.begin(["w"], "{}", 0);
    expect(sent(first.json)).toEqual({});
    // A reclaimed lease (pickup null) says nothing of the pending tasks.
    first.learn([row(0), row(1), row(9, { pickup_seconds: null })], false);
    expect(sent(h.begin(["w"], "{}", 1).json)).toEqual({ w: { p: 0, r: "0", c: "1000000", i: 1 } });
    // Other labels have their own hint.
    expect(sent(h.begin(["w"], '{"gpu":true}', 1).json)).toEqual({});
    h.begin(["w"], "{}", 2).learn([], true);
    expect(sent(h.begin(["w"], "{}", 3).json)).toEqual({ w: { p: -2147483648, r: "9223372036854775807", c: "Infinity", i: 2147483647 } });
    live = false;
    expect(h.begin(["w"], "{}", 4).json).toBe("{}");
  });

  it("an announcement moves the hint back to its head, or drops it; a claim in flight then does not undo it", () => {
    const h = new ClaimHints(5000, () => true);
    h.begin(["w"], "{}", 0).learn([row(5)], false);
    const inFlight = h.begin(["w"], "{}", 1);
    h.heard("w", "3;0;2000000"); // a job of priority 3
    inFlight.learn([row(6)], false);
    expect(sent(h.begin(["w"], "{}", 2).json)).toEqual({ w: { p: 3, r: "0", c: "2000000", i: 0 } });
    // A head after the hint leaves it; one without a head drops it.
    h.heard("w", "0;0;9000000");
    expect(sent(h.begin(["w"], "{}", 3).json)).toEqual({ w: { p: 3, r: "0", c: "2000000", i: 0 } });
    h.heard("w");
    expect(sent(h.begin(["w"], "{}", 4).json)).toEqual({});
    // Another workload's announcement changes nothing here.
    h.begin(["w"], "{}", 5).learn([row(7)], false);
    h.heard("other");
    expect(sent(h.begin(["w"], "{}", 6).json)).toEqual({ w: { p: 0, r: "0", c: "1000000", i: 7 } });
  });

  it("a retry in backoff moves the hint back when it falls due, not before", () => {
    vi.useFakeTimers();
    try {
      const h = new ClaimHints(60_000, () => true);
      h.begin(["w"], "{}", 0).learn([row(9)], false);
      h.heard("w", "0;0;1000000;2;1000");
      expect(sent(h.begin(["w"], "{}", 1).json)).toEqual({ w: { p: 0, r: "0", c: "1000000", i: 9 } });
      vi.advanceTimersByTime(1100);
      expect(sent(h.begin(["w"], "{}", 2).json)).toEqual({ w: { p: 0, r: "0", c: "1000000", i: 2 } });
    } finally {
      vi.useRealTimers();
    }
  });

  it("a hint older than its age is not sent; a reconnect drops every hint and what claims in flight would learn", () => {
    const h = new ClaimHints(5000, () => true);
    h.begin(["w"], "{}", 0).learn([row(1)], false);
    // A claim from the hint keeps the age of the scan from the front that set it.
    h.begin(["w"], "{}", 4000).learn([row(2)], false);
    expect(sent(h.begin(["w"], "{}", 4999).json)).toEqual({ w: { p: 0, r: "0", c: "1000000", i: 2 } });
    expect(sent(h.begin(["w"], "{}", 5000).json)).toEqual({});
    const inFlight = h.begin(["w"], "{}", 6000);
    h.forget();
    inFlight.learn([row(3)], false);
    expect(sent(h.begin(["w"], "{}", 6001).json)).toEqual({});
  });

  it("leaves out the expired-lease arm only while the reaper's last probe is recent and found none", () => {
    const h = new ClaimHints(5000, () => true);
    expect(sent(h.begin(["w"], "{}", 0).json)).toEqual({});
    h.leasesProbed(false, 0);
    expect(sent(h.begin(["w"], "{}", 2999).json)).toEqual({ "~expired": false });
    expect(sent(h.begin(["w"], "{}", 3000).json)).toEqual({});
    h.leasesProbed(true, 3000);
    expect(sent(h.begin(["w"], "{}", 3001).json)).toEqual({});
  });
});
