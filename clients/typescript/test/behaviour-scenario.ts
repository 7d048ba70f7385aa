// What a team meets living with the TypeScript client (its built dist/), printed as one JSON line
// that test/clients/ts-client-behaviour.test.ts checks: error classes and their codes, the answers'
// one shape and their JSON form, a wait's deadline, the worker's events, counts and log lines for
// results, retries and a cancelled task, a worker whose coordinator never answers, TLS against a
// cleartext port, and a base URL with a path. Each section records the error it met instead of
// its answer, so one section's failure does not hide the others.
// Env: LEASEHOLD_URL, LEASEHOLD_TRANSPORT, PREFIX, DEAD_URL (a port nothing listens on).
import { createHash } from "node:crypto";
import http from "node:http";
import type { AddressInfo } from "node:net";
import {
  AbortedError,
  AlreadyExistsError,
  Client,
  DeadlineExceededError,
  FailedPreconditionError,
  InternalError,
  InvalidArgumentError,
  JobStatus,
  JobView,
  LeaseholdError,
  NotFoundError,
  PermissionDeniedError,
  ResourceExhaustedError,
  RetryableError,
  toJson,
  UnauthenticatedError,
  UnavailableError,
  Worker,
  type Logger,
  type TransportName,
} from "../dist/index.js";

const url = process.env.LEASEHOLD_URL!;
const transport = process.env.LEASEHOLD_TRANSPORT as TransportName;
const prefix = process.env.PREFIX!;
const sha = (s: string): string => createHash("sha256").update(s).digest("hex");
const status = (s: JobStatus): string => JobStatus[s].toLowerCase();
const WORK = `${prefix}-work`;
const HOLD = `${prefix}-hold`;
const IDLE = `${prefix}-idle`;
const out: Record<string, unknown> = {};

async function section(name: string, body: () => Promise<unknown>): Promise<void> {
  try {
    out[name] = await body();
  } catch (e) {
    out[name] = { threw: e instanceof Error ? `${e.constructor.name}: ${e.message}` : String(e) };
  }
}

/** What a call rejected with. */
async function refusal(call: () => Promise<unknown>): Promise<Record<string, unknown>> {
  try {
    await call();
    return { ok: true };
  } catch (e) {
    if (!(e instanceof LeaseholdError)) return { threw: String(e) };
    return { class: e.constructor.name, code: e.code, message: e.message, unavailable: e instanceof UnavailableError };
  }
}

/** A logger that keeps its lines. */
function capture(): Logger & { lines: { level: string; message: string }[] } {
  const lines: { level: string; message: string }[] = [];
  const at = (level: string) => (message: string) => void lines.push({ level, message });
  return { lines, debug: at("debug"), info: at("info"), warn: at("warn"), error: at("error") };
}

const until = async (done: () => boolean | Promise<boolean>): Promise<void> => {
  for (let i = 0; i < 400 && !(await done()); i++) await new Promise((r) => setTimeout(r, 50));
};

const client = new Client(url, { transport });
for (const w of [WORK, HOLD, IDLE]) await client.putWorkload(w, { maxAttempts: 3, leaseSeconds: 30 });

await section("errors", async () => {
  const classes = [
    InvalidArgumentError,
    NotFoundError,
    AbortedError,
    AlreadyExistsError,
    FailedPreconditionError,
    UnauthenticatedError,
    PermissionDeniedError,
    UnavailableError,
    ResourceExhaustedError,
    DeadlineExceededError,
    InternalError,
  ];
  return {
    // A class's code is its own, whatever it was made with.
    codes: Object.fromEntries(
      classes.map((C) => [C.name, [new C("made bare").code, new C("made with another", { code: "internal" }).code]]),
    ),
    resourceExhaustedIsUnavailable: new ResourceExhaustedError("quota") instanceof UnavailableError,
  };
});

