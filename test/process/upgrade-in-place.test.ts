// An in-place upgrade: the next release's files land in a running coordinator's tree before it
// restarts. The running coordinator keeps answering /readyz with 200 (its needs were read at
// start); a coordinator started from the new tree refuses until `migrate up`. And `migrate status`
// prints a line per applied and pending migration and per function file.
import { spawn, type ChildProcess } from "node:child_process";
import { cpSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { CONFIG_VARIABLES } from "../../src/config/index.js";
import { migrate, readShippedSchema } from "../../src/store/postgres/schema/migrate.js";
import { createEmptyDatabase, createTestDatabase, type TestDatabase } from "../support/db.js";
import { exitWithin, killAll, ROOT, spawnMigrate } from "../support/process.js";

let db: TestDatabase;
let tree: string;
const children: ChildProcess[] = [];
const dropLater: TestDatabase[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  dropLater.push(db);
  // A copy of the tree a coordinator runs from (node_modules shared through a link).
  tree = mkdtempSync(path.join(os.tmpdir(), "leasehold-tree-"));
  for (const part of ["src", "gen", "migrations", "package.json", "tsconfig.json"]) {
    cpSync(path.join(ROOT, part), path.join(tree, part), { recursive: true });
  }
  symlinkSync(path.join(ROOT, "node_modules"), path.join(tree, "node_modules"), "dir");
});

afterAll(async () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
  await killAll();
  for (const d of dropLater) await d.drop();
  if (tree) rmSync(tree, { recursive: true, force: true });
});

/** A coordinator run from the copied tree; resolves with its base URL, or rejects with its output. */
function coordinatorFromTree(): { child: ChildProcess; listening: Promise<string>; exited: Promise<{ code: number | null; err: string }> } {
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const [name] of CONFIG_VARIABLES) delete env[name];
  const child = spawn(process.execPath, ["--import", "tsx", "src/main.ts"], {
    cwd: tree,
    env: { ...env, LOG_LEVEL: "warn", DATABASE_URL: db.url, PORT: "0" },
    stdio: ["ignore", "ignore", "pipe"],
  });
  children.push(child);
  let err = "";
  const exited = new Promise<{ code: number | null; err: string }>((resolve) => child.on("close", (code) => resolve({ code, err })));
  const listening = new Promise<string>((resolve, reject) => {
    child.stderr?.setEncoding("utf8").on("data", (d: string) => {
      err += d;
      const m = /leasehold listening on (http:\/\/\S+)/.exec(err);
      if (m) resolve(m[1]);
    });
    void exited.then(({ code }) => reject(new Error(`coordinator exited (${code}) before listening:\n${err}`)));
  });
  return { child, listening, exited };
}

it("a migration file added to a running coordinator's tree leaves it ready; a coordinator started from that tree refuses", async () => {
  const running = coordinatorFromTree();
  const base = await running.listening;
  expect((await fetch(`${base}/readyz`)).status).toBe(200);

  // The next release's files arrive: a migration this database lacks.
  const next = `${Number(readShippedSchema().migrations.at(-1)!.split("_")[0]) + 1}_next_release`;
  writeFileSync(
    path.join(tree, "migrations", `${next}.sql`),
    "-- Up Migration\nCREATE TABLE next_release (id int);\n-- Down Migration\nDROP TABLE next_release;\n",
  );
  const ready = await fetch(`${base}/readyz`);
  expect(ready.status, await ready.clone().text()).toBe(200);

  // The next code does need it: started from the new tree, a coordinator says so and exits.
  const restarted = coordinatorFromTree();
  restarted.listening.catch(() => {});
  const exit = await restarted.exited;
  expect(exit.code).not.toBe(0);
  expect(exit.err).toMatch(new RegExp(`1 migration\\(s\\) pending \\(first: ${next}\\)`));

  running.child.kill("SIGTERM");
  expect((await running.exited).code).toBe(0);
}, 90_000);

it("migrate status prints one line per applied and pending migration and per function file", async () => {
  const fresh = await createEmptyDatabase();
  dropLater.push(fresh);
  const shipped = readShippedSchema();
  await migrate(fresh.url, "up");
  await migrate(fresh.url, "down");
  const p = spawnMigrate(["status"], { DATABASE_URL: fresh.url });
  expect((await exitWithin(p, 30_000)).code, p.stderr()).toBe(0);
  const lines = p.stdout().trim().split("\n");
  const applied = shipped.migrations.slice(0, -1);
  // A function the last migration's down drops (one this release added) is pending again; every other is current.
  const lastDown = readFileSync(path.join(ROOT, "migrations", `${shipped.migrations.at(-1)}.sql`), "utf8").split("-- Down Migration")[1];
  const dropped = (name: string) => lastDown.includes(`DROP FUNCTION IF EXISTS ${name}(`);
  expect(lines).toEqual([
    ...applied.map((m) => expect.stringMatching(new RegExp(`^applied  ${m}  \\d{4}-\\d\\d-\\d\\dT`))),
    `pending  ${shipped.migrations.at(-1)}`,
    ...shipped.functions.map((f) => `${dropped(f.name) ? "pending" : "current"}  functions/${f.name}.sql`),
  ]);
}, 60_000);

it("the older tree runs on a database a newer release migrated, and rolls it back with the newer files (--dir)", async () => {
  const newer = await createEmptyDatabase();
  dropLater.push(newer);
  const newerDir = path.join(tree, "migrations");
  const extra = readShippedSchema(newerDir).migrations.at(-1)!;
  expect(readShippedSchema().migrations).not.toContain(extra);
  await migrate(newer.url, "up", undefined, () => {}, newerDir);

  // The older tree's `up` finds nothing to do and its status marks what it has no file for.
  const up = spawnMigrate(["up"], { DATABASE_URL: newer.url });
  expect((await exitWithin(up, 30_000)).code, up.stderr()).toBe(0);
  expect(up.stdout()).toMatch(/schema is current/);
  const before = spawnMigrate(["status"], { DATABASE_URL: newer.url });
  expect((await exitWithin(before, 30_000)).code, before.stderr()).toBe(0);
  expect(before.stdout()).toMatch(new RegExp(`^applied  ${extra}  \\S+  \\(no file in this tree\\)$`, "m"));

  // Without the newer files the down cannot run; with them (--dir) it does.
  const blind = spawnMigrate(["down"], { DATABASE_URL: newer.url });
  expect((await exitWithin(blind, 30_000)).code).not.toBe(0);
  expect(blind.stderr()).toMatch(/have been deleted/);
  const down = spawnMigrate(["down", "--dir", newerDir], { DATABASE_URL: newer.url });
  expect((await exitWithin(down, 30_000)).code, down.stderr()).toBe(0);
  const after = spawnMigrate(["status"], { DATABASE_URL: newer.url });
  expect((await exitWithin(after, 30_000)).code, after.stderr()).toBe(0);
  expect(after.stdout()).not.toContain(extra);
  expect(after.stdout()).not.toMatch(/^pending/m);
}, 90_000);
