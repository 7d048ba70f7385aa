import { readdirSync } from "node:fs";
import path from "node:path";
import pg from "pg";
import { projectRoot } from "../../project-root.js";
import { openClient } from "./db.js";

/** The source migrations folder of the project (tsc does not copy .sql files, so never a build output). */
export const MIGRATIONS_DIR = path.join(projectRoot(import.meta.url), "migrations");
export const MIGRATIONS_TABLE = "pgmigrations";

export async function migrate(
  databaseUrl: string,
  direction: "up" | "down",
  count?: number,
  log: (msg: string) => void = () => {},
): Promise<void> {
  // Loaded only to migrate: node-pg-migrate is ~19 MB of memory, which a coordinator that checks
  // (pendingMigrations) rather than applies migrations would otherwise hold for its whole life.
  const { runner } = await import("node-pg-migrate");
  // Our own connection rather than the runner's, which has no `error` listener: a database
  // restart during a migration must fail the migration, not end the process.
  const dbClient = await openClient({ connectionString: databaseUrl });
  try {
    await runner({
      dbClient,
      dir: MIGRATIONS_DIR,
      direction,
      count: count ?? (direction === "up" ? Infinity : 1),
      migrationsTable: MIGRATIONS_TABLE,
      singleTransaction: true,
      log,
    });
  } finally {
    await dbClient.end().catch(() => {});
  }
}

/** Migration names the code expects, oldest first. */
export function expectedMigrations(): string[] {
  return readdirSync(MIGRATIONS_DIR)
    .filter((f) => /\.(sql|js|ts)$/.test(f))
    .map((f) => f.replace(/\.(sql|js|ts)$/, ""))
    .sort();
}

/**
 * Names of expected migrations not yet applied to the database ("[]" when current).
 * A database without the migrations table counts as having none applied.
 */
export async function pendingMigrations(client: pg.Pool | pg.Client): Promise<string[]> {
  const { rows } = await client.query<{ name: string | null }>(`SELECT CASE WHEN to_regclass($1) IS NULL THEN NULL ELSE '' END AS name`, [
    MIGRATIONS_TABLE,
  ]);
  const applied = new Set<string>();
  if (rows[0].name !== null) {
    const res = await client.query<{ name: string }>(`SELECT name FROM ${MIGRATIONS_TABLE}`);
    for (const r of res.rows) applied.add(r.name);
  }
  return expectedMigrations().filter((m) => !applied.has(m));
}
