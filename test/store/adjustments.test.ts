// Usage and settlement agree for good, against a real PostgreSQL: usage accepted after its job was
// settled (a late result) is an adjustment a billing service lists and settles once, never a
// silent change to the closed settlement, and a job's usage is always its settlement's usage plus
// its adjustments'; a settle and a late result racing on two coordinators put the late usage in
// exactly one of the two. The account's rollup equals the sum of its final jobs' usage after
// retries and late results too (counted again as a difference, moving to the hour the job ended).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { NotFoundError, SettlementConflictError, ValidationError } from "../../src/queue/errors.js";
import type { Task, Usage } from "../../src/queue/types.js";
import { UsageRollup } from "../../src/store/postgres/background/usage-rollup.js";
import { PostgresQueue } from "../../src/store/postgres/store.js";
import { queueFixture, sha, TEST_STORE_OPTIONS, type QueueFixture } from "../support/queue.js";

const W = "adj_w";
const WORKER = "adj-worker";

let f: QueueFixture;
let q: PostgresQueue;
let other: PostgresQueue;
let rollup: UsageRollup;
let seq = 0;

beforeAll(async () => {
  f = await queueFixture();
  q = f.queue;
  other = new PostgresQueue(f.newPool(), TEST_STORE_OPTIONS);
  rollup = new UsageRollup(f.pool);
  await q.putWorkload({ name: W, maxAttempts: 2, leaseSeconds: 60 });
});
afterAll(async () => {
  other?.stopTimers();
  await f?.close();
});

async function account(): Promise<string> {
  const name = `adj-${++seq}`;
  await q.putAccount({ name });
  return name;
}
async function job(acct: string, tasks = 1, failFast = true): Promise<string> {
  const r = await q.createJob({
    workload: W,
    account: acct,
    failurePolicy: failFast ? "fail_fast" : "continue",
    tasks: Array.from({ length: tasks }, (_, i) => ({ chunkIndex: i, inputUri: `s3://in/${i}`, inputSha256: sha(`${seq}-${i}`) })),
  });
  return r.job.id;
}
async function claim(n: number, queue = q): Promise<Task[]> {
  const tasks = await queue.claimTasks({ workerId: WORKER, workloads: [W], maxTasks: n });
  expect(tasks).toHaveLength(n);
  return tasks;
}
const result = (t: Task, usage?: Usage) => ({
  taskId: t.id,
  workerId: WORKER,
  attempt: t.attempt,
  resultUri: "s3://out",
  resultSha256: sha(t.id),
  usage,
});

/** Every adjustment of a job, settled or not. */
async function adjustmentsOf(jobId: string): Promise<Array<{ usage: Usage; settled: boolean }>> {
  const { rows } = await f.pool.query<{ usage: Usage; settled: boolean }>(
    `SELECT usage, settled_at IS NOT NULL AS settled FROM usage_adjustments WHERE job_id = $1 ORDER BY created_at`,
    [jobId],
  );
  return rows;
}

