// The money path through the TypeScript client: usage a handler returns with its result or its
// failure (checked in the worker before it is sent), accounts and a job's billing context, and a
// settlement recorded once. The client's usage checks are imported from its source; the rest runs
// clients/typescript/test/money-scenario.ts against its built dist/ over Connect and gRPC, as the
// parity test runs its scenario, against a real coordinator on a test database.
import { cpSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import path from "node:path";
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { usageMessage, usageNumbers } from "../../clients/typescript/src/usage.js";
import { createPool, PostgresQueue } from "../../src/store/postgres/store.js";
import { apiServerFixture, type ApiServerFixture } from "../support/api-server.js";
import { createTestDatabase, type TestDatabase } from "../support/db.js";
import { ROOT } from "../support/process.js";
import { SWITCHES } from "../support/switches.js";
import { CLIENT_DIR, runCommand } from "../support/ts-consumer.js";

describe("usage counters in the TypeScript client", () => {
  it("become the message's int64 map, and a counter the coordinator would refuse is named", () => {
    expect(usageMessage({ gpu_ms: 1200, "tokens.in": 5n }, "result.usage")).toEqual({ gpu_ms: 1200n, "tokens.in": 5n });
    expect(usageMessage(undefined, "result.usage")).toEqual({});
    expect(usageNumbers({ gpu_ms: 1200n })).toEqual({ gpu_ms: 1200 });
    const refused: [Record<string, number | bigint>, RegExp][] = [
      [{ GPU: 1 }, /counter name "GPU"/],
      [{ gpu_ms: -1 }, /result\.usage\[gpu_ms\]/],
      [{ gpu_ms: 1.5 }, /an integer/],
      [{ gpu_ms: 2n ** 53n }, /9007199254740991/],
      [Object.fromEntries(Array.from({ length: 33 }, (_, i) => [`k${i}`, 1])), /at most 32/],
    ];
    for (const [usage, message] of refused) expect(() => usageMessage(usage, "result.usage")).toThrow(message);
  });
});

let db: TestDatabase;
let pool: pg.Pool;
let api: ApiServerFixture;
let tsPackage: string | undefined;

beforeAll(async () => {
  mkdirSync(path.join(ROOT, "test-artifacts"), { recursive: true });
  db = await createTestDatabase();
  pool = createPool({ connectionString: db.url, max: 8, statementTimeoutMs: 20_000, connectTimeoutMs: 5000 });
  const queue = new PostgresQueue(pool, {
    coalescing: SWITCHES.coalescing,
    defaultLeaseSeconds: 30,
    defaultMaxAttempts: 3,
    maxTasksPerJob: 100,
  });
  api = await apiServerFixture({ queue, maxBodyBytes: 1024 * 1024, requestTimeoutMs: 10_000 });
  // A copy of the package of its own, built there (another test file may rebuild clients/typescript/dist meanwhile).
  tsPackage = mkdtempSync(path.join(ROOT, "test-artifacts", "leasehold-money-"));
  for (const f of ["package.json", "tsconfig.json", "src", "test"])
    cpSync(path.join(CLIENT_DIR, f), path.join(tsPackage, f), { recursive: true });
  const tsc = path.join(ROOT, "node_modules", "typescript", "bin", "tsc");
  const build = await runCommand(process.execPath, [tsc, "-p", "tsconfig.json"], { cwd: tsPackage, timeoutMs: 300_000 });
  if (build.code !== 0) throw new Error(`building the TypeScript client failed:\n${build.output}`);
}, 600_000);

afterAll(async () => {
  if (tsPackage) rmSync(tsPackage, { recursive: true, force: true });
  await api?.close();
  await pool?.end();
  await db?.drop();
});

async function scenario(transport: string): Promise<Record<string, unknown>> {
  const env = { LEASEHOLD_URL: api.base, LEASEHOLD_TRANSPORT: transport, PREFIX: `money-${transport}` };
  const r = await runCommand(process.execPath, ["--import", "tsx", "test/money-scenario.ts"], { cwd: tsPackage!, env, timeoutMs: 240_000 });
  expect(r.code, r.output).toBe(0);
  return JSON.parse(r.output.trim().split("\n").at(-1)!) as Record<string, unknown>;
}

describe("the money path through the TypeScript client", () => {
  for (const transport of ["connect", "grpc"]) {
    it(`over ${transport}`, { timeout: 300_000 }, async () => {
      const out = await scenario(transport);
      expect(out.usage).toEqual({
        status: "completed",
        // The retryable failure's usage counts too: 100 + 20 + 30. The refused counter failed its task with nothing reported.
        job: { gpu_ms: 150, tokens: 7 },
        tasks: [{ gpu_ms: 100, tokens: 7 }, { gpu_ms: 50 }, {}],
        attempts: [{ gpu_ms: 20 }, { gpu_ms: 30 }],
        refused: { code: "invalid_usage", names: true },
      });
      expect(out.accounts).toEqual({
        put: { name: true, maxPendingTasks: 2, priority: 3 },
        listed: true,
        pending: 1,
        job: { account: true, reserved: 500, priority: 3 },
        replay: true,
        filter: true,
        codes: { quota: "resource_exhausted:ResourceExhaustedError", unknown: "not_found" },
      });
      expect(out.settlement).toEqual({
        unsettled: true,
        settlement: { key: true, units: 0 },
        replay: true,
        still: false,
        usageAccount: true,
        codes: { early: "failed_precondition", conflict: "already_exists" },
      });
    });
  }
});
