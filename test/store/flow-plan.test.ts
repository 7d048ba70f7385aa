// The capped claim's candidate scan keeps the ordered index scan that stops at the first pending
// task. A workload whose tasks all share one concurrency key ('' when none is given) once made
// the planner estimate one pending row and read and sort the whole backlog on every claim
// (38 ms a claim at 30,000 pending); auto_explain shows each plan the claim function runs.
import pg from "pg";
import { afterAll, beforeAll, expect, it } from "vitest";
import type { Task } from "../../src/queue/types.js";
import { PostgresQueue } from "../../src/store/postgres/store.js";
import type { TestDatabase } from "../support/db.js";
import { FLOW_HINTS_ARG, sha, queueFixture, type QueueFixture } from "../support/queue.js";
import { SWITCHES } from "../support/switches.js";

const SHA = sha("flow-plan");
let db: TestDatabase;
let fx: QueueFixture;
let queue: PostgresQueue;

beforeAll(async () => {
  fx = await queueFixture(
    {
      defaultLeaseSeconds: 60,
      defaultMaxAttempts: 3,
      maxTasksPerJob: 20_000,
    },
    { max: 2 },
  );
  db = fx.db;
  queue = fx.queue;
});

afterAll(async () => {
  await fx?.close();
});

/** The plans auto_explain logs for ten claims of one task each, as notices on this connection (those with `cte` in them). */
async function claimPlans(workload: string, cte = "pending AS"): Promise<string[]> {
  const c = new pg.Client({ connectionString: db.url });
  c.on("error", () => {});
  await c.connect();
  try {
    await c.query("VACUUM ANALYZE tasks");
    await c.query(
      "LOAD 'auto_explain'; SET auto_explain.log_min_duration = 0; SET auto_explain.log_nested_statements = on; SET client_min_messages = log",
    );
    const plans: string[] = [];
    c.on("notice", (n) => plans.push(n.message ?? ""));
    // More than five calls: PL/pgSQL switches to a generic plan after five custom ones.
    for (let i = 0; i < 10; i++) {
      const { rows } = await c.query(
        `SELECT (task).id FROM leasehold_flow_claim_hinted($1, 1, 'plan-worker', 60, '{}'::jsonb, NULL, $2::jsonb)`,
        [[workload], FLOW_HINTS_ARG],
      );
      expect(rows).toHaveLength(1);
    }
    return plans.filter((p) => p.includes(cte));
  } finally {
    await c.end();
  }
}

for (const [name, settings, keys] of [
  ["one key (none given)", { maxLeased: 1000 }, [""]],
  ["per-key caps over 20 keys", { maxLeasedPerKey: 1000 }, Array.from({ length: 20 }, (_, i) => `k${i}`)],
] as const) {
  it(`a capped claim scans pending tasks in index order, with ${name}`, async () => {
    const workload = `plan-${keys.length}`;
    await queue.putWorkload({ name: workload, ...settings } as never);
    for (const key of keys) {
      await queue.createJob({
        workload,
        concurrencyKey: key,
        tasks: Array.from({ length: Math.ceil(6000 / keys.length) }, (_, i) => ({
          chunkIndex: i,
          inputUri: `s3://p/${i}`,
          inputSha256: SHA,
        })),
      } as never);
    }
    const plans = await claimPlans(workload);
    expect(plans).toHaveLength(10);
    for (const plan of plans) {
      expect(plan).toContain("Index Scan using tasks_claim_pending_idx");
      expect(plan).not.toMatch(/Seq Scan on tasks|Bitmap Heap Scan on tasks/);
    }
  }, 120_000);
}

