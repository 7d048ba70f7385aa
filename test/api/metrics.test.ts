// Metrics: GET /metrics on a real server (the API-server fixture, port 0)
// over a real, migrated PostgreSQL, after jobs are created, claimed, completed
// and failed through the API. The counters come from the store's QueueObserver,
// the task gauges from taskStats at scrape time, the RPC histogram from run().
import { randomUUID } from "node:crypto";
import { Writable } from "node:stream";
import { Code, createClient, type Client } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import type pg from "pg";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { QueueService, TaskStatus } from "../../gen/leasehold/queue/v1/queue_pb.js";
import { Authenticator } from "../../src/api/auth.js";
import type { QueueService as Queue } from "../../src/queue/service.js";
import type { WorkloadTaskStats } from "../../src/queue/types.js";
import { createPool, PostgresQueue } from "../../src/store/postgres/store.js";
import { Metrics } from "../../src/telemetry/metrics.js";
import { createTestDatabase, type TestDatabase } from "../support/db.js";
import { rpcError } from "../support/rpc.js";
import { apiServerFixture, type ApiServerFixture } from "../support/api-server.js";
import { SWITCHES } from "../support/switches.js";
import { sha } from "../support/queue.js";

const TOKENS = {
  worker: `lh_worker_${randomUUID()}`,
  submitter: `lh_sub_${randomUUID()}`,
  bound: `lh_bound_${randomUUID()}`,
  billing: `lh_billing_${randomUUID()}`,
  metrics: `lh_metrics_${randomUUID()}`,
  admin: `lh_admin_${randomUUID()}`,
};

let db: TestDatabase;
let pool: pg.Pool;
let store: PostgresQueue;
let metrics: Metrics;
let server: ApiServerFixture;
let authServer: ApiServerFixture;
let bareServer: ApiServerFixture;
let base: string;
let authBase: string;
let bareBase: string;
const logLines: Record<string, unknown>[] = [];

function logger() {
  const sink = new Writable({
    write(chunk: Buffer, _enc, cb) {
      for (const line of chunk.toString().split("\n")) if (line) logLines.push(JSON.parse(line));
      cb();
    },
  });
  // debug: a successful scrape's line is at that level (request-log.ts).
  return pino({ level: "debug" }, sink);
}

beforeAll(async () => {
  db = await createTestDatabase();
  pool = createPool({ connectionString: db.url, max: 6, statementTimeoutMs: 20_000, connectTimeoutMs: 5000 });
  const log = logger();
  // No caching here, so every scrape sees the latest counts (caching is tested below on its own).
  metrics = new Metrics({ logger: log, pool, unfinishedTtlMs: 0, allTtlMs: 0 });
  store = new PostgresQueue(pool, {
    coalescing: SWITCHES.coalescing,
    defaultLeaseSeconds: 60,
    defaultMaxAttempts: 3,
    maxTasksPerJob: 50,
    observer: metrics.observer,
  });
  metrics.attach({ stats: store });
  const common = { queue: store, logger: log };
  server = await apiServerFixture({ ...common, metrics });
  base = server.base;
  authServer = await apiServerFixture({
    ...common,
    metrics,
    auth: new Authenticator([
      { sha256: sha(TOKENS.worker), role: "worker", workerPrefix: "gpu-" },
      { sha256: sha(TOKENS.submitter), role: "submitter" },
      { sha256: sha(TOKENS.bound), role: "submitter", account: "acme" },
      { sha256: sha(TOKENS.billing), role: "billing" },
      { sha256: sha(TOKENS.metrics), role: "metrics" },
      { sha256: sha(TOKENS.admin), role: "admin" },
    ]),
  });
  authBase = authServer.base;
  bareServer = await apiServerFixture(common);
  bareBase = bareServer.base;
});

