// The money path's property, over random histories on two coordinators (two stores, two pools, one
// PostgreSQL): jobs of two accounts (one with a quota), some with finalizers, some billable by a
// billing context alone; claims, results and failures with usage (retried or not), expired leases,
// cancels, retries, late results, settlements and adjustments' settlements, the usage rollup, some
// of them two at a time. A seeded RNG makes each history repeatable (LEASEHOLD_PROPERTY_SEED picks
// another; a failure names its seed). After each step the quota holds and every settled job's
// usage is its settlement's plus its adjustments'; at the end, once everything is final and
// settled:
// - every unit of usage the workers reported and the coordinator accepted is in exactly one thing a
//   billing service settled: a job's settlement or an adjustment (per account, per counter);
// - each job's usage is its settlement's plus its adjustments';
// - each account's rollup (GetAccountUsage) equals the sum of its jobs' usage.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { QueueError } from "../../src/queue/errors.js";
import type { Task, Usage } from "../../src/queue/types.js";
import { UsageRollup } from "../../src/store/postgres/background/usage-rollup.js";
import { PostgresQueue } from "../../src/store/postgres/store.js";
import { queueFixture, sha, TEST_STORE_OPTIONS, type QueueFixture } from "../support/queue.js";

const W = "prop_w";
const FIN = "prop_fin";
const ACCOUNTS = ["prop-a", "prop-b"] as const;
const QUOTA = { "prop-a": 8 } as Record<string, number>;
/** Jobs billable by a billing context alone are counted under this name. */
const NO_ACCOUNT = "";
const STEPS = 300;

let f: QueueFixture;
let coordinators: PostgresQueue[];
let rollups: UsageRollup[];

beforeAll(async () => {
  f = await queueFixture();
  coordinators = [f.queue, new PostgresQueue(f.newPool(), TEST_STORE_OPTIONS)];
  rollups = [new UsageRollup(f.pool), new UsageRollup(f.newPool())];
  await f.queue.putWorkload({ name: W, maxAttempts: 3, leaseSeconds: 300 });
  await f.queue.putWorkload({ name: FIN, maxAttempts: 2, leaseSeconds: 300 });
  for (const a of ACCOUNTS) await f.queue.putAccount({ name: a, maxPendingTasks: QUOTA[a] ?? 0 });
});
afterAll(async () => {
  coordinators?.[1]?.stopTimers();
  await f?.close();
});

/** mulberry32: a small seeded PRNG, so a history can be replayed from its seed. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function add(into: Usage, u: Usage | undefined | null): void {
  for (const [k, v] of Object.entries(u ?? {})) into[k] = (into[k] ?? 0) + v;
}
/** Usage without its zero counters (a counter reported as 0 and one never reported are the same money). */
const nonZero = (u: Usage) => Object.fromEntries(Object.entries(u).filter(([, v]) => v !== 0));

interface Held {
  task: Task;
  worker: string;
  account: string;
}

class History {
  readonly random: () => number;
  /** usage of every report the coordinator accepted, per account */
  readonly accepted = new Map<string, Usage>();
  readonly accountOf = new Map<string, string>();
  held: Held[] = [];
  private n = 0;
  readonly log: string[] = [];

  constructor(readonly seed: number) {
    this.random = rng(seed);
  }

  pick<T>(xs: readonly T[]): T {
    return xs[Math.floor(this.random() * xs.length)];
  }
  chance(p: number): boolean {
    return this.random() < p;
  }
  get q(): PostgresQueue {
    return this.pick(coordinators);
  }
  usage(): Usage | undefined {
    if (this.chance(0.2)) return undefined;
    const u: Usage = { gpu_ms: Math.floor(this.random() * 100) };
    if (this.chance(0.5)) u.tokens = Math.floor(this.random() * 10);
    return u;
  }
  accept(account: string, u: Usage | undefined): void {
    const total = this.accepted.get(account) ?? {};
    add(total, u);
    this.accepted.set(account, total);
  }

  /** Runs `call`; a refusal (a QueueError) is an outcome like any other, anything else fails the history. */
  async attempt<T>(what: string, call: () => Promise<T>): Promise<T | undefined> {
    try {
      const r = await call();
      this.log.push(`${what}: ok`);
      return r;
    } catch (err) {
      if (!(err instanceof QueueError)) throw err;
      this.log.push(`${what}: ${err.constructor.name}`);
      return undefined;
    }
  }

  async create(): Promise<void> {
    const billingOnly = this.chance(0.1);
    const account = billingOnly ? NO_ACCOUNT : this.pick(ACCOUNTS);
    const tasks = 1 + Math.floor(this.random() * 3);
    const r = await this.attempt("create", () =>
      this.q.createJob({
        workload: W,
        ...(account ? { account } : { billing: { reservedUnits: 100 } }),
        failurePolicy: this.chance(0.5) ? "fail_fast" : "continue",
        tasks: Array.from({ length: tasks }, (_, i) => ({
          chunkIndex: i,
          inputUri: `s3://in/${i}`,
          inputSha256: sha(`${this.seed}-${++this.n}`),
        })),
        ...(this.chance(0.3) ? { finalizer: { workload: FIN, runOnFailure: this.chance(0.5) } } : {}),
      }),
    );
    if (r) this.accountOf.set(r.job.id, account);
  }

