// Workflows against a real PostgreSQL: created whole in one transaction or not at all, nodes
// made pending as their parents end, cancelled and retried mid-run with nothing left claimable
// that should not be and nothing stranded waiting, watched in commit order, deleted whole by
// retention; a node with a finalizer, a run_at, a job outside the workflow as a parent.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { IdempotencyConflictError, NotFoundError, QuotaExceededError, ValidationError } from "../../src/queue/errors.js";
import type { CreateJobInput, CreateWorkflowInput, Task, Workflow, WorkflowUpdate } from "../../src/queue/types.js";
import { Retention } from "../../src/store/postgres/background/retention.js";
import { queueFixture, sha, type QueueFixture } from "../support/queue.js";

let f: QueueFixture;
const W = "wf_a";
const B = "wf_b";

beforeAll(async () => {
  f = await queueFixture();
  await f.queue.putWorkload({ name: W, maxAttempts: 1 });
  await f.queue.putWorkload({ name: B, maxAttempts: 1 });
  await f.queue.putAccount({ name: "acme", maxPendingTasks: 10, priority: 0 });
});
afterAll(async () => {
  await f?.close();
});

let seq = 0;
function job(workload = W, extra: Partial<CreateJobInput> = {}, tasks = 1): CreateJobInput {
  const n = ++seq;
  return {
    workload,
    tasks: Array.from({ length: tasks }, (_, i) => ({ chunkIndex: i, inputUri: `s3://wf/${n}/${i}`, inputSha256: sha(`wf${n}/${i}`) })),
    ...extra,
  };
}

/** a → (b, c) → d */
function diamond(extra: Partial<CreateWorkflowInput> = {}): CreateWorkflowInput {
  return {
    name: "diamond",
    nodes: [
      { name: "a", job: job() },
      { name: "b", job: job(), after: [{ node: "a" }] },
      { name: "c", job: job(), after: [{ node: "a" }] },
      { name: "d", job: job(B), after: [{ node: "b" }, { node: "c" }] },
    ],
    ...extra,
  };
}

const statuses = (w: Workflow) => Object.fromEntries(w.nodes.map((n) => [n.name, n.status]));
const nodeId = (w: Workflow, name: string) => w.nodes.find((n) => n.name === name)!.jobId;

async function claimAll(workload: string): Promise<Task[]> {
  return f.queue.claimTasks({ workerId: "w", workloads: [workload], maxTasks: 100 });
}
async function complete(t: Task): Promise<void> {
  await f.queue.completeTask({
    taskId: t.id,
    workerId: "w",
    attempt: t.attempt,
    resultUri: `s3://out/${t.id}`,
    resultSha256: sha(`o${t.id}`),
  });
}
async function fail(t: Task): Promise<void> {
  await f.queue.failTask({ taskId: t.id, workerId: "w", attempt: t.attempt, errorCode: "boom", retryable: false });
}
async function get(id: string): Promise<Workflow> {
  return f.queue.getWorkflow(id);
}
/** Every node final, or a claimable task of each unfinished one: none stranded waiting with nothing to wait for. */
async function noneStranded(id: string): Promise<void> {
  const { rows } = await f.pool.query(
    `SELECT count(*)::int AS n FROM jobs j WHERE j.workflow_id = $1 AND j.status = 'pending' AND j.waiting_on > 0
       AND NOT EXISTS (SELECT 1 FROM job_dependencies d JOIN jobs p ON p.id = d.parent_id
                       WHERE d.child_id = j.id AND p.status IN ('pending', 'running'))`,
    [id],
  );
  expect(rows[0].n, "nodes waiting with every parent final").toBe(0);
}

