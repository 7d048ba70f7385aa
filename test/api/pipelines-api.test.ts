// The stitch-then-report pipeline of the spec, end to end over REST: a workflow of chunks, a
// stitcher after them and a report after the stitcher, created in one call; workers that claim,
// read their parents from the claimed task (the stitcher pages the chunks' results, the report
// takes the stitcher's result from its parent with no call), and report; the workflow watched over
// Server-Sent Events to its end. Then CreateJob's after with the short policy name, RetryWorkflow
// and CancelWorkflow over REST, and the same workflow over gRPC and Connect.
import { createClient } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DependencyPolicy, JobStatus, QueueService, TaskStatus } from "../../gen/leasehold/queue/v1/queue_pb.js";
import { LongPollingQueue } from "../../src/queue/long-poll.js";
import { apiServerFixture, type ApiServerFixture } from "../support/api-server.js";
import { queueFixture, sha, type QueueFixture } from "../support/queue.js";
import { restCall, type RestAnswer } from "../support/rest.js";

const CHUNK = "pl_chunk";
const STITCH = "pl_stitch";
const REPORT = "pl_report";
const CHUNKS = 12;

let fx: QueueFixture;
let api: ApiServerFixture;
const rest = (method: string, path: string, body?: unknown): Promise<RestAnswer> => restCall(api.base, method, path, body);

beforeAll(async () => {
  fx = await queueFixture({ defaultLeaseSeconds: 60, defaultMaxAttempts: 3 });
  api = await apiServerFixture({ queue: fx.queue, maxBodyBytes: 1 << 20 });
  for (const name of [CHUNK, STITCH, REPORT]) await fx.queue.putWorkload({ name, maxAttempts: 2 });
});
afterAll(async () => {
  await api?.close();
  await fx?.close();
});

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Json = any;

const pipeline = (tag: string) => ({
  name: `render ${tag}`,
  nodes: [
    {
      name: "chunks",
      job: {
        workload: CHUNK,
        tasks: Array.from({ length: CHUNKS }, (_, i) => ({
          chunk_index: i,
          input_uri: `s3://in/${tag}/${i}.h5`,
          input_sha256: sha(`${tag}${i}`),
        })),
      },
    },
    {
      name: "stitch",
      job: {
        workload: STITCH,
        input_uri: `s3://in/${tag}/manifest`,
        input_sha256: sha(`${tag}m`),
        parameters: { out: `s3://out/${tag}/stitched` },
      },
      after: [{ node: "chunks" }],
    },
    {
      name: "report",
      job: { workload: REPORT, input_uri: `s3://in/${tag}/report`, input_sha256: sha(`${tag}r`) },
      after: [{ node: "stitch" }],
    },
  ],
});

async function claim(workload: string, worker: string, max = 1): Promise<Json[]> {
  const r = await rest("POST", "/tasks/claim", { worker_id: worker, workloads: [workload], max_tasks: max });
  if (r.status === 204) return [];
  expect(r.status).toBe(200);
  return r.body.tasks;
}

async function report(task: Json, worker: string, uri: string): Promise<void> {
  const r = await rest("POST", `/tasks/${task.id}/result`, {
    worker_id: worker,
    attempt: task.attempt,
    result_uri: uri,
    result_sha256: sha(uri),
  });
  expect(r.status).toBe(200);
}

/** The SSE stream of a workflow, read to its end: every `data:` line's JSON. */
async function sse(path: string): Promise<Json[]> {
  const res = await fetch(api.base + path, { signal: AbortSignal.timeout(30_000) });
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toMatch(/text\/event-stream/);
  const text = await res.text();
  return text
    .split("\n")
    .filter((l) => l.startsWith("data:"))
    .map((l) => JSON.parse(l.slice(5)));
}