// Per-key caps below 2 x GATES claim through keys of their own (leasehold_flow_claim_hinted): their
// candidates are read, unlocked, by the same ordered index scan.
it.runIf(SWITCHES.flowClaimHints)(
  "a claim of keys of their own (a cap of 4 per key over 20 keys) scans pending tasks in index order",
  async () => {
    const workload = "plan-keys";
    await queue.putWorkload({ name: workload, maxLeasedPerKey: 4 } as never);
    for (let k = 0; k < 20; k++) {
      await queue.createJob({
        workload,
        concurrencyKey: `k${k}`,
        tasks: Array.from({ length: 300 }, (_, i) => ({ chunkIndex: i, inputUri: `s3://p/${i}`, inputSha256: SHA })),
      } as never);
    }
    const plans = await claimPlans(workload, "cand AS");
    expect(plans.length).toBeGreaterThanOrEqual(10);
    for (const plan of plans) {
      if (!plan.includes("full_ AS")) continue;
      expect(plan).toContain("Index Scan using tasks_claim_pending_idx");
      expect(plan).not.toMatch(/Seq Scan on tasks|Bitmap Heap Scan on tasks/);
    }
  },
  120_000,
);

/** Runs `fn` on a client of its own while another session holds a REPEATABLE READ snapshot (a held MVCC horizon). */
async function underHeldSnapshot(fn: (c: pg.Client) => Promise<void>): Promise<void> {
  const holder = new pg.Client({ connectionString: db.url });
  holder.on("error", () => {});
  await holder.connect();
  await holder.query("BEGIN ISOLATION LEVEL REPEATABLE READ");
  await holder.query("SELECT count(*) FROM jobs");
  const c = new pg.Client({ connectionString: db.url });
  c.on("error", () => {});
  await c.connect();
  try {
    await fn(c);
  } finally {
    await c.end();
    await holder.query("ROLLBACK");
    await holder.end();
  }
}

/**
 * `times` counts of the workload's live leases on `c` with generic plans, as the coordinator's
 * sessions run them: each count's total, and the nodes of each count's plan (auto_explain's lines
 * with a cost, not the query text, whose comments name the indexes).
 */
async function liveCounts(c: pg.Client, workload: string, times: number): Promise<{ totals: number[]; plans: string[] }> {
  await c.query(
    "LOAD 'auto_explain'; SET auto_explain.log_min_duration = 0; SET auto_explain.log_nested_statements = on; SET client_min_messages = log; SET plan_cache_mode = force_generic_plan",
  );
  const notices: string[] = [];
  c.on("notice", (n) => notices.push(n.message ?? ""));
  const totals: number[] = [];
  for (let i = 0; i < times; i++) {
    const { rows } = await c.query<{ n: number }>("SELECT n FROM leasehold_flow_live($1)", [workload]);
    totals.push(rows.reduce((s, r) => s + r.n, 0));
  }
  const plans = notices
    .filter((p) => p.includes("saved AS"))
    .map((p) =>
      p
        .split("\n")
        .filter((l) => l.includes("(cost="))
        .join("\n"),
    );
  return { totals, plans };
}

// The count of live leases (leasehold_flow_live) reads from its floor through tasks_leased_seq_idx,
// and the leases without a lease_seq through an index of their own. The planner takes every partial
// index of leases for as small as the few live ones (ANALYZE sees no more): a generic plan once read
// either arm by a full scan of tasks_lease_expiry_idx, and under a held horizon that is every lease
// since, dead ones included, twice a claim.
it("the count of live leases reads its two arms through their own indexes in its generic plan, under a held snapshot", async () => {
  const workload = "plan-live";
  await queue.putWorkload({ name: workload, maxLeasedPerKey: 4 } as never);
  for (let k = 0; k < 10; k++) {
    await queue.createJob({
      workload,
      concurrencyKey: `k${k}`,
      tasks: Array.from({ length: 100 }, (_, i) => ({ chunkIndex: i, inputUri: `s3://l/${i}`, inputSha256: SHA })),
    } as never);
  }
  await underHeldSnapshot(async (c) => {
    // 600 leases begin and end while the snapshot is held: their entries stay in every lease index.
    for (let i = 0; i < 150; i++) {
      const claimed = await queue.claimTasks({ workerId: `churn-${i}`, workloads: [workload], maxTasks: 4 } as never);
      for (const t of claimed as Task[])
        await queue.completeTask({ taskId: t.id, workerId: t.leaseOwner!, attempt: t.attempt, resultUri: "s3://r", resultSha256: SHA });
    }
    for (let i = 0; i < 12; i++) {
      const claimed = await queue.claimTasks({ workerId: `live-${i}`, workloads: [workload], maxTasks: 2 } as never);
      expect(claimed.length).toBeGreaterThan(0);
    }
    await c.query("VACUUM ANALYZE tasks");
    const { totals, plans } = await liveCounts(c, workload, 10);
    expect(totals[totals.length - 1]).toBe(24);
    expect(plans).toHaveLength(10);
    for (const nodes of plans) {
      expect(nodes).toMatch(/Index Scan using tasks_leased_seq_idx on tasks t {2}/);
      expect(nodes).toContain("Index Scan using tasks_leased_noseq_idx on tasks t_2 ");
      expect(nodes).not.toMatch(/tasks_lease_expiry_idx|tasks_status_lease_created_idx|Seq Scan on tasks/);
    }
  });
}, 120_000);

