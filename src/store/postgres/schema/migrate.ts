import { readdirSync } from "node:fs";
import path from "node:path";
import pg from "pg";
import { projectRoot } from "../../../project-root.js";
import { openClient, transaction } from "../sql/db.js";
import { applyFunctionFiles, functionStates, readFunctionFiles, type FunctionFile } from "./function-files.js";

/** The source migrations folder of the project (tsc does not copy .sql files, so never a build output). */
export const MIGRATIONS_DIR = path.join(projectRoot(import.meta.url), "migrations");
export const MIGRATIONS_TABLE = "pgmigrations";

/**
 * What a tree of migrations asks of the database: its versioned migrations (oldest first) and its
 * function files (migrations/functions/). Read once at start by a coordinator, so that files that
 * appear in its tree later (an in-place upgrade copying the next release) change nothing for it.
 */
export interface ShippedSchema {
  migrations: string[];
  functions: FunctionFile[];
}

export function readShippedSchema(dir: string = MIGRATIONS_DIR): ShippedSchema {
  const migrations = readdirSync(dir)
    .filter((f) => /\.(sql|js|ts)$/.test(f))
    .map((f) => f.replace(/\.(sql|js|ts)$/, ""))
    .sort();
  return { migrations, functions: readFunctionFiles(path.join(dir, "functions")) };
}

/** Migration names the code expects, oldest first. */
export function expectedMigrations(): string[] {
  return readShippedSchema().migrations;
}

/**
 * Applies the versioned migrations (node-pg-migrate, one transaction), and after an `up` that
 * leaves none pending, the function files whose text changed (a second transaction). One session
 * advisory lock (node-pg-migrate's own key, so its CLI is excluded too) covers both.
 */
export async function migrate(
  databaseUrl: string,
  direction: "up" | "down",
  count?: number,
  log: (msg: string) => void = () => {},
  dir: string = MIGRATIONS_DIR,
): Promise<void> {
  // Loaded only to migrate: node-pg-migrate is ~19 MB of memory, which a coordinator that checks
  // (pendingMigrations) rather than applies migrations would otherwise hold for its whole life.
  const { runner, PG_MIGRATE_LOCK_ID } = await import("node-pg-migrate");
  // Our own connection rather than the runner's, which has no `error` listener: a database
  // restart during a migration must fail the migration, not end the process.
  const dbClient = await openClient({ connectionString: databaseUrl });
  try {
    const { rows } = await dbClient.query<{ locked: boolean }>(`SELECT pg_try_advisory_lock($1) AS locked`, [PG_MIGRATE_LOCK_ID]);
    if (!rows[0].locked) throw new Error("another migration is already running");
    try {
      await runner({
        dbClient,
        dir,
        direction,
        count: count ?? (direction === "up" ? Infinity : 1),
        migrationsTable: MIGRATIONS_TABLE,
        singleTransaction: true,
        noLock: true,
        log,
      });
      if (direction === "up") {
        const shipped = readShippedSchema(dir);
        if ((await pendingVersioned(dbClient, shipped)).length === 0) await applyFunctions(dbClient, shipped.functions, log);
      }
    } finally {
      await dbClient.query(`SELECT pg_advisory_unlock($1)`, [PG_MIGRATE_LOCK_ID]).catch(() => {});
    }
  } finally {
    await dbClient.end().catch(() => {});
  }
}

async function applyFunctions(client: pg.Client, files: FunctionFile[], log: (msg: string) => void): Promise<void> {
  await transaction(client, (c) => applyFunctionFiles(c, files, log));
}

export interface AppliedMigration {
  name: string;
  runOn: Date;
}

/** The versioned migrations the database records as applied, oldest first ([] without the table). */
export async function appliedMigrations(client: pg.Pool | pg.ClientBase): Promise<AppliedMigration[]> {
  const { rows } = await client.query<{ present: boolean }>(`SELECT to_regclass($1) IS NOT NULL AS present`, [MIGRATIONS_TABLE]);
  if (!rows[0].present) return [];
  const res = await client.query<{ name: string; run_on: Date }>(`SELECT name, run_on FROM ${MIGRATIONS_TABLE} ORDER BY run_on, id`);
  return res.rows.map((r) => ({ name: r.name, runOn: r.run_on }));
}

async function pendingVersioned(client: pg.Pool | pg.ClientBase, shipped: ShippedSchema): Promise<string[]> {
  const applied = new Set((await appliedMigrations(client)).map((m) => m.name));
  return shipped.migrations.filter((m) => !applied.has(m));
}

/**
 * What the code of `shipped` needs and the database lacks ("[]" when it can run): versioned
 * migrations not applied, and function files (as `functions/NAME.sql`) whose text was never
 * applied or whose function is missing. A migration or function text newer than the code's (a
 * later release migrated the database during a rolling upgrade) is not missing.
 */
export async function pendingMigrations(client: pg.Pool | pg.ClientBase, shipped: ShippedSchema = readShippedSchema()): Promise<string[]> {
  const versioned = await pendingVersioned(client, shipped);
  const functions = (await functionStates(client, shipped.functions)).filter((s) => !s.known).map((s) => `functions/${s.file.name}.sql`);
  return [...versioned, ...functions];
}

/**
 * One line each, for `npm run migrate -- status`: every applied migration (with when; those this
 * tree has no file for are marked), every pending one, then each function file, current or
 * pending (what `migrate up` would apply).
 */
export async function migrationStatus(client: pg.Pool | pg.ClientBase, shipped: ShippedSchema = readShippedSchema()): Promise<string[]> {
  const applied = await appliedMigrations(client);
  const names = new Set(applied.map((m) => m.name));
  const files = new Set(shipped.migrations);
  const lines = applied.map((m) => `applied  ${m.name}  ${m.runOn.toISOString()}${files.has(m.name) ? "" : "  (no file in this tree)"}`);
  for (const m of shipped.migrations) if (!names.has(m)) lines.push(`pending  ${m}`);
  for (const s of await functionStates(client, shipped.functions)) {
    lines.push(`${s.pending ? "pending " : "current "} functions/${s.file.name}.sql`);
  }
  return lines;
}
