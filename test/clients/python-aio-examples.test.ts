// The asyncio Python examples (examples/python/gateway.py, a FastAPI app served by uvicorn, and
// examples/python/async_worker.py, an AsyncWorker) run as their README says, against a fresh
// coordinator (a real server on a freshly migrated PostgreSQL with the workload `scimesh`
// registered, as `npm start` registers it), over Connect JSON and gRPC: a job submitted through
// the gateway, its progress streamed as Server-Sent Events, its results read, checked against the
// database; the worker drains on SIGTERM. Both examples are typed under mypy --strict.
import { spawn, type ChildProcess } from "node:child_process";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { ROOT } from "../support/process.js";
import { queueFixture, type QueueFixture } from "../support/queue.js";
import { apiServerFixture, type ApiServerFixture } from "../support/api-server.js";
import { runCommand } from "../support/ts-consumer.js";

const PYTHON = inject("python");
const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

let fx: QueueFixture;
let api: ApiServerFixture;

interface Child {
  child: ChildProcess;
  output(): string;
  /** resolves with the first match of `re` in the output; rejects when the process exits first or after timeoutMs */
  waitFor(re: RegExp, timeoutMs?: number): Promise<RegExpExecArray>;
  exited: Promise<number | null>;
}

const live = new Set<ChildProcess>();

