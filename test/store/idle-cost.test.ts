// What an idle coordinator costs PostgreSQL: the maintenance loop (lease reaper, the maintenance
// probe, pending expiry, retention, event partitions) and the scheduler run every second on every
// coordinator whatever the load, so each of their statements must stay a cheap probe on every
// supported version. On PostgreSQL 15 and 17 a session with sequential scans disabled added 1e10
// to the cost of any plan with one (tables such as workloads and job_watchers have no other path),
// which crossed jit_above_cost, and the probe was JIT-compiled on each call (~70 ms instead of
// 0.1 ms). PostgreSQL 18 counts disabled nodes instead, so this file runs in the version matrix.
//
// The passes run on a pool made as the coordinator makes it (its session settings), every
// statement they send is recorded, and each is then run again under EXPLAIN ANALYZE as a generic
// plan (the coordinator's plan_cache_mode): no JIT, and a planner cost far below jit_above_cost.
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createPool, PostgresQueue } from "../../src/store/postgres/store.js";
import { createTestDatabase, type TestDatabase } from "../support/db.js";
import { TEST_STORE_OPTIONS } from "../support/queue.js";

interface Sent {
  text: string;
  values: unknown[];
}

let db: TestDatabase;
let pool: pg.Pool;
const sent = new Map<string, Sent>();

/** Records every statement a client of the pool sends (text and values), then sends it on. */
function record(client: pg.PoolClient): void {
  const query = client.query.bind(client) as (...args: unknown[]) => unknown;
  (client as unknown as { query: (...args: unknown[]) => unknown }).query = (config: unknown, values?: unknown, cb?: unknown) => {
    const c = config as { text?: string; values?: unknown[] } | string;
    const text = typeof c === "string" ? c : c.text;
    const vals = (typeof c === "string" ? values : (c.values ?? values)) as unknown[] | undefined;
    if (text && /^\s*(SELECT|WITH|UPDATE|DELETE|INSERT)\b/i.test(text) && !sent.has(text)) sent.set(text, { text, values: vals ?? [] });
    return query(config, values, cb);
  };
}

beforeAll(async () => {
  db = await createTestDatabase();
  pool = createPool({ connectionString: db.url, max: 4, statementTimeoutMs: 30_000, connectTimeoutMs: 10_000 });
  pool.on("connect", record);
  // Retention on, so the probe's retention arm is planned and run too.
  const queue = new PostgresQueue(pool, { ...TEST_STORE_OPTIONS, retentionDays: 7 });
  // A database as a new deployment has it: a workload with a pending limit, nothing else.
  await queue.putWorkload({ name: "idle", maxPendingSeconds: 3600 });
  sent.clear();
  for (let pass = 0; pass < 3; pass++) {
    await queue.expireLeases();
    await queue.maintain();
    await queue.fireSchedules();
  }
});

afterAll(async () => {
  await pool?.end();
  await db?.drop();
});

/** A value the store sent, as a literal for EXECUTE (which takes no bound parameters). */
function literal(c: pg.PoolClient, v: unknown): string {
  if (v === null || v === undefined) return "NULL";
  if (typeof v === "number" || typeof v === "bigint" || typeof v === "boolean") return String(v);
  if (v instanceof Date) return c.escapeLiteral(v.toISOString());
  if (Array.isArray(v))
    return c.escapeLiteral(`{${v.map((x) => (x === null ? "NULL" : `"${String(x).replace(/["\\]/g, "\\$&")}"`)).join(",")}}`);
  if (typeof v === "object") return c.escapeLiteral(JSON.stringify(v));
  return c.escapeLiteral(String(v));
}

interface Explained {
  JIT?: unknown;
  Plan: { "Total Cost": number };
}

describe("an idle coordinator's statements", () => {
  it("each is a cheap plan on every version: no JIT, planner cost far below jit_above_cost", async () => {
    const statements = [...sent.values()];
    // The maintenance probe, the reaper's probe and the scheduler's: the loops ran.
    expect(statements.length).toBeGreaterThanOrEqual(3);
    expect(statements.some((s) => /max_pending_seconds/.test(s.text))).toBe(true);
    const client = await pool.connect();
    try {
      const jitAboveCost = Number((await client.query("SELECT current_setting('jit_above_cost') AS c")).rows[0].c);
      expect(jitAboveCost).toBeGreaterThan(0);
      const found: Array<{ statement: string; cost: number; jit: boolean }> = [];
      for (const [i, s] of statements.entries()) {
        await client.query("BEGIN");
        try {
          await client.query(`PREPARE idle_${i} AS ${s.text}`);
          const args = s.values.map((v) => literal(client, v)).join(", ");
          const { rows } = await client.query(`EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE idle_${i}${args ? `(${args})` : ""}`);
          const plan = (rows[0]["QUERY PLAN"] as Explained[])[0];
          found.push({
            statement: s.text.replace(/\s+/g, " ").trim().slice(0, 90),
            cost: plan.Plan["Total Cost"],
            jit: plan.JIT !== undefined,
          });
        } finally {
          await client.query("ROLLBACK");
        }
      }
      // A probe of an empty database costs tens of units; a disabled node's penalty is 1e10.
      const expensive = found.filter((f) => f.jit || f.cost >= jitAboveCost / 10);
      expect(expensive).toEqual([]);
    } finally {
      client.release();
    }
  });
});
