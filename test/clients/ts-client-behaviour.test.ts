// The TypeScript client as a team lives with it: clients/typescript/test/behaviour-scenario.ts runs
// against its built dist/ over Connect and gRPC (as the parity and money tests run theirs) and
// prints what it met; this file checks it. Error classes keep their own codes (a wait's deadline
// is deadline_exceeded; a quota refusal is not an UnavailableError); every call that answers a job
// answers a Job, whose toJson form JSON.stringify takes; the worker reports a RetryableError as
// retryable_error, ends a cancelled task with one debug line and no FailTask (counted as
// cancelled, not dropped), emits completed/failed/cancelled, shows only its public calls, and
// rejects once the coordinator has not answered for unreachableTimeoutMs, its start line first;
// TLS against a cleartext port and a URL path no proxy strips read as what they are.
import { cpSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import net from "node:net";
import path from "node:path";
import type pg from "pg";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createPool, PostgresQueue } from "../../src/store/postgres/store.js";
import { apiServerFixture, type ApiServerFixture } from "../support/api-server.js";
import { createTestDatabase, type TestDatabase } from "../support/db.js";
import { ROOT } from "../support/process.js";
import { SWITCHES } from "../support/switches.js";
import { CLIENT_DIR, runCommand } from "../support/ts-consumer.js";

let db: TestDatabase;
let pool: pg.Pool;
let api: ApiServerFixture;
let tsPackage: string | undefined;
let deadUrl: string;
/** The server's request log lines (debug and up: every worker call). */
const requests: { operation?: string; task_id?: string; code?: string }[] = [];

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
  const logger = pino({ level: "debug" }, { write: (line: string) => void requests.push(JSON.parse(line) as (typeof requests)[number]) });
  api = await apiServerFixture({ queue, logger, maxBodyBytes: 1024 * 1024, requestTimeoutMs: 10_000 });
  // A port nothing listens on: one the kernel handed out, then closed.
  const closed = net.createServer();
  await new Promise<void>((r) => closed.listen(0, "127.0.0.1", r));
  deadUrl = `http://127.0.0.1:${(closed.address() as net.AddressInfo).port}`;
  await new Promise((r) => closed.close(r));
  // A copy of the package of its own, built there (another test file may rebuild clients/typescript/dist meanwhile).
  tsPackage = mkdtempSync(path.join(ROOT, "test-artifacts", "leasehold-behaviour-"));
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

async function scenario(transport: string): Promise<Record<string, Record<string, unknown>>> {
  const env = { LEASEHOLD_URL: api.base, LEASEHOLD_TRANSPORT: transport, PREFIX: `behaviour-${transport}`, DEAD_URL: deadUrl };
  const r = await runCommand(process.execPath, ["--import", "tsx", "test/behaviour-scenario.ts"], {
    cwd: tsPackage!,
    env,
    timeoutMs: 240_000,
  });
  expect(r.code, r.output).toBe(0);
  return JSON.parse(r.output.trim().split("\n").at(-1)!) as Record<string, Record<string, unknown>>;
}