afterAll(async () => {
  await server?.close();
  await authServer?.close();
  await bareServer?.close();
  await pool?.end();
  await db?.drop();
});

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** Parses Prometheus text exposition format (0.0.4) into samples. */
function parseExposition(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)(?: \d+)?$/.exec(line);
    if (!m) throw new Error(`unparseable exposition line: ${line}`);
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) {
      labels[l[1]] = l[2].replace(/\\(.)/g, (_, c: string) => (c === "n" ? "\n" : c));
    }
    const v = m[3];
    samples.push({ name: m[1], labels, value: v === "+Inf" ? Infinity : v === "-Inf" ? -Infinity : Number(v) });
  }
  return samples;
}

/** The value of the one sample with this name and (at least) these labels; undefined when absent. */
function value(samples: Sample[], name: string, labels: Record<string, string> = {}): number | undefined {
  const found = samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
  if (found.length > 1) throw new Error(`${name} ${JSON.stringify(labels)} matches ${found.length} samples`);
  return found[0]?.value;
}

async function scrape(url = base, headers: Record<string, string> = {}): Promise<Sample[]> {
  const res = await fetch(`${url}/metrics`, { headers });
  const text = await res.text();
  expect(res.status, text).toBe(200);
  expect(res.headers.get("content-type")).toMatch(/^text\/plain; version=0\.0\.4/);
  return parseExposition(text);
}

