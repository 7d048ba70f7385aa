// A cap far away (flow-control-claim.md, "A cap far away"): what a flow-controlled claim skips while no
// cap is near, and that skipping it never passes a cap. Real PostgreSQL, the claim function called
// the way the claim statement calls it, on one session and on several.
import type pg from "pg";
import { afterAll, beforeAll, expect, it } from "vitest";
import type { Task } from "../../src/queue/types.js";
import { NOTIFY_CHANNEL } from "../../src/store/postgres/sql/channels.js";
import { FREED_HEAD } from "../../src/store/postgres/sql/fragments.js";
import { FLOW_HINTS_ARG, queueFixture, sha, type QueueFixture } from "../support/queue.js";
import { SWITCHES } from "../support/switches.js";

let f: QueueFixture;
let seq = 0;

beforeAll(async () => {
  f = await queueFixture();
});
afterAll(async () => {
  await f?.close();
});

async function workload(settings: Record<string, number>, tasks: number, key?: (i: number) => string): Promise<string> {
  const name = `far${++seq}`;
  await f.queue.putWorkload({ name, leaseSeconds: 60, ...settings });
  const specs = (from: number, n: number) =>
    Array.from({ length: n }, (_, i) => ({ chunkIndex: from + i, inputUri: `s3://far/${from + i}`, inputSha256: sha(from + i) }));
  if (!key) await f.queue.createJob({ workload: name, tasks: specs(0, tasks) });
  else for (let i = 0; i < tasks; i++) await f.queue.createJob({ workload: name, tasks: specs(i, 1), concurrencyKey: key(i) });
  return name;
}

/** One call of the claim function on `c`, as the claim statements call it (FLOW_HINTS_ARG): the tasks it leased. */
async function claim(c: pg.Client, w: string, want: number, worker = "w"): Promise<{ id: string; key: string }[]> {
  const { rows } = await c.query(
    `SELECT (f.task).id, (f.task).concurrency_key AS key
     FROM leasehold_flow_claim_hinted(ARRAY[$1]::text[], $2, $3, NULL, '{}'::jsonb, NULL, $4::jsonb) f`,
    [w, want, worker, FLOW_HINTS_ARG],
  );
  return rows;
}

const live = async (w: string) => f.count("tasks", `workload = '${w}' AND status = 'leased' AND lease_expires_at > now()`);

it("a session that found the cap far skips the first count, never passes the cap, and still fills it exactly", async () => {
  // max_leased 16: one gate is worth one task, so the gated path holds while 8 or fewer are live.
  const w = await workload({ maxLeased: 16 }, 60);
  const c = await f.session();
  try {
    // The first claim counts, finds the cap far, and says so for the next claim of this session.
    expect(await claim(c, w, 1)).toHaveLength(1);
    const { rows } = await c.query(
      `SELECT current_setting('leasehold.flow_far_' || to_hex(hashtext('leasehold.flow:' || $1::text)), true) AS far`,
      [w],
    );
    expect(Number(rows[0].far)).toBeGreaterThan(0);
    // Claims of 20 on the same session: the hint sends them down the gated path without the first
    // count (8 gates, 8 tasks at most each) until a count after the gates finds the cap near (9
    // live + 8 gates' worth > 16); from then on they count first, take every gate, and lease
    // nothing past 16.
    const sizes: number[] = [];
    for (let i = 0; i < 6; i++) {
      sizes.push((await claim(c, w, 20)).length);
      expect(await live(w)).toBeLessThanOrEqual(16);
    }
    expect(await live(w)).toBe(16);
    expect(sizes.reduce((a, b) => a + b, 0)).toBe(15);
    const { rows: after } = await c.query(
      `SELECT current_setting('leasehold.flow_far_' || to_hex(hashtext('leasehold.flow:' || $1::text)), true) AS far`,
      [w],
    );
    expect(after[0].far).toBe("");
  } finally {
    await c.end();
  }
});

