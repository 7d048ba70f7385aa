// claim_next: a result report (CompleteTask, CompleteTasks) that also claims the worker's next
// tasks, so a worker needs one call per task. A real server (the API-server fixture, port 0) with
// long-poll claims over a real, migrated PostgreSQL; REST through fetch, gRPC through the
// generated client.
import { Code, createClient, type Client } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { QueueService, TaskStatus } from "../../gen/leasehold/queue/v1/queue_pb.js";
import { Authenticator } from "../../src/api/auth.js";
import { LongPollingQueue } from "../../src/queue/long-poll.js";
import { TaskListener } from "../../src/store/postgres/state/listener.js";
import { EVENTS_CHANNEL } from "../../src/store/postgres/sql/channels.js";
import { queueFixture, sha, type QueueFixture } from "../support/queue.js";
import { restCall, type RestAnswer } from "../support/rest.js";
import { rpcError } from "../support/rpc.js";
import { apiServerFixture, type ApiServerFixture } from "../support/api-server.js";

let f: QueueFixture;
let listener: TaskListener;
let queue: LongPollingQueue;
let api: ApiServerFixture;
let authed: ApiServerFixture;
let base: string;
let authedBase: string;
let grpc: Client<typeof QueueService>;
let seq = 0;

const WORKER_TOKEN = "claim-next-worker-token";
const readiness = async () => ({ ready: true });

beforeAll(async () => {
  f = await queueFixture();
  listener = new TaskListener(f.db.url);
  await listener.start();
  queue = new LongPollingQueue(f.queue, listener, { pollIntervalMs: 60_000 });
  api = await apiServerFixture({ queue: f.queue, longPoll: queue, requestTimeoutMs: 10_000, readiness });
  base = api.base;
  authed = await apiServerFixture({
    queue: f.queue,
    longPoll: queue,
    requestTimeoutMs: 10_000,
    readiness,
    auth: new Authenticator([{ sha256: sha(WORKER_TOKEN), role: "worker", workerPrefix: "gpu-" }]),
  });
  authedBase = authed.base;
  grpc = createClient(QueueService, createGrpcTransport({ baseUrl: base }));
});

afterAll(async () => {
  queue?.close();
  await api?.close();
  await authed?.close(2000);
  await listener?.stop();
  await f?.close();
});

const rest = (path: string, body: unknown): Promise<RestAnswer> => restCall(base, "POST", path, body);

/** A fresh workload with a job of n pending tasks. */
async function backlog(n: number): Promise<string> {
  const w = `cn${++seq}`;
  await f.queue.putWorkload({ name: w });
  await f.queue.createJob({
    workload: w,
    tasks: Array.from({ length: n }, (_, i) => ({ chunkIndex: i, inputUri: `s3://in/${w}/${i}`, inputSha256: sha(i) })),
  });
  return w;
}

async function rows(w: string): Promise<{ status: string; lease_owner: string | null; attempt: number }[]> {
  const r = await f.pool.query("SELECT status::text, lease_owner, attempt FROM tasks WHERE workload = $1 ORDER BY chunk_index", [w]);
  return r.rows;
}

const result = (t: { task_id?: string; id?: string; attempt: number }, worker = "w1") => ({
  worker_id: worker,
  attempt: t.attempt,
  result_uri: `s3://out/${t.task_id ?? t.id}`,
  result_sha256: sha(`${t.task_id ?? t.id}`),
});

async function claimOne(w: string, worker = "w1") {
  const a = await rest("/tasks/claim", { worker_id: worker, workloads: [w] });
  expect(a.status, a.text).toBe(200);
  return a.body.tasks[0] as { id: string; attempt: number };
}

