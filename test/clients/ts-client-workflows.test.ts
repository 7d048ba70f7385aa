// Workflows through the TypeScript client: clients/typescript/test/workflow-scenario.ts runs against
// the client's built dist/ over Connect and gRPC, as the parity test runs its scenario, against a
// real coordinator on a test database: a pipeline whose later stages read task.parents, a watch
// while the workflow is cancelled, its retry, createJob's after, a refused workflow.
import { cpSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import path from "node:path";
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { workflowRequest } from "../../clients/typescript/src/workflows.js";
import { createPool, PostgresQueue } from "../../src/store/postgres/store.js";
import { apiServerFixture, type ApiServerFixture } from "../support/api-server.js";
import { createTestDatabase, type TestDatabase } from "../support/db.js";
import { ROOT } from "../support/process.js";
import { SWITCHES } from "../support/switches.js";
import { CLIENT_DIR, runCommand } from "../support/ts-consumer.js";

describe("a workflow's nodes in the TypeScript client", () => {
  it("become CreateWorkflow's nodes: edges by name, parents outside the workflow in the node's job", () => {
    const r = workflowRequest(
      {
        a: { workload: "w", inputUri: "s3://a", inputSha256: "x" },
        b: { workload: "w", inputUri: "s3://b", inputSha256: "x", after: ["a", { node: "c", optional: true }, { jobId: "j1" }] },
      },
      { name: "two" },
    );
    expect(r).toEqual({
      name: "two",
      nodes: [
        { name: "a", after: [], job: { workload: "w", inputUri: "s3://a", inputSha256: "x", after: [] } },
        {
          name: "b",
          after: [{ node: "a" }, { node: "c", optional: true }],
          job: { workload: "w", inputUri: "s3://b", inputSha256: "x", after: [{ jobId: "j1" }] },
        },
      ],
    });
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
  tsPackage = mkdtempSync(path.join(ROOT, "test-artifacts", "leasehold-workflows-"));
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
  const env = { LEASEHOLD_URL: api.base, LEASEHOLD_TRANSPORT: transport, PREFIX: `wf-${transport}` };
  const r = await runCommand(process.execPath, ["--import", "tsx", "test/workflow-scenario.ts"], {
    cwd: tsPackage!,
    env,
    timeoutMs: 240_000,
  });
  expect(r.code, r.output).toBe(0);
  return JSON.parse(r.output.trim().split("\n").at(-1)!) as Record<string, unknown>;
}

describe("workflows through the TypeScript client", () => {
  for (const transport of ["connect", "grpc"]) {
    it(`over ${transport}`, { timeout: 300_000 }, async () => {
      const out = await scenario(transport);
      expect(out.pipeline).toEqual({
        created: [
          ["chunks", "pending", []],
          ["stitch", "waiting", ["chunks"]],
          ["report", "waiting", ["stitch"]],
        ],
        stitchJob: { workflow: true, node: "stitch", parents: ["chunks"] },
        done: {
          status: "completed",
          nodes: [
            ["chunks", "completed", 3],
            ["stitch", "completed", 1],
            ["report", "completed", 1],
          ],
        },
        seen: {
          // A parent of many tasks is read with results(); one of a single task hands its result with the task.
          stitch: { parents: [["chunks", "completed", 3, 3, null]], inputs: ["s3://out/chunk/0", "s3://out/chunk/1", "s3://out/chunk/2"] },
          report: [["stitch", "completed", "s3://out/stitched"]],
        },
        listed: true,
        json: true,
      });
      expect(out.cancelRetry).toEqual({
        cancelled: { nodes: 3, status: "cancelled", reasons: ["not today"] },
        events: ["chunks:pending>cancelled", "report:waiting>cancelled", "stitch:waiting>cancelled"],
        retried: { nodes: 3, tasks: 5, statuses: ["pending", "waiting", "waiting"] },
      });
      expect(out.after).toEqual({
        child: { status: "waiting", waiting: 2, parents: [false, true], waitingTasks: 1 },
        afterParentCancelled: "cancelled",
      });
      expect(out.refused).toEqual({ code: "invalid_argument", fields: ["nodes[0].after[0].node"] });
    });
  }
});
