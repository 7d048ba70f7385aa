// The Python client's worker modules of its pytest suite (test_worker.py, test_units.py): the
// Worker's processes against live coordinators over both transports, run beside the rest of the
// suite (python-client.test.ts) rather than after it.
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { createTestDatabase, type TestDatabase } from "../support/db.js";
import { passed, pytest, pytestModules, PYTEST_TIMEOUT_MS } from "../support/pytest.js";

const PYTHON = inject("python");

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
});

afterAll(async () => {
  await db?.drop();
});

describe("clients/python, its workers", () => {
  it(
    "pytest test_worker.py and test_units.py: worker processes against live coordinators, over Connect JSON and gRPC",
    async () => {
      const r = await pytest(PYTHON, pytestModules("workers"), db.url);
      expect(r.code, r.output).toBe(0);
      expect(passed(r), r.output).toBeGreaterThanOrEqual(40);
      expect(r.output).not.toMatch(/\b(failed|skipped|error)\b/);
    },
    PYTEST_TIMEOUT_MS + 30_000,
  );
});
