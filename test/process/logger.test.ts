import { Writable } from "node:stream";
import { setTimeout } from "node:timers/promises";
import { pino } from "pino";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { requestLevel } from "../../src/api/request-log.js";
import { createApiServer, type ApiServer } from "../../src/api/server.js";
import { loadConfig } from "../../src/config/index.js";
import { createLogger, isoTime } from "../../src/logger.js";
import { queueFixture, sha, type QueueFixture } from "../support/queue.js";
import { restCall } from "../support/rest.js";
import { SWITCHES } from "../support/switches.js";

describe("the logger's timestamp", () => {
  afterEach(() => vi.restoreAllMocks());

  it("is pino's isoTime text, made again when the millisecond changes", () => {
    const now = vi.spyOn(Date, "now");
    for (const ms of [0, 1_764_510_000_123, 1_764_510_000_123, 1_764_510_000_124, 1_764_510_000_123, 253_402_300_799_999]) {
      now.mockReturnValue(ms);
      expect(isoTime()).toBe(pino.stdTimeFunctions.isoTime());
    }
  });

  it("stamps each log line with its time", () => {
    const lines: string[] = [];
    const sink = new Writable({ write: (c: Buffer, _e, cb) => (lines.push(c.toString()), cb()) });
    const logger = createLogger("info", sink);
    const now = vi.spyOn(Date, "now");
    now.mockReturnValue(1_764_510_000_123);
    logger.info("one");
    now.mockReturnValue(1_764_510_000_999);
    logger.info("two");
    expect(lines.map((l) => (JSON.parse(l) as { time: string }).time)).toEqual(["2025-11-30T13:40:00.123Z", "2025-11-30T13:40:00.999Z"]);
  });
});

