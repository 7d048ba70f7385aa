// Group commit's linger (group-commit.ts): a lane whose callers come back at once (results with
// claim_next) waits after a statement for the callers it answered, so the next statement carries
// them and those already waiting together. No database: `run` records the batches it is given.
// Lingers long enough here that a test passing by the timer, not by the count, would time out.
import { describe, expect, it } from "vitest";
import { GroupCommit } from "../../src/store/postgres/coalescing/group-commit.js";

const FOREVER_MS = 60_000;

/** A group commit that records its batches; the first statement waits for `gate` when one is given. */
function recorder(opts: {
  lingerMs: number;
  returning?: boolean;
  maxBatch?: number;
  gate?: Promise<void>;
  weight?: (i: number) => number;
}) {
  const seen: number[][] = [];
  const gc = new GroupCommit<number, number>(
    {
      async run(_key, items) {
        seen.push(items);
        if (seen.length === 1 && opts.gate) await opts.gate;
        return items.map((i) => ({ value: i * 10 }));
      },
      returning: opts.returning ?? true,
      weight: opts.weight,
    },
    { maxBatch: opts.maxBatch ?? 64, lingerMs: opts.lingerMs },
  );
  return { gc, seen };
}

describe("group commit's linger", () => {
  it("waits for the callers a statement answered, then runs them with those already waiting in one statement", async () => {
    let open: () => void = () => {};
    const gate = new Promise<void>((r) => (open = r));
    const { gc, seen } = recorder({ lingerMs: FOREVER_MS, gate });
    // Worker 1's call runs at once (an idle lane); 2 and 3 wait behind it.
    const first = gc.submit("k", 1);
    const waiting = [gc.submit("k", 2), gc.submit("k", 3)];
    open();
    expect(await first).toBe(10);
    // Worker 1 comes back: the statement of all three starts then, not before.
    await Promise.resolve();
    expect(seen).toEqual([[1]]);
    const back = gc.submit("k", 11);
    expect(await Promise.all([...waiting, back])).toEqual([20, 30, 110]);
    expect(seen).toEqual([[1], [2, 3, 11]]);
  });

  it("never makes a lone worker wait: it is the caller expected", async () => {
    const { gc, seen } = recorder({ lingerMs: FOREVER_MS });
    for (let i = 1; i <= 4; i++) expect(await gc.submit("k", i)).toBe(i * 10);
    expect(seen).toEqual([[1], [2], [3], [4]]);
  });

  it("runs what waits when the linger runs out, and the next statements start without lingering", async () => {
    let open1: () => void = () => {};
    let open3: () => void = () => {};
    const gates = new Map([
      [1, new Promise<void>((r) => (open1 = r))],
      [3, new Promise<void>((r) => (open3 = r))],
    ]);
    const seen: number[][] = [];
    const gc = new GroupCommit<number, number>(
      {
        async run(_key, items) {
          seen.push(items);
          await gates.get(seen.length);
          return items.map((i) => ({ value: i * 10 }));
        },
        returning: true,
      },
      { maxBatch: 64, lingerMs: 20 },
    );
    const first = gc.submit("k", 1);
    const second = gc.submit("k", 2);
    open1();
    expect(await first).toBe(10);
    // Worker 1 does not come back: worker 2's call runs when the linger runs out.
    expect(await second).toBe(20);
    expect(seen).toEqual([[1], [2]]);
    // The next statement that ends with a call waiting starts it at once: worker 3, back right
    // after its answer, goes in the statement after (a lingering lane would have waited for it).
    const third = gc.submit("k", 3);
    const fourth = gc.submit("k", 4);
    open3();
    expect(await third).toBe(30);
    const back = gc.submit("k", 31);
    expect(await Promise.all([fourth, back])).toEqual([40, 310]);
    expect(seen).toEqual([[1], [2], [3], [4], [31]]);
  });

  it("counts by weight: it waits for no more than a statement can hold", async () => {
    let open: () => void = () => {};
    const gate = new Promise<void>((r) => (open = r));
    const { gc, seen } = recorder({ lingerMs: FOREVER_MS, maxBatch: 10, gate, weight: (i) => i });
    // A call of weight 6 runs; one of 4 waits. Together with the 6 coming back they would be 16,
    // more than a statement holds: the lane waits for 10, which the 4 and the 6 make.
    const first = gc.submit("k", 6);
    const waiting = gc.submit("k", 4);
    open();
    expect(await first).toBe(60);
    const back = gc.submit("k", 6);
    expect(await Promise.all([waiting, back])).toEqual([40, 60]);
    expect(seen).toEqual([[6], [4, 6]]);
  });

  it("does not linger in a lane whose callers do not come back", async () => {
    let open: () => void = () => {};
    const gate = new Promise<void>((r) => (open = r));
    const { gc, seen } = recorder({ lingerMs: FOREVER_MS, returning: false, gate });
    const all = [gc.submit("k", 1), gc.submit("k", 2)];
    open();
    expect(await Promise.all(all)).toEqual([10, 20]);
    expect(seen).toEqual([[1], [2]]);
  });
});
