// Every database call runs under the caller's deadline: waiting for a connection and a running
// statement both end when the signal aborts, and the pool is healthy afterwards.
import { afterAll, beforeAll, expect, it } from "vitest";
import type pg from "pg";
import { DeadlineExceededError, UnavailableError } from "../../src/queue/errors.js";
import { createPool } from "../../src/store/postgres/store.js";
import { withClient } from "../../src/store/postgres/sql/db.js";
import { createTestDatabase, type TestDatabase } from "../support/db.js";

let db: TestDatabase;
let pool: pg.Pool;
const unhandled: unknown[] = [];
const onUnhandled = (e: unknown) => unhandled.push(e);

beforeAll(async () => {
  db = await createTestDatabase();
  pool = createPool({ connectionString: db.url, max: 1, statementTimeoutMs: 30_000, connectTimeoutMs: 1_000 });
  process.on("unhandledRejection", onUnhandled);
});
afterAll(async () => {
  process.off("unhandledRejection", onUnhandled);
  await pool?.end();
  await db?.drop();
});

it("a deadline passing while waiting for a connection rejects, and the late connection goes back exactly once", async () => {
  const held = await pool.connect();
  const err = await withClient(pool, AbortSignal.timeout(100), (c) => c.query("SELECT 1")).catch((e) => e);
  expect(err).toBeInstanceOf(DeadlineExceededError);
  held.release();
  await new Promise((r) => setTimeout(r, 100));
  expect(unhandled).toEqual([]);
  const { rows } = await pool.query("SELECT 2 AS n");
  expect(rows[0].n).toBe(2);
  expect(pool.totalCount).toBe(1);
});

it("an exhausted pool answers UNAVAILABLE after its connect timeout instead of hanging", async () => {
  const held = await pool.connect();
  const err = await withClient(pool, undefined, (c) => c.query("SELECT 1")).catch((e) => e);
  held.release();
  expect(err).toBeInstanceOf(UnavailableError);
});

it("an abort cancels the running statement on the server", async () => {
  const err = await withClient(pool, AbortSignal.timeout(200), (c) => c.query("SELECT pg_sleep(20)")).catch((e) => e);
  expect(err).toBeInstanceOf(DeadlineExceededError);
  const { rows } = await pool.query(
    `SELECT count(*)::int AS n FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep(20)%' AND state = 'active'`,
  );
  expect(rows[0].n).toBe(0);
  expect((await pool.query("SELECT 3 AS n")).rows[0].n).toBe(3);
});

it("a call PostgreSQL aborts as a deadlock answers UNAVAILABLE (retry), not an internal error, and its connection stays usable", async () => {
  const two = createPool({ connectionString: db.url, max: 2, statementTimeoutMs: 30_000, connectTimeoutMs: 1_000 });
  try {
    // Each side holds one advisory lock and waits for the other's: PostgreSQL aborts one of them
    // after deadlock_timeout and the other goes on.
    let firstHeld!: () => void;
    let secondHeld!: () => void;
    const held = [new Promise<void>((r) => (firstHeld = r)), new Promise<void>((r) => (secondHeld = r))];
    const side = (mine: number, theirs: number, signalHeld: () => void, other: Promise<void>) =>
      withClient(two, undefined, async (c) => {
        await c.query("BEGIN");
        try {
          await c.query("SELECT pg_advisory_xact_lock(4242, $1)", [mine]);
          signalHeld();
          await other;
          await c.query("SELECT pg_advisory_xact_lock(4242, $1)", [theirs]);
          await c.query("COMMIT");
          return "committed";
        } catch (err) {
          await c.query("ROLLBACK");
          throw err;
        }
      });
    const results = await Promise.allSettled([side(1, 2, firstHeld, held[1]), side(2, 1, secondHeld, held[0])]);
    const rejected = results.filter((r) => r.status === "rejected");
    expect(rejected).toHaveLength(1);
    expect(rejected[0].reason).toBeInstanceOf(UnavailableError);
    expect(results.filter((r) => r.status === "fulfilled")).toHaveLength(1);
    expect((await two.query("SELECT 4 AS n")).rows[0].n).toBe(4);
  } finally {
    await two.end();
  }
});
