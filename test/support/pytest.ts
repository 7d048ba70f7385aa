// Running the Python client's tools (pytest, mypy, ruff, generate.sh) from the venv the run made
// (inject("python")), in clients/python, each bounded in time.
import { spawn } from "node:child_process";
import { readdirSync } from "node:fs";
import path from "node:path";
import { nodeEntry } from "./entry.js";
import { ROOT } from "./process.js";

export const CLIENT = path.join(ROOT, "clients", "python");

export interface Run {
  code: number | null;
  output: string;
}

export function run(cmd: string, args: string[], env: Record<string, string>, timeoutMs: number): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, {
      cwd: CLIENT,
      env: { ...process.env, PYTHONPATH: CLIENT, PYTHONDONTWRITEBYTECODE: "1", ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let output = "";
    child.stdout.setEncoding("utf8").on("data", (d: string) => (output += d));
    child.stderr.setEncoding("utf8").on("data", (d: string) => (output += d));
    // pytest stops its coordinators and workers on SIGTERM (the fixtures' finalizers run).
    const timer = setTimeout(() => child.kill("SIGTERM"), timeoutMs);
    child.once("error", (err) => {
      clearTimeout(timer);
      reject(new Error(`cannot run ${cmd}: ${err.message}`));
    });
    child.once("close", (code) => {
      clearTimeout(timer);
      resolve({ code, output });
    });
  });
}

/**
 * The pytest modules of clients/python/tests, in the two halves the suite runs as two test files
 * (so the run's two workers can take one each): test_worker.py and test_units.py, and the rest.
 */
export function pytestModules(half: "workers" | "rest"): string[] {
  const all = readdirSync(path.join(CLIENT, "tests"))
    .filter((f) => /^test_.*\.py$/.test(f))
    .sort();
  const workers = new Set(["test_worker.py", "test_units.py"]);
  return all.filter((f) => workers.has(f) === (half === "workers")).map((f) => `tests/${f}`);
}

/** A bound for a hung pytest run, not a measure. */
export const PYTEST_TIMEOUT_MS = 900_000;

/**
 * pytest over `modules` with the venv's python, its coordinators (conftest.py) on `databaseUrl`,
 * started from the build when the run's is fresh (entry.ts).
 */
export function pytest(python: string, modules: string[], databaseUrl: string): Promise<Run> {
  return run(
    python,
    ["-m", "pytest", "-q", "-p", "no:cacheprovider", ...modules],
    {
      LEASEHOLD_TEST_DATABASE_URL: databaseUrl,
      LEASEHOLD_NODE: process.execPath,
      LEASEHOLD_REPO_ROOT: ROOT,
      LEASEHOLD_COORDINATOR_ARGS: nodeEntry("src/main.ts").join(" "),
    },
    PYTEST_TIMEOUT_MS,
  );
}

/** How many tests a pytest run passed (0 when its summary says none). */
export function passed(r: Run): number {
  return Number(/(\d+) passed/.exec(r.output)?.[1] ?? 0);
}
