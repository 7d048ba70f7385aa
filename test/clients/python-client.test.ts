// The Python client (clients/python) as its own suite sees it: pytest against live coordinator
// processes (started by its fixtures: conftest.py) on a database of this run, over both of its
// transports (the worker modules in python-client-workers.test.ts, so the two halves can run side
// by side); plus mypy --strict, ruff and the freshness of its generated modules. Each step runs
// the venv's python (inject("python")) and, when it fails, fails here with that tool's own output.
import path from "node:path";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { createTestDatabase, type TestDatabase } from "../support/db.js";
import { CLIENT, passed, pytest, pytestModules, PYTEST_TIMEOUT_MS, run } from "../support/pytest.js";

const PYTHON = inject("python");
const TOOL_TIMEOUT_MS = 120_000;

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
});

afterAll(async () => {
  await db?.drop();
});

describe("clients/python", () => {
  it(
    "pytest (all but the workers' modules, which python-client-workers.test.ts runs): the clients, sync and asyncio, against live coordinators, over Connect JSON and gRPC",
    async () => {
      const r = await pytest(PYTHON, pytestModules("rest"), db.url);
      expect(r.code, r.output).toBe(0);
      expect(passed(r), r.output).toBeGreaterThanOrEqual(70);
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
