// The Python client (clients/python) as its own suite sees it: pytest against live
// coordinator processes (started by its fixtures with `node --import tsx src/main.ts`, or the build: entry.ts)
// on a database of this run, over both of its transports; plus mypy --strict, ruff and
// the freshness of its generated modules. Each step runs the venv's python
// (inject("python")) and, when it fails, fails here with that tool's own output.
import { spawn } from "node:child_process";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { createTestDatabase, type TestDatabase } from "../support/db.js";
import { ROOT } from "../support/process.js";
import { nodeEntry } from "../support/entry.js";

const PYTHON = inject("python");
const CLIENT = path.join(ROOT, "clients", "python");
// A bound for a hung run, not a measure: the suite takes 4–5 minutes on a quiet 2-core machine and twice that on a busy one.
const PYTEST_TIMEOUT_MS = 900_000;
const TOOL_TIMEOUT_MS = 120_000;

interface Run {
  code: number | null;
  output: string;
}

function run(cmd: string, args: string[], env: Record<string, string>, timeoutMs: number): Promise<Run> {
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

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
});

afterAll(async () => {
  await db?.drop();
});

describe("clients/python", () => {
  it(
    "pytest: submitter and worker processes against live coordinators, over Connect JSON and gRPC",
    async () => {
      const r = await run(
        PYTHON,
        ["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        {
          LEASEHOLD_TEST_DATABASE_URL: db.url,
          LEASEHOLD_NODE: process.execPath,
          LEASEHOLD_REPO_ROOT: ROOT,
          LEASEHOLD_COORDINATOR_ARGS: nodeEntry("src/main.ts").join(" "),
        },
        PYTEST_TIMEOUT_MS,
      );
      expect(r.code, r.output).toBe(0);
      const summary = /(\d+) passed/.exec(r.output);
      expect(Number(summary?.[1]), r.output).toBeGreaterThanOrEqual(70);
      expect(r.output).not.toMatch(/\b(failed|skipped|error)\b/);
    },
    PYTEST_TIMEOUT_MS + 30_000,
  );

  it(
    "mypy --strict and ruff are clean",
    async () => {
      const mypy = await run(PYTHON, ["-m", "mypy"], {}, TOOL_TIMEOUT_MS);
      expect(mypy.code, mypy.output).toBe(0);
      expect(mypy.output).toMatch(/Success: no issues found/);
      const ruff = await run(PYTHON, ["-m", "ruff", "check", "--no-cache", "."], {}, TOOL_TIMEOUT_MS);
      expect(ruff.code, ruff.output).toBe(0);
    },
    TOOL_TIMEOUT_MS * 2,
  );

  it(
    "the committed leasehold/queue/v1 modules are what generate.sh makes from the proto",
    async () => {
      const r = await run("bash", [path.join(CLIENT, "generate.sh"), "--check", PYTHON], {}, TOOL_TIMEOUT_MS);
      expect(r.code, r.output).toBe(0);
    },
    TOOL_TIMEOUT_MS,
  );
});