// The request log at queue rates: one real API server per level over a real database, its lines
// read back as JSON. The workers' successful calls are debug lines; a client's mistake and any
// other call are info; the server's failures stay visible at warn.
describe("the request log's levels", () => {
  let fx: QueueFixture;
  const servers: ApiServer[] = [];
  const lines = new Map<string, Record<string, unknown>[]>();
  const bases = new Map<string, string>();

  beforeAll(async () => {
    fx = await queueFixture();
    for (const level of ["debug", "info", "warn"] as const) {
      const seen: Record<string, unknown>[] = [];
      lines.set(level, seen);
      const sink = new Writable({
        write(chunk: Buffer, _enc, cb) {
          for (const line of chunk.toString().split("\n")) if (line) seen.push(JSON.parse(line) as Record<string, unknown>);
          cb();
        },
      });
      const server = createApiServer({
        directUnary: SWITCHES.directUnary,
        queue: fx.queue,
        logger: createLogger(level, sink),
        maxBodyBytes: 64 * 1024,
        requestTimeoutMs: 5000,
        readiness: async () => ({ ready: false, detail: "database unreachable (test)" }),
      });
      servers.push(server);
      bases.set(level, `http://127.0.0.1:${await server.listen(0, "127.0.0.1")}`);
    }
  });

  afterAll(async () => {
    await Promise.all(servers.map((s) => s.close(2000)));
    await fx?.close();
  });

  /** One task's life on the server of `level`, each call with its own request id (prefix-operation). */
  async function taskLife(level: string): Promise<{ jobId: string; taskId: string }> {
    const base = bases.get(level)!;
    const id = (op: string) => ({ "x-request-id": `${level}-${op}` });
    const workload = `log_levels_${level}`;
    expect((await restCall(base, "PUT", `/workloads/${workload}`, {}, id("put"))).status).toBe(200);
    const job = await restCall(base, "POST", "/jobs", { workload, input_uri: "s3://in", input_sha256: sha("in") }, id("create"));
    expect(job.status, job.text).toBe(201);
    const claim = await restCall(base, "POST", "/tasks/claim", { worker_id: `w-${level}`, workloads: [workload] }, id("claim"));
    expect(claim.status, claim.text).toBe(200);
    const task = claim.body.tasks[0] as { id: string; attempt: number };
    const lease = { worker_id: `w-${level}`, attempt: task.attempt };
    expect((await restCall(base, "POST", `/tasks/${task.id}/heartbeat`, lease, id("heartbeat"))).status).toBe(200);
    expect((await restCall(base, "POST", `/tasks/${task.id}/progress`, { ...lease, progress: 0.5 }, id("progress"))).status).toBe(200);
    const done = { ...lease, result_uri: "s3://out", result_sha256: sha("out") };
    expect((await restCall(base, "POST", `/tasks/${task.id}/result`, done, id("result"))).status).toBe(200);
    // A client's mistake: a heartbeat of an attempt the task never had.
    const stale = await restCall(base, "POST", `/tasks/${task.id}/heartbeat`, { ...lease, attempt: 7 }, id("stale"));
    expect(stale.status).toBeGreaterThanOrEqual(400);
    expect(stale.status).toBeLessThan(500);
    expect((await restCall(base, "GET", `/jobs/${job.body.job.id}`, undefined, id("get"))).status).toBe(200);
    // The server's trouble: not ready.
    expect((await restCall(base, "GET", "/readyz", undefined, id("readyz"))).status).toBe(503);
    return { jobId: job.body.job.id as string, taskId: task.id };
  }

  /** Waits for the line of the last request (lines are written when the response closes). */
  async function lineOf(level: string, requestId: string): Promise<Record<string, unknown> | undefined> {
    for (let i = 0; i < 200 && !lines.get(level)!.some((l) => l.request_id === `${level}-readyz`); i++) await setTimeout(10);
    return lines.get(level)!.find((l) => l.request_id === `${level}-${requestId}`);
  }

  const HOT = ["claim", "heartbeat", "progress", "result"];

  it("at debug: the workers' successes as debug lines with request, operation, task, job and worker", async () => {
    const { jobId, taskId } = await taskLife("debug");
    const ops = { claim: "ClaimTasks", heartbeat: "RenewLease", progress: "ReportProgress", result: "CompleteTask" };
    for (const [op, operation] of Object.entries(ops)) {
      const line = await lineOf("debug", op);
      expect(line, op).toMatchObject({ level: 20, msg: "request", request_id: `debug-${op}`, operation, worker_id: "w-debug" });
      // A claim may lease tasks of several jobs: it names neither.
      if (op !== "claim") expect([line?.task_id, line?.job_id], op).toEqual([taskId, jobId]);
    }
    expect(await lineOf("debug", "get")).toMatchObject({ level: 30, operation: "GetJob", job_id: jobId });
  });

  it("at info: no line for a worker's success; its mistake, other calls and the server's trouble are there", async () => {
    const { jobId, taskId } = await taskLife("info");
    for (const op of HOT) expect(await lineOf("info", op), op).toBeUndefined();
    expect(await lineOf("info", "stale")).toMatchObject({ level: 30, operation: "RenewLease", task_id: taskId, worker_id: "w-info" });
    expect(await lineOf("info", "put")).toMatchObject({ level: 30, operation: "PutWorkload" });
    expect(await lineOf("info", "create")).toMatchObject({ level: 30, operation: "CreateJob", job_id: jobId });
    expect(await lineOf("info", "readyz")).toMatchObject({ level: 40, operation: "readyz", status: 503 });
  });

  it("at warn: only the server's trouble", async () => {
    await taskLife("warn");
    const seen = lines.get("warn")!;
    await lineOf("warn", "readyz");
    expect(seen.map((l) => [l.level, l.request_id])).toEqual([[40, "warn-readyz"]]);
  });

  it("a call slower than LOG_SLOW_MS (beyond a long poll's wait) is an info line, whatever its operation", () => {
    const claim = { requestId: "r", operation: "ClaimTasks" };
    expect(requestLevel(claim, 200, "ok", 20, 500)).toBe("debug");
    expect(requestLevel(claim, 200, "ok", 600, 500)).toBe("info");
    expect(requestLevel({ ...claim, waitMs: 20_000 }, 200, "ok", 20_100, 500)).toBe("debug");
    expect(requestLevel({ ...claim, waitMs: 20_000 }, 200, "ok", 20_600, 500)).toBe("info");
    expect(requestLevel({ requestId: "r", operation: "WatchJob" }, 200, "ok", 60_000, 500)).toBe("info");
    expect(requestLevel(claim, 503, "unavailable", 20, 500)).toBe("warn");
    expect(requestLevel({ ...claim, error: new Error("x") }, 500, "internal", 20, 500)).toBe("error");
    expect(requestLevel(claim, 409, "aborted", 20, 500)).toBe("info");
  });

  it("probes and scrapes that succeed are debug lines (one every few seconds per instance); a failed one is not", () => {
    for (const operation of ["healthz", "readyz", "metrics"])
      expect(requestLevel({ requestId: "r", operation }, 200, undefined, 5, 500)).toBe("debug");
    expect(requestLevel({ requestId: "r", operation: "readyz" }, 503, undefined, 5, 500)).toBe("warn");
    expect(requestLevel({ requestId: "r", operation: "metrics" }, 401, undefined, 5, 500)).toBe("info");
  });

  it("LOG_SLOW_MS is read by the config (default 500) and refused when not a positive integer", () => {
    expect(loadConfig({}).logSlowMs).toBe(500);
    expect(loadConfig({ LOG_SLOW_MS: "50" }).logSlowMs).toBe(50);
    expect(() => loadConfig({ LOG_SLOW_MS: "0" })).toThrow(/^LOG_SLOW_MS: /);
  });
});
