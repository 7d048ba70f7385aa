// The TypeScript client as a user gets it: `npm pack` of clients/typescript installed into an
// empty project with `npm install <tarball>`, its example worker and submitter
// (clients/typescript/examples, as they stand) type-checked under `strict`, built and run against
// a live coordinator over Connect and gRPC; the worker drains on SIGTERM and exits 0. And the
// contract the package ships, used offline as docs/typescript.md says: stubs generated with buf and
// protoc-gen-es from its self-contained proto module, and `buf breaking` of a newer release against
// the image (leasehold.binpb) built against, which must fail (exit 100) on a breaking change.
import { spawn } from "node:child_process";
import { copyFileSync, cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { QueueService } from "../../gen/leasehold/queue/v1/queue_pb.js";
import { createPool, PostgresQueue } from "../../src/store/postgres/store.js";
import { createTestDatabase, type TestDatabase } from "../support/db.js";
import { CLIENT_DIR, consumerProject, packClient, runCommand, tsc } from "../support/ts-consumer.js";
import { SWITCHES } from "../support/switches.js";
import { apiServerFixture, type ApiServerFixture } from "../support/api-server.js";

let db: TestDatabase;
let pool: pg.Pool;
let api: ApiServerFixture;
let url: string;
let consumer: string;
let packDir: string | undefined;

beforeAll(async () => {
  db = await createTestDatabase();
  pool = createPool({ connectionString: db.url, max: 8, statementTimeoutMs: 20_000, connectTimeoutMs: 5000 });
  const queue = new PostgresQueue(pool, {
    coalescing: SWITCHES.coalescing,
    defaultLeaseSeconds: 30,
    defaultMaxAttempts: 3,
    maxTasksPerJob: 100,
  });
  api = await apiServerFixture({ queue, maxBodyBytes: 1024 * 1024, requestTimeoutMs: 10_000 });
  url = api.base;
  const admin = createClient(QueueService, createConnectTransport({ baseUrl: url, httpVersion: "1.1" }));
  await admin.putWorkload({ name: "thumbs", maxAttempts: 3, leaseSeconds: 30 });

  packDir = mkdtempSync(path.join(os.tmpdir(), "leasehold-pack-"));
  const tarball = await packClient(packDir);
  consumer = await consumerProject(tarball, ["@bufbuild/buf@1.75.0", "@bufbuild/protoc-gen-es@2.13.0", "@bufbuild/protobuf@2.13.0"]);
  mkdirSync(path.join(consumer, "src"));
  for (const f of ["submit.ts", "worker.ts"]) copyFileSync(path.join(CLIENT_DIR, "examples", f), path.join(consumer, "src", f));
}, 600_000);

afterAll(async () => {
  for (const dir of [packDir, consumer]) if (dir) rmSync(dir, { recursive: true, force: true });
  await api?.close();
  await pool?.end();
  await db?.drop();
});

/** Runs the built worker in the background; resolves its exit code and output once it ends. */
function startWorker(transport: string) {
  const child = spawn(process.execPath, ["dist/worker.js"], {
    cwd: consumer,
    env: { ...process.env, LEASEHOLD_URL: url, LEASEHOLD_TRANSPORT: transport },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  child.stdout.setEncoding("utf8").on("data", (d: string) => (output += d));
  child.stderr.setEncoding("utf8").on("data", (d: string) => (output += d));
  const exited = new Promise<number | null>((resolve) => child.once("close", resolve));
  return { child, exited, output: () => output };
}

describe("@leasehold/client from its tarball", () => {
  it("type-checks the examples under strict and builds them", async () => {
    const r = await tsc(consumer);
    expect(r.output).toBe("");
    expect(r.code).toBe(0);
  });

  for (const transport of ["connect", "grpc"]) {
    it(`runs the example worker and submitter over ${transport}`, async () => {
      const worker = startWorker(transport);
      try {
        const r = await runCommand(process.execPath, ["dist/submit.js"], {
          cwd: consumer,
          env: { LEASEHOLD_URL: url, LEASEHOLD_TRANSPORT: transport },
          timeoutMs: 120_000,
        });
        expect(r.code, r.output + worker.output()).toBe(0);
        expect(r.output).toMatch(/^status: FAILED$/m);
        expect(r.output).toMatch(/^failure: chunk 2 bad_input: chunk 2: input is corrupt \(attempt 1, worker \S+\)$/m);
        expect(r.output).toMatch(/^ {2}attempt 1 of chunk 2: bad_input chunk 2: input is corrupt$/m);
        const results = [...r.output.matchAll(/^result: chunk (\d+) mem:\/\/out\/\S+\/(\d+)$/gm)].map((m) => Number(m[1]));
        expect(results).toEqual([0, 1, 3]);
        expect(r.output).toMatch(/^refused: tasks\[0\]\.input_uri: /m);
      } finally {
        worker.child.kill("SIGTERM");
      }
      expect(await worker.exited, worker.output()).toBe(0);
      expect(worker.output()).toMatch(/worker stopped: \{"claimed":5,"completed":3,"failed":2,"dropped":0,"released":0\}/);
    });
  }
});

/** npx-free: the consumer's own buf binary, with a cache of its own and no network to the BSR needed. */
function buf(args: string[]) {
  return runCommand(path.join(consumer, "node_modules", ".bin", "buf"), args, {
    cwd: consumer,
    env: { BUF_CACHE_DIR: path.join(consumer, ".buf-cache") },
  });
}

describe("the contract in the package, offline", () => {
  const shipped = () => path.join(consumer, "node_modules", "@leasehold", "client");

  it("generates stubs in the consumer's project with buf and protoc-gen-es, and they type-check", async () => {
    writeFileSync(
      path.join(consumer, "buf.gen.yaml"),
      [
        "version: v2",
        "inputs:",
        "  - directory: node_modules/@leasehold/client/proto",
        "plugins:",
        "  - local: node_modules/.bin/protoc-gen-es",
        "    out: stubs/gen",
        "    include_imports: true",
        "    opt: [target=ts, import_extension=js]",
        "",
      ].join("\n"),
    );
    const gen = await buf(["generate"]);
    expect(gen.code, gen.output).toBe(0);
    const stub = readFileSync(path.join(consumer, "stubs", "gen", "leasehold", "queue", "v1", "queue_pb.ts"), "utf8");
    expect(stub).toMatch(/export const QueueService: GenService</);
    writeFileSync(
      path.join(consumer, "stubs", "use.ts"),
      'import { create } from "@bufbuild/protobuf";\nimport { CreateJobRequestSchema } from "./gen/leasehold/queue/v1/queue_pb.js";\n' +
        'export const req = create(CreateJobRequestSchema, { workload: "thumbs" });\n',
    );
    writeFileSync(
      path.join(consumer, "stubs", "tsconfig.json"),
      JSON.stringify({
        compilerOptions: { module: "NodeNext", moduleResolution: "NodeNext", strict: true, noEmit: true, target: "ES2022" },
      }),
    );
    const r = await tsc(path.join(consumer, "stubs"));
    expect(r.output).toBe("");
    expect(r.code).toBe(0);
  });

  it("buf breaking: the same release passes, a newer one with a renamed field fails with exit 100", async () => {
    // What the consumer built against, kept in their repository.
    mkdirSync(path.join(consumer, "contract"), { recursive: true });
    copyFileSync(path.join(shipped(), "leasehold.binpb"), path.join(consumer, "contract", "leasehold.binpb"));
    const same = await buf(["breaking", "node_modules/@leasehold/client/proto", "--against", "contract/leasehold.binpb"]);
    expect(same.code, same.output).toBe(0);

    // A newer release's proto module with a field renamed.
    const newer = path.join(consumer, "newer-proto");
    cpSync(path.join(shipped(), "proto"), newer, { recursive: true });
    const file = path.join(newer, "leasehold", "queue", "v1", "queue.proto");
    const text = readFileSync(file, "utf8");
    expect(text).toMatch(/string input_sha256 = 3;/);
    writeFileSync(file, text.replace("string input_sha256 = 3;", "string input_digest = 3;"));
    const broken = await buf(["breaking", "newer-proto", "--against", "contract/leasehold.binpb"]);
    expect(broken.code, broken.output).toBe(100);
    expect(broken.output).toMatch(/input_sha256/);
  });
});