it("per-key caps far away lease in fair-share order; a key near its cap is still held at it", async () => {
  // Two keys, a b a b …: far from max_leased_per_key 16, a claim of 6 takes the first 6 in rank order.
  const w = await workload({ maxLeasedPerKey: 16 }, 40, (i) => (i % 2 ? "b" : "a"));
  const c = await f.session();
  try {
    const first = await claim(c, w, 6);
    expect(first.map((t) => t.key)).toEqual(["a", "b", "a", "b", "a", "b"]);
    // Then claims of 10 until nothing is left to lease: each key ends at its cap, exactly.
    for (let i = 0; i < 8; i++) await claim(c, w, 10);
    const { rows } = await f.pool.query(
      `SELECT concurrency_key AS key, count(*)::int AS n FROM tasks WHERE workload = $1 AND status = 'leased' GROUP BY 1 ORDER BY 1`,
      [w],
    );
    expect(rows).toEqual([
      { key: "a", n: 16 },
      { key: "b", n: 16 },
    ]);
  } finally {
    await c.end();
  }
});

it("completions of a capped workload wake parked claims only after a claim of it left a caller with nothing", async () => {
  const w = await workload({ maxLeased: 1000 }, 3);
  const capped = await workload({ maxLeased: 1 }, 2);
  const listen = await f.session();
  const wakes: string[] = [];
  listen.on("notification", (n) => {
    if (n.channel === NOTIFY_CHANNEL && n.payload) wakes.push(n.payload);
  });
  await listen.query(`LISTEN ${NOTIFY_CHANNEL}`);
  // Notifications arrive in commit order: once this one is here, every earlier one is too.
  let marks = 0;
  const settled = async (of = w) => {
    const mark = `${w}:mark${++marks}`;
    await f.pool.query(`SELECT pg_notify($1, $2)`, [NOTIFY_CHANNEL, mark]);
    const end = Date.now() + 5000;
    while (!wakes.includes(mark) && Date.now() < end) await new Promise((r) => setTimeout(r, 5));
    expect(wakes).toContain(mark);
    // A freed slot's wake names no task (FREED_HEAD): it wakes parked claims and moves no claim hint.
    return wakes.filter((p) => p === `${of}:1:${FREED_HEAD}`).length;
  };
  const waits = (of: string) => f.count("workload_slot_waits" as "tasks", `workload = '${of}' AND wanted_at > now() - interval '1 minute'`);
  const complete = (t: Task) =>
    f.queue.completeTask({ taskId: t.id, workerId: t.leaseOwner!, attempt: t.attempt, resultUri: "s3://o", resultSha256: sha("o") });
  try {
    // Served in full, far from the cap: its completion frees a slot nobody waits for, and sends nothing.
    const [one] = await f.queue.claimTasks({ workerId: "a", workloads: [w] });
    await complete(one);
    expect(await settled()).toBe(0);
    expect(await f.count("tasks", `workload = '${w}' AND status = 'completed'`)).toBe(1);
    // A claim of 10 finds 2: short, but its caller got tasks and does not park: still nothing.
    const two = await f.queue.claimTasks({ workerId: "b", workloads: [w], maxTasks: 10 });
    expect(two).toHaveLength(2);
    await complete(two[0]);
    expect(await settled()).toBe(0);
    expect(await waits(w)).toBe(0);
    // A claim that gets nothing may be parked.
    expect(await f.queue.claimTasks({ workerId: "c", workloads: [w] })).toEqual([]);
    if (SWITCHES.flowClaimHints) {
      // Nothing left to take is no limit: a freed slot gives it nothing, and the next job's
      // CreateJob wakes it. Not recorded; the completion sends nothing.
      expect(await waits(w)).toBe(0);
      await complete(two[1]);
      expect(await settled()).toBe(0);
    } else {
      // The claim as before records every caller left with nothing.
      expect(await waits(w)).toBe(1);
      await complete(two[1]);
      expect(await settled()).toBe(1);
    }
    // Held back by its cap: recorded, and from then on a freed slot wakes.
    const [first] = await f.queue.claimTasks({ workerId: "d", workloads: [capped] });
    expect(await f.queue.claimTasks({ workerId: "e", workloads: [capped] })).toEqual([]);
    expect(await waits(capped)).toBe(1);
    await complete(first);
    expect(await settled(capped)).toBe(1);
  } finally {
    await listen.end();
  }
});
