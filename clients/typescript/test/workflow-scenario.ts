// Workflows through the TypeScript client (its built dist/), printed as one JSON line that
// test/clients/ts-client-workflows.test.ts compares: a three-stage pipeline created in one call and
// run by a Worker whose later stages read their inputs from task.parents, waited for; a watch of a
// workflow's node changes while it is cancelled, then its retry; createJob's after; a refused
// workflow. Each section records the error code it met instead of its answer. Env: LEASEHOLD_URL,
// LEASEHOLD_TRANSPORT, PREFIX.
import { createHash } from "node:crypto";
import { Client, DependencyPolicy, JobStatus, LeaseholdError, Worker, toJson, type TransportName } from "../dist/index.js";

const url = process.env.LEASEHOLD_URL!;
const transport = process.env.LEASEHOLD_TRANSPORT as TransportName;
const prefix = process.env.PREFIX!;
const sha = (s: string): string => createHash("sha256").update(s).digest("hex");
const name = (s: JobStatus): string => JobStatus[s].toLowerCase();
const [CHUNKS, STITCH, REPORT, IDLE] = ["chunks", "stitch", "report", "idle"].map((w) => `${prefix}-${w}`);

const client = new Client(url, { transport });
for (const w of [CHUNKS, STITCH, REPORT, IDLE]) await client.putWorkload(w, { maxAttempts: 1, leaseSeconds: 30 });
const out: Record<string, unknown> = {};

async function section(label: string, body: () => Promise<unknown>): Promise<void> {
  try {
    out[label] = await body();
  } catch (e) {
    if (!(e instanceof LeaseholdError)) throw e;
    out[label] = { error: e.code, message: e.message };
  }
}

const pipeline = (chunks: string, stitch: string, report: string) => ({
  chunks: { workload: chunks, tasks: [0, 1, 2].map((i) => ({ chunkIndex: i, inputUri: `s3://in/${i}`, inputSha256: sha(`${i}`) })) },
  stitch: { workload: stitch, inputUri: "s3://out/stitched", inputSha256: sha("stitch"), after: ["chunks"] },
  report: { workload: report, inputUri: "s3://out/report", inputSha256: sha("report"), after: ["stitch"] },
});

const silent = { debug() {}, info() {}, warn() {}, error() {} };
const worker = new Worker(url, { transport, workloads: [CHUNKS, STITCH, REPORT], concurrency: 4, handleSignals: false, logger: silent });
const seen: Record<string, unknown> = {};
worker.handle(CHUNKS, (task) => ({ uri: `s3://out/chunk/${task.chunkIndex}`, sha256: sha(`chunk-${task.chunkIndex}`) }));
worker.handle(STITCH, async (task) => {
  const inputs: string[] = [];
  for await (const m of client.results(task.parents[0].jobId)) inputs.push(m.resultUri);
  seen.stitch = { parents: task.parents.map((p) => [p.node, name(p.status), p.totalTasks, p.completedTasks, p.result ?? null]), inputs };
  return { uri: "s3://out/stitched", sha256: sha("stitched") };
});
worker.handle(REPORT, (task) => {
  seen.report = task.parents.map((p) => [p.node, name(p.status), p.result?.resultUri]);
  return { uri: "s3://out/report.pdf", sha256: sha("report") };
});
const running = worker.run();

await section("pipeline", async () => {
  const created = await client.createWorkflow(pipeline(CHUNKS, STITCH, REPORT), { name: `mesh-${transport}` });
  const stitch = await client.getJob(created.nodes[1].jobId);
  const done = await client.waitWorkflow(created.id, { timeoutMs: 60_000 });
  const listed: string[] = [];
  for await (const w of client.listWorkflows({ pageSize: 1 })) listed.push(w.id);
  return {
    created: created.nodes.map((n) => [n.name, name(n.status), n.after.map((a) => a.node)]),
    stitchJob: { workflow: stitch.workflowId === created.id, node: stitch.workflowNode, parents: stitch.parents.map((p) => p.node) },
    done: { status: name(done.status), nodes: done.nodes.map((n) => [n.name, name(n.status), n.completedTasks]) },
    seen,
    listed: listed.includes(created.id),
    json: (toJson(done) as { name?: string }).name === `mesh-${transport}`,
  };
});

await section("cancelRetry", async () => {
  const wf = await client.createWorkflow(pipeline(IDLE, IDLE, IDLE));
  const events: string[] = [];
  // Cancelled only once the watch has its snapshot: a cancel that lands first is in the snapshot,
  // and no event follows it (seen on a loaded machine).
  let snapshotSeen!: () => void;
  const snapshot = new Promise<void>((resolve) => (snapshotSeen = resolve));
  const watching = (async () => {
    for await (const u of client.watchWorkflow(wf.id, { timeoutMs: 60_000 })) {
      if (u.update.case === "snapshot") snapshotSeen();
      if (u.update.case === "event")
        events.push(`${u.update.value.node}:${name(u.update.value.previousStatus)}>${name(u.update.value.status)}`);
    }
  })();
  await Promise.race([snapshot, watching]);
  const cancelled = await client.cancelWorkflow(wf.id, "not today");
  await watching;
  const retried = await client.retryWorkflow(wf.id);
  await client.cancelWorkflow(wf.id);
  return {
    cancelled: {
      nodes: cancelled.cancelledNodes,
      status: name(cancelled.status),
      reasons: [...new Set(cancelled.nodes.map((n) => n.cancelReason))],
    },
    events: events.sort(),
    retried: { nodes: retried.retriedNodes, tasks: retried.retriedTasks, statuses: retried.nodes.map((n) => name(n.status)) },
  };
});

await section("after", async () => {
  const parent = await client.createJob(IDLE, [], { inputUri: "s3://in/p", inputSha256: sha("p") });
  const other = await client.createJob(IDLE, [], { inputUri: "s3://in/o", inputSha256: sha("o") });
  const child = await client.createJob(IDLE, [], {
    inputUri: "s3://in/c",
    inputSha256: sha("c"),
    after: [parent.id, { jobId: other.id, optional: true }],
    dependencyPolicy: DependencyPolicy.ALL_COMPLETED,
  });
  const got = await client.getJob(child.id);
  await client.cancel(parent.id);
  await client.cancel(other.id);
  const after = await client.getJob(child.id);
  return {
    child: {
      status: name(child.status),
      waiting: got.waitingParents,
      parents: got.parents.map((p) => p.optional),
      waitingTasks: got.taskCounts?.waiting,
    },
    afterParentCancelled: name(after.status),
  };
});

await section("refused", async () => {
  try {
    await client.createWorkflow({ a: { workload: IDLE, inputUri: "s3://a", inputSha256: sha("a"), after: ["nope"] } });
    return "ok";
  } catch (e) {
    if (!(e instanceof LeaseholdError)) throw e;
    return { code: e.code, fields: e.violations.map((v) => v.field) };
  }
});

worker.stop();
await running;
client.close();
console.log(JSON.stringify(out));