describe("CompleteTask with claim_next", () => {
  it("REST: completes the task and leases the next to the reporting worker in one call", async () => {
    const w = await backlog(3);
    let t = await claimOne(w);
    const seen = [t.id];
    for (let i = 0; i < 2; i++) {
      // An empty claim_next.worker_id is the reporter's.
      const a = await rest(`/tasks/${t.id}/result`, { ...result(t), claim_next: { workloads: [w] } });
      expect(a.status, a.text).toBe(200);
      expect(a.body.task.status).toBe("TASK_STATUS_COMPLETED");
      expect(a.body.next_tasks).toHaveLength(1);
      expect(a.body.next_tasks[0]).toMatchObject({ status: "TASK_STATUS_LEASED", lease_owner: "w1", attempt: 1 });
      t = a.body.next_tasks[0];
      seen.push(t.id);
    }
    expect(new Set(seen).size).toBe(3);
    expect(await rows(w)).toEqual([
      { status: "completed", lease_owner: "w1", attempt: 1 },
      { status: "completed", lease_owner: "w1", attempt: 1 },
      { status: "leased", lease_owner: "w1", attempt: 1 },
    ]);
    // The last report finds nothing left: next_tasks is empty, the result is still recorded.
    const last = await rest(`/tasks/${t.id}/result`, { ...result(t), claim_next: { workloads: [w], max_tasks: 5 } });
    expect(last.status, last.text).toBe(200);
    expect(last.body.next_tasks).toEqual([]);
    expect((await rows(w)).map((r) => r.status)).toEqual(["completed", "completed", "completed"]);
    // Every status change is in the event log: pending → leased → completed for each task.
    const { rows: events } = await f.pool.query(
      "SELECT count(*)::int AS n FROM task_events e JOIN tasks t ON t.id = e.task_id WHERE t.workload = $1 AND e.kind = 'task_status'",
      [w],
    );
    expect(events[0].n).toBe(6);
    const { rows: job } = await f.pool.query("SELECT status::text FROM jobs WHERE workload = $1", [w]);
    expect(job[0].status).toBe("completed");
  });

  it("notifies the watched jobs of both the completed and the claimed task", async () => {
    const w = await backlog(1);
    const other = await f.queue.createJob({ workload: w, tasks: [{ chunkIndex: 0, inputUri: "s3://in/other", inputSha256: sha("o") }] });
    const t = await claimOne(w);
    const { rows: jobs } = await f.pool.query("SELECT job_id FROM tasks WHERE id = $1", [t.id]);
    const watched = [jobs[0].job_id as string, other.job.id];
    await f.pool.query("INSERT INTO job_watchers (job_id, expires_at) SELECT unnest($1::uuid[]), now() + interval '1 minute'", [watched]);
    const listen = await f.pool.connect();
    const heard: string[] = [];
    listen.on("notification", (n) => heard.push(n.payload ?? ""));
    await listen.query(`LISTEN ${EVENTS_CHANNEL}`);
    try {
      const a = await rest(`/tasks/${t.id}/result`, { ...result(t), claim_next: { workloads: [w] } });
      expect(a.status, a.text).toBe(200);
      expect(a.body.next_tasks[0].job_id).toBe(other.job.id);
      const end = Date.now() + 5000;
      while (heard.length < 2 && Date.now() < end) await new Promise((r) => setTimeout(r, 10));
      expect(new Set(heard)).toEqual(new Set(watched));
    } finally {
      await listen.query(`UNLISTEN ${EVENTS_CHANNEL}`);
      listen.release();
    }
  });

  it("claims in claim order: priority, then age, then chunk, for one task as for several", async () => {
    const w = await backlog(1);
    const t = await claimOne(w);
    // Three jobs after the first: a low-priority one, then two high-priority ones, the second younger.
    for (const [name, priority, n] of [
      ["low", 0, 2],
      ["old", 5, 2],
      ["young", 5, 1],
    ] as const) {
      await f.queue.createJob({
        workload: w,
        priority,
        tasks: Array.from({ length: n }, (_, i) => ({ chunkIndex: i, inputUri: `s3://in/${name}/${i}`, inputSha256: sha(i) })),
      });
      await new Promise((r) => setTimeout(r, 5)); // distinct created_at
    }
    const inputs = (a: RestAnswer) => (a.body.next_tasks as { input_uri: string }[]).map((n) => n.input_uri);
    const one = await rest(`/tasks/${t.id}/result`, { ...result(t), claim_next: { workloads: [w], max_tasks: 1 } });
    expect(one.status, one.text).toBe(200);
    expect(inputs(one)).toEqual(["s3://in/old/0"]);
    const next = one.body.next_tasks[0] as { id: string; attempt: number };
    const several = await rest(`/tasks/${next.id}/result`, { ...result(next), claim_next: { workloads: [w], max_tasks: 10 } });
    expect(several.status, several.text).toBe(200);
    expect(inputs(several)).toEqual(["s3://in/old/1", "s3://in/young/0", "s3://in/low/0", "s3://in/low/1"]);
  });

  it("gRPC: claimNext with its own worker id and max_tasks", async () => {
    const w = await backlog(4);
    const { tasks } = await grpc.claimTasks({ workerId: "g1", workloads: [w] });
    const t = tasks[0];
    const r = await grpc.completeTask({
      taskId: t.id,
      workerId: "g1",
      attempt: t.attempt,
      resultUri: "s3://out/g",
      resultSha256: sha("g"),
      claimNext: { workerId: "g2", workloads: [w], maxTasks: 2 },
    });
    expect(r.task?.status).toBe(TaskStatus.COMPLETED);
    expect(r.nextTasks.map((n) => [n.status, n.leaseOwner])).toEqual([
      [TaskStatus.LEASED, "g2"],
      [TaskStatus.LEASED, "g2"],
    ]);
    expect((await rows(w)).map((x) => x.status).sort()).toEqual(["completed", "leased", "leased", "pending"]);
  });

  it("a replayed result claims as an accepted one does", async () => {
    const w = await backlog(2);
    const t = await claimOne(w);
    expect((await rest(`/tasks/${t.id}/result`, result(t))).status).toBe(200);
    const again = await rest(`/tasks/${t.id}/result`, { ...result(t), claim_next: { workloads: [w] } });
    expect(again.status, again.text).toBe(200);
    expect(again.body.next_tasks).toHaveLength(1);
  });

  it("a refused result claims nothing", async () => {
    const w = await backlog(2);
    const t = await claimOne(w);
    const a = await rest(`/tasks/${t.id}/result`, { ...result(t), attempt: 2, claim_next: { workloads: [w] } });
    expect(a.status, a.text).toBe(409);
    expect(await rows(w)).toEqual([
      { status: "leased", lease_owner: "w1", attempt: 1 },
      { status: "pending", lease_owner: null, attempt: 0 },
    ]);
  });

  it("waits as a long-poll claim does when nothing is claimable, and takes work committed meanwhile", async () => {
    const w = await backlog(1);
    const t = await claimOne(w);
    const report = rest(`/tasks/${t.id}/result`, { ...result(t), claim_next: { workloads: [w], wait_seconds: 10 } });
    // The result is written before the claim parks.
    const end = Date.now() + 5000;
    while (queue.parked === 0 && Date.now() < end) await new Promise((r) => setTimeout(r, 10));
    expect(queue.parked).toBe(1);
    expect((await rows(w))[0].status).toBe("completed");
    await f.queue.createJob({ workload: w, tasks: [{ chunkIndex: 0, inputUri: "s3://in/late", inputSha256: sha("late") }] });
    const a = await report;
    expect(a.status, a.text).toBe(200);
    expect(a.body.next_tasks).toHaveLength(1);
    expect(a.body.next_tasks[0].input_uri).toBe("s3://in/late");
  });
});

