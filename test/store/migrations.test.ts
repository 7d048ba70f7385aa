// Migrations, walked from the list rather than by a block per migration: every versioned migration
// up, down (which must restore the schema before it, read from the catalog) and up again; the
// function files applied on top, each function in the database equal to its file; and databases
// migrated by older releases (function text made by versioned migrations, no record of function
// files) brought forward to the same text.
import { readFileSync } from "node:fs";
import path from "node:path";
import pg from "pg";
import { afterAll, beforeAll, expect, it } from "vitest";
import { FUNCTIONS_TABLE } from "../../src/store/postgres/schema/function-files.js";
import { migrate, migrationStatus, MIGRATIONS_DIR, pendingMigrations, readShippedSchema } from "../../src/store/postgres/schema/migrate.js";
import { createEmptyDatabase, type TestDatabase } from "../support/db.js";

const shipped = readShippedSchema();
const fileOwned = shipped.functions.map((f) => f.name);

let db: TestDatabase;
let client: pg.Client;

beforeAll(async () => {
  db = await createEmptyDatabase();
  client = new pg.Client({ connectionString: db.url });
  await client.connect();
});
afterAll(async () => {
  await client?.end();
  await db?.drop();
});

/**
 * The public schema as the catalog describes it: relations (with kind, persistence and storage
 * settings), columns, indexes, constraints, triggers, types, and the functions versioned
 * migrations own. Left out: NOT NULL constraints (in the columns already; PostgreSQL 18 names them,
 * and a table made again gets new names), the two migration records, and the functions of function files, which
 * are checked against their files instead (a down leaves the newest text, or an older release's).
 */
async function schema(): Promise<Record<string, string[]>> {
  const q = async (sql: string) => (await client.query<{ d: string }>(sql, [fileOwned])).rows.map((r) => r.d);
  const mine = `n.nspname = 'public' AND NOT c.relname LIKE 'pgmigrations%'`;
  return {
    relations: await q(
      `SELECT c.relname || ' ' || c.relkind::text || c.relpersistence::text || ' ' || coalesce(array_to_string(c.reloptions, ','), '') AS d
         FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE ${mine} AND $1::text[] IS NOT NULL ORDER BY 1`,
    ),
    columns: await q(
      `SELECT c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod) || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
              || coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), '') AS d
         FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
         LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE ${mine} AND c.relkind IN ('r', 'p', 'v', 'm') AND a.attnum > 0 AND NOT a.attisdropped AND $1::text[] IS NOT NULL ORDER BY 1`,
    ),
    indexes: await q(
      `SELECT indexdef AS d FROM pg_indexes WHERE schemaname = 'public' AND NOT tablename LIKE 'pgmigrations%' AND $1::text[] IS NOT NULL ORDER BY 1`,
    ),
    constraints: await q(
      `SELECT c.relname || ' ' || k.conname || ' ' || pg_get_constraintdef(k.oid) AS d FROM pg_constraint k
         JOIN pg_class c ON c.oid = k.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE ${mine} AND k.contype <> 'n' AND $1::text[] IS NOT NULL ORDER BY 1`,
    ),
    triggers: await q(
      `SELECT pg_get_triggerdef(t.oid) AS d FROM pg_trigger t WHERE NOT t.tgisinternal AND $1::text[] IS NOT NULL ORDER BY 1`,
    ),
    types: await q(
      `SELECT t.typname || ' ' || coalesce((SELECT string_agg(e.enumlabel, ',' ORDER BY e.enumsortorder) FROM pg_enum e WHERE e.enumtypid = t.oid), '') AS d
         FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
        WHERE n.nspname = 'public' AND t.typtype IN ('e', 'd', 'c') AND t.typrelid = 0 AND $1::text[] IS NOT NULL ORDER BY 1`,
    ),
    functions: await q(
      `SELECT pg_get_functiondef(p.oid) AS d FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace AND p.proname <> ALL ($1) ORDER BY 1`,
    ),
  };
}

/** Each function file's function, as the database defines it now and as the file would define it. */
async function functionsAgainstFiles(): Promise<{ name: string; now: string[]; fromFile: string[] }[]> {
  const definitions = async (name: string) =>
    (await client.query(`SELECT pg_get_functiondef(p.oid) AS d FROM pg_proc p WHERE p.proname = $1 ORDER BY p.oid`, [name])).rows.map(
      (r) => r.d as string,
    );
  const out = [];
  for (const f of shipped.functions) {
    const now = await definitions(f.name);
    await client.query("BEGIN");
    await client.query(f.sql);
    const fromFile = await definitions(f.name);
    await client.query("ROLLBACK");
    out.push({ name: f.name, now, fromFile });
  }
  return out;
}

