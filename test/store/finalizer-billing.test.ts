// Work the coordinator makes on a caller's behalf is that caller's, billed and counted, against a
// real PostgreSQL: a finalizer's job belongs to its parent's account (its bound caller reads it,
// ListSettlements lists it, SettleJob settles it on its own), a parent billable by its billing
// context alone makes a billable finalizer, and the account's quota holds the finalizer's task from
// the parent's creation, so its enqueue (inside the transaction that ends the parent) never passes
// the quota and is never refused. A schedule's tick job is its template's account's, finalizer too.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { NotFoundError, QuotaExceededError } from "../../src/queue/errors.js";
import type { CreateJobInput, Task } from "../../src/queue/types.js";
import type { PostgresQueue } from "../../src/store/postgres/store.js";
import { queueFixture, sha, type QueueFixture } from "../support/queue.js";

const W = "fin_parent";
const FIN = "fin_child";
const WORKER = "fin-worker";

let f: QueueFixture;
let q: PostgresQueue;
let seq = 0;

beforeAll(async () => {
  f = await queueFixture();
  q = f.queue;
  await q.putWorkload({ name: W, maxAttempts: 1 });
  await q.putWorkload({ name: FIN, maxAttempts: 1 });
});
afterAll(async () => {
  await f?.close();
});

async function account(maxPendingTasks = 0): Promise<string> {
  const name = `fin-acct-${++seq}`;
  await q.putAccount({ name, maxPendingTasks });
  return name;
}

const withFinalizer = (tasks: number, extra: Partial<CreateJobInput> = {}): CreateJobInput => ({
  workload: W,
  tasks: Array.from({ length: tasks }, (_, i) => ({ chunkIndex: i, inputUri: `s3://in/${i}`, inputSha256: sha(`${seq}-${i}`) })),
  finalizer: { workload: FIN, parameters: { note: "done" } },
  ...extra,
});

async function claim(workload: string, n: number): Promise<Task[]> {
  const tasks = await q.claimTasks({ workerId: WORKER, workloads: [workload], maxTasks: n });
  expect(tasks).toHaveLength(n);
  return tasks;
}
const complete = (t: Task, usage?: Record<string, number>) =>
  q.completeTask({ taskId: t.id, workerId: WORKER, attempt: t.attempt, resultUri: "s3://out", resultSha256: sha(t.id), usage });

/** The finalizer job of a parent, once the parent ended. */
async function finalizerOf(parentId: string): Promise<string> {
  const parent = (await q.getJobStatus(parentId)).job;
  expect(parent.finalizerJobId, "the parent ended and enqueued its finalizer").not.toBeNull();
  return parent.finalizerJobId!;
}

describe("a finalizer's job", () => {
  it("is its parent's account's: its bound caller reads it, ListSettlements lists it with its usage, SettleJob settles it", async () => {
    const acct = await account();
    const bound = { account: acct };
    const parent = await q.createJob(withFinalizer(1, { billing: { reservedUnits: 100, billingKey: `fin-${seq}` } }), bound);
    const [t] = await claim(W, 1);
    await complete(t, { gpu_ms: 10 });
    const finId = await finalizerOf(parent.job.id);

    // Its account, and not the parent's billing key (that stays the parent's own).
    const fin = (await q.getJobStatus(finId, bound)).job;
    expect(fin).toMatchObject({ account: acct, parentJobId: parent.job.id, billing: null });
    const [ft] = await claim(FIN, 1);
    expect(ft.jobId).toBe(finId);
    await complete(ft, { gpu_ms: 5 });
    expect((await q.getJobStatus(finId, bound)).job).toMatchObject({ status: "completed", usage: { gpu_ms: 5 } });
    // Another account's bound caller does not see it.
    const other = await account();
    await expect(q.getJobStatus(finId, { account: other })).rejects.toBeInstanceOf(NotFoundError);

    const listed = (await q.listSettlements({ account: acct, pageSize: 100 })).jobs;
    expect(listed.map((j) => j.id).sort()).toEqual([parent.job.id, finId].sort());
    expect(listed.find((j) => j.id === finId)?.usage).toEqual({ gpu_ms: 5 });
    const settled = await q.settleJob({ jobId: finId, settlementKey: `fin-settle-${seq}`, settledUnits: 5 });
    expect(settled.settlement).toMatchObject({ settledUnits: 5, usage: { gpu_ms: 5 } });
  });

  it("of a parent billable by its billing context alone is billable too, with 0 units reserved", async () => {
    const parent = await q.createJob(withFinalizer(1, { billing: { reservedUnits: 30 } }));
    const [t] = await claim(W, 1);
    await complete(t);
    const finId = await finalizerOf(parent.job.id);
    const fin = (await q.getJobStatus(finId)).job;
    expect(fin).toMatchObject({ account: null, billing: { reservedUnits: 0, billingKey: null } });
    const [ft] = await claim(FIN, 1);
    await complete(ft, { tokens: 3 });
    expect((await q.listSettlements({ pageSize: 1000 })).jobs.map((j) => j.id)).toContain(finId);
    expect((await q.settleJob({ jobId: finId, settlementKey: "ctx-only", settledUnits: 0 })).settlement?.usage).toEqual({ tokens: 3 });
  });

  it("of a job of no account and no billing context stays unbillable, as before", async () => {
    const parent = await q.createJob(withFinalizer(1));
    const [t] = await claim(W, 1);
    await complete(t);
    const finId = await finalizerOf(parent.job.id);
    expect((await q.getJobStatus(finId)).job).toMatchObject({ account: null, billing: null });
    const [ft] = await claim(FIN, 1);
    await complete(ft);
  });
});