describe("usage after its job was settled", () => {
  it("is an adjustment: listed, settled once; the settlement's usage stays what it covered", async () => {
    const acct = await account();
    const jobId = await job(acct);
    const [t] = await claim(1);
    await q.cancelJob({ jobId, reason: "stop" });
    const settled = await q.settleJob({ jobId, settlementKey: `s-${seq}`, settledUnits: 0 });
    expect(settled.settlement).toMatchObject({ settledUnits: 0, usage: {} });

    // The late result is accepted (the work was done) and its usage is the job's...
    const late = await q.completeTask(result(t, { gpu_ms: 5000 }));
    expect(late).toMatchObject({ status: "completed", usage: { gpu_ms: 5000 } });
    const after = (await q.getJobStatus(jobId)).job;
    expect(after.usage).toEqual({ gpu_ms: 5000 });
    // ...but not the closed settlement's: an adjustment, listed for the billing service.
    expect(after.settlement).toMatchObject({ settledUnits: 0, usage: {} });
    expect((await q.listSettlements({ account: acct })).jobs).toEqual([]);
    const listed = (await q.listAdjustments({ account: acct })).adjustments;
    expect(listed).toHaveLength(1);
    expect(listed[0]).toMatchObject({
      jobId,
      taskId: t.id,
      attempt: t.attempt,
      account: acct,
      workload: W,
      usage: { gpu_ms: 5000 },
      settlement: null,
    });

    // Settled once: the same key and units answer it again; others are a conflict naming what was recorded.
    const input = { adjustmentId: listed[0].id, settlementKey: `adj-${seq}`, settledUnits: 50 };
    const done = await q.settleAdjustment(input);
    expect(done.settlement).toMatchObject({ settlementKey: `adj-${seq}`, settledUnits: 50, usage: { gpu_ms: 5000 } });
    expect(await other.settleAdjustment(input)).toMatchObject({ settlement: { settledUnits: 50 } });
    const conflict = await q.settleAdjustment({ ...input, settledUnits: 51 }).catch((e: unknown) => e);
    expect(conflict).toBeInstanceOf(SettlementConflictError);
    expect((conflict as Error).message).toContain("settled_units 50");
    expect((await q.listAdjustments({ account: acct })).adjustments).toEqual([]);
    // A replay of the late result adds nothing and makes no second adjustment.
    expect(await q.completeTask(result(t, { gpu_ms: 5000 }))).toMatchObject({ status: "completed" });
    expect(await adjustmentsOf(jobId)).toEqual([{ usage: { gpu_ms: 5000 }, settled: true }]);
  });

  it("of a fail_fast job ended by another task's failure is an adjustment too", async () => {
    const acct = await account();
    const jobId = await job(acct, 2);
    const [a, b] = await claim(2);
    await q.failTask({ taskId: a.id, workerId: WORKER, attempt: a.attempt, errorCode: "boom", retryable: false, usage: { gpu_ms: 1 } });
    expect((await q.getJobStatus(jobId)).job.status).toBe("failed");
    expect((await q.settleJob({ jobId, settlementKey: `s-${seq}`, settledUnits: 1 })).settlement?.usage).toEqual({ gpu_ms: 1 });
    await q.completeTask(result(b, { gpu_ms: 777 }));
    const ended = (await q.getJobStatus(jobId)).job;
    expect(ended.usage).toEqual({ gpu_ms: 778 });
    expect(ended.settlement?.usage).toEqual({ gpu_ms: 1 });
    expect(await adjustmentsOf(jobId)).toEqual([{ usage: { gpu_ms: 777 }, settled: false }]);
  });

  it("before the settlement is in the settlement, and no adjustment", async () => {
    const acct = await account();
    const jobId = await job(acct);
    const [t] = await claim(1);
    await q.cancelJob({ jobId });
    await q.completeTask(result(t, { tokens: 9 }));
    expect((await q.listSettlements({ account: acct })).jobs.map((j) => j.usage)).toEqual([{ tokens: 9 }]);
    expect((await q.settleJob({ jobId, settlementKey: `s-${seq}`, settledUnits: 9 })).settlement?.usage).toEqual({ tokens: 9 });
    expect(await adjustmentsOf(jobId)).toEqual([]);
  });

  it("racing the settlement on two coordinators lands in exactly one of the two", async () => {
    const acct = await account();
    for (let i = 0; i < 12; i++) {
      const jobId = await job(acct);
      const [t] = await claim(1);
      await q.cancelJob({ jobId });
      const usage = { gpu_ms: 100 + i };
      await Promise.all([
        q.settleJob({ jobId, settlementKey: `race-${i}`, settledUnits: 1 }),
        (i % 2 ? q : other).completeTask(result(t, usage)),
      ]);
      const settlement = (await q.getJobStatus(jobId)).job.settlement!;
      const adjustments = await adjustmentsOf(jobId);
      const inSettlement = settlement.usage.gpu_ms === usage.gpu_ms;
      expect(inSettlement ? adjustments : [adjustments[0]?.usage], `round ${i}`).toEqual(inSettlement ? [] : [usage]);
      if (inSettlement) expect(settlement.usage).toEqual(usage);
      else expect(settlement.usage).toEqual({});
    }
  });

  it("refuses a settlement without settled_units, a blank key, an unknown or another account's adjustment", async () => {
    const acct = await account();
    const jobId = await job(acct);
    const [t] = await claim(1);
    await q.cancelJob({ jobId });
    await q.settleJob({ jobId, settlementKey: `s-${seq}`, settledUnits: 0 });
    await q.completeTask(result(t, { gpu_ms: 3 }));
    const [adj] = (await q.listAdjustments({ account: acct })).adjustments;
    const fields = async (p: Promise<unknown>) => ((await p.catch((e: unknown) => e)) as ValidationError).violations.map((v) => v.field);
    expect(await fields(q.settleAdjustment({ adjustmentId: adj.id, settlementKey: "k" }))).toEqual(["settled_units"]);
    expect(await fields(q.settleAdjustment({ adjustmentId: adj.id, settlementKey: " ", settledUnits: 1 }))).toEqual(["settlement_key"]);
    expect(await fields(q.settleAdjustment({ adjustmentId: "nope", settlementKey: "k", settledUnits: 1 }))).toEqual(["adjustment_id"]);
    await expect(
      q.settleAdjustment({ adjustmentId: adj.id, settlementKey: "k", settledUnits: 1 }, { account: "adj-none" }),
    ).rejects.toBeInstanceOf(NotFoundError);
    expect((await q.listAdjustments({}, { account: "adj-none" })).adjustments).toEqual([]);
    expect((await q.listAdjustments({ account: acct })).adjustments).toHaveLength(1);
  });
});

