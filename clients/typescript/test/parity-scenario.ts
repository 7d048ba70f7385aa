// The client-parity scenario through the TypeScript client (its built dist/), printed as one JSON
// line that test/clients/client-parity.test.ts compares with the Python client's (test/support/parity_scenario.py):
// a job with a failing chunk under the continue policy, a retry, a cancel, a wait across a dropped
// connection, and a table of bad inputs. Env: LEASEHOLD_URL, LEASEHOLD_TRANSPORT, PREFIX, RESET_URL.
import { createHash } from "node:crypto";
import { Client, FailurePolicy, JobStatus, LeaseholdError, TaskError, Worker, type TransportName } from "../dist/index.js";

const url = process.env.LEASEHOLD_URL!;
const transport = process.env.LEASEHOLD_TRANSPORT as TransportName;
const prefix = process.env.PREFIX!;
const sha = (s: string): string => createHash("sha256").update(s).digest("hex");
const name = (s: JobStatus): string => JobStatus[s].toLowerCase();
const MAIN = `${prefix}-main`;
const GATE = `${prefix}-gate`;
const IDLE = `${prefix}-idle`;

const client = new Client(url, { transport });
for (const w of [MAIN, GATE, IDLE]) await client.putWorkload(w, { maxAttempts: 1, leaseSeconds: 30 });

let openGate!: () => void;
const gate = new Promise<void>((resolve) => (openGate = resolve));
const silent = { debug() {}, info() {}, warn() {}, error() {} };
const worker = new Worker(url, { transport, workloads: [MAIN, GATE], concurrency: 4, handleSignals: false, logger: silent });
worker.handle(MAIN, (task) => {
  if (task.inputUri.endsWith("/bad") && task.attempt === 1) throw new TaskError(`chunk ${task.chunkIndex} is bad`, { code: "bad_chunk" });
  return { uri: `mem://${task.chunkIndex}`, sha256: sha(task.inputUri) };
});
worker.handle(GATE, async (task) => {
  await gate;
  return { uri: "mem://gate", sha256: sha(task.inputUri) };
});
const running = worker.run();

const out: Record<string, unknown> = {};
const results = async (jobId: string): Promise<number[]> => {
  const chunks: number[] = [];
  for await (const m of client.results(jobId, { pageSize: 2 })) chunks.push(m.chunkIndex);
  return chunks;
};

// A failing chunk under the continue policy: every other chunk still runs; the job fails once all are final.
const uris = ["s3://in/0", "s3://in/1", "s3://in/bad", "s3://in/3"];
const job = await client.createJob(
  MAIN,
  uris.map((u, i) => ({ chunkIndex: i, inputUri: u, inputSha256: sha(u) })),
  { failurePolicy: FailurePolicy.CONTINUE },
);
const failed = await client.wait(job.id, { timeoutMs: 60_000 });
out.continue = {
  status: name(failed.status),
  failure: { chunk: failed.failure?.chunkIndex, code: failed.failure?.errorCode, message: failed.failure?.errorMessage },
  results: await results(job.id),
};

// Its retry: the bad chunk passes on its second attempt.
const retried = await client.retry(job.id);
const done = await client.wait(job.id, { timeoutMs: 60_000 });
out.retry = { retried: retried.retriedTasks, status: name(done.status), results: await results(job.id) };

// A cancel of a job nobody works on.
const idle = await client.createJob(IDLE, [{ chunkIndex: 0, inputUri: "s3://idle", inputSha256: sha("idle") }]);
out.cancel = { status: name((await client.cancel(idle.id, "not needed")).status) };

// A wait across a dropped connection: the task is leased, every connection is cut, then it completes.
const gated = await client.createJob(GATE, [{ chunkIndex: 0, inputUri: "s3://gate", inputSha256: sha("gate") }]);
const waiting = client.wait(gated.id, { timeoutMs: 60_000 });
while ((await client.getJob(gated.id)).status !== JobStatus.RUNNING) await new Promise((r) => setTimeout(r, 50));
await fetch(process.env.RESET_URL!, { method: "POST" });
openGate();
out.reconnect = { status: name((await waiting).status) };

// Bad inputs: the code, the fields named and the reason.
const bad: Record<string, unknown> = {};
const attempt = async (label: string, call: () => Promise<unknown>) => {
  try {
    await call();
    bad[label] = "ok";
  } catch (e) {
    if (!(e instanceof LeaseholdError)) throw e;
    bad[label] = { code: e.code, fields: e.violations.map((v) => v.field).sort(), reason: e.reason };
  }
};
await attempt("empty input_uri", () => client.createJob(MAIN, [{ chunkIndex: 0, inputUri: "", inputSha256: "x" }]));
await attempt("job id not a uuid", () => client.getJob("not-a-uuid"));
await attempt("unknown job", () => client.getJob("00000000-0000-0000-0000-000000000000"));
await attempt("unknown workload", () => client.createJob(`${prefix}-nope`, [{ chunkIndex: 0, inputUri: "s3://x", inputSha256: sha("x") }]));
await attempt("retry of a completed job", () => client.retry(gated.id));
out.bad = bad;

worker.stop();
await running;
client.close();
console.log(JSON.stringify(out));