describe("CreateWorkflow", () => {
  it("creates the nodes and edges at once; each node runs when its parents are final", async () => {
    const { workflow: w, created } = await f.queue.createWorkflow(diamond());
    expect(created).toBe(true);
    expect(w.nodes.map((n) => n.name)).toEqual(["a", "b", "c", "d"]);
    expect(statuses(w)).toEqual({ a: "pending", b: "waiting", c: "waiting", d: "waiting" });
    expect(w.nodes.find((n) => n.name === "d")!.after).toEqual([
      { node: "b", optional: false },
      { node: "c", optional: false },
    ]);
    expect(w.status).toBe("pending");
    const [ta] = await claimAll(W);
    expect(ta.jobId).toBe(nodeId(w, "a"));
    await complete(ta);
    expect(statuses(await get(w.id))).toEqual({ a: "completed", b: "pending", c: "pending", d: "waiting" });
    const bc = await claimAll(W);
    expect(bc.map((t) => t.jobId).sort()).toEqual([nodeId(w, "b"), nodeId(w, "c")].sort());
    expect(bc[0].parents).toEqual([expect.objectContaining({ jobId: nodeId(w, "a"), node: "a", status: "completed" })]);
    await complete(bc[0]);
    expect(await claimAll(B)).toEqual([]);
    await complete(bc[1]);
    const [td] = await claimAll(B);
    expect(td.parents?.map((p) => p.node).sort()).toEqual(["b", "c"]);
    await complete(td);
    const done = await get(w.id);
    expect(done.status).toBe("completed");
    expect(done.completedAt).not.toBeNull();
    expect(done.nodeCounts).toMatchObject({ completed: 4, waiting: 0 });
    expect((await f.queue.getJobStatus(nodeId(w, "d"))).job).toMatchObject({ workflowId: w.id, workflowNode: "d" });
  });

  it("refuses the whole workflow, writing nothing: an unknown workload, a cycle, an unknown node, too many nodes, the quota", async () => {
    const before = { jobs: await f.count("jobs"), tasks: await f.count("tasks"), workflows: await countWorkflows() };
    const bad = diamond();
    bad.nodes[2].job.workload = "nope";
    const e = await f.queue.createWorkflow(bad).catch((err: unknown) => err);
    expect(e).toBeInstanceOf(NotFoundError);
    expect((e as NotFoundError).field).toBe("nodes[2].job.workload");
    const cycle = diamond();
    cycle.nodes[0].after = [{ node: "d" }];
    await expect(f.queue.createWorkflow(cycle)).rejects.toThrow(/cycle: "a" → "b" → "d" → "a"|cycle/);
    const unknown = diamond();
    unknown.nodes[1].after = [{ node: "zz" }];
    await expect(f.queue.createWorkflow(unknown)).rejects.toThrow(ValidationError);
    const huge: CreateWorkflowInput = { nodes: Array.from({ length: 1001 }, (_, i) => ({ name: `n${i}`, job: job() })) };
    await expect(f.queue.createWorkflow(huge)).rejects.toThrow(/at most 1000 nodes/);
    const badJob = diamond();
    badJob.nodes[3].job.inputUri = "";
    badJob.nodes[3].job.tasks = [];
    const v = await f.queue.createWorkflow(badJob).catch((err: unknown) => err);
    expect((v as ValidationError).field).toBe("nodes[3].job.input_uri");
    // acme may hold 10 tasks: 4 nodes of 3 tasks is 12.
    const big: CreateWorkflowInput = {
      account: "acme",
      nodes: ["a", "b", "c", "d"].map((name, i) => ({ name, job: job(W, {}, 3), after: i > 0 ? [{ node: "a" }] : [] })),
    };
    await expect(f.queue.createWorkflow(big)).rejects.toThrow(QuotaExceededError);
    expect({ jobs: await f.count("jobs"), tasks: await f.count("tasks"), workflows: await countWorkflows() }).toEqual(before);
  });

  it("an idempotency key answers the workflow it made; another request under it is a conflict", async () => {
    const input = diamond({ idempotencyKey: "wf-key-1" });
    const first = await f.queue.createWorkflow(input);
    const again = await f.queue.createWorkflow(input);
    expect(again).toMatchObject({ created: false, workflow: { id: first.workflow.id } });
    await expect(f.queue.createWorkflow(diamond({ idempotencyKey: "wf-key-1" }))).rejects.toThrow(IdempotencyConflictError);
    await f.queue.cancelWorkflow({ workflowId: first.workflow.id });
  });

  it("counts every node's tasks against the account's quota, waiting ones included, as they are promoted", async () => {
    const { workflow: w } = await f.queue.createWorkflow({
      account: "acme",
      nodes: [
        { name: "x", job: job(W, {}, 2) },
        { name: "y", job: job(W, {}, 3), after: [{ node: "x" }] },
      ],
    });
    expect((await f.queue.getAccount("acme")).pendingTasks).toBe(5);
    expect((await f.queue.getJobStatus(nodeId(w, "y"))).job.account).toBe("acme");
    for (const t of await claimAll(W)) await complete(t);
    expect((await f.queue.getAccount("acme")).pendingTasks).toBe(3);
    for (const t of await claimAll(W)) await complete(t);
    expect((await f.queue.getAccount("acme")).pendingTasks).toBe(0);
  });
});

