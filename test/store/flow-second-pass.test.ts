// Keys of their own (flow-control-claim.md): a claim whose first candidates are all of one key that
// has room for fewer than it wants, or whose lock another claim holds, reads past that key in a
// second pass, to the next keys and priorities, and still passes no cap. Real PostgreSQL, the claim
// function called the way the claim statements call it. The claim as it was before
// (FLOW_CLAIM_HINTS=false) has no second pass: these run with the hinted claim only.
import type pg from "pg";
import { afterAll, beforeAll, expect, it } from "vitest";
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

/** A workload of per-key cap 2 (keys of their own): key a's job of `a` tasks at priority 1, then key b's of 10 at priority 0. */
async function workload(a: number): Promise<string> {
  const name = `pass${++seq}`;
  await f.queue.putWorkload({ name, leaseSeconds: 60, maxLeasedPerKey: 2 });
  const specs = (n: number) => Array.from({ length: n }, (_, i) => ({ chunkIndex: i, inputUri: `s3://pass/${i}`, inputSha256: sha(i) }));
  await f.queue.createJob({ workload: name, tasks: specs(a), concurrencyKey: "a", priority: 1 });
  await f.queue.createJob({ workload: name, tasks: specs(10), concurrencyKey: "b", priority: 0 });
  return name;
}

type Leased = { key: string; slot: number; owner: string };

/** One call of the claim function for `owners` (one slot each), as the coalesced statements call it: what it leased, by slot. */
async function claim(c: pg.Client, w: string, owners: string[]): Promise<Leased[]> {
  const { rows } = await c.query<Leased>(
    `SELECT (f.task).concurrency_key AS key, f.slot, (f.task).lease_owner AS owner
     FROM leasehold_flow_claim_hinted(ARRAY[$1]::text[], $2, NULL, NULL, '{}'::jsonb, $3::text[], $4::jsonb) f ORDER BY f.slot`,
    [w, owners.length, owners, FLOW_HINTS_ARG],
  );
  return rows;
}

async function liveByKey(w: string): Promise<Record<string, number>> {
  const { rows } = await f.pool.query<{ key: string; n: number }>(
    `SELECT concurrency_key AS key, count(*)::int AS n FROM tasks WHERE workload = $1 AND status = 'leased' GROUP BY 1 ORDER BY 1`,
    [w],
  );
  return Object.fromEntries(rows.map((r) => [r.key, r.n]));
}

it.skipIf(!SWITCHES.flowClaimHints)(
  "a key at the front with room for one: the claim takes it, then the next key's tasks, each slot its owner, no cap passed",
  async () => {
    const w = await workload(30);
    const c = await f.session();
    try {
      // Key a has one lease live, so room for one more; its 29 pending tasks fill the first pass's scan.
      expect(await claim(c, w, ["w0"])).toEqual([{ key: "a", slot: 1, owner: "w0" }]);
      const got = await claim(c, w, ["w1", "w2", "w3"]);
      expect(got).toEqual([
        { key: "a", slot: 1, owner: "w1" },
        { key: "b", slot: 2, owner: "w2" },
        { key: "b", slot: 3, owner: "w3" },
      ]);
      expect(await liveByKey(w)).toEqual({ a: 2, b: 2 });
      // Both keys at their cap: nothing more.
      expect(await claim(c, w, ["w4", "w5"])).toEqual([]);
      expect(await liveByKey(w)).toEqual({ a: 2, b: 2 });
    } finally {
      await c.end();
    }
  },
);

it.skipIf(!SWITCHES.flowClaimHints)(
  "the front key's lock held by another claim: the claim reads past it to the next key, and the held key's tasks wait for it",
  async () => {
    const w = await workload(30);
    const holder = await f.session();
    const c = await f.session();
    try {
      // Another claim of key a, in its transaction: its lock as the claim function takes it.
      await holder.query("BEGIN");
      await holder.query("SELECT pg_advisory_xact_lock(hashtext('leasehold.key:' || $1::text), hashtext('a'))", [w]);
      expect(await claim(c, w, ["w1", "w2"])).toEqual([
        { key: "b", slot: 1, owner: "w1" },
        { key: "b", slot: 2, owner: "w2" },
      ]);
      expect(await liveByKey(w)).toEqual({ b: 2 });
      await holder.query("COMMIT");
      // Key a's lock let go: its tasks, first in claim order, are the next claim's.
      expect(await claim(c, w, ["w3", "w4"])).toEqual([
        { key: "a", slot: 1, owner: "w3" },
        { key: "a", slot: 2, owner: "w4" },
      ]);
      expect(await liveByKey(w)).toEqual({ a: 2, b: 2 });
    } finally {
      await holder.end();
      await c.end();
    }
  },
);

it.skipIf(!SWITCHES.flowClaimHints)(
  "a key the first pass filled is not the second pass's, whatever that pass's count of live leases sees",
  async () => {
    // Key c (priority 1) has one lease live: room for one. Then key p: 2 tasks at priority 2, 5 at 0.
    const name = `pass${++seq}`;
    await f.queue.putWorkload({ name, leaseSeconds: 60, maxLeasedPerKey: 2 });
    const specs = (n: number) => Array.from({ length: n }, (_, i) => ({ chunkIndex: i, inputUri: `s3://pass/${i}`, inputSha256: sha(i) }));
    await f.queue.createJob({ workload: name, tasks: specs(30), concurrencyKey: "c", priority: 1 });
    const c = await f.session();
    try {
      expect(await claim(c, name, ["w0"])).toEqual([{ key: "c", slot: 1, owner: "w0" }]);
      await f.queue.createJob({ workload: name, tasks: specs(2), concurrencyKey: "p", priority: 2 });
      await f.queue.createJob({ workload: name, tasks: specs(5), concurrencyKey: "p", priority: 0 });
      // The first pass takes p's two (its cap) and one of c's (its room), and passes over the rest of
      // c's. The second reads past c to p's tasks at priority 0: p is full, by its own first pass.
      expect((await claim(c, name, ["w1", "w2", "w3", "w4"])).map((r) => r.key)).toEqual(["p", "p", "c"]);
      expect(await liveByKey(name)).toEqual({ c: 2, p: 2 });
    } finally {
      await c.end();
    }
  },
);
