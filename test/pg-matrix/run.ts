// npm run test:pg -- 15|17|all [vitest filters…]
//
// The server-facing suites (files.ts) on each PostgreSQL version in turn: one container per
// version (container.ts), its admin URL handed to vitest as TEST_DATABASE_URL, so the shared global
// setup migrates a template database there and every file clones its own. The container is
// stopped when the run ends, fails or is interrupted. Starts no Docker engine: without one it says
// so in one line and exits 1.
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import pg from "pg";
import type { StartedPostgreSqlContainer } from "@testcontainers/postgresql";
import { ROOT, VERSIONS, engineProblem, ensureImage, startPostgres, sweepLeftovers, type Version } from "./container.js";

interface Outcome {
  version: Version;
  image: string;
  server: string;
  imageSeconds: number;
  suiteSeconds: number;
  passed: number;
  failed: number;
  skipped: number;
  ok: boolean;
}

const args = process.argv.slice(2);
const wanted = args.filter((a) => a === "all" || /^\d+$/.test(a));
const filters = args.filter((a) => !wanted.includes(a));
const versions: Version[] = [];
for (const w of wanted.length ? wanted : ["all"]) {
  if (w === "all") versions.push(...VERSIONS);
  else if ((VERSIONS as readonly string[]).includes(w)) versions.push(w as Version);
  else {
    console.error(`test:pg: PostgreSQL ${w} is not in the matrix (versions: ${VERSIONS.join(", ")}, or all)`);
    process.exit(2);
  }
}

const problem = engineProblem();
if (problem) {
  console.error(
    `test:pg: no Docker engine answers (${problem}); start one (as root on Debian: apt-get install docker.io && dockerd &) - nothing was tested`,
  );
  process.exit(1);
}
sweepLeftovers();

let container: StartedPostgreSqlContainer | undefined;
let vitest: ReturnType<typeof spawn> | undefined;
let interrupted: NodeJS.Signals | undefined;

async function stopContainer(): Promise<void> {
  const c = container;
  container = undefined;
  if (c)
    await c
      .stop({ remove: true, removeVolumes: true })
      .catch((err: unknown) => console.error(`test:pg: stopping the container: ${String(err)}`));
}

// The run stops vitest and lets the loop below end, whose `finally` stops the container (also one
// still starting when the signal came); a second signal exits at once.
for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) {
  process.on(signal, () => {
    if (interrupted) process.exit(130);
    interrupted = signal;
    console.error(`\ntest:pg: ${signal}: stopping vitest and the container`);
    vitest?.kill("SIGTERM");
  });
}

function runVitest(url: string, reportFile: string): Promise<number> {
  return new Promise((resolve) => {
    vitest = spawn(
      process.execPath,
      [
        path.join(ROOT, "node_modules/vitest/vitest.mjs"),
        "run",
        "--config",
        "test/pg-matrix/vitest.config.ts",
        "--reporter=default",
        "--reporter=json",
        `--outputFile.json=${reportFile}`,
        ...filters,
      ],
      {
        cwd: ROOT,
        stdio: "inherit",
        // PYTHON: the matrix's files run no Python, so the global setup need not provision the venv.
        env: { ...process.env, TEST_DATABASE_URL: url, PYTHON: process.env.PYTHON ?? "python3" },
      },
    );
    vitest.on("exit", (code, signal) => resolve(code ?? (signal ? 128 : 1)));
  });
}

async function serverVersion(url: string): Promise<string> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return (await c.query<{ server_version: string }>("SHOW server_version")).rows[0].server_version;
  } finally {
    await c.end();
  }
}

/** After a failed run: the server's own account of crashes and restarts, if it had any. */
function printServerTrouble(id: string): void {
  const r = spawnSync("docker", ["logs", id], { encoding: "utf8", maxBuffer: 256 * 1024 * 1024 });
  const lines = `${r.stdout ?? ""}${r.stderr ?? ""}`.split("\n");
  // A crashed process's own earlier lines say what it was doing.
  const crashed = [...lines.join("\n").matchAll(/process \(PID (\d+)\) (?:was terminated|exited with exit code [^1])/g)].map(
    (m) => `[${m[1]}]`,
  );
  const trouble = lines.filter(
    (l) =>
      /PANIC|terminated by signal|exited with exit code [^1]|reinitializing|was interrupted|out of memory|No space left/.test(l) ||
      crashed.some((pid) => l.includes(pid)),
  );
  if (trouble.length) console.log(`test:pg: the server's log says:\n${trouble.slice(0, 60).join("\n")}`);
}

const outcomes: Outcome[] = [];
const tmp = mkdtempSync(path.join(os.tmpdir(), "leasehold-pg-matrix-"));
try {
  for (const version of versions) {
    if (interrupted) break;
    console.log(`\n==> PostgreSQL ${version}`);
    let started = performance.now();
    const image = ensureImage(version);
    const imageSeconds = (performance.now() - started) / 1000;
    started = performance.now();
    const db = await startPostgres(image, { tmpfs: true });
    container = db;
    if (interrupted) break;
    const url = db.getConnectionUri();
    const server = await serverVersion(url);
    console.log(`test:pg: PostgreSQL ${server} in ${image} (container ${db.getId().slice(0, 12)}, ${url.replace(/:[^:@/]*@/, ":***@")})`);
    const reportFile = path.join(tmp, `vitest-${version}.json`);
    const code = await runVitest(url, reportFile);
    if (interrupted) break;
    if (code !== 0) printServerTrouble(db.getId());
    await stopContainer();
    const suiteSeconds = (performance.now() - started) / 1000;
    let passed = 0;
    let failed = 0;
    let skipped = 0;
    try {
      const report = JSON.parse(readFileSync(reportFile, "utf8")) as {
        numPassedTests: number;
        numFailedTests: number;
        numPendingTests: number;
        numTodoTests: number;
      };
      passed = report.numPassedTests;
      failed = report.numFailedTests;
      skipped = report.numPendingTests + report.numTodoTests;
    } catch {
      // no report: vitest failed before running tests; the exit code says so
    }
    outcomes.push({ version, image, server, imageSeconds, suiteSeconds, passed, failed, skipped, ok: code === 0 });
  }
} finally {
  await stopContainer();
  rmSync(tmp, { recursive: true, force: true });
}

console.log("\ntest:pg: PostgreSQL version matrix");
for (const o of outcomes) {
  console.log(
    `  ${o.ok ? "ok  " : "FAIL"} PostgreSQL ${o.server.split(" ")[0].padEnd(6)} ${o.image.padEnd(22)} tests ${o.passed} passed, ${o.failed} failed, ${o.skipped} skipped; ` +
      `image ${o.imageSeconds.toFixed(1)} s, container + suite ${o.suiteSeconds.toFixed(1)} s`,
  );
}
if (interrupted) process.exit(130);
const ok = outcomes.length === versions.length && outcomes.every((o) => o.ok);
process.exit(ok ? 0 : 1);