describe("CancelWorkflow and RetryWorkflow", () => {
  it("cancel mid-run leaves nothing claimable and nothing waiting; a cancel of a final workflow changes nothing", async () => {
    const { workflow: w } = await f.queue.createWorkflow(diamond());
    const [ta] = await claimAll(W);
    await complete(ta);
    const [tb] = await claimAll(W).then((ts) => ts.filter((t) => t.jobId === nodeId(w, "b")));
    const r = await f.queue.cancelWorkflow({ workflowId: w.id, reason: "stop" });
    expect(r.cancelledNodes).toBe(3);
    expect(statuses(r.workflow)).toEqual({ a: "completed", b: "cancelled", c: "cancelled", d: "cancelled" });
    expect(r.workflow.status).toBe("cancelled");
    expect(await claimAll(W)).toEqual([]);
    expect(await claimAll(B)).toEqual([]);
    expect(
      await f.count("tasks", `job_id IN (SELECT id FROM jobs WHERE workflow_id = '${w.id}') AND status IN ('pending', 'waiting')`),
    ).toBe(0);
    // The leased task's result is still accepted within its lease; the node stays cancelled.
    if (tb) await complete(tb);
    expect((await f.queue.cancelWorkflow({ workflowId: w.id })).cancelledNodes).toBe(0);
  });

  it("retry reruns the failed node and what is after it, never a completed node, and runs through", async () => {
    const { workflow: w } = await f.queue.createWorkflow(diamond());
    await complete((await claimAll(W))[0]); // a
    const bc = await claimAll(W);
    const tb = bc.find((t) => t.jobId === nodeId(w, "b"))!;
    const tc = bc.find((t) => t.jobId === nodeId(w, "c"))!;
    await complete(tc);
    await fail(tb);
    let now = await get(w.id);
    expect(statuses(now)).toEqual({ a: "completed", b: "failed", c: "completed", d: "cancelled" });
    expect(now.nodes.find((n) => n.name === "d")!.cancelReason).toBe(`parent "b" (${nodeId(w, "b")}) ended failed`);
    expect(now.status).toBe("failed");
    await noneStranded(w.id);
    const r = await f.queue.retryWorkflow({ workflowId: w.id });
    expect(r).toMatchObject({ retriedNodes: 2, retriedTasks: 2 });
    expect(statuses(r.workflow)).toEqual({ a: "completed", b: "pending", c: "completed", d: "waiting" });
    const again = await claimAll(W);
    expect(again.map((t) => t.jobId)).toEqual([nodeId(w, "b")]);
    await complete(again[0]);
    const [td] = await claimAll(B);
    expect(td.jobId).toBe(nodeId(w, "d"));
    await complete(td);
    now = await get(w.id);
    expect(now.status).toBe("completed");
    // a and c ran once each.
    const runs = await f.pool.query(
      `SELECT j.workflow_node AS node, max(t.attempt)::int AS attempts FROM jobs j JOIN tasks t ON t.job_id = j.id
       WHERE j.workflow_id = $1 GROUP BY 1 ORDER BY 1`,
      [w.id],
    );
    expect(runs.rows).toEqual([
      { node: "a", attempts: 1 },
      { node: "b", attempts: 2 },
      { node: "c", attempts: 1 },
      { node: "d", attempts: 1 },
    ]);
    await expect(f.queue.retryWorkflow({ workflowId: w.id })).rejects.toThrow(/no failed or cancelled node/);
  });

  it("retry of a cancelled workflow mid-run waits the reopened nodes for their parents again", async () => {
    const { workflow: w } = await f.queue.createWorkflow(diamond());
    await f.queue.cancelWorkflow({ workflowId: w.id });
    const r = await f.queue.retryWorkflow({ workflowId: w.id });
    expect(r.retriedNodes).toBe(4);
    expect(statuses(r.workflow)).toEqual({ a: "pending", b: "waiting", c: "waiting", d: "waiting" });
    expect((await claimAll(W)).map((t) => t.jobId)).toEqual([nodeId(w, "a")]);
    await f.queue.cancelWorkflow({ workflowId: w.id });
    await noneStranded(w.id);
  });

  it("another account's workflow is not found, and a workflow naming another account's job is refused", async () => {
    const { workflow: w } = await f.queue.createWorkflow(diamond({ account: "acme" }));
    await f.queue.putAccount({ name: "other", maxPendingTasks: 0, priority: 0 });
    await expect(f.queue.getWorkflow(w.id, { account: "other" })).rejects.toThrow(NotFoundError);
    await expect(f.queue.cancelWorkflow({ workflowId: w.id }, { account: "other" })).rejects.toThrow(NotFoundError);
    await expect(f.queue.retryWorkflow({ workflowId: w.id }, { account: "other" })).rejects.toThrow(NotFoundError);
    const outsider = { nodes: [{ name: "x", job: job(W, { after: [{ jobId: nodeId(w, "a") }] }) }] };
    const e = await f.queue.createWorkflow(outsider, { account: "other" }).catch((err: unknown) => err);
    expect((e as NotFoundError).field).toBe("nodes[0].job.after[0].job_id");
    expect((await f.queue.listWorkflows({}, { account: "other" })).workflows).toEqual([]);
    expect((await f.queue.listWorkflows({}, { account: "acme" })).workflows.map((x) => x.id)).toContain(w.id);
    await f.queue.cancelWorkflow({ workflowId: w.id }, { account: "acme" });
  });
});