describe("the quota and a finalizer", () => {
  it("holds the finalizer's task from the parent's creation, so its enqueue at the parent's end never passes the quota", async () => {
    const acct = await account(3);
    const parent = await q.createJob(withFinalizer(2, { account: acct }));
    // Two tasks and the finalizer's, held.
    expect((await q.getAccount(acct)).pendingTasks).toBe(3);
    const refused = await q
      .createJob({ workload: W, account: acct, inputUri: "s3://in/x", inputSha256: sha(`x${seq}`) })
      .catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(QuotaExceededError);
    expect((refused as Error).message).toContain("has 3 pending tasks; 1 more would pass its max_pending_tasks of 3");
    // Leased tasks count: a worker's lease does not make room.
    const [a, b] = await claim(W, 2);
    expect((await q.getAccount(acct)).pendingTasks).toBe(3);
    await complete(a);
    expect((await q.getAccount(acct)).pendingTasks).toBe(2);
    await complete(b);
    // The parent ended: its held task is now the finalizer job's, one pending task of the account.
    const finId = await finalizerOf(parent.job.id);
    expect((await q.getJobStatus(finId)).job.account).toBe(acct);
    expect((await q.getAccount(acct)).pendingTasks).toBe(1);
    // Counted against the quota like any job's: 2 more fit, 3 do not.
    const three = await q.createJob({ ...withFinalizer(3, { account: acct }), finalizer: undefined }).catch((e: unknown) => e);
    expect(three).toBeInstanceOf(QuotaExceededError);
    const two = await q.createJob({ ...withFinalizer(2, { account: acct }), finalizer: undefined });
    expect((await q.getAccount(acct)).pendingTasks).toBe(3);
    const [ft] = await claim(FIN, 1);
    await complete(ft);
    expect((await q.getAccount(acct)).pendingTasks).toBe(2);
    await q.cancelJob({ jobId: two.job.id });
  });

  it("a job that ends with no finalizer to run (failed, run_on_failure unset) gives its held task back", async () => {
    const acct = await account(2);
    const parent = await q.createJob(withFinalizer(1, { account: acct }));
    expect((await q.getAccount(acct)).pendingTasks).toBe(2);
    await q.cancelJob({ jobId: parent.job.id, reason: "stop" });
    expect((await q.getJobStatus(parent.job.id)).job.finalizerJobId).toBeNull();
    expect((await q.getAccount(acct)).pendingTasks).toBe(0);
  });
});

describe("a schedule's tick", () => {
  it("creates its job and the job's finalizer under the template's account", async () => {
    const acct = await account();
    const name = `fin-tick-${seq}`;
    await q.putSchedule({ name, cron: "0 0 1 1 *", job: withFinalizer(1, { account: acct }) });
    await f.pool.query(`UPDATE schedules SET next_fire_at = now() WHERE name = $1`, [name]);
    expect((await q.fireSchedules()).failures).toEqual([]);
    const { rows } = await f.pool.query<{ id: string; account: string }>(`SELECT id, account FROM jobs WHERE schedule_name = $1`, [name]);
    expect(rows.map((r) => r.account)).toEqual([acct]);
    const [t] = await claim(W, 1);
    expect(t.jobId).toBe(rows[0].id);
    await complete(t);
    const finId = await finalizerOf(rows[0].id);
    expect((await q.getJobStatus(finId, { account: acct })).job.account).toBe(acct);
    const [ft] = await claim(FIN, 1);
    await complete(ft);
  });
});