describe("REST: the stitch-then-report pipeline", () => {
  it("runs from one CreateWorkflow call to a completed workflow, each stage reading its parents from its claimed task", async () => {
    const made = await rest("POST", "/workflows", pipeline("a"));
    expect(made.status).toBe(201);
    expect(made.headers.get("x-request-id")).toBeTruthy();
    const wf = made.body.workflow;
    expect(wf.nodes.map((n: Json) => [n.name, n.status])).toEqual([
      ["chunks", "JOB_STATUS_PENDING"],
      ["stitch", "JOB_STATUS_WAITING"],
      ["report", "JOB_STATUS_WAITING"],
    ]);
    const ids = Object.fromEntries(wf.nodes.map((n: Json) => [n.name, n.job_id]));
    const events = sse(`/workflows/${wf.id}/events`);

    // The chunk workers.
    for (;;) {
      const tasks = await claim(CHUNK, "chunker", 5);
      if (tasks.length === 0) break;
      for (const t of tasks) await report(t, "chunker", `s3://out/a/${t.chunk_index}.h5`);
    }
    // The stitcher: its parent is the chunks job, all of whose results it reads in chunk order.
    const [st] = await claim(STITCH, "stitcher");
    expect(st.parents).toEqual([
      expect.objectContaining({
        job_id: ids.chunks,
        status: "JOB_STATUS_COMPLETED",
        node: "chunks",
        total_tasks: CHUNKS,
        completed_tasks: CHUNKS,
      }),
    ]);
    const manifest: string[] = [];
    let token = "";
    do {
      const page = await rest("GET", `/jobs/${st.parents[0].job_id}/results?page_size=5${token ? `&page_token=${token}` : ""}`);
      expect(page.status).toBe(200);
      manifest.push(...page.body.results.map((r: Json) => r.result_uri));
      token = page.body.next_page_token ?? "";
    } while (token);
    expect(manifest).toEqual(Array.from({ length: CHUNKS }, (_, i) => `s3://out/a/${i}.h5`));
    await report(st, "stitcher", st.parameters.out);
    // The report: its parent is the stitcher, one task: its result is on the claimed task.
    const [rt] = await claim(REPORT, "reporter");
    expect(rt.parents).toHaveLength(1);
    expect(rt.parents[0]).toMatchObject({ job_id: ids.stitch, node: "stitch", status: "JOB_STATUS_COMPLETED", total_tasks: 1 });
    expect(rt.parents[0].result).toMatchObject({ result_uri: "s3://out/a/stitched", result_sha256: sha("s3://out/a/stitched") });
    await report(rt, "reporter", "s3://out/a/report.html");

    const done = await rest("GET", `/workflows/${wf.id}`);
    expect(done.body.workflow.status).toBe("JOB_STATUS_COMPLETED");
    expect(done.body.workflow.node_counts.completed).toBe(3);
    const stream = await events;
    expect(stream[0].snapshot.workflow.id).toBe(wf.id);
    const changes = stream.slice(1).map((m: Json) => `${m.event.node}:${m.event.status}`);
    expect(changes).toEqual([
      "chunks:JOB_STATUS_RUNNING",
      "chunks:JOB_STATUS_COMPLETED",
      "stitch:JOB_STATUS_PENDING",
      "stitch:JOB_STATUS_RUNNING",
      "stitch:JOB_STATUS_COMPLETED",
      "report:JOB_STATUS_PENDING",
      "report:JOB_STATUS_RUNNING",
      "report:JOB_STATUS_COMPLETED",
    ]);
    // A node is a job: GetJob names its workflow, its parents and its policy.
    const stitch = await rest("GET", `/jobs/${ids.stitch}`);
    expect(stitch.body.job).toMatchObject({
      workflow_id: wf.id,
      workflow_node: "stitch",
      dependency_policy: "DEPENDENCY_POLICY_ALL_COMPLETED",
      parents: [expect.objectContaining({ job_id: ids.chunks, status: "JOB_STATUS_COMPLETED" })],
    });
    expect((await rest("GET", `/workflows?page_size=10`)).body.workflows.map((w: Json) => w.id)).toContain(wf.id);
  });

  it("CreateJob after a job (short policy name); a failed stage retried with RetryWorkflow; CancelWorkflow stops the rest", async () => {
    const parent = await rest("POST", "/jobs", { workload: CHUNK, input_uri: "s3://in/p", input_sha256: sha("p") });
    const child = await rest("POST", "/jobs", {
      workload: STITCH,
      input_uri: "s3://in/c",
      input_sha256: sha("c"),
      after: [{ job_id: parent.body.job.id }],
      dependency_policy: "all_final",
    });
    expect(child.status).toBe(201);
    expect(child.body.job).toMatchObject({
      status: "JOB_STATUS_WAITING",
      waiting_parents: 1,
      dependency_policy: "DEPENDENCY_POLICY_ALL_FINAL",
    });
    expect(child.body.tasks[0].status).toBe("TASK_STATUS_WAITING");
    const waitingTask = await rest("GET", `/tasks/${child.body.tasks[0].id}`);
    expect(waitingTask.body.waiting_reason).toBe("WAITING_REASON_PARENTS");
    await rest("POST", `/jobs/${parent.body.job.id}/cancel`, {});
    expect((await rest("GET", `/jobs/${child.body.job.id}`)).body.job.status).toBe("JOB_STATUS_PENDING");
    const [ct] = await claim(STITCH, "s");
    await report(ct, "s", "s3://out/c");

    const wf = (await rest("POST", "/workflows", pipeline("b"))).body.workflow;
    for (;;) {
      const tasks = await claim(CHUNK, "chunker", 20);
      if (tasks.length === 0) break;
      for (const t of tasks) await report(t, "chunker", `s3://out/b/${t.chunk_index}.h5`);
    }
    const [st] = await claim(STITCH, "stitcher");
    const failed = await rest("POST", `/tasks/${st.id}/failure`, {
      worker_id: "stitcher",
      attempt: st.attempt,
      error_code: "disk",
      retryable: false,
    });
    expect(failed.status).toBe(200);
    let now = (await rest("GET", `/workflows/${wf.id}`)).body.workflow;
    expect(now.nodes.map((n: Json) => n.status)).toEqual(["JOB_STATUS_COMPLETED", "JOB_STATUS_FAILED", "JOB_STATUS_CANCELLED"]);
    const retried = await rest("POST", `/workflows/${wf.id}/retry`, {});
    expect(retried.status).toBe(200);
    expect(retried.body).toMatchObject({ retried_nodes: 2, retried_tasks: 2 });
    expect(retried.body.workflow.nodes.map((n: Json) => n.status)).toEqual([
      "JOB_STATUS_COMPLETED",
      "JOB_STATUS_PENDING",
      "JOB_STATUS_WAITING",
    ]);
    const cancelled = await rest("POST", `/workflows/${wf.id}/cancel`, { reason: "enough" });
    expect(cancelled.body).toMatchObject({ cancelled_nodes: 2 });
    now = cancelled.body.workflow;
    expect(now.status).toBe("JOB_STATUS_CANCELLED");
    expect(await claim(STITCH, "stitcher")).toEqual([]);
    expect(await claim(REPORT, "reporter")).toEqual([]);
  });
});

