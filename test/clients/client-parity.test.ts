// The Python client (sync and asyncio) and the TypeScript client, each on two transports, through one
// scenario (a job with a failing chunk under the continue policy, its retry, a cancel, a wait across
// dropped connections, a table of bad inputs): the same statuses, failure explanation, result order
// and error codes. Each client runs its own Worker, in its own process, through a TCP proxy the
// scenario asks to cut every connection (POST to RESET_URL). The Python scenarios also make every
// other call of their client once and report the RPCs they and their worker sent: every RPC of the
// contract must be among them.
import { cpSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import net from "node:net";
import http from "node:http";
import path from "node:path";
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { QueueService } from "../../gen/leasehold/queue/v1/queue_pb.js";
import { createPool, PostgresQueue } from "../../src/store/postgres/store.js";
import { createTestDatabase, type TestDatabase } from "../support/db.js";
import { ROOT } from "../support/process.js";
import { CLIENT_DIR, runCommand } from "../support/ts-consumer.js";
import { apiServerFixture, type ApiServerFixture } from "../support/api-server.js";
import { SWITCHES } from "../support/switches.js";

let db: TestDatabase;
let pool: pg.Pool;
let api: ApiServerFixture;
let proxyUrl: string;
let resetUrl: string;
const sockets = new Set<net.Socket>();
let proxy: net.Server;
let control: http.Server;
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
  const port = api.port;
  // Every client connection goes through here; a reset destroys both sides of every pair.
  proxy = net.createServer((client) => {
    const upstream = net.connect(port, "127.0.0.1");
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on("close", () => sockets.delete(s));
      s.on("error", () => {});
    }
    client.pipe(upstream).pipe(client);
  });
  await new Promise<void>((r) => proxy.listen(0, "127.0.0.1", r));
  proxyUrl = `http://127.0.0.1:${(proxy.address() as net.AddressInfo).port}`;
  control = http.createServer((req, res) => {
    for (const s of sockets) s.destroy();
    res.end("reset");
  });
  await new Promise<void>((r) => control.listen(0, "127.0.0.1", r));
  resetUrl = `http://127.0.0.1:${(control.address() as net.AddressInfo).port}/reset`;
  // The TypeScript scenario imports the client's built dist/, from a copy of the package of its own
  // (in the git-ignored test-artifacts/, so its imports resolve in the root node_modules): another test file packing the
  // package at the same time rebuilds clients/typescript/dist.
  tsPackage = mkdtempSync(path.join(ROOT, "test-artifacts", "leasehold-parity-"));
  for (const f of ["package.json", "tsconfig.json", "src", "test"])
    cpSync(path.join(CLIENT_DIR, f), path.join(tsPackage, f), { recursive: true });
  const build = await runCommand(process.execPath, [path.join(ROOT, "node_modules", "typescript", "bin", "tsc"), "-p", "tsconfig.json"], {
    cwd: tsPackage,
    timeoutMs: 300_000,
  });
  if (build.code !== 0) throw new Error(`building the TypeScript client failed:\n${build.output}`);
}, 600_000);

afterAll(async () => {
  if (tsPackage) rmSync(tsPackage, { recursive: true, force: true });
  for (const s of sockets) s.destroy();
  await new Promise((r) => proxy?.close(r));
  await new Promise((r) => control?.close(r));
  await api?.close();
  await pool?.end();
  await db?.drop();
});

type ClientName = "ts" | "py" | "py-aio";

async function scenario(client: ClientName, transport: string): Promise<unknown> {
  const env = {
    LEASEHOLD_URL: proxyUrl,
    LEASEHOLD_TRANSPORT: transport,
    PREFIX: `${client.replace(/\W/g, "")}${transport.replace(/\W/g, "")}`,
    RESET_URL: resetUrl,
  };
  const r =
    client === "ts"
      ? await runCommand(process.execPath, ["--import", "tsx", "test/parity-scenario.ts"], { cwd: tsPackage!, env, timeoutMs: 240_000 })
      : await runCommand(
          inject("python"),
          [path.join(ROOT, "test", "support", client === "py" ? "parity_scenario.py" : "parity_scenario_aio.py")],
          {
            cwd: ROOT,
            env: { ...env, PYTHONPATH: path.join(ROOT, "clients", "python"), PYTHONDONTWRITEBYTECODE: "1" },
            timeoutMs: 240_000,
          },
        );
  expect(r.code, r.output).toBe(0);
  const last = r.output.trim().split("\n").at(-1)!;
  return JSON.parse(last);
}

const EXPECTED = {
  continue: { status: "failed", failure: { chunk: 2, code: "bad_chunk", message: "chunk 2 is bad" }, results: [0, 1, 3] },
  retry: { retried: 1, status: "completed", results: [0, 1, 2, 3] },
  cancel: { status: "cancelled" },
  reconnect: { status: "completed" },
  bad: {
    "empty input_uri": { code: "invalid_argument", fields: ["tasks[0].input_sha256", "tasks[0].input_uri"], reason: "" },
    "job id not a uuid": { code: "invalid_argument", fields: ["job_id"], reason: "" },
    "unknown job": { code: "not_found", fields: [], reason: "" },
    "unknown workload": { code: "not_found", fields: [], reason: "WORKLOAD_NOT_FOUND" },
    "retry of a completed job": { code: "failed_precondition", fields: [], reason: "" },
  },
};

/** Every RPC of the contract, by the name a client sends. */
const ALL_RPCS = QueueService.methods.map((m) => m.name).sort();
const NAMES: Record<ClientName, string> = { ts: "TypeScript", py: "Python", "py-aio": "Python asyncio (leasehold.aio)" };

describe("client parity: Python (sync and asyncio) and TypeScript, two transports each", () => {
  for (const [client, transport] of [
    ["ts", "connect"],
    ["ts", "grpc"],
    ["py", "json"],
    ["py", "grpc"],
    ["py-aio", "json"],
    ["py-aio", "grpc"],
  ] as const) {
    it(`${NAMES[client]} over ${transport}`, { timeout: 300_000 }, async () => {
      const out = (await scenario(client, transport)) as Record<string, unknown>;
      if (client === "ts") {
        expect(out).toEqual(EXPECTED);
        return;
      }
      const { rpcs, ...rest } = out;
      expect(rest).toEqual(EXPECTED);
      expect(rpcs).toEqual(ALL_RPCS);
    });
  }
});
