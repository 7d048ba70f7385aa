// The TypeScript client as a user gets it: `npm pack` of clients/typescript installed into an
// empty project with `npm install <tarball>`, its example worker and submitter
// (clients/typescript/examples, as they stand) type-checked under `strict`, built and run over
// Connect and gRPC against a fresh coordinator started as `npm start` starts it (embedded
// PostgreSQL in an empty data directory, no token, nothing registered by hand: the examples use
// the demo workload it registers); the worker drains on SIGTERM and exits 0. The package's types
// hold what docs/typescript.md says (one answer shape, no worker internals, the generated Task),
// and a project whose `lib` lacks "DOM" needs skipLibCheck, as it says. And the contract the
// package ships, used offline: stubs generated with buf and protoc-gen-es from its self-contained
// proto module, and `buf breaking` of a newer release against the image (leasehold.binpb) built
// against, which must fail (exit 100) on a breaking change.
import { spawn } from "node:child_process";
import { chmodSync, copyFileSync, cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freePort } from "../support/global-setup.js";
import { killAll, ROOT, spawnCoordinator, type Spawned } from "../support/process.js";
import { CLIENT_DIR, consumerProject, packClient, runCommand, tsc } from "../support/ts-consumer.js";

let coordinator: Spawned;
let url: string;
let consumer: string;
let packDir: string | undefined;
let dataDir: string | undefined;

/** What the package's types promise a user, checked under strict beside the examples (each @ts-expect-error must be an error). */
const TYPES_CHECK = `import {
  DeadlineExceededError,
  ResourceExhaustedError,
  type Client,
  type CreatedJob,
  type Job,
  type JobSnapshot,
  type RetriedJob,
  type Task,
  type TaskContext,
  type UnavailableError,
  type Worker,
  type WorkerEvents,
} from "@leasehold/client";

// Every call that answers a job answers a Job: no wrapper, no job!.
export async function answers(client: Client): Promise<Job[]> {
  const created: CreatedJob = await client.createJob("scimesh", []);
  const snapshot: JobSnapshot = await client.getJob(created.id);
  const retried: RetriedJob = await client.retry(snapshot.id);
  const waited: JobSnapshot = await client.wait(retried.id);
  const cancelled: Job = await client.cancel(waited.id);
  return [created, snapshot, retried, waited, cancelled, await client.settleJob(cancelled.id, "key", 0)];
}

// The worker's type is its public calls.
export function internals(worker: Worker): void {
  // @ts-expect-error not part of the Worker's type
  void worker.leases;
  // @ts-expect-error not part of the Worker's type
  void worker.rpc;
  // @ts-expect-error not part of the Worker's type
  worker.freeLanes();
}

// Task is the generated message; a handler's task is a TaskContext.
export const typeName: Task["$typeName"] = "leasehold.queue.v1.Task";
export const input = (task: TaskContext): string => task.inputUri;
// A class's code is its own.
export const code: "deadline_exceeded" = new DeadlineExceededError("late").code;
// @ts-expect-error a quota refusal is not an UnavailableError
export const quota: UnavailableError = new ResourceExhaustedError("quota");
export const events: (keyof WorkerEvents)[] = ["completed", "failed", "cancelled", "error"];
`;

beforeAll(async () => {
  // As a newcomer's `npm start`: embedded mode, a data directory of its own, no token.
  dataDir = mkdtempSync(path.join(os.tmpdir(), "leasehold-fresh-"));
  chmodSync(dataDir, 0o755); // as root, PostgreSQL runs as the postgres user and must reach its data directory
  coordinator = spawnCoordinator({
    EMBEDDED_PG_DIR: path.join(dataDir, "pg"),
    EMBEDDED_PG_PORT: String(await freePort()),
    PORT: "0",
  });
  packDir = mkdtempSync(path.join(os.tmpdir(), "leasehold-pack-"));
  const [listening, tarball] = await Promise.all([coordinator.listening(120_000), packClient(packDir)]);
  url = listening;
  consumer = await consumerProject(tarball, ["@bufbuild/buf@1.75.0", "@bufbuild/protoc-gen-es@2.13.0", "@bufbuild/protobuf@2.13.0"]);
  mkdirSync(path.join(consumer, "src"));
  for (const f of ["submit.ts", "worker.ts"]) copyFileSync(path.join(CLIENT_DIR, "examples", f), path.join(consumer, "src", f));
  writeFileSync(path.join(consumer, "src", "types-check.ts"), TYPES_CHECK);
}, 600_000);