// The same count once the planner's counts of the two lease indexes have drifted apart: with a few
// entries counted in tasks_leased_seq_idx's hundreds of pages, and none in tasks_lease_expiry_idx,
// a full scan of the latter with a sort on top looked cheaper than the floor's range, and the kept
// plan read every lease version since the snapshot was held (~30,000 buffers a count in
// bench:horizon's keyed shape, in spells of seconds each time the plans were made again).
it("the count of live leases keeps its floor's range when the planner's counts of the lease indexes drift apart", async () => {
  const workload = "plan-tall";
  await queue.putWorkload({ name: workload, maxLeasedPerKey: 4 } as never);
  await queue.createJob({
    workload,
    concurrencyKey: "k",
    tasks: Array.from({ length: 10_000 }, (_, i) => ({ chunkIndex: i, inputUri: `s3://t/${i}`, inputSha256: SHA })),
  } as never);
  await underHeldSnapshot(async (c) => {
    // Three rounds of 10,000 leases begun and given back, each by one statement, while the snapshot
    // is held: 30,000 versions in each lease index, which no VACUUM may remove.
    for (let round = 0; round < 3; round++) {
      await c.query(
        `UPDATE tasks SET status = 'leased', lease_seq = txid_current() - 10000 + chunk_index, lease_owner = 'churn',
           lease_expires_at = now() + interval '60 s' + chunk_index * interval '1 ms'
         WHERE workload = $1 AND status = 'pending'`,
        [workload],
      );
      await c.query(
        `UPDATE tasks SET status = 'pending', lease_seq = NULL, lease_owner = NULL, lease_expires_at = NULL WHERE workload = $1 AND lease_owner = 'churn'`,
        [workload],
      );
    }
    // ANALYZE alone (autovacuum's, between its VACUUMs) with no lease live: both lease indexes look
    // empty to the planner, as they did in bench:horizon whenever its few live leases missed the sample.
    await c.query("VACUUM tasks");
    await c.query("ANALYZE tasks");
    const claimed = await queue.claimTasks({ workerId: "tall", workloads: [workload], maxTasks: 4 } as never);
    expect(claimed).toHaveLength(4);
    // The two indexes' counts as bench:horizon's database had them when its plans went wrong: a few
    // entries in tasks_leased_seq_idx (hundreds of pages, so each entry looks pages long), none in
    // tasks_lease_expiry_idx (one page). Each index's count is set by whichever of autovacuum's
    // ANALYZE (the live leases its sample met) and VACUUM (which skips the index it need not scan)
    // touched it last, so the two drift apart.
    await c.query("UPDATE pg_class SET reltuples = 5 WHERE relname = 'tasks_leased_seq_idx'");
    const { totals, plans } = await liveCounts(c, workload, 3);
    expect(totals).toEqual([4, 4, 4]);
    expect(plans).toHaveLength(3);
    for (const nodes of plans) {
      expect(nodes).toMatch(/Index Scan using tasks_leased_seq_idx on tasks t {2}/);
      expect(nodes).not.toMatch(/tasks_lease_expiry_idx|Seq Scan on tasks/);
    }
  });
}, 120_000);