  async claim(): Promise<void> {
    const worker = this.pick(["w1", "w2", "w3"]);
    const tasks = await this.q.claimTasks({ workerId: worker, workloads: [W, FIN], maxTasks: 1 + Math.floor(this.random() * 3) });
    for (const task of tasks) this.held.push({ task, worker, account: await this.account(task.jobId) });
  }

  /** A job's account; a finalizer's job (made by the coordinator) is looked up once. */
  async account(jobId: string): Promise<string> {
    let a = this.accountOf.get(jobId);
    if (a === undefined) {
      a = (await f.queue.getJobStatus(jobId)).job.account ?? NO_ACCOUNT;
      this.accountOf.set(jobId, a);
    }
    return a;
  }

  takeHeld(): Held | undefined {
    if (this.held.length === 0) return undefined;
    const i = Math.floor(this.random() * this.held.length);
    return this.held.splice(i, 1)[0];
  }

  async report(): Promise<void> {
    const h = this.takeHeld();
    if (!h) return;
    const usage = this.usage();
    const lease = { taskId: h.task.id, workerId: h.worker, attempt: h.task.attempt };
    if (this.chance(0.75)) {
      const done = await this.attempt("complete", () =>
        this.q.completeTask({ ...lease, resultUri: "s3://out", resultSha256: sha(h.task.id), usage }),
      );
      if (done) this.accept(h.account, usage);
    } else {
      const retryable = this.chance(0.6);
      const failed = await this.attempt("fail", () =>
        this.q.failTask({ ...lease, errorCode: "boom", retryable, retryAfterSeconds: 0, usage }),
      );
      if (failed) this.accept(h.account, usage);
    }
  }

  async expire(): Promise<void> {
    const h = this.held[Math.floor(this.random() * this.held.length)];
    if (!h) return;
    await f.pool.query(`UPDATE tasks SET lease_expires_at = now() - interval '1 second' WHERE id = $1 AND status = 'leased'`, [h.task.id]);
    await this.q.expireLeases();
  }

  async jobs(where: string): Promise<string[]> {
    return (await f.pool.query<{ id: string }>(`SELECT id FROM jobs WHERE ${where} ORDER BY id`)).rows.map((r) => r.id);
  }

  async cancel(): Promise<void> {
    const open = await this.jobs(`status IN ('pending', 'running')`);
    if (open.length) await this.attempt("cancel", () => this.q.cancelJob({ jobId: this.pick(open), reason: "property" }));
  }

  async retry(): Promise<void> {
    const final = await this.jobs(`status IN ('failed', 'cancelled', 'completed') AND settled_at IS NULL`);
    if (final.length) await this.attempt("retry", () => this.q.retryJob({ jobId: this.pick(final) }));
  }

  async settle(): Promise<void> {
    const listed = (await this.q.listSettlements({ pageSize: 20 })).jobs;
    if (listed.length === 0) return;
    const j = this.pick(listed);
    await this.attempt("settle", () => this.q.settleJob({ jobId: j.id, settlementKey: `s-${j.id}`, settledUnits: j.usage?.gpu_ms ?? 0 }));
  }

  async settleAdjustment(): Promise<void> {
    const listed = (await this.q.listAdjustments({ pageSize: 20 })).adjustments;
    if (listed.length === 0) return;
    const a = this.pick(listed);
    await this.attempt("settle adjustment", () =>
      this.q.settleAdjustment({ adjustmentId: a.id, settlementKey: `a-${a.id}`, settledUnits: a.usage.gpu_ms ?? 0 }),
    );
  }

  async step(): Promise<void> {
    const r = this.random();
    if (r < 0.16) return this.create();
    if (r < 0.36) return this.claim();
    if (r < 0.62) return this.report();
    if (r < 0.66) return this.expire();
    if (r < 0.74) return this.cancel();
    if (r < 0.8) return this.retry();
    if (r < 0.9) return this.settle();
    if (r < 0.95) return this.settleAdjustment();
    await this.pick(rollups).runOnce(undefined);
  }
}

/** Every settled job's usage is its settlement's plus its adjustments'; an unsettled job has none. */
async function checkJobs(): Promise<void> {
  const { rows } = await f.pool.query<{ id: string; settled: boolean; settled_usage: Usage | null; adjustments: Usage[] }>(
    `SELECT j.id, j.settled_at IS NOT NULL AS settled, j.settled_usage,
       coalesce((SELECT jsonb_agg(a.usage) FROM usage_adjustments a WHERE a.job_id = j.id), '[]') AS adjustments
     FROM jobs j`,
  );
  for (const r of rows) {
    if (!r.settled) {
      expect(r.adjustments, `job ${r.id}: an adjustment of an unsettled job`).toEqual([]);
      continue;
    }
    const parts: Usage = {};
    add(parts, r.settled_usage);
    for (const u of r.adjustments) add(parts, u);
    expect(nonZero(parts), `job ${r.id}`).toEqual(nonZero((await f.queue.getJobStatus(r.id)).job.usage ?? {}));
  }
}