describe("nodes as jobs", () => {
  it("a node's finalizer runs once it ends, a node may wait for a job outside, and a run_at holds a node past its parents", async () => {
    const outside = (await f.queue.createJob(job())).job;
    const later = new Date(Date.now() + 60_000);
    const { workflow: w } = await f.queue.createWorkflow({
      nodes: [
        { name: "first", job: job(W, { after: [{ jobId: outside.id }], finalizer: { workload: B } }) },
        { name: "late", job: job(B, { runAt: later }), after: [{ node: "first" }] },
      ],
    });
    expect(statuses(w)).toEqual({ first: "waiting", late: "waiting" });
    const [to] = await claimAll(W);
    expect(to.jobId).toBe(outside.id);
    await complete(to);
    const [tf] = await claimAll(W);
    expect(tf.jobId).toBe(nodeId(w, "first"));
    await complete(tf);
    const fin = (await f.queue.getJobStatus(nodeId(w, "first"))).job.finalizerJobId;
    expect(fin).not.toBeNull();
    // late is pending now, but due only at its run_at: the claim passes it over; the finalizer's task is claimable.
    const now = await get(w.id);
    expect(statuses(now)).toEqual({ first: "completed", late: "scheduled" });
    expect((await claimAll(B)).map((t) => t.jobId)).toEqual([fin]);
    await f.queue.cancelWorkflow({ workflowId: w.id });
  });

  it("WatchWorkflow sends the snapshot, then each node's change in commit order, and ends when no node is unfinished", async () => {
    const { workflow: w } = await f.queue.createWorkflow({
      nodes: [
        { name: "p", job: job() },
        { name: "q", job: job(), after: [{ node: "p" }] },
      ],
    });
    const seen: WorkflowUpdate[] = [];
    const stream = (async () => {
      for await (const u of f.queue.watchWorkflow(w.id, { signal: AbortSignal.timeout(20_000) })) seen.push(u);
    })();
    await until(() => seen.length > 0);
    const [tp] = await claimAll(W);
    await complete(tp);
    const [tq] = await claimAll(W);
    await complete(tq);
    await stream;
    expect(seen[0].snapshot?.id).toBe(w.id);
    const events = seen.slice(1).map((u) => `${u.event!.node}:${u.event!.previousStatus}->${u.event!.status}`);
    expect(events).toEqual([
      "p:pending->running",
      "p:running->completed",
      "q:waiting->pending",
      "q:pending->running",
      "q:running->completed",
    ]);
    const ids = seen.slice(1).map((u) => BigInt(u.event!.id));
    expect([...ids].sort((a, b) => (a < b ? -1 : 1))).toEqual(ids);
  });

  it("retention deletes a workflow whole, once every node is old enough, never a node alone", async () => {
    const { workflow: w } = await f.queue.createWorkflow(diamond());
    await f.queue.cancelWorkflow({ workflowId: w.id });
    const a = nodeId(w, "a");
    // Three nodes are old; one is not: nothing goes.
    await f.pool.query(`UPDATE jobs SET completed_at = now() - interval '40 days' WHERE workflow_id = $1 AND id <> $2`, [w.id, a]);
    await f.pool.query(`UPDATE workflows SET created_at = now() - interval '41 days' WHERE id = $1`, [w.id]);
    const retention = new Retention(f.pool, { days: 30 });
    await retention.runOnce(undefined);
    expect(await f.count("jobs", `workflow_id = '${w.id}'`)).toBe(4);
    await f.pool.query(`UPDATE jobs SET completed_at = now() - interval '40 days' WHERE id = $1`, [a]);
    await retention.runOnce(undefined);
    expect(await f.count("jobs", `workflow_id = '${w.id}'`)).toBe(0);
    expect(await countWorkflows(`id = '${w.id}'`)).toBe(0);
    const edges = await f.pool.query(`SELECT count(*)::int AS n FROM job_dependencies WHERE child_id = $1`, [nodeId(w, "d")]);
    expect(edges.rows[0].n).toBe(0);
  });
});

