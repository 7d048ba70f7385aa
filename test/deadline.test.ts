// Every database call runs under the caller's deadline: waiting for a connection and a running
// statement both end when the signal aborts, and the pool is healthy afterwards.
import { afterAll, beforeAll, expect, it } from "vitest";
import type pg from "pg";
import { DeadlineExceededError, UnavailableError } from "../src/queue/errors.js";
import { createPool } from "../src/store/postgres/store.js";
import { withClient } from "../src/store/postgres/db.js";
import { createTestDatabase, type TestDatabase } from "./support/db.js";

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