afterAll(async () => {
  await killAll();
  for (const dir of [packDir, consumer, dataDir]) if (dir) rmSync(dir, { recursive: true, force: true });
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
  it("type-checks the examples and what its types promise under strict, and builds them", async () => {
    const r = await tsc(consumer);
    expect(r.output).toBe("");
    expect(r.code).toBe(0);
  });

  it('without "DOM" in lib, needs skipLibCheck (only connect\'s own .d.ts fails), as docs/typescript.md says', async () => {
    const variant = (name: string, options: Record<string, unknown>) => {
      const file = path.join(consumer, `tsconfig.${name}.json`);
      writeFileSync(file, JSON.stringify({ extends: "./tsconfig.json", compilerOptions: { noEmit: true, ...options } }));
      return runCommand(process.execPath, [path.join(ROOT, "node_modules", "typescript", "bin", "tsc"), "-p", file], { cwd: consumer });
    };
    // With "DOM" (the default lib of the consumer's tsconfig, which the test above compiles) it passes.
    const [noDom, skipped] = await Promise.all([
      variant("nodom", { lib: ["ES2022"], skipLibCheck: false }),
      variant("nodom-skip", { lib: ["ES2022"], skipLibCheck: true }),
    ]);
    expect(noDom.code).not.toBe(0);
    const errors = noDom.output.split("\n").filter((l) => /error TS\d+/.test(l));
    expect(errors.length).toBeGreaterThan(0);
    for (const line of errors) expect(line).toMatch(/^node_modules\/@connectrpc\//);
    expect(noDom.output).toMatch(/HeadersInit/);
    expect(skipped.output).toBe("");
    expect(skipped.code).toBe(0);
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
        expect(r.output).toMatch(/^job \S+ created with 4 tasks$/m);
        expect(r.output).toMatch(/^status: FAILED$/m);
        expect(r.output).toMatch(/^failure: chunk 2 bad_input: chunk 2: input is corrupt \(attempt 1, worker \S+\)$/m);
        expect(r.output).toMatch(/^ {2}attempt 1 of chunk 2: bad_input chunk 2: input is corrupt$/m);
        const results = [...r.output.matchAll(/^result: chunk (\d+) mem:\/\/out\/\S+\/(\d+)$/gm)].map((m) => Number(m[1]));
        expect(results).toEqual([0, 1, 3]);
        expect(r.output).toMatch(/^refused: tasks\[0\]\.input_uri: /m);
        const json = JSON.parse(/^json: (.*)$/m.exec(r.output)![1]) as Record<string, unknown>;
        expect(json).toMatchObject({ workload: "scimesh", status: "JOB_STATUS_FAILED", totalTasks: 4, failure: { chunkIndex: 2 } });
      } finally {
        worker.child.kill("SIGTERM");
      }
      expect(await worker.exited, worker.output()).toBe(0);
      const out = worker.output();
      // Its start line first, then one line per outcome from the worker's events.
      expect(out.split("\n")[0]).toMatch(/^leasehold worker \S+: 4 lane\(s\) for scimesh at http:/);
      expect(out.match(/^completed: chunk \d mem:/gm)).toHaveLength(3);
      expect(out).toMatch(/^failed: chunk 2 attempt 1: TaskError: chunk 2: input is corrupt$/m);
      expect(out).toMatch(/^failed: chunk 3 attempt 1: RetryableError: storage timed out$/m);
      expect(out).toMatch(/worker stopped: \{"claimed":5,"completed":3,"failed":2,"cancelled":0,"dropped":0,"released":0\}/);
    });
  }

  it("meets a coordinator whose no-token warning names a page that exists", () => {
    const warning = coordinator
      .stdout()
      .split("\n")
      .find((l) => l.includes("no AUTH_TOKENS_FILE"));
    expect(warning, coordinator.stdout()).toBeDefined();
    const msg = (JSON.parse(warning!) as { msg: string }).msg;
    const [, page, anchor] = /\(see (docs\/[\w-]+\.md)#([\w-]+)\)$/.exec(msg) ?? [];
    expect(page, msg).toBeDefined();
    expect(existsSync(path.join(ROOT, page))).toBe(true);
    const headings = readFileSync(path.join(ROOT, page), "utf8").match(/^#+ .*$/gm) ?? [];
    const anchors = headings.map((h) =>
      h
        .replace(/^#+ /, "")
        .toLowerCase()
        .replace(/[^\w\s-]/g, "")
        .replace(/\s+/g, "-"),
    );
    expect(anchors).toContain(anchor);
  });
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