describe("GET /metrics", () => {
  let client: Client<typeof QueueService>;
  const workload = "metrics_w";
  const worker = "gpu-metrics-1";

  beforeAll(() => {
    client = createClient(QueueService, createConnectTransport({ baseUrl: base, httpVersion: "1.1" }));
  });

  it("counts claims, completions, failures and tasks by workload and status", async () => {
    await client.putWorkload({ name: workload, maxAttempts: 3, leaseSeconds: 60 });
    // Job one: 4 tasks; job two: 1 task that fails for good (a failed task fails its job and
    // cancels the job's other tasks, so it gets a job of its own).
    const one = await client.createJob({
      workload,
      tasks: [0, 1, 2, 3].map((i) => ({ chunkIndex: i, inputUri: `s3://in/${i}`, inputSha256: sha(`in${i}`) })),
    });
    const two = await client.createJob({ workload, inputUri: "s3://in/two", inputSha256: sha("two") });

    const claimed = await client.claimTasks({ workerId: worker, workloads: [workload], maxTasks: 5 });
    expect(claimed.tasks).toHaveLength(5);
    const [a, b, c] = claimed.tasks.filter((t) => t.jobId === one.job?.id);
    const [d] = claimed.tasks.filter((t) => t.jobId === two.job?.id);
    const manifest = (t: typeof a) => ({
      taskId: t.id,
      workerId: worker,
      attempt: t.attempt,
      resultUri: `s3://out/${t.chunkIndex}`,
      resultSha256: sha("out"),
    });
    await client.completeTask(manifest(a));
    await client.completeTask(manifest(a)); // a replay: not a second completion
    await client.completeTask(manifest(b));
    const retried = await client.failTask({ taskId: c.id, workerId: worker, attempt: c.attempt, errorCode: "flaky", retryAfterSeconds: 0 });
    expect(retried.task?.status).toBe(TaskStatus.PENDING);
    const failed = await client.failTask({ taskId: d.id, workerId: worker, attempt: d.attempt, errorCode: "broken", retryable: false });
    expect(failed.task?.status).toBe(TaskStatus.FAILED);
    const missing = await rpcError(client.getJob({ jobId: randomUUID() }));
    expect(missing.code).toBe(Code.NotFound);

    const s = await scrape();
    // Counters fed by the store's observer.
    expect(value(s, "leasehold_claims_total")).toBe(5);
    expect(value(s, "leasehold_completions_total")).toBe(2);
    expect(value(s, "leasehold_failures_total", { retryable: "true" })).toBe(1);
    expect(value(s, "leasehold_failures_total", { retryable: "false" })).toBe(1);
    expect(value(s, "leasehold_pickup_seconds_count")).toBe(5);
    expect(value(s, "leasehold_pickup_seconds_sum")).toBeGreaterThanOrEqual(0);

    // Task gauges from taskStats: 1 pending again, 1 still leased, 2 completed, 1 failed.
    expect(value(s, "leasehold_tasks", { workload, status: "pending" })).toBe(1);
    expect(value(s, "leasehold_tasks", { workload, status: "leased" })).toBe(1);
    expect(value(s, "leasehold_tasks", { workload, status: "completed" })).toBe(2);
    expect(value(s, "leasehold_tasks", { workload, status: "failed" })).toBe(1);
    expect(value(s, "leasehold_tasks", { workload, status: "cancelled" })).toBe(0);
    expect(value(s, "leasehold_oldest_pending_seconds", { workload })).toBeGreaterThanOrEqual(0);

    // RPC durations by method and Connect code.
    expect(value(s, "leasehold_rpc_duration_seconds_count", { method: "ClaimTasks", code: "ok" })).toBe(1);
    expect(value(s, "leasehold_rpc_duration_seconds_count", { method: "CompleteTask", code: "ok" })).toBe(3);
    expect(value(s, "leasehold_rpc_duration_seconds_count", { method: "FailTask", code: "ok" })).toBe(2);
    expect(value(s, "leasehold_rpc_duration_seconds_count", { method: "CreateJob", code: "ok" })).toBe(2);
    expect(value(s, "leasehold_rpc_duration_seconds_count", { method: "GetJob", code: "not_found" })).toBe(1);
    expect(value(s, "leasehold_rpc_duration_seconds_bucket", { method: "GetJob", code: "not_found", le: "+Inf" })).toBe(1);
    expect(value(s, "leasehold_rpc_duration_seconds_bucket", { method: "ClaimTasks", code: "ok", le: "30" })).toBe(1);

    // Pool gauges and the default Node.js metrics (no prefix).
    expect(value(s, "leasehold_db_pool_connections", { state: "total" })).toBeGreaterThanOrEqual(1);
    expect(value(s, "leasehold_db_pool_connections", { state: "idle" })).toBeGreaterThanOrEqual(0);
    // Read before the scrape's own stats queries ask the pool for connections.
    expect(value(s, "leasehold_db_pool_connections", { state: "waiting" })).toBe(0);
    expect(value(s, "process_cpu_user_seconds_total")).toBeGreaterThan(0);
    expect(value(s, "nodejs_heap_size_total_bytes")).toBeGreaterThan(0);
    expect(s.some((x) => x.name === "nodejs_eventloop_lag_seconds")).toBe(true);
  });

  it("counts REST calls in the RPC histogram too, and expired leases", async () => {
    const expiring = "metrics_exp";
    await client.putWorkload({ name: expiring, maxAttempts: 3, leaseSeconds: 60 });
    await client.createJob({ workload: expiring, inputUri: "s3://in/x", inputSha256: sha("x") });
    const res = await fetch(`${base}/tasks/claim`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ worker_id: worker, workloads: [expiring], lease_seconds: 1 }),
    });
    expect(res.status, await res.text()).toBe(200);
    await new Promise((r) => setTimeout(r, 1300));
    expect(await store.expireLeases()).toMatchObject({ requeued: 1 });

    const s = await scrape();
    expect(value(s, "leasehold_rpc_duration_seconds_count", { method: "ClaimTasks", code: "ok" })).toBe(2);
    expect(value(s, "leasehold_lease_expirations_total")).toBe(1);
    expect(value(s, "leasehold_claims_total")).toBe(6);
    expect(value(s, "leasehold_tasks", { workload: expiring, status: "pending" })).toBe(1);
    expect(value(s, "leasehold_tasks", { workload: expiring, status: "leased" })).toBe(0);
  });

  it("answers HEAD without a body, other methods with 405, and logs the request", async () => {
    const head = await fetch(`${base}/metrics`, { method: "HEAD" });
    expect(head.status).toBe(200);
    expect(await head.text()).toBe("");

    const post = await fetch(`${base}/metrics`, { method: "POST", body: "x" });
    const body = (await post.json()) as { error: { code: string; request_id: string } };
    expect(post.status).toBe(405);
    expect(post.headers.get("allow")).toBe("GET, HEAD");
    expect(body.error.code).toBe("unimplemented");
    expect(body.error.request_id).toBe(post.headers.get("x-request-id"));

    const requestId = `metrics-${randomUUID()}`;
    await fetch(`${base}/metrics`, { headers: { "x-request-id": requestId } });
    await new Promise((r) => setTimeout(r, 50));
    const line = logLines.find((l) => l.request_id === requestId);
    expect(line).toMatchObject({ level: 20, msg: "request", path: "/metrics", operation: "metrics", method: "GET", status: 200 });
  });

  it("counts claims refused by a cap and by a rate limit, per workload, and shows the leased tasks while they are leased", async () => {
    const capped = "metrics_capped";
    const limited = "metrics_rate";
    await client.putWorkload({ name: capped, maxLeased: 2 });
    // One token, refilled once in 1,000 s: the second claim finds none.
    await client.putWorkload({ name: limited, maxLeasesPerSecond: 0.001, leasesBurst: 1 });
    const chunks = (n: number) =>
      Array.from({ length: n }, (_, i) => ({ chunkIndex: i, inputUri: `s3://in/${i}`, inputSha256: sha(`c${i}`) }));
    await client.createJob({ workload: capped, tasks: chunks(4) });
    await client.createJob({ workload: limited, tasks: chunks(3) });
    const before = await scrape();
    expect(value(before, "leasehold_claims_refused_total", { workload: capped, reason: "cap" })).toBeUndefined();

    const claim = (w: string, maxTasks: number) => client.claimTasks({ workerId: worker, workloads: [w], maxTasks });
    expect((await claim(capped, 4)).tasks).toHaveLength(2);
    expect((await claim(capped, 1)).tasks).toHaveLength(0);
    expect((await claim(capped, 2)).tasks).toHaveLength(0);
    expect((await claim(limited, 3)).tasks).toHaveLength(1);
    expect((await claim(limited, 1)).tasks).toHaveLength(0);

    const s = await scrape();
    expect(value(s, "leasehold_claims_refused_total", { workload: capped, reason: "cap" })).toBe(2);
    expect(value(s, "leasehold_claims_refused_total", { workload: capped, reason: "rate" })).toBeUndefined();
    expect(value(s, "leasehold_claims_refused_total", { workload: limited, reason: "rate" })).toBe(1);
    expect(value(s, "leasehold_claims_refused_total", { workload: limited, reason: "cap" })).toBeUndefined();
    // Leased tasks per workload, read from the database at scrape time: the cap's 2, the token's 1.
    expect(value(s, "leasehold_tasks", { workload: capped, status: "leased" })).toBe(2);
    expect(value(s, "leasehold_tasks", { workload: capped, status: "pending" })).toBe(2);
    expect(value(s, "leasehold_tasks", { workload: limited, status: "leased" })).toBe(1);
    expect(value(s, "leasehold_tasks", { workload: limited, status: "pending" })).toBe(2);
  });

  it("is a 404 on a server without metrics", async () => {
    const res = await fetch(`${bareBase}/metrics`);
    expect(res.status).toBe(404);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe("not_found");
  });
});