await section("answers", async () => {
  const one = { chunkIndex: 0, inputUri: "s3://idle", inputSha256: sha("idle") };
  const created = await client.createJob(IDLE, [one], { billing: { reservedUnits: 5n, billingKey: `${prefix}-order` } });
  const waited = await refusal(() => client.wait(created.id, { timeoutMs: 300 }));
  const snapshot = await client.getJob(created.id);
  let stringify = "ok";
  try {
    JSON.stringify(snapshot);
  } catch (e) {
    stringify = (e as Error).constructor.name;
  }
  const json = JSON.parse(JSON.stringify(toJson(snapshot))) as Record<string, unknown>;
  const cancelled = await client.cancel(created.id, "not needed");
  const retried = await client.retry(created.id);
  const again = await client.cancel(created.id, "tidy");
  // The job alone (JOB_VIEW_BASIC): no tasks in the answer.
  const basic = await client.createJob(IDLE, [{ ...one, inputUri: "s3://idle-basic" }], { view: JobView.BASIC });
  await client.cancel(basic.id, "tidy");
  return {
    created: { id: created.id.length > 0, workload: created.workload, tasks: created.tasks.map((t) => t.chunkIndex) },
    basic: { id: basic.id.length > 0, workload: basic.workload, tasks: basic.tasks.length },
    wait: waited,
    snapshot: {
      id: snapshot.id === created.id,
      status: status(snapshot.status),
      totalTasks: snapshot.totalTasks,
      pending: snapshot.taskCounts?.pending,
    },
    stringify,
    json: {
      id: json.id === created.id,
      status: json.status,
      totalTasks: json.totalTasks,
      reservedUnits: (json.billing as Record<string, unknown>).reservedUnits,
      typeName: "$typeName" in json,
      createdAt: typeof json.createdAt,
    },
    cancel: { id: cancelled.id === created.id, status: status(cancelled.status) },
    retry: { id: retried.id === created.id, retriedTasks: retried.retriedTasks, status: status(retried.status) },
    again: status(again.status),
  };
});

await section("worker", async () => {
  const log = capture();
  const events: string[] = [];
  const worker = new Worker(url, {
    transport,
    workloads: [WORK, HOLD],
    concurrency: 3,
    handleSignals: false,
    heartbeatIntervalMs: 200,
    logger: log,
  });
  worker.handle(WORK, (task) => {
    if (task.chunkIndex === 1 && task.attempt === 1) throw new RetryableError("flaky storage", { retryAfterSeconds: 0 });
    return { uri: `mem://${task.chunkIndex}`, sha256: sha(task.inputUri) };
  });
  // Stops as the docs advise: once its signal is aborted (the next heartbeat says the task was cancelled).
  worker.handle(HOLD, (task) => new Promise((_, reject) => task.signal.addEventListener("abort", () => reject(task.signal.reason))));
  worker
    .on("completed", (task, result) => events.push(`completed ${task.chunkIndex} ${result.uri}`))
    .on("failed", (task, error) => events.push(`failed ${task.chunkIndex} ${(error as Error).constructor.name}`))
    .on("cancelled", (task, reason) => events.push(`cancelled ${task.workload === HOLD} ${/was cancelled/.test(reason)}`))
    .on("error", (error) => events.push(`error ${error.message}`));
  const running = worker.run();

  const uris = ["s3://in/0", "s3://in/1"];
  const job = await client.createJob(
    WORK,
    uris.map((u, i) => ({ chunkIndex: i, inputUri: u, inputSha256: sha(u) })),
  );
  const done = await client.wait(job.id, { timeoutMs: 60_000 });
  const attempts: string[] = [];
  for await (const t of client.listTasks(job.id)) for (const a of t.attempts) attempts.push(`${t.task?.chunkIndex}:${a.errorCode}`);

  const held = await client.createJob(HOLD, [{ chunkIndex: 0, inputUri: "s3://hold", inputSha256: sha("hold") }]);
  await until(async () => (await client.getJob(held.id)).status === JobStatus.RUNNING);
  await client.cancel(held.id, "changed my mind");
  await until(() => worker.stats.cancelled > 0);
  worker.stop();
  await running;
  const heldTask = held.tasks[0].id;
  return {
    status: status(done.status),
    attempts: attempts.sort(),
    stats: worker.stats,
    events: events.sort(),
    heldTaskId: heldTask,
    // Every line that names the cancelled task, by level.
    cancelLines: log.lines.filter((l) => l.message.includes(heldTask)).map((l) => l.level),
    warnings: log.lines.filter((l) => l.level === "warn" || l.level === "error").map((l) => l.message),
    surface: {
      prototype: Object.getOwnPropertyNames(Worker.prototype).sort(),
      keys: Object.keys(worker),
    },
  };
});

