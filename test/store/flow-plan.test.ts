// The capped claim's candidate scan keeps the ordered index scan that stops at the first pending
// task. A workload whose tasks all share one concurrency key ('' when none is given) once made
// the planner estimate one pending row and read and sort the whole backlog on every claim
// (38 ms a claim at 30,000 pending); auto_explain shows each plan the claim function runs.
import pg from "pg";
import { afterAll, beforeAll, expect, it } from "vitest";
import { PostgresQueue } from "../../src/store/postgres/store.js";
import type { TestDatabase } from "../support/db.js";
import { sha, queueFixture, type QueueFixture } from "../support/queue.js";

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

/** The plans auto_explain logs for ten claims of one task each, as notices on this connection. */
async function claimPlans(workload: string): Promise<string[]> {
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
      const { rows } = await c.query(`SELECT (task).id FROM leasehold_flow_claim($1, 1, 'plan-worker', 60, '{}'::jsonb)`, [[workload]]);
      expect(rows).toHaveLength(1);
    }
    return plans.filter((p) => p.includes("pending AS"));
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