describe("GET /metrics with bearer tokens configured", () => {
  it("needs an admin or a metrics token: any other role is 403, as the counts are every account's", async () => {
    const none = await fetch(`${authBase}/metrics`);
    const body = (await none.json()) as { error: { code: string; message: string; request_id: string } };
    expect(none.status).toBe(401);
    expect(body.error.code).toBe("unauthenticated");
    expect(body.error.request_id).toBe(none.headers.get("x-request-id"));

    const wrong = await fetch(`${authBase}/metrics`, { headers: { authorization: `Bearer lh_wrong_${randomUUID()}` } });
    expect(wrong.status).toBe(401);

    const scraped = await scrape(authBase, { authorization: `Bearer ${TOKENS.metrics}` });
    expect(value(scraped, "leasehold_claims_total")).toBeGreaterThanOrEqual(1);
    await scrape(authBase, { authorization: `Bearer ${TOKENS.admin}` });
    for (const role of ["worker", "submitter", "bound", "billing"] as const) {
      const refused = await fetch(`${authBase}/metrics`, { headers: { authorization: `Bearer ${TOKENS[role]}` } });
      const error = ((await refused.json()) as { error: { code: string; message: string } }).error;
      expect([role, refused.status, error.code], error.message).toEqual([role, 403, "permission_denied"]);
      expect(error.message).toContain("/metrics");
    }
  });

  it("a metrics token calls no RPC", async () => {
    const res = await fetch(`${authBase}/jobs?page_size=1`, { headers: { authorization: `Bearer ${TOKENS.metrics}` } });
    expect(res.status).toBe(403);
  });

  it("keeps /healthz open", async () => {
    expect((await fetch(`${authBase}/healthz`)).status).toBe(200);
  });
});