async function countWorkflows(where = "true"): Promise<number> {
  const { rows } = await f.pool.query(`SELECT count(*)::int AS n FROM workflows WHERE ${where}`);
  return rows[0].n as number;
}

async function until(cond: () => boolean, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error("condition not met in time");
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe("a schedule of workflows", () => {
  it("creates one workflow per tick from its template, skips a tick while the last one runs (overlap: skip), and refuses what a template cannot mean", async () => {
    const template: CreateWorkflowInput = {
      name: "nightly",
      nodes: [
        { name: "shards", job: job(W, {}, 2) },
        { name: "index", job: job(B), after: [{ node: "shards" }] },
      ],
    };
    await f.queue.putSchedule({ name: "wf-nightly", cron: "0 3 * * *", workflow: template, overlap: "skip" });
    const s = await f.queue.getSchedule("wf-nightly");
    expect(s.job).toBeNull();
    expect(s.workflow?.nodes.map((n) => n.name)).toEqual(["shards", "index"]);
    const fire = async () => {
      await f.pool.query(`UPDATE schedules SET next_fire_at = now() WHERE name = 'wf-nightly'`);
      return f.queue.fireSchedules();
    };
    expect((await fire()).fired).toBe(1);
    const listed = (await f.queue.listWorkflows({ scheduleName: "wf-nightly" })).workflows;
    expect(listed).toHaveLength(1);
    const w = await get(listed[0].id);
    expect(w).toMatchObject({ name: "nightly", scheduleName: "wf-nightly", status: "pending" });
    expect(statuses(w)).toEqual({ shards: "pending", index: "waiting" });
    expect((await f.queue.getSchedule("wf-nightly")).lastWorkflowId).toBe(w.id);
    expect((await f.queue.listJobs({ scheduleName: "wf-nightly" })).jobs).toHaveLength(2);
    // The workflow runs: the next tick is skipped.
    const pass = await fire();
    expect([pass.fired, pass.skipped.overlap]).toEqual([0, 1]);
    await f.queue.cancelWorkflow({ workflowId: w.id });
    expect((await fire()).fired).toBe(1);
    expect((await f.queue.listWorkflows({ scheduleName: "wf-nightly" })).workflows).toHaveLength(2);
    for (const x of (await f.queue.listWorkflows({ scheduleName: "wf-nightly" })).workflows)
      await f.queue.cancelWorkflow({ workflowId: x.id });
    await f.queue.deleteSchedule("wf-nightly");

    const refused = async (t: CreateWorkflowInput, field: string) => {
      const e = await f.queue.putSchedule({ name: "wf-bad", cron: "0 3 * * *", workflow: t }).catch((err: unknown) => err);
      expect((e as ValidationError).violations?.map((v) => v.field) ?? [(e as NotFoundError).field]).toContain(field);
    };
    await refused({ ...template, idempotencyKey: "k" }, "workflow.idempotency_key");
    await refused({ nodes: [{ name: "a", job: job(W, { after: [{ jobId: nodeId(w, "shards") }] }) }] }, "workflow.nodes[0].job.after");
    await refused({ nodes: [{ name: "a", job: job(W, { runAt: new Date(Date.now() + 60_000) }) }] }, "workflow.nodes[0].job.run_at");
    await refused({ nodes: [{ name: "a", job: job(W), after: [{ node: "a" }] }] }, "workflow.nodes[0].after[0].node");
    await refused({ nodes: [{ name: "a", job: job("nope") }] }, "workflow.nodes[0].job.workload");
    await expect(f.queue.putSchedule({ name: "wf-bad", cron: "0 3 * * *", job: job(), workflow: template })).rejects.toThrow(/workflow/);
    await expect(f.queue.getSchedule("wf-bad")).rejects.toThrow(NotFoundError);
  });
});

describe("the rest of the queue's rules hold for nodes", () => {
  it("promoted nodes obey their workload's cap, and each node bills as a job: settlement lists every node once final", async () => {
    await f.queue.putWorkload({ name: "wf_capped", maxAttempts: 1, maxLeased: 1 });
    await f.queue.putAccount({ name: "billed", maxPendingTasks: 0, priority: 0 });
    const { workflow: w } = await f.queue.createWorkflow({
      account: "billed",
      nodes: [
        { name: "root", job: job(W, { billing: { reservedUnits: 10 } }) },
        ...["x", "y", "z"].map((name) => ({ name, job: job("wf_capped"), after: [{ node: "root" }] })),
      ],
    });
    await complete((await claimAll(W))[0]);
    expect(statuses(await get(w.id))).toMatchObject({ x: "pending", y: "pending", z: "pending" });
    const first = await claimAll("wf_capped");
    expect(first).toHaveLength(1);
    await complete(first[0]);
    const second = await claimAll("wf_capped");
    expect(second).toHaveLength(1);
    await complete(second[0]);
    await complete((await claimAll("wf_capped"))[0]);
    expect((await get(w.id)).status).toBe("completed");
    const listed = (await f.queue.listSettlements({ account: "billed", pageSize: 100 })).jobs.map((j) => j.id);
    expect(listed.sort()).toEqual(w.nodes.map((n) => n.jobId).sort());
    const root = (await f.queue.listSettlements({ account: "billed", pageSize: 100 })).jobs.find((j) => j.id === nodeId(w, "root"))!;
    expect(root.billing).toMatchObject({ reservedUnits: 10 });
  });
});