await section("unreachable", async () => {
  const log = capture();
  const worker = new Worker(process.env.DEAD_URL!, {
    transport,
    workloads: [WORK],
    handleSignals: false,
    unreachableTimeoutMs: 1000,
    logger: log,
  });
  worker.handle(WORK, () => ({ uri: "mem://never", sha256: sha("never") }));
  const ran = await Promise.race([
    refusal(() => worker.run()),
    new Promise<Record<string, unknown>>((resolve) => setTimeout(() => resolve({ still: "running after 30 s" }), 30_000).unref()),
  ]);
  return { ran, first: log.lines[0]?.message ?? "", lines: log.lines.length };
});

await section("stopped while unreachable", async () => {
  const log = capture();
  const worker = new Worker(process.env.DEAD_URL!, {
    transport,
    workloads: [WORK],
    handleSignals: false,
    unreachableTimeoutMs: Infinity,
    logger: log,
  });
  worker.handle(WORK, () => ({ uri: "mem://never", sha256: sha("never") }));
  const running = worker.run();
  await until(() => log.lines.some((l) => l.level === "warn"));
  worker.stop();
  await running;
  return log.lines.map(
    (l) => `${l.level} ${l.message.includes("lane(s)") ? "start" : l.message.includes("not reachable") ? "unreachable" : l.message}`,
  );
});

await section("tls", async () => {
  const tls = new Client(url.replace(/^http:/, "https:"), { transport });
  try {
    return await refusal(() => tls.listWorkloads());
  } finally {
    tls.close();
  }
});

await section("path", async () => {
  const prefixed = new Client(`${url}/prefix`, { transport });
  let notServed: Record<string, unknown>;
  try {
    notServed = await refusal(() => prefixed.listWorkloads());
  } finally {
    prefixed.close();
  }
  // A worker there stops at start: a 404 does not go away by waiting.
  const worker = new Worker(`${url}/prefix`, { transport, workloads: [WORK], handleSignals: false, logger: capture() });
  worker.handle(WORK, () => ({ uri: "mem://never", sha256: sha("never") }));
  let workerRun = "resolved";
  try {
    await worker.run();
  } catch (e) {
    workerRun = `${(e as Error).constructor.name}: ${(e as Error).message}`;
  }
  // A proxy that serves the coordinator under /prefix (HTTP/1.1, so gRPC-Web): the path is honoured.
  const target = new URL(url);
  const proxy = http.createServer((req, res) => {
    const upstream = http.request(
      { host: target.hostname, port: target.port, method: req.method, path: req.url!.replace(/^\/prefix/, ""), headers: req.headers },
      (answer) => {
        res.writeHead(answer.statusCode!, answer.headers);
        answer.pipe(res);
      },
    );
    req.pipe(upstream);
  });
  await new Promise<void>((r) => proxy.listen(0, "127.0.0.1", r));
  const proxied = new Client(`http://127.0.0.1:${(proxy.address() as AddressInfo).port}/prefix/`, { transport: "grpc-web" });
  try {
    const names = (await proxied.listWorkloads()).map((w) => w.name);
    let badUrl = "";
    try {
      new Client(`${url}?x=1`);
    } catch (e) {
      badUrl = `${(e as Error).constructor.name}: ${(e as Error).message}`;
    }
    return { notServed, workerRun, proxied: { url: proxied.url, work: names.includes(WORK) }, badUrl };
  } finally {
    proxied.close();
    proxy.close();
  }
});

client.close();
console.log(JSON.stringify(out));
