// A real PostgresQueue on a database of its own, for tests that go through the service.
import { createHash } from "node:crypto";
import pg from "pg";
import type { QueueObserver } from "../../src/queue/service.js";
import { createPool, PostgresQueue, type StoreOptions } from "../../src/store/postgres/store.js";
import { createTestDatabase, type TestDatabase } from "./db.js";
import { SWITCHES } from "./switches.js";

export function sha(seed: string | number): string {
  return createHash("sha256").update(String(seed)).digest("hex");
}

/** An observer that records each coalesced statement's kind and size, in order, and ignores the rest. */
export function batchRecorder(): { observer: QueueObserver; batches: Array<{ kind: string; size: number }> } {
  const batches: Array<{ kind: string; size: number }> = [];
  const observer: QueueObserver = {
    tasksClaimed() {},
    tasksCompleted() {},
    taskFailed() {},
    leasesExpired() {},
    statementBatched(kind, size) {
      batches.push({ kind, size });
    },
  };
  return { observer, batches };
}

export interface QueueFixture {
  db: TestDatabase;
  pool: pg.Pool;
  queue: PostgresQueue;
  /** an extra pool on the same database, standing for another coordinator */
  newPool(): pg.Pool;
  /** a connection of its own on the same database, for a suite that needs one session's settings kept between calls; the suite ends it */
  session(): Promise<pg.Client>;
  count(table: "jobs" | "tasks" | "workloads" | "task_events", where?: string): Promise<number>;
  close(): Promise<void>;
}

/** A test store's options; coalescing follows the project's COALESCE switch (switches.ts). */
export const TEST_STORE_OPTIONS: StoreOptions = {
  defaultLeaseSeconds: 30,
  defaultMaxAttempts: 3,
  maxTasksPerJob: 10_000,
  coalescing: SWITCHES.coalescing,
  claimHints: SWITCHES.claimHints,
  flowClaimHints: SWITCHES.flowClaimHints,
};

/**
 * The hints argument of leasehold_flow_claim_hinted for a suite that calls the claim function itself:
 * none (the function as the claim statements call it), or the claim as before under FLOW_CLAIM_HINTS=false.
 */
export const FLOW_HINTS_ARG = SWITCHES.flowClaimHints ? "{}" : JSON.stringify({ "~flow": "off" });

/**
 * A store on a database of its own, the one way a suite builds one: `options` are what the suite
 * sets apart from TEST_STORE_OPTIONS (which follow the project's switches), `pool.max` its pools'
 * size (default 10).
 */
export async function queueFixture(options: Partial<StoreOptions> = {}, pool: { max?: number } = {}): Promise<QueueFixture> {
  const db = await createTestDatabase();
  const pools: pg.Pool[] = [];
  const newPool = () => {
    const p = createPool({ connectionString: db.url, max: pool.max ?? 10, statementTimeoutMs: 30_000, connectTimeoutMs: 10_000 });
    pools.push(p);
    return p;
  };
  const first = newPool();
  const queue = new PostgresQueue(first, { ...TEST_STORE_OPTIONS, ...options });
  return {
    db,
    pool: first,
    queue,
    newPool,
    async session() {
      const c = new pg.Client({ connectionString: db.url });
      c.on("error", () => {});
      await c.connect();
      return c;
    },
    async count(table, where = "true") {
      const { rows } = await first.query(`SELECT count(*)::int AS n FROM ${table} WHERE ${where}`);
      return rows[0].n;
    },
    async close() {
      await Promise.all(pools.map((p) => p.end()));
      await db.drop();
    },
  };
}
