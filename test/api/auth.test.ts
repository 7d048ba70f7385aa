// Authentication: bearer tokens with roles on every transport, worker_id prefixes,
// open mode bound to loopback, the token CLI, config errors, and TLS (HTTP/1.1
// and HTTP/2 on one port, with a self-signed certificate made here by openssl).
// A real server (the API-server fixture, port 0; createApiServer itself for TLS) over a real, migrated PostgreSQL.
import { execFileSync, spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import https from "node:https";
import os from "node:os";
import path from "node:path";
import { Writable } from "node:stream";
import type tls from "node:tls";
import { Code, createClient, type Client, type Interceptor, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { JobStatus, QueueService, TaskStatus } from "../../gen/leasehold/queue/v1/queue_pb.js";
import { Authenticator } from "../../src/api/auth.js";
import { createApiServer, type ApiServer } from "../../src/api/server.js";
import { ConfigError, loadConfig, parseAuthTokens, type AuthTokenEntry } from "../../src/config/index.js";
import { createLogger } from "../../src/logger.js";
import { createPool, PostgresQueue } from "../../src/store/postgres/store.js";
import { createTestDatabase, type TestDatabase } from "../support/db.js";
import { SWITCHES } from "../support/switches.js";
import { ROOT } from "../support/process.js";
import { rpcError } from "../support/rpc.js";
import { sha } from "../support/queue.js";
import { apiServerFixture, type ApiServerFixture } from "../support/api-server.js";
import { configLine } from "../../src/cli/commands/token.js";

const TOKENS = {
  admin: `lh_admin_${randomUUID()}`,
  submitter: `lh_submitter_${randomUUID()}`,
  gpu: `lh_gpu_${randomUUID()}`,
  cpu: `lh_cpu_${randomUUID()}`,
};
const WRONG_TOKEN = `lh_wrong_${randomUUID()}`;
const ENTRIES: AuthTokenEntry[] = [
  { sha256: sha(TOKENS.admin), role: "admin" },
  { sha256: sha(TOKENS.submitter), role: "submitter" },
  { sha256: sha(TOKENS.gpu), role: "worker", workerPrefix: "gpu-" },
  { sha256: sha(TOKENS.cpu), role: "worker", workerPrefix: "cpu-" },
];

let db: TestDatabase;
let pool: pg.Pool;
let queue: PostgresQueue;
let api: ApiServerFixture;
let base: string;
let logText = "";
let tmp: string;

beforeAll(async () => {
  tmp = mkdtempSync(path.join(os.tmpdir(), "leasehold-auth-"));
  db = await createTestDatabase();
  pool = createPool({ connectionString: db.url, max: 6, statementTimeoutMs: 20_000, connectTimeoutMs: 5000 });
  queue = new PostgresQueue(pool, { coalescing: SWITCHES.coalescing, defaultLeaseSeconds: 60, defaultMaxAttempts: 3, maxTasksPerJob: 50 });
  const sink = new Writable({
    write(chunk: Buffer, _enc, cb) {
      logText += chunk.toString();
      cb();
    },
  });
  api = await apiServerFixture({ queue, logger: createLogger("info", sink), auth: new Authenticator(ENTRIES) });
  base = api.base;
});

afterAll(async () => {
  await api?.close();
  await pool?.end();
  await db?.drop();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

interface RestAnswer {
  status: number;
  text: string;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  body: any;
}

async function rest(
  method: string,
  route: string,
  token: string | undefined,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<RestAnswer> {
  const h: Record<string, string> = { ...headers };
  if (token !== undefined) h.authorization = `Bearer ${token}`;
  if (body !== undefined) h["content-type"] = "application/json";
  const res = await fetch(base + route, { method, headers: h, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, text, body: text ? JSON.parse(text) : undefined };
}

function expectDenied(a: RestAnswer, status: 401 | 403): void {
  expect(a.status, a.text).toBe(status);
  expect(a.body.error.code).toBe(status === 401 ? "unauthenticated" : "permission_denied");
}

async function taskRow(id: string) {
  const { rows } = await pool.query(
    "SELECT status::text, attempt, lease_owner, result_uri, error_code, version, lease_expires_at FROM tasks WHERE id = $1",
    [id],
  );
  return rows[0];
}

/** Progress rows of a task, and every event row of its job: a refused ReportProgress writes neither. */
async function eventCounts(taskId: string) {
  const { rows } = await pool.query(
    `SELECT (SELECT count(*)::int FROM task_events WHERE task_id = $1 AND kind = 'task_progress') AS progress,
            (SELECT count(*)::int FROM task_events WHERE job_id = (SELECT job_id FROM tasks WHERE id = $1)) AS job_events`,
    [taskId],
  );
  return rows[0] as { progress: number; job_events: number };
}

async function jobStatus(id: string): Promise<string> {
  return (await pool.query("SELECT status::text FROM jobs WHERE id = $1", [id])).rows[0].status;
}

async function watcherCount(): Promise<number> {
  return (await pool.query("SELECT count(*)::int AS n FROM job_watchers")).rows[0].n;
}

interface SseAnswer {
  status: number;
  contentType: string;
  text: string;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  messages: any[];
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  body: any;
}

/**
 * GET /jobs/{id}/events. A 200 is read until the stream ends (a final job's ends after its snapshot)
 * or, with firstOnly, until the first message; any other answer is a JSON REST error.
 */
async function sse(jobId: string, token: string | undefined, firstOnly = false): Promise<SseAnswer> {
  const abort = new AbortController();
  const headers: Record<string, string> = token === undefined ? {} : { authorization: `Bearer ${token}` };
  const res = await fetch(`${base}/jobs/${jobId}/events`, { headers, signal: abort.signal });
  const contentType = res.headers.get("content-type") ?? "";
  if (res.status !== 200 || !res.body) {
    const text = await res.text();
    return { status: res.status, contentType, text, messages: [], body: text ? JSON.parse(text) : undefined };
  }
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let text = "";
  const messages = () =>
    text
      .split("\n")
      .filter((l) => l.startsWith("data: "))
      .map((l) => JSON.parse(l.slice(6)));
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    text += decoder.decode(value, { stream: true });
    if (firstOnly && messages().length > 0) {
      abort.abort();
      break;
    }
  }
  return { status: res.status, contentType, text, messages: messages(), body: undefined };
}

async function counts() {
  const { rows } = await pool.query(
    "SELECT (SELECT count(*)::int FROM jobs) AS jobs, (SELECT count(*)::int FROM tasks) AS tasks, (SELECT count(*)::int FROM workloads) AS workloads",
  );
  return rows[0];
}

describe("configuration", () => {
  const file = (name: string, text: string) => {
    const p = path.join(tmp, name);
    writeFileSync(p, text);
    return p;
  };
  const configError = (env: Record<string, string>): ConfigError => {
    try {
      loadConfig(env);
    } catch (err) {
      if (err instanceof ConfigError) return err;
      throw err;
    }
    throw new Error("expected a ConfigError");
  };

  it("parses AUTH_TOKENS_FILE: comments, blank lines, upper-case hex, a prefix per worker, an account per bound submitter", () => {
    const h = [sha("a"), sha("b"), sha("c"), sha("d"), sha("e")];
    const p = file(
      "ok.tokens",
      `# tokens\n\n${h[0].toUpperCase()} admin   # ops\n${h[1]} submitter\n  ${h[2]}\tworker gpu-#1\n${h[3]} submitter acme_co-1\n${h[4]} billing\n`,
    );
    const config = loadConfig({ AUTH_TOKENS_FILE: p, HOST: "0.0.0.0" });
    expect(config.authTokens).toEqual([
      { sha256: h[0], role: "admin" },
      { sha256: h[1], role: "submitter" },
      { sha256: h[2], role: "worker", workerPrefix: "gpu-#1" },
      { sha256: h[3], role: "submitter", account: "acme_co-1" },
      { sha256: h[4], role: "billing" },
    ]);
    expect(config.host).toBe("0.0.0.0");
  });

  it("a malformed line is a ConfigError naming AUTH_TOKENS_FILE and the line number, never echoing the line", () => {
    const pasted = "lh_this-is-a-token-not-a-hash";
    const cases: [string, RegExp][] = [
      [`# a\n${sha("a")} admin\n${pasted} admin\n`, /line 3: the first field must be the sha256/],
      [`${sha("a")} root\n`, /line 1: the role must be one of submitter, worker, billing, metrics, admin/],
      [`${sha("a")} worker\n`, /line 1: a worker token needs the worker_id prefix/],
      [
        `${sha("a")} admin gpu-\n`,
        /line 1: only worker tokens \(a worker_id prefix\) and submitter tokens \(an account\) take a third field, not admin/,
      ],
      [`${sha("a")} billing acme\n`, /line 1: only worker tokens .* take a third field, not billing/],
      [`${sha("a")} submitter Acme\n`, /line 1: a submitter's third field is the account it is bound to/],
      [`${sha("a")} submitter 1acme\n`, /line 1: a submitter's third field is the account/],
      [`${sha("a")} worker gpu- extra\n`, /line 1: too many fields/],
      [`${sha("a")} admin\n\n${sha("a")} submitter\n`, /line 3: the same token hash is already on line 1/],
      ["# nothing but comments\n", /holds no token/],
    ];
    for (const [text, message] of cases) {
      const err = configError({ AUTH_TOKENS_FILE: file("bad.tokens", text) });
      expect(err.variable).toBe("AUTH_TOKENS_FILE");
      expect(err.message).toMatch(/^AUTH_TOKENS_FILE: /);
      expect(err.message).toMatch(message);
      expect(err.message).not.toContain(pasted);
    }
    expect(configError({ AUTH_TOKENS_FILE: path.join(tmp, "missing") }).message).toMatch(/AUTH_TOKENS_FILE: cannot read .*ENOENT/);
  });

  it("without tokens only loopback binds, unless ALLOW_UNAUTHENTICATED=true", () => {
    for (const host of ["0.0.0.0", "10.1.2.3", "::", "example.com"]) {
      const err = configError({ HOST: host });
      expect(err.variable).toBe("HOST");
      expect(err.message).toMatch(/^HOST: .*ALLOW_UNAUTHENTICATED=true/);
    }
    for (const host of ["127.0.0.1", "::1", "localhost", ""]) expect(loadConfig({ HOST: host }).authTokens).toEqual([]);
    expect(loadConfig({ HOST: "0.0.0.0", ALLOW_UNAUTHENTICATED: "true" }).allowUnauthenticated).toBe(true);
    expect(configError({ ALLOW_UNAUTHENTICATED: "yes" }).variable).toBe("ALLOW_UNAUTHENTICATED");
    // The defaults are exactly today's open coordinator.
    expect(loadConfig({})).toMatchObject({ host: "127.0.0.1", authTokens: [], allowUnauthenticated: false, tls: undefined });
  });

  it("TLS_CERT_FILE and TLS_KEY_FILE: both or neither, and a key that belongs to the certificate", () => {
    const cert = file("c.pem", "not a certificate");
    expect(configError({ TLS_CERT_FILE: cert }).variable).toBe("TLS_KEY_FILE");
    expect(configError({ TLS_KEY_FILE: cert }).variable).toBe("TLS_CERT_FILE");
    expect(configError({ TLS_CERT_FILE: cert, TLS_KEY_FILE: cert }).message).toMatch(/^TLS_CERT_FILE: .* is not a PEM certificate/);
  });
});

describe("leasehold token new", () => {
  function cli(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
    return new Promise((resolve) => {
      const child = spawn(process.execPath, [path.join(ROOT, "bin/leasehold.js"), ...args], {
        cwd: ROOT,
        stdio: ["ignore", "pipe", "pipe"],
      });
      let stdout = "";
      let stderr = "";
      child.stdout.setEncoding("utf8").on("data", (d: string) => (stdout += d));
      child.stderr.setEncoding("utf8").on("data", (d: string) => (stderr += d));
      child.on("close", (code) => resolve({ code, stdout, stderr }));
    });
  }

  it("--json prints a fresh token and a config line holding its sha256, which the config accepts", async () => {
    const [a, b] = await Promise.all([
      cli(["token", "new", "--role", "worker", "--worker-prefix", "gpu-", "--json"]),
      cli(["token", "new", "--role", "submitter"]),
    ]);
    expect(a.code, a.stderr).toBe(0);
    const out = JSON.parse(a.stdout) as { token: string; config_line: string };
    expect(Object.keys(out).sort()).toEqual(["config_line", "token"]);
    expect(out.token.length).toBeGreaterThanOrEqual(40);
    expect(out.config_line).toBe(`${sha(out.token)} worker gpu-`);
    expect(parseAuthTokens(out.config_line)).toEqual([{ sha256: sha(out.token), role: "worker", workerPrefix: "gpu-" }]);
    expect(new Authenticator(parseAuthTokens(out.config_line)).authenticate(`Bearer ${out.token}`)).toEqual({
      role: "worker",
      workerPrefix: "gpu-",
    });

    expect(b.code, b.stderr).toBe(0);
    const [token, line, ...rest] = b.stdout.trimEnd().split("\n");
    expect(rest).toEqual([]);
    expect(line).toBe(`${sha(token)} submitter`);
    expect(token).not.toBe(out.token);
  });

  it("makes a metrics (scrape) token: a line of no third field that the config accepts", async () => {
    const r = await cli(["token", "new", "--role", "metrics", "--json"]);
    expect(r.code, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout) as { token: string; config_line: string };
    expect(out.config_line).toBe(`${sha(out.token)} metrics`);
    expect(new Authenticator(parseAuthTokens(out.config_line)).authenticate(`Bearer ${out.token}`)).toEqual({ role: "metrics" });
    expect(() => configLine("lh_t", "metrics", "gpu-")).toThrow(/only worker tokens take --worker-prefix/);
    expect(() => configLine("lh_t", "metrics", undefined, "acme")).toThrow(/only submitter tokens are bound to an account/);
  });

  it("configLine binds a submitter to an account, and refuses an account on any other role", () => {
    const line = configLine("lh_t", "submitter", undefined, "acme");
    expect(line).toBe(`${sha("lh_t")} submitter acme`);
    expect(parseAuthTokens(line)).toEqual([{ sha256: sha("lh_t"), role: "submitter", account: "acme" }]);
    expect(new Authenticator(parseAuthTokens(line)).authenticate("Bearer lh_t")).toEqual({ role: "submitter", account: "acme" });
    expect(() => configLine("lh_t", "billing", undefined, "acme")).toThrow(/only submitter tokens are bound to an account/);
    expect(() => configLine("lh_t", "worker", "gpu-", "acme")).toThrow(/exclude each other/);
    expect(() => configLine("lh_t", "submitter", "gpu-")).toThrow(/only worker tokens take --worker-prefix/);
    expect(() => configLine("lh_t", "submitter", undefined, "Acme")).toThrow(/--account is the account it is bound to/);
  });

  it("refuses a worker token without a prefix (exit 2)", async () => {
    const r = await cli(["token", "new", "--role", "worker"]);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe("");
    expect(r.stderr).toMatch(/worker_id prefix/);
  });
});

describe("REST", () => {
  const workload = "auth_rest";
  let jobId: string;

  it("/healthz and /readyz stay open", async () => {
    expect((await rest("GET", "/healthz", undefined)).status).toBe(200);
    expect((await rest("GET", "/readyz", undefined)).status).toBe(200);
  });

  it("no token, a wrong token or another scheme: 401 and nothing written", async () => {
    const before = await counts();
    const job = { workload, input_uri: "s3://x", input_sha256: sha("x") };
    expectDenied(await rest("POST", "/jobs", undefined, job), 401);
    expectDenied(await rest("POST", "/jobs", WRONG_TOKEN, job), 401);
    expectDenied(
      await rest("POST", "/jobs", undefined, job, { authorization: `Basic ${Buffer.from(`u:${TOKENS.admin}`).toString("base64")}` }),
      401,
    );
    expectDenied(await rest("POST", "/jobs", undefined, job, { authorization: TOKENS.admin }), 401);
    expectDenied(await rest("PUT", `/workloads/${workload}`, undefined, {}), 401);
    expectDenied(await rest("GET", "/workloads", WRONG_TOKEN), 401);
    expectDenied(await rest("POST", "/tasks/claim", undefined, { worker_id: "gpu-1", workloads: [workload] }), 401);
    expect(await counts()).toEqual(before);
  });

  it("admin registers workloads; submitter and worker may not", async () => {
    const before = await counts();
    expectDenied(await rest("PUT", `/workloads/${workload}`, TOKENS.submitter, {}), 403);
    expectDenied(await rest("PUT", `/workloads/${workload}`, TOKENS.gpu, {}), 403);
    expectDenied(await rest("GET", "/workloads", TOKENS.submitter), 403);
    expect(await counts()).toEqual(before);
    const put = await rest("PUT", `/workloads/${workload}`, TOKENS.admin, { max_attempts: 3 });
    expect(put.status, put.text).toBe(200);
    expect((await rest("GET", "/workloads", TOKENS.admin)).body.workloads.map((w: { name: string }) => w.name)).toContain(workload);
  });

  it("submitter creates, reads and cancels jobs; a worker may not create one", async () => {
    const job = { workload, tasks: [0, 1, 2, 3].map((i) => ({ chunk_index: i, input_uri: `s3://in/${i}`, input_sha256: sha(`r${i}`) })) };
    const before = await counts();
    expectDenied(await rest("POST", "/jobs", TOKENS.gpu, job), 403);
    expect(await counts()).toEqual(before);
    const created = await rest("POST", "/jobs", TOKENS.submitter, job);
    expect(created.status, created.text).toBe(201);
    jobId = created.body.job.id;
    expect((await rest("GET", `/jobs/${jobId}`, TOKENS.submitter)).status).toBe(200);
    expect((await rest("GET", `/jobs/${jobId}/results`, TOKENS.submitter)).status).toBe(200);
    expectDenied(await rest("GET", `/jobs/${jobId}`, TOKENS.gpu), 403);
    const other = await rest("POST", "/jobs", TOKENS.submitter, { workload, input_uri: "s3://c", input_sha256: sha("c") });
    expectDenied(await rest("POST", `/jobs/${other.body.job.id}/cancel`, TOKENS.cpu, {}), 403);
    expect((await rest("GET", `/jobs/${other.body.job.id}`, TOKENS.admin)).body.job.status).toBe("JOB_STATUS_PENDING");
    const cancelled = await rest("POST", `/jobs/${other.body.job.id}/cancel`, TOKENS.submitter, { reason: "test" });
    expect(cancelled.status, cancelled.text).toBe(200);
  });

  it("a submitter may not claim; a worker claims only as a worker_id under its prefix", async () => {
    const pending = async () =>
      (await pool.query("SELECT count(*)::int AS n FROM tasks WHERE job_id = $1 AND status = 'pending'", [jobId])).rows[0].n;
    expect(await pending()).toBe(4);
    expectDenied(await rest("POST", "/tasks/claim", TOKENS.submitter, { worker_id: "gpu-1", workloads: [workload] }), 403);
    expectDenied(await rest("POST", "/tasks/claim", TOKENS.gpu, { worker_id: "cpu-1", workloads: [workload] }), 403);
    expectDenied(await rest("POST", "/tasks/claim", TOKENS.gpu, { worker_id: "xgpu-1", workloads: [workload] }), 403);
    expect(await pending()).toBe(4);
    const claimed = await rest("POST", "/tasks/claim", TOKENS.gpu, { worker_id: "gpu-1", workloads: [workload], max_tasks: 3 });
    expect(claimed.status, claimed.text).toBe(200);
    expect(claimed.body.tasks).toHaveLength(3);
    const cpu = await rest("POST", "/tasks/claim", TOKENS.cpu, { worker_id: "cpu-1", workloads: [workload], max_tasks: 1 });
    expect(cpu.status, cpu.text).toBe(200);
    expect(await pending()).toBe(0);
  });

  it("a worker completing, renewing or failing another prefix's task: 403, the row unchanged", async () => {
    const { rows } = await pool.query<{ id: string; lease_owner: string }>(
      "SELECT id, lease_owner FROM tasks WHERE job_id = $1 AND status = 'leased' ORDER BY chunk_index",
      [jobId],
    );
    const gpuTasks = rows.filter((r) => r.lease_owner === "gpu-1").map((r) => r.id);
    const cpuTask = rows.find((r) => r.lease_owner === "cpu-1")!.id;
    expect(gpuTasks).toHaveLength(3);
    const [t0, t1, t2] = gpuTasks;
    const before = await Promise.all([t0, t1, t2, cpuTask].map(taskRow));
    const result = { worker_id: "gpu-1", attempt: 1, result_uri: "s3://out/x", result_sha256: sha("out") };

    // The cpu- worker acting as the gpu- lease holder (which would otherwise succeed).
    expectDenied(await rest("POST", `/tasks/${t0}/result`, TOKENS.cpu, result), 403);
    expectDenied(await rest("POST", `/tasks/${t0}/heartbeat`, TOKENS.cpu, { worker_id: "gpu-1", attempt: 1, lease_seconds: 600 }), 403);
    expectDenied(
      await rest("POST", `/tasks/${t0}/failure`, TOKENS.cpu, { worker_id: "gpu-1", attempt: 1, error_code: "boom", retryable: false }),
      403,
    );
    expectDenied(await rest("POST", "/tasks/results", TOKENS.cpu, { results: [{ task_id: t1, ...result }] }), 403);
    // A batch with one result outside the prefix writes none of them.
    expectDenied(
      await rest("POST", "/tasks/results", TOKENS.gpu, {
        results: [
          { task_id: t1, ...result },
          { task_id: cpuTask, ...result, worker_id: "cpu-1" },
        ],
      }),
      403,
    );
    // A submitter completing a task.
    expectDenied(await rest("POST", `/tasks/${t2}/result`, TOKENS.submitter, result), 403);
    expect(await Promise.all([t0, t1, t2, cpuTask].map(taskRow))).toEqual(before);

    // The right worker: heartbeat, result, batch, failure.
    expect((await rest("POST", `/tasks/${t0}/heartbeat`, TOKENS.gpu, { worker_id: "gpu-1", attempt: 1 })).status).toBe(200);
    const done = await rest("POST", `/tasks/${t0}/result`, TOKENS.gpu, result);
    expect(done.status, done.text).toBe(200);
    expect(done.body.task.status).toBe("TASK_STATUS_COMPLETED");
    const batch = await rest("POST", "/tasks/results", TOKENS.gpu, { results: [{ task_id: t1, ...result }] });
    expect(batch.status, batch.text).toBe(200);
    expect(batch.body.outcomes[0].task.status).toBe("TASK_STATUS_COMPLETED");
    const failed = await rest("POST", `/tasks/${cpuTask}/failure`, TOKENS.cpu, {
      worker_id: "cpu-1",
      attempt: 1,
      error_code: "flaky",
      retry_after_seconds: 0,
    });
    expect(failed.status, failed.text).toBe(200);
    // Admin may act as any worker_id.
    const admin = await rest("POST", `/tasks/${t2}/result`, TOKENS.admin, result);
    expect(admin.status, admin.text).toBe(200);
  });
});

describe("REST: ReportProgress, WatchJob (SSE), RetryJob, ListJobs", () => {
  const workload = "auth_ops";
  let jobId: string;
  let taskId: string;
  let cancelledJobId: string;

  beforeAll(async () => {
    const put = await rest("PUT", `/workloads/${workload}`, TOKENS.admin, { max_attempts: 3, lease_seconds: 60 });
    expect(put.status, put.text).toBe(200);
    const created = await rest("POST", "/jobs", TOKENS.submitter, {
      workload,
      tasks: [0, 1].map((i) => ({ chunk_index: i, input_uri: `s3://ops/${i}`, input_sha256: sha(`ops${i}`) })),
    });
    expect(created.status, created.text).toBe(201);
    jobId = created.body.job.id;
    const claimed = await rest("POST", "/tasks/claim", TOKENS.gpu, { worker_id: "gpu-ops", workloads: [workload], max_tasks: 1 });
    expect(claimed.status, claimed.text).toBe(200);
    taskId = claimed.body.tasks[0].id;
    const other = await rest("POST", "/jobs", TOKENS.submitter, { workload, input_uri: "s3://ops/c", input_sha256: sha("ops-c") });
    cancelledJobId = other.body.job.id;
    expect((await rest("POST", `/jobs/${cancelledJobId}/cancel`, TOKENS.submitter, { reason: "auth test" })).status).toBe(200);
  });

  it("a worker reports progress only as a worker_id under its prefix; a submitter may not; refused: no task_events row, lease unchanged", async () => {
    const report = (workerId: string) => ({ worker_id: workerId, attempt: 1, progress: 0.25, message: "a quarter", lease_seconds: 600 });
    const route = `/tasks/${taskId}/progress`;
    const row = await taskRow(taskId);
    const events = await eventCounts(taskId);
    expect(events.progress).toBe(0);

    expectDenied(await rest("POST", route, undefined, report("gpu-ops")), 401);
    expectDenied(await rest("POST", route, WRONG_TOKEN, report("gpu-ops")), 401);
    // The cpu- worker acting as the gpu- lease holder (which would otherwise succeed).
    const foreign = await rest("POST", route, TOKENS.cpu, report("gpu-ops"));
    expectDenied(foreign, 403);
    expect(foreign.body.error.message).toMatch(/worker_id "gpu-ops" is outside this token's prefix "cpu-"/);
    // Its own prefix's worker_id, and ids that merely contain the prefix.
    expectDenied(await rest("POST", route, TOKENS.gpu, report("cpu-1")), 403);
    expectDenied(await rest("POST", route, TOKENS.gpu, report("xgpu-ops")), 403);
    expectDenied(await rest("POST", route, TOKENS.gpu, report("GPU-ops")), 403);
    // Submitters do not report progress, not even as the lease holder.
    expectDenied(await rest("POST", route, TOKENS.submitter, report("gpu-ops")), 403);
    expect(await taskRow(taskId)).toEqual(row);
    expect(await eventCounts(taskId)).toEqual(events);

    const ok = await rest("POST", route, TOKENS.gpu, report("gpu-ops"));
    expect(ok.status, ok.text).toBe(200);
    expect(ok.body.task.lease_owner).toBe("gpu-ops");
    expect(await eventCounts(taskId)).toEqual({ progress: 1, job_events: events.job_events + 1 });
    expect((await taskRow(taskId)).version).toBe(row.version + 1);
    // Admin may report as any worker_id.
    const admin = await rest("POST", route, TOKENS.admin, { ...report("gpu-ops"), progress: 0.5 });
    expect(admin.status, admin.text).toBe(200);
    expect((await eventCounts(taskId)).progress).toBe(2);
  });

  it("WatchJob over SSE: submitter and admin get the stream; a worker gets 403, no token 401, both JSON before any stream", async () => {
    for (const token of [TOKENS.submitter, TOKENS.admin]) {
      // A cancelled job: the snapshot, then the end of the stream.
      const done = await sse(cancelledJobId, token);
      expect(done.status, done.text).toBe(200);
      expect(done.contentType).toMatch(/^text\/event-stream/);
      expect(done.messages).toHaveLength(1);
      expect(done.messages[0].snapshot.job).toMatchObject({ id: cancelledJobId, status: "JOB_STATUS_CANCELLED" });
      // A running job: the first message is its snapshot.
      const live = await sse(jobId, token, true);
      expect(live.status, live.text).toBe(200);
      expect(live.messages[0].snapshot.job).toMatchObject({ id: jobId, status: "JOB_STATUS_RUNNING" });
    }
    await expect.poll(watcherCount).toBe(0);
    for (const [token, status] of [
      [undefined, 401],
      [WRONG_TOKEN, 401],
      [TOKENS.gpu, 403],
      [TOKENS.cpu, 403],
    ] as const) {
      for (const id of [jobId, cancelledJobId]) {
        const a = await sse(id, token);
        expect(a.contentType, a.text).toMatch(/^application\/json/);
        expectDenied(a, status);
      }
    }
    // Refused before the stream registered itself.
    expect(await watcherCount()).toBe(0);
  });

  it("RetryJob: submitter and admin may retry a cancelled job; a worker gets 403 and no token 401, the job unchanged", async () => {
    const before = await pool.query("SELECT j::text AS j FROM jobs j WHERE id = $1", [cancelledJobId]);
    const tasks = async () => (await pool.query("SELECT status::text, attempt FROM tasks WHERE job_id = $1", [cancelledJobId])).rows;
    const tasksBefore = await tasks();
    expectDenied(await rest("POST", `/jobs/${cancelledJobId}/retry`, undefined, {}), 401);
    expectDenied(await rest("POST", `/jobs/${cancelledJobId}/retry`, WRONG_TOKEN, { max_attempts: 2 }), 401);
    expectDenied(await rest("POST", `/jobs/${cancelledJobId}/retry`, TOKENS.gpu, {}), 403);
    expectDenied(await rest("POST", `/jobs/${cancelledJobId}/retry`, TOKENS.cpu, { max_attempts: 2 }), 403);
    expect((await pool.query("SELECT j::text AS j FROM jobs j WHERE id = $1", [cancelledJobId])).rows).toEqual(before.rows);
    expect(await tasks()).toEqual(tasksBefore);

    const retried = await rest("POST", `/jobs/${cancelledJobId}/retry`, TOKENS.submitter, { max_attempts: 2 });
    expect(retried.status, retried.text).toBe(200);
    expect(retried.body).toMatchObject({ job: { id: cancelledJobId, status: "JOB_STATUS_PENDING" }, retried_tasks: 1 });
    expect((await rest("POST", `/jobs/${cancelledJobId}/cancel`, TOKENS.submitter, {})).status).toBe(200);
    const byAdmin = await rest("POST", `/jobs/${cancelledJobId}/retry`, TOKENS.admin, {});
    expect(byAdmin.status, byAdmin.text).toBe(200);
    expect(byAdmin.body.job.status).toBe("JOB_STATUS_PENDING");
    // Leave it cancelled for the tests after this one.
    expect((await rest("POST", `/jobs/${cancelledJobId}/cancel`, TOKENS.admin, {})).status).toBe(200);
    expect(await jobStatus(cancelledJobId)).toBe("cancelled");
  });

  it("ListJobs: submitter and admin may list; a worker gets 403 and no token 401", async () => {
    for (const token of [TOKENS.submitter, TOKENS.admin]) {
      const all = await rest("GET", `/jobs?workload=${workload}`, token);
      expect(all.status, all.text).toBe(200);
      expect(all.body.jobs.map((j: { id: string }) => j.id).sort()).toEqual([jobId, cancelledJobId].sort());
      const cancelled = await rest("GET", `/jobs?workload=${workload}&status=cancelled`, token);
      expect(cancelled.status, cancelled.text).toBe(200);
      expect(cancelled.body.jobs.map((j: { id: string }) => j.id)).toEqual([cancelledJobId]);
    }
    expectDenied(await rest("GET", "/jobs", undefined), 401);
    expectDenied(await rest("GET", `/jobs?workload=${workload}`, WRONG_TOKEN), 401);
    expectDenied(await rest("GET", "/jobs", TOKENS.gpu), 403);
    expectDenied(await rest("GET", `/jobs?status=JOB_STATUS_FAILED`, TOKENS.cpu), 403);
  });

  it("ListTasks and GetTask: submitter and admin may read; a worker gets 403 and no token 401", async () => {
    for (const token of [TOKENS.submitter, TOKENS.admin]) {
      const list = await rest("GET", `/jobs/${jobId}/tasks`, token);
      expect(list.status, list.text).toBe(200);
      expect(list.body.tasks.map((t: { task: { id: string } }) => t.task.id)).toContain(taskId);
      const leased = await rest("GET", `/jobs/${jobId}/tasks?status=leased`, token);
      expect(leased.body.tasks.map((t: { task: { id: string } }) => t.task.id)).toEqual([taskId]);
      const one = await rest("GET", `/tasks/${taskId}`, token);
      expect(one.status, one.text).toBe(200);
      expect(one.body.attempts.map((a: { worker_id: string; outcome: string }) => [a.worker_id, a.outcome])).toEqual([
        ["gpu-ops", "ATTEMPT_OUTCOME_RUNNING"],
      ]);
    }
    expectDenied(await rest("GET", `/jobs/${jobId}/tasks`, undefined), 401);
    expectDenied(await rest("GET", `/tasks/${taskId}`, WRONG_TOKEN), 401);
    expectDenied(await rest("GET", `/jobs/${jobId}/tasks?status=failed`, TOKENS.gpu), 403);
    expectDenied(await rest("GET", `/tasks/${taskId}`, TOKENS.cpu), 403);
  });
});

describe.each([
  ["grpc (HTTP/2)", (baseUrl: string, i: Interceptor[]) => createGrpcTransport({ baseUrl, interceptors: i })],
  ["grpc-web (HTTP/1.1)", (baseUrl: string, i: Interceptor[]) => createGrpcWebTransport({ baseUrl, httpVersion: "1.1", interceptors: i })],
  ["connect (HTTP/1.1)", (baseUrl: string, i: Interceptor[]) => createConnectTransport({ baseUrl, httpVersion: "1.1", interceptors: i })],
] as [string, (baseUrl: string, i: Interceptor[]) => Transport][])("over %s", (label, makeTransport) => {
  const workload = `auth_${label.replace(/[^a-z0-9]+/gi, "_").toLowerCase()}`.replace(/_+$/, "");
  const bearer =
    (token: string): Interceptor =>
    (next) =>
    (req) => {
      req.header.set("authorization", `Bearer ${token}`);
      return next(req);
    };
  const as = (token?: string): Client<typeof QueueService> => createClient(QueueService, makeTransport(base, token ? [bearer(token)] : []));

  it("UNAUTHENTICATED without or with a wrong token, PERMISSION_DENIED for the wrong role or prefix, nothing written", async () => {
    const before = await counts();
    expect((await rpcError(as().putWorkload({ name: workload }))).code).toBe(Code.Unauthenticated);
    expect((await rpcError(as(WRONG_TOKEN).putWorkload({ name: workload }))).code).toBe(Code.Unauthenticated);
    expect((await rpcError(as(TOKENS.submitter).putWorkload({ name: workload }))).code).toBe(Code.PermissionDenied);
    expect((await rpcError(as(TOKENS.gpu).listWorkloads({}))).code).toBe(Code.PermissionDenied);
    expect(await counts()).toEqual(before);

    expect((await as(TOKENS.admin).putWorkload({ name: workload })).workload?.name).toBe(workload);
    const jobId = (await as(TOKENS.submitter).createJob({ workload, inputUri: "s3://in", inputSha256: sha("in") })).job!.id;
    expect((await rpcError(as(TOKENS.submitter).claimTasks({ workerId: "gpu-1", workloads: [workload] }))).code).toBe(
      Code.PermissionDenied,
    );
    expect((await rpcError(as(TOKENS.cpu).claimTasks({ workerId: "gpu-1", workloads: [workload] }))).code).toBe(Code.PermissionDenied);
    expect((await as(TOKENS.submitter).getJob({ jobId })).taskCounts?.pending).toBe(1);

    const [task] = (await as(TOKENS.gpu).claimTasks({ workerId: "gpu-7", workloads: [workload] })).tasks;
    expect(task.leaseOwner).toBe("gpu-7");
    const before2 = await taskRow(task.id);
    const manifest = { taskId: task.id, workerId: "gpu-7", attempt: 1, resultUri: "s3://out", resultSha256: sha("out") };
    const denied = await rpcError(as(TOKENS.cpu).completeTask(manifest));
    expect(denied.code).toBe(Code.PermissionDenied);
    expect(denied.rawMessage).toMatch(/worker_id "gpu-7" is outside this token's prefix "cpu-"/);
    expect((await rpcError(as(TOKENS.cpu).completeTasks({ results: [manifest] }))).code).toBe(Code.PermissionDenied);
    expect((await rpcError(as(TOKENS.cpu).failTask({ ...manifest, errorCode: "x" }))).code).toBe(Code.PermissionDenied);
    expect((await rpcError(as(TOKENS.cpu).renewLease({ taskId: task.id, workerId: "gpu-7", attempt: 1 }))).code).toBe(
      Code.PermissionDenied,
    );
    expect((await rpcError(as(TOKENS.gpu).cancelJob({ jobId }))).code).toBe(Code.PermissionDenied);
    expect(await taskRow(task.id)).toEqual(before2);

    expect((await as(TOKENS.gpu).completeTask(manifest)).task?.status).toBe(TaskStatus.COMPLETED);
    expect((await as(TOKENS.submitter).listCompletedResults({ jobId })).results).toHaveLength(1);
  });

  /** Every message of a WatchJob stream (which ends after the snapshot of a final job). */
  const watch = async (client: Client<typeof QueueService>, jobId: string) => {
    const out = [];
    for await (const m of client.watchJob({ jobId })) out.push(m);
    return out;
  };

  it("ReportProgress for workers under their prefix; WatchJob, RetryJob, ListJobs, ListTasks and GetTask for submitter and admin only", async () => {
    const ops = `${workload}_ops`;
    await as(TOKENS.admin).putWorkload({ name: ops });
    const jobId = (await as(TOKENS.submitter).createJob({ workload: ops, inputUri: "s3://in/ops", inputSha256: sha("in-ops") })).job!.id;
    const [task] = (await as(TOKENS.gpu).claimTasks({ workerId: "gpu-9", workloads: [ops] })).tasks;
    const report = { taskId: task.id, workerId: "gpu-9", attempt: 1, progress: 0.5, message: "half" };

    // ReportProgress.
    const row = await taskRow(task.id);
    const events = await eventCounts(task.id);
    expect((await rpcError(as().reportProgress(report))).code).toBe(Code.Unauthenticated);
    expect((await rpcError(as(WRONG_TOKEN).reportProgress(report))).code).toBe(Code.Unauthenticated);
    const denied = await rpcError(as(TOKENS.cpu).reportProgress(report));
    expect(denied.code).toBe(Code.PermissionDenied);
    expect(denied.rawMessage).toMatch(/worker_id "gpu-9" is outside this token's prefix "cpu-"/);
    expect((await rpcError(as(TOKENS.gpu).reportProgress({ ...report, workerId: "cpu-9" }))).code).toBe(Code.PermissionDenied);
    expect((await rpcError(as(TOKENS.submitter).reportProgress(report))).code).toBe(Code.PermissionDenied);
    expect(await taskRow(task.id)).toEqual(row);
    expect(await eventCounts(task.id)).toEqual(events);
    expect((await as(TOKENS.gpu).reportProgress(report)).task?.leaseOwner).toBe("gpu-9");
    expect((await as(TOKENS.admin).reportProgress({ ...report, progress: 0.75 })).task?.leaseOwner).toBe("gpu-9");
    expect((await eventCounts(task.id)).progress).toBe(events.progress + 2);

    // WatchJob (server streaming: the refusal ends the stream before any message), on a final job.
    await as(TOKENS.submitter).cancelJob({ jobId });
    for (const token of [TOKENS.submitter, TOKENS.admin]) {
      const messages = await watch(as(token), jobId);
      expect(messages).toHaveLength(1);
      expect(messages[0].update.case).toBe("snapshot");
    }
    expect((await rpcError(watch(as(), jobId))).code).toBe(Code.Unauthenticated);
    expect((await rpcError(watch(as(WRONG_TOKEN), jobId))).code).toBe(Code.Unauthenticated);
    expect((await rpcError(watch(as(TOKENS.gpu), jobId))).code).toBe(Code.PermissionDenied);
    expect((await rpcError(watch(as(TOKENS.cpu), jobId))).code).toBe(Code.PermissionDenied);

    // RetryJob.
    const before = await jobStatus(jobId);
    expect(before).toBe("cancelled");
    expect((await rpcError(as().retryJob({ jobId }))).code).toBe(Code.Unauthenticated);
    expect((await rpcError(as(TOKENS.gpu).retryJob({ jobId }))).code).toBe(Code.PermissionDenied);
    expect((await rpcError(as(TOKENS.cpu).retryJob({ jobId, maxAttempts: 2 }))).code).toBe(Code.PermissionDenied);
    expect(await jobStatus(jobId)).toBe(before);
    expect((await as(TOKENS.submitter).retryJob({ jobId, maxAttempts: 2 })).retriedTasks).toBe(1);
    await as(TOKENS.submitter).cancelJob({ jobId });
    expect((await as(TOKENS.admin).retryJob({ jobId })).job?.status).not.toBe(JobStatus.CANCELLED);

    // ListJobs.
    expect((await rpcError(as().listJobs({}))).code).toBe(Code.Unauthenticated);
    expect((await rpcError(as(WRONG_TOKEN).listJobs({ workload: ops }))).code).toBe(Code.Unauthenticated);
    expect((await rpcError(as(TOKENS.gpu).listJobs({ workload: ops }))).code).toBe(Code.PermissionDenied);
    expect((await rpcError(as(TOKENS.cpu).listJobs({ status: JobStatus.FAILED }))).code).toBe(Code.PermissionDenied);
    for (const token of [TOKENS.submitter, TOKENS.admin]) {
      expect((await as(token).listJobs({ workload: ops })).jobs.map((j) => j.id)).toEqual([jobId]);
    }

    // ListTasks and GetTask: job reads, as GetJob.
    expect((await rpcError(as().listTasks({ jobId }))).code).toBe(Code.Unauthenticated);
    expect((await rpcError(as(WRONG_TOKEN).getTask({ taskId: task.id }))).code).toBe(Code.Unauthenticated);
    expect((await rpcError(as(TOKENS.gpu).listTasks({ jobId }))).code).toBe(Code.PermissionDenied);
    expect((await rpcError(as(TOKENS.cpu).getTask({ taskId: task.id }))).code).toBe(Code.PermissionDenied);
    for (const token of [TOKENS.submitter, TOKENS.admin]) {
      expect((await as(token).listTasks({ jobId })).tasks.map((t) => t.task?.id)).toEqual([task.id]);
      expect((await as(token).getTask({ taskId: task.id })).attempts.map((a) => a.workerId)).toEqual(["gpu-9"]);
    }
  });
});

describe("logs", () => {
  it("carry the role of each call and never a token", async () => {
    // Everything above has run against this server's logger; add a request whose every header is a token.
    await rest("GET", "/workloads", TOKENS.admin, undefined, { "x-request-id": "auth-log-check" });
    const lines = logText
      .split("\n")
      .filter(Boolean)
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines.length).toBeGreaterThan(40);
    expect(lines.find((l) => l.request_id === "auth-log-check")).toMatchObject({ role: "admin", status: 200, operation: "ListWorkloads" });
    expect(lines.some((l) => l.code === "unauthenticated" && l.status === 401)).toBe(true);
    expect(lines.some((l) => l.code === "permission_denied" && l.role === undefined)).toBe(true);
    for (const token of [...Object.values(TOKENS), WRONG_TOKEN]) expect(logText).not.toContain(token);

    // Should a log call ever carry request headers, the logger redacts the token.
    let redacted = "";
    const logger = createLogger("info", new Writable({ write: (c: Buffer, _e, cb) => ((redacted += c.toString()), cb()) }));
    logger.info({ headers: { authorization: `Bearer ${TOKENS.admin}` } }, "a");
    logger.info({ req: { headers: { authorization: `Bearer ${TOKENS.admin}` } } }, "b");
    logger.info({ authorization: `Bearer ${TOKENS.admin}` }, "c");
    expect(redacted).not.toContain(TOKENS.admin);
    expect(redacted.match(/\[redacted\]/g)).toHaveLength(3);
  });
});

describe("TLS", () => {
  const hasOpenssl = (() => {
    try {
      execFileSync("openssl", ["version"], { stdio: "ignore" });
      return true;
    } catch {
      return false;
    }
  })();
  let tlsServer: ApiServer | undefined;
  let httpsBase: string;
  let cert: Buffer;

  beforeAll(async () => {
    if (!hasOpenssl) return;
    const dir = mkdtempSync(path.join(tmp, "tls-"));
    const certFile = path.join(dir, "cert.pem");
    const keyFile = path.join(dir, "key.pem");
    execFileSync(
      "openssl",
      [
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=localhost",
        "-days",
        "1",
        "-keyout",
        keyFile,
        "-out",
        certFile,
        "-addext",
        "subjectAltName=DNS:localhost,IP:127.0.0.1",
      ],
      { stdio: "ignore" },
    );
    expect(existsSync(certFile)).toBe(true);
    const config = loadConfig({
      TLS_CERT_FILE: certFile,
      TLS_KEY_FILE: keyFile,
      AUTH_TOKENS_FILE: (writeFileSync(path.join(dir, "t"), `${sha(TOKENS.admin)} admin\n`), path.join(dir, "t")),
    });
    expect(config.tls).toBeDefined();
    cert = readFileSync(certFile);
    tlsServer = createApiServer({
      directUnary: SWITCHES.directUnary,
      queue,
      logger: createLogger("silent"),
      maxBodyBytes: 64 * 1024,
      requestTimeoutMs: 5000,
      readiness: async () => ({ ready: true }),
      auth: new Authenticator(config.authTokens),
      tls: config.tls,
    });
    httpsBase = `https://127.0.0.1:${await tlsServer.listen(0, "127.0.0.1")}`;
  });

  afterAll(async () => {
    await tlsServer?.close(2000);
  });

  /** HTTP/1.1 over TLS, offering ALPN "http/1.1" as curl or a browser without h2 would. */
  function get(route: string, token?: string): Promise<{ status: number; version: string; alpn: string | false; body: string }> {
    return new Promise((resolve, reject) => {
      const req = https.request(
        `${httpsBase}${route}`,
        // ALPNProtocols reaches tls.connect, though https.RequestOptions does not list it.
        {
          ca: cert,
          agent: false,
          ALPNProtocols: ["http/1.1"],
          headers: token ? { authorization: `Bearer ${token}` } : {},
        } as https.RequestOptions,
        (res) => {
          let body = "";
          res.setEncoding("utf8").on("data", (d: string) => (body += d));
          res.on("end", () =>
            resolve({
              status: res.statusCode ?? 0,
              version: res.httpVersion,
              alpn: (res.socket as tls.TLSSocket).alpnProtocol ?? false,
              body,
            }),
          );
        },
      );
      req.on("error", reject);
      req.end();
    });
  }

  it("serves HTTP/1.1 (REST) and HTTP/2 (Connect, gRPC) on one port with a self-signed certificate", async (ctx) => {
    if (!hasOpenssl) ctx.skip("no openssl on this machine to make a self-signed certificate");
    const health = await get("/healthz");
    expect(health).toMatchObject({ status: 200, version: "1.1", alpn: "http/1.1" });
    expect((await get("/workloads")).status).toBe(401);
    const listed = await get("/workloads", TOKENS.admin);
    expect(listed.status, listed.body).toBe(200);
    expect(JSON.parse(listed.body).workloads.map((w: { name: string }) => w.name)).toContain("auth_rest");

    const bearer: Interceptor = (next) => (req) => {
      req.header.set("authorization", `Bearer ${TOKENS.admin}`);
      return next(req);
    };
    for (const transport of [
      createConnectTransport({ baseUrl: httpsBase, httpVersion: "2", nodeOptions: { ca: cert }, interceptors: [bearer] }),
      createGrpcTransport({ baseUrl: httpsBase, nodeOptions: { ca: cert }, interceptors: [bearer] }),
      createConnectTransport({ baseUrl: httpsBase, httpVersion: "1.1", nodeOptions: { ca: cert }, interceptors: [bearer] }),
    ]) {
      const client = createClient(QueueService, transport);
      expect((await client.listWorkloads({})).workloads.map((w) => w.name)).toContain("auth_rest");
    }
    const anonymous = createClient(
      QueueService,
      createConnectTransport({ baseUrl: httpsBase, httpVersion: "2", nodeOptions: { ca: cert } }),
    );
    expect((await rpcError(anonymous.listWorkloads({}))).code).toBe(Code.Unauthenticated);
    // Cleartext on the TLS port gets no answer from the API.
    await expect(fetch(httpsBase.replace("https:", "http:") + "/healthz")).rejects.toThrow();
  });
});
