// npm run migrate -- up [N] | down [N] | status | create NAME   [--dir DIR]
//
// --dir: the migrations folder of another tree (default: this one's migrations/), e.g. a newer
// release's, unpacked to roll back what it applied when this tree lacks its files (docs/upgrades.md).
//
// The only way migrations reach a DATABASE_URL database: the coordinator never
// migrates in production mode (it refuses to start while any are pending).
import { existsSync } from "node:fs";
import path from "node:path";
import { Migration } from "node-pg-migrate";
import { ConfigError, loadConfig } from "./config/index.js";
import { openClient } from "./store/postgres/sql/db.js";
import { migrate, migrationStatus, MIGRATIONS_DIR, pendingMigrations, readShippedSchema } from "./store/postgres/schema/migrate.js";

const USAGE = "usage: npm run migrate -- up [N] | down [N] | status | create NAME  [--dir MIGRATIONS_DIR]";

function fail(message: string, code: number): never {
  process.stderr.write(`migrate: ${message}\n`);
  process.exit(code);
}

function databaseUrl(): string {
  let url: string | undefined;
  try {
    url = loadConfig().databaseUrl;
  } catch (err) {
    if (err instanceof ConfigError) fail(`invalid configuration: ${err.message}`, 2);
    throw err;
  }
  if (!url) fail("DATABASE_URL is not set (e.g. DATABASE_URL=postgres://user:pass@host:5432/leasehold)", 2);
  return url;
}

function count(raw: string | undefined, fallback: number): number {
  if (raw === undefined) return fallback;
  if (!/^\d+$/.test(raw) || Number(raw) < 1) fail(`count must be a positive integer, got ${JSON.stringify(raw)}`, 2);
  return Number(raw);
}

/** Takes `--dir DIR` out of argv: the folder, resolved, or this tree's migrations/. */
function migrationsDir(argv: string[]): string {
  const at = argv.indexOf("--dir");
  if (at < 0) return MIGRATIONS_DIR;
  const dir = argv[at + 1];
  if (dir === undefined || dir.startsWith("--")) fail(`--dir needs a folder (${USAGE})`, 2);
  argv.splice(at, 2);
  if (!existsSync(dir)) fail(`--dir ${dir}: no such folder`, 2);
  return path.resolve(dir);
}

async function main(argv: string[]): Promise<void> {
  const dir = migrationsDir(argv);
  const [command, arg, ...rest] = argv;
  if (rest.length > 0) fail(USAGE, 2);
  switch (command) {
    case "up":
    case "down": {
      const url = databaseUrl();
      await migrate(url, command, count(arg, command === "up" ? Infinity : 1), (msg: string) => process.stdout.write(`${msg}\n`), dir);
      const client = await openClient({ connectionString: url });
      try {
        const pending = await pendingMigrations(client, readShippedSchema(dir));
        process.stdout.write(pending.length === 0 ? "schema is current\n" : `${pending.length} migration(s) pending\n`);
      } finally {
        await client.end();
      }
      return;
    }
    case "status": {
      // One line per migration (applied, with when; pending) and per function file (current;
      // pending: `up` would apply it). Reads only.
      if (arg !== undefined) fail(USAGE, 2);
      const client = await openClient({ connectionString: databaseUrl() });
      try {
        for (const line of await migrationStatus(client, readShippedSchema(dir))) process.stdout.write(`${line}\n`);
      } finally {
        await client.end();
      }
      return;
    }
    case "create": {
      if (!arg || !/^[a-z0-9][a-z0-9_-]*$/i.test(arg)) fail(`create needs a NAME of letters, digits, - and _ (${USAGE})`, 2);
      const file = await Migration.create(arg, dir, { language: "sql" });
      process.stdout.write(`created ${path.relative(process.cwd(), file)}\n`);
      return;
    }
    default:
      fail(USAGE, 2);
  }
}

main(process.argv.slice(2)).then(
  () => process.exit(0),
  (err: unknown) => fail(err instanceof Error ? err.message : String(err), 1),
);
