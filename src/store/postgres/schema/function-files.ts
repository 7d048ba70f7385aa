// The repeatable half of the migrations: one file per plpgsql function under migrations/functions/,
// holding its current text. `migrate up` applies a file after the versioned migrations when its
// checksum differs from the one last applied, or when the database's definition of the function
// is not the one recorded then (a versioned migration's down, or a hand edit, replaced it).
//
// The record is a history, newest last: a coordinator needs its own text to have been applied at
// some time, not to be the latest, so an older coordinator still running (or restarting) during a
// rolling upgrade stays ready while the newer release's text serves it.
import { createHash } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import type pg from "pg";

export const FUNCTIONS_TABLE = "pgmigrations_functions";

export interface FunctionFile {
  /** The function's name: the file's name without .sql. */
  name: string;
  sql: string;
  /** sha256 of the file's text */
  checksum: string;
}

export interface FunctionState {
  file: FunctionFile;
  /** `migrate up` would apply it: its text is not the one last applied, or the database's definition changed since. */
  pending: boolean;
  /** The code may run on the database: this text was applied at some time and the function exists once. */
  known: boolean;
}

/** The function files below `dir`, in name order (none when the folder is missing). */
export function readFunctionFiles(dir: string): FunctionFile[] {
  let names: string[];
  try {
    names = readdirSync(dir).filter((f) => f.endsWith(".sql"));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return [];
    throw err;
  }
  return names.sort().map((f) => {
    const name = f.slice(0, -".sql".length);
    if (!/^[a-z_][a-z0-9_]*$/.test(name)) throw new Error(`${path.join(dir, f)}: a function file is named after its function (lower case)`);
    const sql = readFileSync(path.join(dir, f), "utf8");
    return { name, sql, checksum: createHash("sha256").update(sql).digest("hex") };
  });
}

// Per file: how many functions of that name the current schema has, the md5 of their definitions,
// the checksum and definition last recorded, and whether the file's checksum was ever recorded.
const STATES = `
  SELECT f.name,
         (SELECT count(*)::int FROM pg_proc p WHERE p.proname = f.name AND p.pronamespace = current_schema()::regnamespace) AS defined,
         (SELECT md5(string_agg(pg_get_functiondef(p.oid), E'\\n' ORDER BY p.oid)) FROM pg_proc p
           WHERE p.proname = f.name AND p.pronamespace = current_schema()::regnamespace) AS definition_md5,
         last.checksum, last.definition_md5 AS recorded_md5,
         EXISTS (SELECT 1 FROM ${FUNCTIONS_TABLE} r WHERE r.name = f.name AND r.checksum = f.checksum) AS ever
    FROM unnest($1::text[], $2::text[]) AS f(name, checksum)
    LEFT JOIN LATERAL (SELECT r.checksum, r.definition_md5 FROM ${FUNCTIONS_TABLE} r WHERE r.name = f.name ORDER BY r.id DESC LIMIT 1) last ON true
   ORDER BY f.name`;

interface StateRow {
  name: string;
  defined: number;
  definition_md5: string | null;
  checksum: string | null;
  recorded_md5: string | null;
  ever: boolean;
}

async function hasRecord(client: pg.ClientBase | pg.Pool): Promise<boolean> {
  const { rows } = await client.query<{ present: boolean }>(`SELECT to_regclass($1) IS NOT NULL AS present`, [FUNCTIONS_TABLE]);
  return rows[0].present;
}

export async function functionStates(client: pg.ClientBase | pg.Pool, files: FunctionFile[]): Promise<FunctionState[]> {
  if (files.length === 0) return [];
  if (!(await hasRecord(client))) return files.map((file) => ({ file, pending: true, known: false }));
  const { rows } = await client.query<StateRow>(STATES, [files.map((f) => f.name), files.map((f) => f.checksum)]);
  return files.map((file, i) => {
    const r = rows[i];
    return {
      file,
      pending: r.checksum !== file.checksum || r.defined !== 1 || r.definition_md5 !== r.recorded_md5,
      known: r.ever && r.defined === 1,
    };
  });
}

/**
 * Applies the pending function files and records them, on a client inside a transaction the
 * caller opened (and under the migration lock). Returns the names applied.
 */
export async function applyFunctionFiles(client: pg.ClientBase, files: FunctionFile[], log: (msg: string) => void): Promise<string[]> {
  await client.query(
    `CREATE TABLE IF NOT EXISTS ${FUNCTIONS_TABLE} (
       id serial PRIMARY KEY,
       name text NOT NULL,
       checksum text NOT NULL,
       definition_md5 text NOT NULL,
       applied_at timestamptz NOT NULL DEFAULT now())`,
  );
  const applied: string[] = [];
  for (const state of await functionStates(client, files)) {
    if (!state.pending) continue;
    const { name, sql, checksum } = state.file;
    log(`> function ${name} (functions/${name}.sql)`);
    await client.query(sql);
    const { rows } = await client.query<{ defined: number; definition_md5: string }>(
      `SELECT count(*)::int AS defined, md5(string_agg(pg_get_functiondef(p.oid), E'\\n' ORDER BY p.oid)) AS definition_md5
         FROM pg_proc p WHERE p.proname = $1 AND p.pronamespace = current_schema()::regnamespace`,
      [name],
    );
    // One function per name: a file whose signature changed would otherwise leave the old one
    // beside it (CREATE OR REPLACE replaces only the same argument types).
    if (rows[0].defined !== 1) {
      throw new Error(
        `functions/${name}.sql: ${rows[0].defined} functions named ${name} after applying it (one expected: ` +
          "a file creates the function it is named after, and a changed signature needs a versioned migration that drops the old one)",
      );
    }
    await client.query(`INSERT INTO ${FUNCTIONS_TABLE} (name, checksum, definition_md5) VALUES ($1, $2, $3)`, [
      name,
      checksum,
      rows[0].definition_md5,
    ]);
    applied.push(name);
  }
  return applied;
}