describe.each(["connect", "grpc"])("the TypeScript client over %s", (transport) => {
  let out: Record<string, Record<string, unknown>>;
  beforeAll(async () => {
    out = await scenario(transport);
  }, 300_000);

  it("gives each error class its own code, and a quota refusal is not an UnavailableError", () => {
    const codes = out.errors.codes as Record<string, string[]>;
    const expected: Record<string, string> = {
      InvalidArgumentError: "invalid_argument",
      NotFoundError: "not_found",
      AbortedError: "aborted",
      AlreadyExistsError: "already_exists",
      FailedPreconditionError: "failed_precondition",
      UnauthenticatedError: "unauthenticated",
      PermissionDeniedError: "permission_denied",
      UnavailableError: "unavailable",
      ResourceExhaustedError: "resource_exhausted",
      DeadlineExceededError: "deadline_exceeded",
      InternalError: "internal",
    };
    expect(codes).toEqual(Object.fromEntries(Object.entries(expected).map(([name, code]) => [name, [code, code]])));
    expect(out.errors.resourceExhaustedIsUnavailable).toBe(false);
  });

  it("answers a Job from createJob, getJob, cancel and retry, a wait's deadline as deadline_exceeded, and JSON through toJson", () => {
    expect(out.answers).toMatchObject({
      created: { id: true, workload: `behaviour-${transport}-idle`, tasks: [0] },
      basic: { id: true, workload: `behaviour-${transport}-idle`, tasks: 0 },
      wait: { class: "DeadlineExceededError", code: "deadline_exceeded", unavailable: false },
      snapshot: { id: true, status: "pending", totalTasks: 1, pending: 1 },
      // A message as it is holds bigints (timestamps, int64 fields): JSON.stringify refuses it.
      stringify: "TypeError",
      json: { id: true, status: "JOB_STATUS_PENDING", totalTasks: 1, reservedUnits: "5", typeName: false, createdAt: "string" },
      cancel: { id: true, status: "cancelled" },
      retry: { id: true, retriedTasks: 1, status: "pending" },
      again: "cancelled",
    });
    expect((out.answers.wait as { message: string }).message).toMatch(/not final within 300 ms/);
  });

  it("reports a RetryableError as retryable_error and emits completed and failed", () => {
    expect(out.worker.status).toBe("completed");
    expect(out.worker.attempts).toEqual(["0:", "1:", "1:retryable_error"]);
    expect(out.worker.events).toEqual(["cancelled true true", "completed 0 mem://0", "completed 1 mem://1", "failed 1 RetryableError"]);
  });

  it("ends a cancelled task's handler with one debug line and no FailTask, counted as cancelled, not dropped", () => {
    expect(out.worker.stats).toEqual({ claimed: 4, completed: 2, failed: 1, cancelled: 1, dropped: 0, released: 0 });
    expect(out.worker.cancelLines).toEqual(["debug"]);
    expect(out.worker.warnings).toEqual([]);
    const taskId = out.worker.heldTaskId as string;
    const calls = requests.filter((r) => r.task_id === taskId).map((r) => r.operation);
    expect(calls).toContain("RenewLease");
    expect(calls).not.toContain("FailTask");
  });

  it("shows only handle, on, off, run, stop, stats and workerId", () => {
    expect(out.worker.surface).toEqual({
      prototype: ["constructor", "handle", "off", "on", "run", "stats", "stop", "workerId"],
      keys: [],
    });
  });

  it("rejects run() once the coordinator has not answered for unreachableTimeoutMs, its start line logged first", () => {
    expect(out.unreachable.ran).toMatchObject({ class: "UnavailableError", code: "unavailable", unavailable: true });
    expect((out.unreachable.ran as { message: string }).message).toMatch(
      new RegExp(`^the coordinator at ${deadUrl} did not answer for 1 s \\(unreachableTimeoutMs 1000\\); last: RenewLease: .*ECONNREFUSED`),
    );
    expect(out.unreachable.first).toMatch(/^leasehold worker \S+: 1 lane\(s\) for behaviour-\S+-work at http:/);
    // Stopped while it waits: the start line came first, and nothing was logged after the stop.
    expect(out["stopped while unreachable"]).toEqual(["info start", "warn unreachable"]);
  });

  it("names TLS against a cleartext port, and a URL path no proxy strips, and honours a path a proxy strips", () => {
    expect(out.tls).toEqual({
      class: "UnavailableError",
      code: "unavailable",
      unavailable: true,
      message: `ListWorkloads: ${api.base.replace("http:", "https:")} does not speak TLS (it answered in cleartext): use http:// for a cleartext coordinator, or serve TLS on it`,
    });
    const notServed = out.path.notServed as { code: string; message: string };
    expect(notServed.code).toBe("unimplemented");
    expect(notServed.message).toContain(`${api.base}/prefix has no /prefix/leasehold.queue.v1.QueueService/ListWorkloads`);
    expect(notServed.message).toContain(`without one, use ${api.base}`);
    expect(out.path.workerRun).toMatch(
      /^WorkerConfigError: RenewLease: http:\/\/\S+\/prefix has no \/prefix\/leasehold\.queue\.v1\.QueueService\/RenewLease/,
    );
    expect(out.path.proxied).toMatchObject({ url: expect.stringMatching(/\/prefix$/), work: true });
    expect(out.path.badUrl).toMatch(/^TypeError: url: no query or fragment/);
  });
});