function startPython(args: string[], env: Record<string, string>): Child {
  const child = spawn(PYTHON, args, {
    cwd: ROOT,
    env: { ...process.env, PYTHONUNBUFFERED: "1", PYTHONDONTWRITEBYTECODE: "1", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  live.add(child);
  let out = "";
  child.stdout!.setEncoding("utf8").on("data", (d: string) => (out += d));
  child.stderr!.setEncoding("utf8").on("data", (d: string) => (out += d));
  const exited = new Promise<number | null>((resolve) => child.once("close", (code) => (live.delete(child), resolve(code))));
  const waitFor = (re: RegExp, timeoutMs = 60_000) =>
    new Promise<RegExpExecArray>((resolve, reject) => {
      const started = Date.now();
      const look = () => {
        const m = re.exec(out);
        if (m) return resolve(m);
        if (child.exitCode !== null || child.signalCode !== null) return reject(new Error(`${args[0]} exited before ${re}:\n${out}`));
        if (Date.now() - started > timeoutMs) return reject(new Error(`no ${re} within ${timeoutMs} ms:\n${out}`));
        setTimeout(look, 50);
      };
      look();
    });
  return { child, output: () => out, waitFor, exited };
}

beforeAll(async () => {
  fx = await queueFixture();
  api = await apiServerFixture({ queue: fx.queue, requestTimeoutMs: 10_000 });
  // As `npm start` registers its demo workload (src/main.ts).
  await fx.queue.putWorkload({ name: "scimesh", maxAttempts: 3, leaseSeconds: 300 });
});

afterAll(async () => {
  for (const c of live) c.kill("SIGKILL");
  await api?.close();
  await fx?.close();
});

interface SseEvent {
  event: string;
  data: Record<string, unknown>;
}

function parseSse(text: string): SseEvent[] {
  return text
    .split("\n\n")
    .filter((block) => block.trim() !== "")
    .map((block) => {
      const event = /^event: (.*)$/m.exec(block)![1];
      return { event, data: JSON.parse(/^data: (.*)$/m.exec(block)![1]) as Record<string, unknown> };
    });
}

describe.each(["json", "grpc"])("the FastAPI gateway and the async worker (leasehold.aio, %s)", (transport) => {
  it("submits through the gateway, streams the job's progress as SSE to its end, reads its results; the worker drains on SIGTERM", async () => {
    const coordinator = api.base;
    const env = { LEASEHOLD_TRANSPORT: transport, LEASEHOLD_URL: coordinator };
    const worker = startPython(["examples/python/async_worker.py", coordinator, "scimesh"], env);
    const gateway = startPython(["-m", "uvicorn", "gateway:app", "--app-dir", "examples/python", "--port", "0"], env);
    try {
      const port = (await gateway.waitFor(/Uvicorn running on http:\/\/127\.0\.0\.1:(\d+)/))[1];
      const base = `http://127.0.0.1:${port}`;
      const created = await fetch(`${base}/jobs`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ workload: "scimesh", chunks: 5 }),
      });
      expect(created.status).toBe(201);
      const job = (await created.json()) as { job_id: string; status: string; tasks: number };
      expect(job).toMatchObject({ status: "pending", tasks: 5 });
      expect(job.job_id).toMatch(UUID_RE);

      const stream = await fetch(`${base}/jobs/${job.job_id}/events`);
      expect(stream.headers.get("content-type")).toMatch(/^text\/event-stream/);
      const events = parseSse(await stream.text()); // the stream ends once the job is final
      expect(events[0]).toMatchObject({ event: "snapshot", data: { job_id: job.job_id, total_tasks: 5 } });
      expect(events.at(-1)).toEqual({ event: "job", data: { status: "completed" } });
      const progress = events.filter((e) => e.event === "progress").map((e) => e.data);
      const completed = events.filter((e) => e.event === "task" && e.data.status === "completed").map((e) => e.data.chunk_index);
      const { rows } = await fx.pool.query<{
        chunk_index: number;
        status: string;
        result_uri: string;
        result_sha256: string;
        lease_owner: string;
      }>("SELECT chunk_index, status, result_uri, result_sha256, lease_owner FROM tasks WHERE job_id = $1 ORDER BY chunk_index", [
        job.job_id,
      ]);
      expect(rows.map((r) => r.status)).toEqual(Array(5).fill("completed"));
      // Every chunk's "halfway" and completion streamed, unless it happened before the watch began.
      const early = (events[0].data.completed as number) ?? 0;
      expect(completed.length + early).toBe(5);
      expect(progress.length).toBeGreaterThanOrEqual(5 - early - 1);
      for (const p of progress) expect(p).toMatchObject({ progress: 0.5, message: "halfway" });

      const results = (await (await fetch(`${base}/jobs/${job.job_id}/results`)).json()) as unknown[];
      expect(results).toEqual(rows.map((r) => ({ chunk_index: r.chunk_index, uri: r.result_uri, sha256: r.result_sha256 })));
      for (const r of rows) expect(r.result_uri).toBe(`mem://results/${job.job_id}/${r.chunk_index}`);

      // The coordinator's refusals keep their meaning through the gateway.
      const unknown = await fetch(`${base}/jobs`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ workload: "no-such-workload", chunks: 1 }),
      });
      expect(unknown.status).toBe(404);
      expect(await unknown.json()).toMatchObject({ error: "not_found", request_id: expect.stringMatching(UUID_RE) });
      const missing = await fetch(`${base}/jobs/00000000-0000-0000-0000-000000000000/events`);
      expect(missing.status).toBe(404);
    } finally {
      worker.child.kill("SIGTERM");
      gateway.child.kill("SIGTERM");
    }
    expect(await worker.exited, worker.output()).toBe(0);
    expect(worker.output()).toMatch(/drained: \{'claimed': 5, 'completed': 5, 'failed': 0, 'dropped': 0, 'released': 0\}/);
    // uvicorn shuts the app down (its lifespan closes the client), then ends by the signal it caught.
    await gateway.exited;
    expect(gateway.output()).toMatch(/Application shutdown complete/);
  }, 120_000);
});

it("the asyncio examples are typed under mypy --strict", async () => {
  const r = await runCommand(PYTHON, ["-m", "mypy", "--strict", "examples/python/gateway.py", "examples/python/async_worker.py"], {
    cwd: ROOT,
    timeoutMs: 180_000,
  });
  expect(r.code, r.output).toBe(0);
  expect(r.output).toMatch(/Success: no issues found in 2 source files/);
}, 200_000);