describe("CompleteTasks with claim_next", () => {
  it("records the batch and leases the next batch; outcomes stay per result", async () => {
    const w = await backlog(5);
    const claimed = await rest("/tasks/claim", { worker_id: "b1", workloads: [w], max_tasks: 2 });
    const [a, b] = claimed.body.tasks;
    const r = await rest("/tasks/results", {
      results: [
        { task_id: a.id, ...result(a, "b1") },
        { task_id: b.id, ...result(b, "b1"), attempt: 7 },
      ],
      claim_next: { workloads: [w], max_tasks: 10 },
    });
    expect(r.status, r.text).toBe(200);
    expect(r.body.outcomes[0].task.status).toBe("TASK_STATUS_COMPLETED");
    expect(r.body.outcomes[1].error.code).toBe("aborted");
    expect(r.body.next_tasks).toHaveLength(3);
    expect(r.body.next_tasks.every((t: { lease_owner: string }) => t.lease_owner === "b1")).toBe(true);
    expect((await rows(w)).map((x) => x.status).sort()).toEqual(["completed", "leased", "leased", "leased", "leased"]);
  });

  it("an empty claim_next.worker_id needs the results to share one worker", async () => {
    const w = await backlog(2);
    const claimed = await rest("/tasks/claim", { worker_id: "b1", workloads: [w], max_tasks: 2 });
    const before = await rows(w);
    const [a, b] = claimed.body.tasks;
    const r = await rest("/tasks/results", {
      results: [
        { task_id: a.id, ...result(a, "b1") },
        { task_id: b.id, ...result(b, "b2") },
      ],
      claim_next: { workloads: [w] },
    });
    expect(r.status, r.text).toBe(400);
    expect(r.body.error.message).toContain("claim_next.worker_id");
    expect(await rows(w)).toEqual(before);
  });
});

