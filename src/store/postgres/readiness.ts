// Database checks main needs outside the queue itself: creating the embedded
// database on first start, and the /readyz probe.
import type pg from "pg";
import { openClient } from "./db.js";
import { pendingMigrations } from "./migrate.js";

/** Creates `database` on the cluster behind adminUrl unless it exists. Returns true if created. */
export async function ensureDatabase(adminUrl: string, database: string): Promise<boolean> {
  if (!/^[a-z_][a-z0-9_]*$/.test(database)) throw new Error(`unsafe database name ${JSON.stringify(database)}`);
  const client = await openClient({ connectionString: adminUrl });
  try {
    const { rowCount } = await client.query("SELECT 1 FROM pg_database WHERE datname = $1", [database]);
    if (rowCount) return false;
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
 * Ready when the database answers `SELECT 1` within timeoutMs and every
 * migration the code expects has been applied.
 */
export async function checkReadiness(pool: pg.Pool, timeoutMs: number): Promise<Readiness> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<Readiness>((resolve) => {
    timer = setTimeout(() => resolve({ ready: false, detail: `database did not answer within ${timeoutMs} ms` }), timeoutMs);
  });
  const check = async (): Promise<Readiness> => {
    try {
      await pool.query("SELECT 1");
      const pending = await pendingMigrations(pool);
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