async function checkQuota(): Promise<void> {
  for (const [account, max] of Object.entries(QUOTA)) expect((await f.queue.getAccount(account)).pendingTasks).toBeLessThanOrEqual(max);
}

describe("the money path over random histories on two coordinators", () => {
  it("accepted usage is settled exactly once, and each account's rollup is the sum of its jobs' usage", { timeout: 300_000 }, async () => {
    const seed = Number(process.env.LEASEHOLD_PROPERTY_SEED ?? 20261205);
    const h = new History(seed);
    try {
      for (let i = 0; i < STEPS; i++) {
        // A fifth of the steps run two operations at once, on whichever coordinators they pick.
        if (h.chance(0.2)) await Promise.all([h.step(), h.step()]);
        else await h.step();
        await checkQuota();
        if (i % 25 === 0) await checkJobs();
      }

      // Everything made final, the stragglers' late results sent, then everything settled.
      for (const held of h.held.splice(0)) {
        const usage = { gpu_ms: 1 };
        const lease = { taskId: held.task.id, workerId: held.worker, attempt: held.task.attempt };
        const done = await h.attempt("final report", () =>
          h.q.completeTask({ ...lease, resultUri: "s3://out", resultSha256: sha(held.task.id), usage }),
        );
        if (done) h.accept(held.account, usage);
      }
      for (
        let open = await h.jobs(`status IN ('pending', 'running')`);
        open.length > 0;
        open = await h.jobs(`status IN ('pending', 'running')`)
      )
        for (const id of open) await h.q.cancelJob({ jobId: id });
      for (
        let page = await h.q.listSettlements({ pageSize: 100 });
        page.jobs.length > 0;
        page = await h.q.listSettlements({ pageSize: 100 })
      )
        for (const j of page.jobs) await h.q.settleJob({ jobId: j.id, settlementKey: `end-${j.id}`, settledUnits: 0 });
      for (
        let page = await h.q.listAdjustments({ pageSize: 100 });
        page.adjustments.length > 0;
        page = await h.q.listAdjustments({ pageSize: 100 })
      )
        for (const a of page.adjustments) await h.q.settleAdjustment({ adjustmentId: a.id, settlementKey: `end-${a.id}`, settledUnits: 0 });
      while ((await rollups[0].runOnce(undefined)) > 0);
      await checkJobs();

      // Every accepted unit in exactly one settled thing: the settlements' usage and the
      // adjustments' add up to what was accepted, per account (each job's parts were checked above).
      const settledByAccount = new Map<string, Usage>();
      const { rows } = await f.pool.query<{ account: string; usage: Usage | null }>(
        `SELECT coalesce(account, '') AS account, settled_usage AS usage FROM jobs WHERE settled_usage IS NOT NULL
         UNION ALL SELECT coalesce(account, ''), usage FROM usage_adjustments WHERE settled_at IS NOT NULL`,
      );
      for (const r of rows) {
        const total = settledByAccount.get(r.account) ?? {};
        add(total, r.usage);
        settledByAccount.set(r.account, total);
      }
      for (const account of [...ACCOUNTS, NO_ACCOUNT])
        expect(nonZero(settledByAccount.get(account) ?? {}), `settled usage of "${account}"`).toEqual(
          nonZero(h.accepted.get(account) ?? {}),
        );
      expect(await f.count("jobs", "settled_at IS NULL AND (account IS NOT NULL OR reserved_units IS NOT NULL)")).toBe(0);

      // Each account's rollup is the sum of its jobs' usage, which is what it was accepted for.
      for (const account of ACCOUNTS) {
        const rolled: Usage = {};
        for (const w of (await f.queue.getAccountUsage({ account })).workloads) add(rolled, w.usage);
        const jobs: Usage = {};
        for (const id of await h.jobs(`account = '${account}'`)) add(jobs, (await f.queue.getJobStatus(id)).job.usage);
        expect(nonZero(rolled), `rollup of ${account}`).toEqual(nonZero(jobs));
        expect(nonZero(jobs), `jobs of ${account}`).toEqual(nonZero(h.accepted.get(account) ?? {}));
      }
      // The history did what it is for.
      const did = (what: string) => h.log.filter((l) => l === `${what}: ok`).length;
      expect(
        did("settle adjustment") + (await f.count("jobs", "id IN (SELECT job_id FROM usage_adjustments)")),
        h.log.join("\n"),
      ).toBeGreaterThan(0);
      expect(did("retry")).toBeGreaterThan(0);
      expect(did("complete")).toBeGreaterThan(20);
    } catch (err) {
      (err as Error).message = `seed ${seed}: ${(err as Error).message}`;
      throw err;
    }
  });
});