describe("task stats at scrape time", () => {
  const stats = (pending: number): WorkloadTaskStats[] => [
    { workload: "w", counts: { pending, leased: 0, completed: 7, failed: 0, cancelled: 0, waiting: 0 }, oldestPendingSeconds: 3 },
  ];
  const quiet = () => pino({ level: "silent" });

  it("are cached: one query per scope within the TTL, however many scrapes", async () => {
    const calls: string[] = [];
    const source: Pick<Queue, "taskStats"> = {
      taskStats: async (scope) => {
        calls.push(scope);
        return stats(2);
      },
    };
    const m = new Metrics({ logger: quiet(), stats: source });
    await Promise.all([m.render(), m.render()]);
    await m.render();
    expect(calls.sort()).toEqual(["all", "unfinished"]);
    const s = parseExposition(await m.render());
    expect(value(s, "leasehold_tasks", { workload: "w", status: "pending" })).toBe(2);
    expect(value(s, "leasehold_tasks", { workload: "w", status: "completed" })).toBe(7);
    expect(value(s, "leasehold_oldest_pending_seconds", { workload: "w" })).toBe(3);
  });

  it("a failing query keeps the last values, warns, and never fails the scrape", async () => {
    let fail = false;
    const warnings: unknown[] = [];
    const log = pino(
      { level: "warn" },
      new Writable({ write: (chunk: Buffer, _e, cb) => (warnings.push(JSON.parse(chunk.toString())), cb()) }),
    );
    const m = new Metrics({
      logger: log,
      unfinishedTtlMs: 0,
      allTtlMs: 0,
      stats: {
        taskStats: async () => {
          if (fail) throw new Error("database unreachable (test)");
          return stats(4);
        },
      },
    });
    expect(value(parseExposition(await m.render()), "leasehold_tasks", { workload: "w", status: "pending" })).toBe(4);
    fail = true;
    const s = parseExposition(await m.render());
    expect(value(s, "leasehold_tasks", { workload: "w", status: "pending" })).toBe(4);
    expect(value(s, "leasehold_tasks", { workload: "w", status: "completed" })).toBe(7);
    expect(warnings.length).toBeGreaterThanOrEqual(1);
    expect(warnings[0]).toMatchObject({ level: 40, msg: expect.stringContaining("task stats") });

    // Never answered at all: no task series, the rest of the scrape still works.
    const broken = new Metrics({ logger: quiet(), stats: { taskStats: async () => Promise.reject(new Error("down")) } });
    const b = parseExposition(await broken.render());
    expect(b.some((x) => x.name === "leasehold_tasks")).toBe(false);
    expect(value(b, "leasehold_claims_total")).toBe(0);
  });
});
