// Database checks main needs outside the queue itself: creating the embedded
// database on first start, and the /readyz probe.
import type pg from "pg";
import { openClient } from "../sql/db.js";
import { pendingMigrations, readShippedSchema, type ShippedSchema } from "./migrate.js";
import { defineQuery, type NoParams } from "../sql/query.js";

const DATABASE_EXISTS = defineQuery<{ database: string }, { exists: 1 }>(
  null,
  "SELECT 1 AS exists FROM pg_database WHERE datname = $1",
  (p) => [p.database],
);

const READ_ONLY = defineQuery<NoParams, { recovery: boolean; read_only: string }>(
  null,
  "SELECT pg_is_in_recovery() AS recovery, current_setting('transaction_read_only') AS read_only",
);

/** Creates `database` on the cluster behind adminUrl unless it exists. Returns true if created. */
export async function ensureDatabase(adminUrl: string, database: string): Promise<boolean> {
  if (!/^[a-z_][a-z0-9_]*$/.test(database)) throw new Error(`unsafe database name ${JSON.stringify(database)}`);
  const client = await openClient({ connectionString: adminUrl });
  try {
    if (await DATABASE_EXISTS.maybe(client, { database })) return false;
    await client.query(`CREATE DATABASE ${database}`);
    return true;
  } finally {
    await client.end();
  }
}

export interface Readiness {
  ready: boolean;
  detail?: string;
}

/**
 * Why the sessions of this pool cannot write, or undefined when they can: a coordinator pointed
 * at a hot standby (or reaching a demoted leader during a switchover) answers every write with
 * an error, so it must not take traffic. Checked per session: through a pooler the answer is the
 * server's that the pooler reaches now.
 */
export async function readOnlyReason(pool: pg.Pool): Promise<string | undefined> {
  const row = await READ_ONLY.one(pool);
  if (row.recovery) return "the database is a read-only standby (pg_is_in_recovery() is true): point DATABASE_URL at the primary";
  if (row.read_only === "on") {
    return "the database's sessions are read-only (default_transaction_read_only is on): point DATABASE_URL at a writable primary";
  }
  return undefined;
}

/**
 * The migrations and function files this process's code shipped with, read once when the process
 * loads this module (at start). Not read again per request: an in-place upgrade copies the next
 * release's files into the tree before the coordinators restart, and those files are the next
 * code's needs, not this one's (re-reading took every live coordinator out of the balancer).
 */
const shippedAtStart: ShippedSchema = readShippedSchema();

/**
 * Ready when the database answers within timeoutMs, accepts writes, and has every migration and
 * function text the running code shipped with (newer ones, from a release migrated in a rolling
 * upgrade, do not count against it).
 */
export async function checkReadiness(pool: pg.Pool, timeoutMs: number, shipped: ShippedSchema = shippedAtStart): Promise<Readiness> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<Readiness>((resolve) => {
    timer = setTimeout(() => resolve({ ready: false, detail: `database did not answer within ${timeoutMs} ms` }), timeoutMs);
  });
  const check = async (): Promise<Readiness> => {
    try {
      const readOnly = await readOnlyReason(pool);
      if (readOnly) return { ready: false, detail: readOnly };
      const pending = await pendingMigrations(pool, shipped);
      if (pending.length > 0) {
        return { ready: false, detail: `${pending.length} migration(s) pending (first: ${pending[0]})` };
      }
      return { ready: true };
    } catch (err) {
      // No database text in an HTTP answer: only the error code (e.g. ECONNREFUSED, 57P03).
      const code = (err as { code?: unknown } | null)?.code;
      return { ready: false, detail: `database unreachable${typeof code === "string" ? ` (${code})` : ""}` };
    }
  };
  try {
    return await Promise.race([check(), timeout]);
  } finally {
    clearTimeout(timer);
  }
}
