// Accounts against real PostgreSQL: PutAccount/GetAccount/ListAccounts, and what an account does to
// CreateJob: it must exist, lends its priority and its name as the concurrency key, holds the
// job's billing context, refuses past its quota with nothing written, and answers a reused
// billing key with the first job.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  IdempotencyConflictError,
  NotFoundError,
  PermissionDeniedError,
  QuotaExceededError,
  ValidationError,
} from "../../src/queue/errors.js";
import type { CreateJobInput } from "../../src/queue/types.js";
import { PostgresQueue } from "../../src/store/postgres/store.js";
import { queueFixture, sha, TEST_STORE_OPTIONS, type QueueFixture } from "../support/queue.js";

let f: QueueFixture;
let q: PostgresQueue;

beforeAll(async () => {
  f = await queueFixture();
  q = f.queue;
  await q.putWorkload({ name: "acc_w" });
});
afterAll(async () => {
  await f?.close();
});

const job = (account: string | undefined, tasks = 1, extra: Partial<CreateJobInput> = {}): CreateJobInput => ({
  workload: "acc_w",
  account,
  tasks: Array.from({ length: tasks }, (_, i) => ({ chunkIndex: i, inputUri: `s3://in/${i}`, inputSha256: sha(i) })),
  ...extra,
});

/** What the database holds of accounts and jobs: a refused call changes none of it. */
async function written(): Promise<number[]> {
  const { rows } = await f.pool.query(
    `SELECT (SELECT count(*) FROM accounts)::int AS a, (SELECT count(*) FROM jobs)::int AS j, (SELECT count(*) FROM tasks)::int AS t`,
  );
  return [rows[0].a, rows[0].j, rows[0].t];
}

describe("accounts", () => {
  it("puts, gets and lists accounts with their pending tasks", async () => {
    const put = await q.putAccount({ name: "acc-one", maxPendingTasks: 10, priority: 5 });
    expect(put).toMatchObject({ name: "acc-one", maxPendingTasks: 10, priority: 5, pendingTasks: 0 });
    await q.createJob(job("acc-one", 3));
    expect(await q.getAccount("acc-one")).toMatchObject({ pendingTasks: 3, maxPendingTasks: 10 });
    // A PUT states the whole account: what it leaves out is its default.
    const again = await q.putAccount({ name: "acc-one", priority: 2 });
    expect(again).toMatchObject({ maxPendingTasks: 0, priority: 2, pendingTasks: 3 });
    expect(again.updatedAt.getTime()).toBeGreaterThanOrEqual(put.updatedAt.getTime());
    await q.putAccount({ name: "acc-a" });
    const names = (await q.listAccounts()).map((a) => a.name);
    expect(names).toEqual([...names].sort());
    expect(names).toEqual(expect.arrayContaining(["acc-a", "acc-one"]));
  });

  it("counts only pending tasks of unfinished jobs", async () => {
    await q.putAccount({ name: "acc-count" });
    const { job: j } = await q.createJob(job("acc-count", 2));
    await q.createJob(job("acc-count", 1));
    expect((await q.getAccount("acc-count")).pendingTasks).toBe(3);
    await q.cancelJob({ jobId: j.id, reason: "test" });
    expect((await q.getAccount("acc-count")).pendingTasks).toBe(1);
  });

  it("answers NOT_FOUND for an unknown account and refuses bad settings naming the field, writing nothing", async () => {
    await expect(q.getAccount("acc-nobody")).rejects.toBeInstanceOf(NotFoundError);
    const before = await written();
    for (const [input, field] of [
      [{ name: "Bad Name" }, "name"],
      [{ name: "" }, "name"],
      [{ name: "acc-x", maxPendingTasks: -1 }, "max_pending_tasks"],
      [{ name: "acc-x", maxPendingTasks: 1.5 }, "max_pending_tasks"],
      [{ name: "acc-x", priority: 1_000_001 }, "priority"],
    ] as const) {
      const err = await q.putAccount(input).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ValidationError);
      expect((err as ValidationError).field).toBe(field);
    }
    expect(await written()).toEqual(before);
  });
});

