// An older commit's coordinator for bench:flow's `--baseline <git-ref>`: the commit's files
// exported with `git archive` into a temporary directory (no worktree is registered), this
// checkout's node_modules linked in, its src/ and gen/ compiled with its own tsconfig.build.json,
// and its own migrations applied to a database of its own on the same server. Cached per commit
// in the temporary directory, so a second run starts at once.

import { execFileSync, execSync } from "node:child_process";
import { existsSync, mkdirSync, rmSync, symlinkSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import pg from "pg";

export interface Baseline {
  ref: string;
  sha: string;
  /** the exported checkout */
  dir: string;
  /** its compiled coordinator, as its `npm start` runs it */
  script: string;
}

/** Exports and compiles `ref` (once per commit); throws when the ref is unknown or does not compile. */
export function prepareBaseline(ref: string): Baseline {
  const sha = execFileSync("git", ["rev-parse", "--verify", `${ref}^{commit}`], { encoding: "utf8" }).trim();
  const dir = path.join(os.tmpdir(), `leasehold-baseline-${sha.slice(0, 12)}`);
  const script = path.join(dir, "dist", "src", "main.js");
  if (!existsSync(script)) {
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir, { recursive: true });
    console.error(`baseline ${ref} (${sha.slice(0, 12)}): exporting to ${dir} and compiling…`);
    execSync(`git archive --format=tar ${sha} | tar -x -C ${JSON.stringify(dir)}`, { stdio: ["ignore", "ignore", "inherit"] });
    // The runtime dependencies the coordinator loads; a commit whose lockfile differs from this
    // checkout's in a runtime dependency is measured with this checkout's version of it.
    symlinkSync(path.resolve("node_modules"), path.join(dir, "node_modules"), "dir");
    execFileSync(process.execPath, [path.resolve("node_modules", "typescript", "bin", "tsc"), "-p", "tsconfig.build.json"], {
      cwd: dir,
      stdio: "inherit",
    });
  }
  return { ref, sha, dir, script };
}

/** Creates database `name` next to the one at `url`, with the baseline's own migrations applied; returns its URL. */
export async function baselineDatabase(url: string, name: string, baseline: Baseline): Promise<string> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    await c.query(`CREATE DATABASE ${name}`);
  } finally {
    await c.end();
  }
  const u = new URL(url);
  u.pathname = `/${name}`;
  const { runner } = await import("node-pg-migrate");
  const dbClient = new pg.Client({ connectionString: u.toString() });
  await dbClient.connect();
  try {
    await runner({
      dbClient,
      dir: path.join(baseline.dir, "migrations"),
      direction: "up",
      count: Infinity,
      migrationsTable: "pgmigrations",
      singleTransaction: true,
      log: () => {},
    });
  } finally {
    await dbClient.end();
  }
  return u.toString();
}

export async function dropDatabase(url: string, name: string): Promise<void> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  } finally {
    await c.end();
  }
}