describe.each([
  ["gRPC", () => createGrpcTransport({ baseUrl: api.base })],
  ["Connect", () => createConnectTransport({ baseUrl: api.base, httpVersion: "1.1" })],
])("%s", (_name, transport) => {
  it("CreateWorkflow, GetWorkflow, a claimed task's parents and WatchWorkflow carry the same messages", async () => {
    const client = createClient(QueueService, transport());
    const { workflow } = await client.createWorkflow({
      nodes: [
        { name: "one", job: { workload: CHUNK, inputUri: "s3://g/1", inputSha256: sha("g1") } },
        {
          name: "two",
          job: { workload: REPORT, inputUri: "s3://g/2", inputSha256: sha("g2"), dependencyPolicy: DependencyPolicy.ALL_FINAL },
          after: [{ node: "one", optional: true }],
        },
      ],
    });
    expect(workflow!.nodes.map((n) => n.status)).toEqual([JobStatus.PENDING, JobStatus.WAITING]);
    expect(workflow!.nodes[1]).toMatchObject({
      dependencyPolicy: DependencyPolicy.ALL_FINAL,
      after: [{ node: "one", optional: true }],
      waitingParents: 1,
    });
    const updates: string[] = [];
    const watching = (async () => {
      for await (const u of client.watchWorkflow({ workflowId: workflow!.id })) {
        updates.push(u.update.case === "snapshot" ? "snapshot" : `${u.update.value!.node}:${JobStatus[u.update.value!.status]}`);
      }
    })();
    const { tasks } = await client.claimTasks({ workerId: "g", workloads: [CHUNK], maxTasks: 1 });
    await client.completeTask({
      taskId: tasks[0].id,
      workerId: "g",
      attempt: tasks[0].attempt,
      resultUri: "s3://g/o",
      resultSha256: sha("go"),
    });
    const next = await client.claimTasks({ workerId: "g", workloads: [REPORT], maxTasks: 1 });
    expect(next.tasks[0].status).toBe(TaskStatus.LEASED);
    expect(next.tasks[0].parents[0]).toMatchObject({ node: "one", optional: true, status: JobStatus.COMPLETED });
    expect(next.tasks[0].parents[0].result?.resultUri).toBe("s3://g/o");
    await client.completeTask({
      taskId: next.tasks[0].id,
      workerId: "g",
      attempt: next.tasks[0].attempt,
      resultUri: "s3://g/o2",
      resultSha256: sha("go2"),
    });
    await watching;
    expect(updates[0]).toBe("snapshot");
    expect(updates.slice(-1)).toEqual(["two:COMPLETED"]);
    expect((await client.getWorkflow({ workflowId: workflow!.id })).workflow!.status).toBe(JobStatus.COMPLETED);
  });
});

// The long poll wrapper serves WatchWorkflow as it does WatchJob (it ends at shutdown).
it("a LongPollingQueue passes WatchWorkflow through", () => {
  expect(typeof LongPollingQueue.prototype.watchWorkflow).toBe("function");
});