describe("the account's rollup", () => {
  /** The account's usage over all time, from the rollup (GetAccountUsage), summed over workloads. */
  async function rolled(acct: string): Promise<Usage> {
    await rollup.runOnce(undefined);
    const total: Usage = {};
    for (const w of (await q.getAccountUsage({ account: acct })).workloads)
      for (const [k, v] of Object.entries(w.usage)) total[k] = (total[k] ?? 0) + v;
    return total;
  }

  it("equals the job's usage after a retry: the job is counted again as the difference, in the hour it ended", async () => {
    const acct = await account();
    const jobId = await job(acct, 2);
    const [a, b] = await claim(2);
    await q.completeTask(result(a, { gpu_ms: 5 }));
    await q.failTask({ taskId: b.id, workerId: WORKER, attempt: b.attempt, errorCode: "boom", retryable: false, usage: { gpu_ms: 2 } });
    expect((await q.getJobStatus(jobId)).job.status).toBe("failed");
    // Counted three hours ago.
    await f.pool.query(`UPDATE jobs SET completed_at = now() - interval '3 hours' WHERE id = $1`, [jobId]);
    expect(await rolled(acct)).toEqual({ gpu_ms: 7 });
    const past = { account: acct, from: new Date(Date.now() - 4 * 3600_000), to: new Date(Date.now() - 2 * 3600_000) };
    expect((await q.getAccountUsage(past)).workloads).toMatchObject([{ jobs: 1, tasksCompleted: 1, tasksFailed: 1, usage: { gpu_ms: 7 } }]);

    await q.retryJob({ jobId });
    const [again] = await claim(1);
    await q.completeTask(result(again, { gpu_ms: 5 }));
    expect((await q.getJobStatus(jobId)).job).toMatchObject({ status: "completed", usage: { gpu_ms: 12 } });
    expect(await rolled(acct)).toEqual({ gpu_ms: 12 });
    // One job, moved to the hour it ended now; nothing left three hours ago.
    expect((await q.getAccountUsage(past)).workloads).toEqual([]);
    expect((await q.getAccountUsage({ account: acct })).workloads).toMatchObject([{ jobs: 1, tasksCompleted: 2, tasksFailed: 0 }]);
  });

  it("equals the job's usage after a late result that came after the job was counted", async () => {
    const acct = await account();
    const jobId = await job(acct);
    const [t] = await claim(1);
    await q.cancelJob({ jobId });
    expect(await rolled(acct)).toEqual({});
    await q.completeTask(result(t, { tokens: 40 }));
    expect(await rolled(acct)).toEqual({ tokens: 40 });
    expect((await q.getAccountUsage({ account: acct })).workloads).toMatchObject([{ jobs: 1, tasksCompleted: 1 }]);
  });
});