describe("CreateJob with an account", () => {
  it("refuses an unknown account with NOT_FOUND naming it, writing nothing", async () => {
    const before = await written();
    const err = await q.createJob(job("acc-ghost")).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NotFoundError);
    expect((err as NotFoundError).field).toBe("account");
    expect((err as Error).message).toContain("acc-ghost");
    expect(await written()).toEqual(before);
  });

  it("takes the account's priority when the job sets none, and its name as the concurrency key", async () => {
    await q.putAccount({ name: "acc-tier", priority: 40 });
    const own = await q.createJob(job("acc-tier", 2));
    expect(own.job).toMatchObject({ account: "acc-tier", priority: 40, concurrencyKey: "acc-tier" });
    expect(own.tasks.map((t) => [t.priority, t.concurrencyKey])).toEqual([
      [40, "acc-tier"],
      [40, "acc-tier"],
    ]);
    const { rows } = await f.pool.query(`SELECT priority, concurrency_key FROM tasks WHERE job_id = $1`, [own.job.id]);
    expect(rows).toEqual([
      { priority: 40, concurrency_key: "acc-tier" },
      { priority: 40, concurrency_key: "acc-tier" },
    ]);
    const set = await q.createJob(job("acc-tier", 1, { priority: -3, concurrencyKey: "mine" }));
    expect(set.job).toMatchObject({ priority: -3, concurrencyKey: "mine" });
    // A large job (by COPY) too.
    const big = await q.createJob(job("acc-tier", 1000));
    expect(big.job.priority).toBe(40);
    const { rows: bigRows } = await f.pool.query(`SELECT DISTINCT priority, concurrency_key FROM tasks WHERE job_id = $1`, [big.job.id]);
    expect(bigRows).toEqual([{ priority: 40, concurrency_key: "acc-tier" }]);
  });

  it("reads account and billing back through GetJob and lists an account's jobs", async () => {
    await q.putAccount({ name: "acc-read" });
    const { job: j } = await q.createJob(job("acc-read", 1, { billing: { reservedUnits: 120, billingKey: "inv-1" } }));
    expect(j).toMatchObject({ account: "acc-read", billing: { reservedUnits: 120, billingKey: "inv-1" } });
    const { job: read } = await q.getJobStatus(j.id);
    expect(read).toMatchObject({ account: "acc-read", billing: { reservedUnits: 120, billingKey: "inv-1" } });
    const plain = await q.createJob(job(undefined));
    expect(plain.job).toMatchObject({ account: null, billing: null });
    const listed = await q.listJobs({ account: "acc-read" });
    expect(listed.jobs.map((x) => x.id)).toEqual([j.id]);
    expect((await q.listJobs({ account: "acc-read", status: "completed" })).jobs).toEqual([]);
    expect((await q.listJobs({ account: "acc-read", status: "pending" })).jobs.map((x) => x.id)).toEqual([j.id]);
  });

  it("answers a reused billing key with the first job, and refuses a different request under it", async () => {
    await q.putAccount({ name: "acc-key" });
    const first = await q.createJob(job("acc-key", 2, { billing: { reservedUnits: 5, billingKey: "k1" } }));
    const before = await written();
    const again = await q.createJob(job("acc-key", 2, { billing: { reservedUnits: 5, billingKey: "k1" } }));
    expect(again.created).toBe(false);
    expect(again.job.id).toBe(first.job.id);
    expect(again.tasks.map((t) => t.id)).toEqual(first.tasks.map((t) => t.id));
    const other = await q.createJob(job("acc-key", 3, { billing: { reservedUnits: 5, billingKey: "k1" } })).catch((e: unknown) => e);
    expect(other).toBeInstanceOf(IdempotencyConflictError);
    expect((other as Error).message).toMatch(/^billing\.billing_key: /);
    expect(await written()).toEqual(before);
    // The key is the account's: another account (or none) may use it.
    await q.putAccount({ name: "acc-key2" });
    expect((await q.createJob(job("acc-key2", 2, { billing: { reservedUnits: 5, billingKey: "k1" } }))).created).toBe(true);
    expect((await q.createJob(job(undefined, 2, { billing: { billingKey: "k1" } }))).created).toBe(true);
  });

  it("scopes idempotency keys to the account: another account's use of a key is neither found nor told", async () => {
    await q.putAccount({ name: "acc-ik-a" });
    await q.putAccount({ name: "acc-ik-b" });
    const own = await q.createJob(job("acc-ik-a", 1, { idempotencyKey: "acc-ik" }));
    const mine = await q.createJob(job("acc-ik-a", 2, { idempotencyKey: "acc-ik" })).catch((e: unknown) => e);
    expect(mine).toBeInstanceOf(IdempotencyConflictError);
    expect((mine as Error).message).toContain(own.job.id);
    // Another account (a squatter before the owner, or a stranger after): a job of its own, created,
    // exactly as for a key nobody used; the first account's replay still answers its own job.
    const theirs = await q.createJob(job("acc-ik-b", 2, { idempotencyKey: "acc-ik" }));
    expect(theirs.created).toBe(true);
    expect(theirs.job.id).not.toBe(own.job.id);
    expect(theirs.job.account).toBe("acc-ik-b");
    expect(await q.createJob(job("acc-ik-a", 1, { idempotencyKey: "acc-ik" }))).toMatchObject({ created: false, job: { id: own.job.id } });
    expect(await q.createJob(job("acc-ik-b", 2, { idempotencyKey: "acc-ik" }))).toMatchObject({
      created: false,
      job: { id: theirs.job.id },
    });
    // The jobs without an account share one namespace, as before accounts (single-tenant mode).
    const open = await q.createJob(job(undefined, 1, { idempotencyKey: "acc-ik" }));
    expect(open.created).toBe(true);
    const again = await q.createJob(job(undefined, 2, { idempotencyKey: "acc-ik" })).catch((e: unknown) => e);
    expect(again).toBeInstanceOf(IdempotencyConflictError);
    expect((again as Error).message).toContain(open.job.id);
  });

  it("refuses bad billing naming the field, writing nothing", async () => {
    await q.putAccount({ name: "acc-bad" });
    const before = await written();
    for (const [billing, field] of [
      [{ reservedUnits: -1 }, "billing.reserved_units"],
      [{ reservedUnits: 1.5 }, "billing.reserved_units"],
      [{ reservedUnits: 1, billingKey: "x".repeat(257) }, "billing.billing_key"],
    ] as const) {
      const err = await q.createJob(job("acc-bad", 1, { billing })).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ValidationError);
      expect((err as ValidationError).field).toBe(field);
    }
    const bad = await q.createJob(job("Not-An-Account")).catch((e: unknown) => e);
    expect((bad as ValidationError).field).toBe("account");
    expect(await written()).toEqual(before);
  });

  it("takes a bound caller's account, and refuses another with PERMISSION_DENIED, writing nothing", async () => {
    await q.putAccount({ name: "acc-bound" });
    await q.putAccount({ name: "acc-other" });
    const { job: j } = await q.createJob(job(undefined), { account: "acc-bound" });
    expect(j.account).toBe("acc-bound");
    expect((await q.createJob(job("acc-bound"), { account: "acc-bound" })).job.account).toBe("acc-bound");
    const before = await written();
    const err = await q.createJob(job("acc-other"), { account: "acc-bound" }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(PermissionDeniedError);
    expect(await written()).toEqual(before);
  });
});