async function expectFunctionsAsInFiles(): Promise<void> {
  for (const f of await functionsAgainstFiles()) {
    expect(f.now, f.name).toHaveLength(1);
    expect(f.now, f.name).toEqual(f.fromFile);
  }
  // And the source the database runs is the file's, word for word.
  const { rows } = await client.query(`SELECT prosrc FROM pg_proc WHERE proname = 'leasehold_flow_claim'`);
  const file = readFileSync(path.join(MIGRATIONS_DIR, "functions", "leasehold_flow_claim.sql"), "utf8");
  expect(rows).toHaveLength(1);
  expect(file).toContain(`$$${rows[0].prosrc as string}$$;`);
  expect(await pendingMigrations(client)).toEqual([]);
  expect((await migrationStatus(client)).filter((l) => !l.startsWith("applied") && !l.startsWith("current"))).toEqual([]);
}

it("walks every migration up, down (restoring the schema before it) and up; then down to nothing and up again", async () => {
  const names = shipped.migrations;
  expect(await pendingMigrations(client)).toEqual([...names, ...fileOwned.map((n) => `functions/${n}.sql`)]);
  const before: Record<string, string[]>[] = [await schema()];
  for (const [i, name] of names.entries()) {
    await migrate(db.url, "up", 1);
    const after = await schema();
    await migrate(db.url, "down", 1);
    expect(await schema(), `${name} down`).toEqual(before[i]);
    await migrate(db.url, "up", 1);
    expect(await schema(), `${name} up again`).toEqual(after);
    before.push(after);
  }
  // The last `up` left nothing versioned pending, so it applied the function files.
  await expectFunctionsAsInFiles();

  for (let i = names.length; i > 0; i--) {
    await migrate(db.url, "down", 1);
    expect(await schema(), `${names[i - 1]} down from the top`).toEqual(before[i - 1]);
  }
  expect(await pendingMigrations(client)).toEqual(expect.arrayContaining(names));
  await migrate(db.url, "up");
  expect(await schema()).toEqual(before.at(-1));
  await expectFunctionsAsInFiles();
});

it("brings a database migrated by an older release (function text from versioned migrations, no record) to the files' text", async () => {
  const top = await schema();
  // As the release before function files left it: the same schema and claim, no record of files.
  await client.query(`DROP TABLE ${FUNCTIONS_TABLE}`);
  expect(await pendingMigrations(client)).toEqual(fileOwned.map((n) => `functions/${n}.sql`));
  await migrate(db.url, "up");
  expect(await schema()).toEqual(top);
  await expectFunctionsAsInFiles();

  // As a release before the far-cap claim left it: its downs put back that release's claim text.
  const far = shipped.migrations.findIndex((m) => m.endsWith("_flow_claim_far"));
  await migrate(db.url, "down", shipped.migrations.length - far);
  const claim = async () => (await client.query(`SELECT prosrc FROM pg_proc WHERE proname = 'leasehold_flow_claim'`)).rows;
  expect(await claim()).toEqual([{ prosrc: expect.not.stringContaining("leasehold_slot_wanted") }]);
  await client.query(`DROP TABLE ${FUNCTIONS_TABLE}`);
  await migrate(db.url, "up");
  expect(await schema()).toEqual(top);
  await expectFunctionsAsInFiles();

  // And before the gates: the claim had five arguments; going forward replaces it, not beside it.
  const shards = shipped.migrations.findIndex((m) => m.endsWith("_flow_claim_shards"));
  await migrate(db.url, "down", shipped.migrations.length - shards);
  expect(await claim()).toEqual([{ prosrc: expect.not.stringContaining("c_gates") }]);
  await migrate(db.url, "up");
  await expectFunctionsAsInFiles();
});

it("no versioned migration after function files came defines a function a file owns", () => {
  const sinceFiles = shipped.migrations.filter((m) => m > "1764600000000");
  for (const m of sinceFiles) {
    const text = readFileSync(path.join(MIGRATIONS_DIR, `${m}.sql`), "utf8");
    for (const name of fileOwned) {
      expect(text, `${m} defines ${name}: change migrations/functions/${name}.sql instead`).not.toMatch(
        new RegExp(`CREATE\\s+(OR\\s+REPLACE\\s+)?FUNCTION\\s+${name}\\b`, "i"),
      );
    }
  }
});