describe("a mistaken claim_next is a 4xx and writes nothing", () => {
  it.each([
    ["max_tasks 0", { max_tasks: 0 }, 400, "claim_next.max_tasks"],
    ["no workloads", { workloads: [] }, 400, "claim_next.workloads"],
    ["wait_seconds out of range", { wait_seconds: 100_000 }, 400, "claim_next.wait_seconds"],
    ["an unknown workload", { workloads: ["no_such_workload"] }, 404, "claim_next.workloads[0]"],
  ])("%s", async (_what, change, status, mentions) => {
    const w = await backlog(2);
    const t = await claimOne(w);
    const before = await rows(w);
    const a = await rest(`/tasks/${t.id}/result`, { ...result(t), claim_next: { workloads: [w], ...change } });
    expect(a.status, a.text).toBe(status);
    expect(a.body.error.message).toContain(mentions);
    expect(a.body.error.request_id).toBe(a.headers.get("x-request-id"));
    expect(await rows(w)).toEqual(before);
  });

  it("a claim_next inside a batch's result", async () => {
    const w = await backlog(1);
    const t = await claimOne(w);
    const r = await rest("/tasks/results", { results: [{ task_id: t.id, ...result(t), claim_next: { workloads: [w] } }] });
    expect(r.status, r.text).toBe(400);
    expect(r.body.error.message).toContain("results[0].claim_next");
    expect((await rows(w))[0].status).toBe("leased");
  });

  it("gRPC: INVALID_ARGUMENT", async () => {
    const w = await backlog(1);
    const { tasks } = await grpc.claimTasks({ workerId: "g1", workloads: [w] });
    const err = await rpcError(
      grpc.completeTask({
        taskId: tasks[0].id,
        workerId: "g1",
        attempt: tasks[0].attempt,
        resultUri: "s3://out/x",
        resultSha256: sha("x"),
        claimNext: { workloads: [w], maxTasks: 0 },
      }),
    );
    expect(err.code).toBe(Code.InvalidArgument);
    expect((await rows(w))[0].status).toBe("leased");
  });

  it("a claim_next worker_id outside the token's prefix is refused", async () => {
    const w = await backlog(2);
    const claimed = await restCall(
      authedBase,
      "POST",
      "/tasks/claim",
      { worker_id: "gpu-1", workloads: [w] },
      { authorization: `Bearer ${WORKER_TOKEN}` },
    );
    expect(claimed.status, claimed.text).toBe(200);
    const t = claimed.body.tasks[0];
    const a = await restCall(
      authedBase,
      "POST",
      `/tasks/${t.id}/result`,
      { ...result(t, "gpu-1"), claim_next: { worker_id: "cpu-1", workloads: [w] } },
      { authorization: `Bearer ${WORKER_TOKEN}` },
    );
    expect(a.status, a.text).toBe(403);
    expect((await rows(w)).map((x) => x.status)).toEqual(["leased", "pending"]);
  });
});