describe("max_pending_tasks", () => {
  it("refuses a CreateJob past the quota with the numbers, writing nothing; a replay is still answered", async () => {
    await q.putAccount({ name: "acc-quota", maxPendingTasks: 5 });
    const first = await q.createJob(job("acc-quota", 3, { idempotencyKey: "acc-quota-1" }));
    const before = await written();
    const err = await q.createJob(job("acc-quota", 3)).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(QuotaExceededError);
    expect((err as Error).message).toContain("3 pending tasks");
    expect((err as Error).message).toContain("3 more");
    expect((err as Error).message).toContain("max_pending_tasks of 5");
    expect(await written()).toEqual(before);
    // The same request again is a replay of the first job, not a new one past the quota.
    const replay = await q.createJob(job("acc-quota", 3, { idempotencyKey: "acc-quota-1" }));
    expect(replay).toMatchObject({ created: false, job: { id: first.job.id } });
    // Up to the limit exactly is allowed.
    await q.createJob(job("acc-quota", 2));
    expect((await q.getAccount("acc-quota")).pendingTasks).toBe(5);
  });

  it("holds for a schedule's ticks: a tick past the quota is recorded failed with the numbers, and writes no job", async () => {
    await q.putAccount({ name: "acc-tick", maxPendingTasks: 1, priority: 6 });
    await q.putSchedule({ name: "acc-tick", cron: "0 0 1 1 *", job: job("acc-tick") });
    const fire = async () => {
      await f.pool.query(`UPDATE schedules SET next_fire_at = now() WHERE name = 'acc-tick'`);
      return q.fireSchedules();
    };
    expect((await fire()).failures).toEqual([]);
    const { rows } = await f.pool.query(`SELECT account, priority, concurrency_key FROM jobs WHERE schedule_name = 'acc-tick'`);
    expect(rows).toEqual([{ account: "acc-tick", priority: 6, concurrency_key: "acc-tick" }]);
    const second = await fire();
    expect(second.failures.map((x) => x.message)).toEqual([
      'account: account "acc-tick" has 1 pending tasks; 1 more would pass its max_pending_tasks of 1',
    ]);
    expect(await f.count("jobs", "schedule_name = 'acc-tick'")).toBe(1);
  });

  it("holds across coordinators creating at once: the pending total never passes the limit", async () => {
    const limit = 12;
    await q.putAccount({ name: "acc-race", maxPendingTasks: limit });
    // Four coordinators (their own pools) and 24 CreateJobs of 1 or 2 tasks at once: 36 tasks asked.
    const coordinators = [q, ...Array.from({ length: 3 }, () => new PostgresQueue(f.newPool(), TEST_STORE_OPTIONS))];
    const sizes = Array.from({ length: 24 }, (_, i) => 1 + (i % 2));
    const outcomes = await Promise.allSettled(
      sizes.map((n, i) => coordinators[i % coordinators.length].createJob(job("acc-race", n, { idempotencyKey: `race-${i}` }))),
    );
    const accepted = outcomes.flatMap((o, i) => (o.status === "fulfilled" ? [sizes[i]] : []));
    const refused = outcomes.flatMap((o, i) => (o.status === "rejected" ? [i] : []));
    for (const o of outcomes) if (o.status === "rejected") expect(o.reason).toBeInstanceOf(QuotaExceededError);
    const total = accepted.reduce((a, b) => a + b, 0);
    expect(total).toBeLessThanOrEqual(limit);
    // Refusals happen only when the next job would not fit: the quota is filled to within one job.
    expect(total).toBeGreaterThanOrEqual(limit - 1);
    expect(refused.length).toBeGreaterThan(0);
    // Every refused call wrote nothing: no job with its key, and the rows are exactly the accepted ones.
    const { rows } = await f.pool.query(
      `SELECT count(*)::int AS jobs, (SELECT count(*)::int FROM tasks t JOIN jobs j ON j.id = t.job_id WHERE j.account = 'acc-race') AS tasks
       FROM jobs WHERE account = 'acc-race'`,
    );
    expect(rows[0]).toEqual({ jobs: accepted.length, tasks: total });
    const keys = await f.pool.query(`SELECT idempotency_key FROM jobs WHERE idempotency_key = ANY($1::text[])`, [
      refused.map((i) => `race-${i}`),
    ]);
    expect(keys.rows).toEqual([]);
    expect((await q.getAccount("acc-race")).pendingTasks).toBe(total);
  });
});
