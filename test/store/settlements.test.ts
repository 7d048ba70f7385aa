// Settlement against a real PostgreSQL: ListSettlements (final billable unsettled jobs, oldest
// final first, paged, by account), SettleJob (recorded once, its event, every refusal), what
// WatchJob, RetryJob and retention do with a settled or unsettled job, and the listing's plan and
// time over 100,000 unsettled jobs.
//
// Jobs are made billable by SQL (an account row, then the job's account / reserved_units /
// billing_key), and usage is written to tasks.usage directly: CreateJob's billing context and the
// workers' usage reports are other parts of the money path, tested with them.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  FailedPreconditionError,
  NotFoundError,
  PermissionDeniedError,
  SettlementConflictError,
  ValidationError,
} from "../../src/queue/errors.js";
import type { Job, JobUpdate } from "../../src/queue/types.js";
import { MAINTENANCE_DUE } from "../../src/store/postgres/background/store-maintenance.js";
import { DELETE_OLD_JOBS } from "../../src/store/postgres/background/retention.js";
import { LIST_SETTLEMENTS } from "../../src/store/postgres/operations/settlements.js";
import { PostgresQueue } from "../../src/store/postgres/store.js";
import { queueFixture, sha, TEST_STORE_OPTIONS, type QueueFixture } from "../support/queue.js";

const W = "billed";
const WORKER = "worker-1";

let fx: QueueFixture;
let queue: PostgresQueue;

beforeAll(async () => {
  fx = await queueFixture();
  queue = fx.queue;
  await queue.putWorkload({ name: W, maxAttempts: 1, leaseSeconds: 60 });
  await fx.pool.query(`INSERT INTO accounts (name) VALUES ('acme'), ('globex')`);
});

afterAll(async () => {
  await fx?.close();
});

interface Billable {
  account?: string;
  reservedUnits?: number;
  billingKey?: string;
}

async function newJob(tasks: number, bill: Billable | null): Promise<string> {
  const r = await queue.createJob({
    workload: W,
    tasks: Array.from({ length: tasks }, (_, i) => ({ chunkIndex: i, inputUri: `s3://in/${i}`, inputSha256: sha(i) })),
  });
  if (bill)
    await fx.pool.query(`UPDATE jobs SET account = $2, reserved_units = $3, billing_key = $4 WHERE id = $1`, [
      r.job.id,
      bill.account ?? null,
      bill.reservedUnits ?? null,
      bill.billingKey ?? null,
    ]);
  return r.job.id;
}

/** Runs every task of the job: completed (with usage written as the workers' reports would sum it), or the first one failed. */
async function finish(jobId: string, outcome: "completed" | "failed" = "completed"): Promise<void> {
  for (;;) {
    const tasks = await queue.claimTasks({ workerId: WORKER, workloads: [W], maxTasks: 100 });
    if (tasks.length === 0) break;
    for (const t of tasks) {
      expect(t.jobId).toBe(jobId);
      await fx.pool.query(`UPDATE tasks SET usage = $2 WHERE id = $1`, [t.id, { gpu_ms: 100 + t.chunkIndex, tokens: 7 }]);
      if (outcome === "failed" && t.chunkIndex === 0)
        await queue.failTask({ taskId: t.id, workerId: WORKER, attempt: t.attempt, errorCode: "boom", retryable: false });
      else
        await queue.completeTask({
          taskId: t.id,
          workerId: WORKER,
          attempt: t.attempt,
          resultUri: `s3://out/${t.chunkIndex}`,
          resultSha256: sha(`o${t.chunkIndex}`),
        });
    }
  }
  const status = (await queue.getJobStatus(jobId)).job.status;
  expect(status).toBe(outcome);
}

async function finalJob(bill: Billable | null, outcome: "completed" | "failed" | "cancelled" = "completed", tasks = 2): Promise<string> {
  const id = await newJob(tasks, bill);
  if (outcome === "cancelled") await queue.cancelJob({ jobId: id });
  else await finish(id, outcome);
  return id;
}

async function settledEvents(jobId: string): Promise<{ settlement_key: string; settled_units: string }[]> {
  const { rows } = await fx.pool.query(
    `SELECT settlement_key, settled_units FROM task_events WHERE job_id = $1 AND kind = 'job_settled' ORDER BY id`,
    [jobId],
  );
  return rows;
}

async function unsettledIds(account?: string, opts = {}): Promise<string[]> {
  const ids: string[] = [];
  let pageToken: string | undefined;
  do {
    const page = await queue.listSettlements({ account, pageSize: 1000, pageToken }, opts);
    ids.push(...page.jobs.map((j) => j.id));
    pageToken = page.nextPageToken || undefined;
  } while (pageToken);
  return ids;
}

/** Clears the listing between tests: every unsettled final billable job settled. */
async function settleAll(): Promise<void> {
  for (const id of await unsettledIds()) await queue.settleJob({ jobId: id, settlementKey: `clear-${id}`, settledUnits: 0 });
}

describe("ListSettlements", () => {
  it("lists final billable unsettled jobs, oldest final first, with account, billing, usage, status and time", async () => {
    await settleAll();
    const a = await finalJob({ account: "acme" }, "completed");
    const b = await finalJob({ reservedUnits: 500, billingKey: "order-1" }, "failed");
    const c = await finalJob({ account: "globex", reservedUnits: 10 }, "cancelled");
    const plain = await finalJob(null, "completed");
    const settled = await finalJob({ account: "acme" }, "completed");
    await queue.settleJob({ jobId: settled, settlementKey: "k", settledUnits: 1 });
    const running = await newJob(1, { account: "acme" });

    const page = await queue.listSettlements({});
    expect(page.jobs.map((j) => j.id)).toEqual([a, b, c]);
    expect(page.nextPageToken).toBe("");
    const [ja, jb, jc] = page.jobs;
    expect(ja).toMatchObject({ status: "completed", settlement: null });
    expect(ja.completedAt).toBeInstanceOf(Date);
    expect(ja.usage).toEqual({ gpu_ms: 201, tokens: 14 });
    expect(jb).toMatchObject({ status: "failed" });
    expect(jc).toMatchObject({ status: "cancelled" });
    expect(jc.usage).toEqual({});
    // account and billing come back through toJob once CreateJob stores them; the rows hold them here.
    const { rows } = await fx.pool.query(
      `SELECT id, account, reserved_units, billing_key FROM jobs WHERE id = ANY($1) ORDER BY completed_at`,
      [[a, b, c]],
    );
    expect(rows.map((r) => [r.account, r.reserved_units, r.billing_key])).toEqual([
      ["acme", null, null],
      [null, "500", "order-1"],
      ["globex", "10", null],
    ]);
    expect(page.jobs.map((j) => j.id)).not.toContain(plain);
    expect(page.jobs.map((j) => j.id)).not.toContain(running);

    await queue.cancelJob({ jobId: running });
    expect(await unsettledIds()).toEqual([a, b, c, running]);
  });

  it("pages by (completed_at, id) and filters by account; a bound token lists only its own", async () => {
    await settleAll();
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push(await finalJob({ account: i % 2 === 0 ? "acme" : "globex" }, "cancelled", 1));
    // Two jobs final at the same instant are ordered by id.
    await fx.pool.query(`UPDATE jobs SET completed_at = (SELECT completed_at FROM jobs WHERE id = $1) WHERE id = $2`, [ids[1], ids[2]]);
    const expected = [ids[0], ...[ids[1], ids[2]].sort(), ids[3], ids[4]];

    const seen: string[] = [];
    let token: string | undefined;
    let pages = 0;
    do {
      const p = await queue.listSettlements({ pageSize: 2, pageToken: token });
      seen.push(...p.jobs.map((j) => j.id));
      token = p.nextPageToken || undefined;
      pages++;
    } while (token);
    expect(seen).toEqual(expected);
    expect(pages).toBe(3);

    expect(await unsettledIds("acme")).toEqual(expected.filter((id) => [ids[0], ids[2], ids[4]].includes(id)));
    expect(await unsettledIds(undefined, { account: "globex" })).toEqual(expected.filter((id) => [ids[1], ids[3]].includes(id)));
    expect(await unsettledIds("globex", { account: "globex" })).toHaveLength(2);
    await expect(queue.listSettlements({ account: "acme" }, { account: "globex" })).rejects.toBeInstanceOf(PermissionDeniedError);
  });

  it("refuses a bad page token, page size or account, naming the field", async () => {
    await expect(queue.listSettlements({ pageToken: "nope" })).rejects.toMatchObject({ field: "page_token" });
    await expect(queue.listSettlements({ pageSize: 1001 })).rejects.toMatchObject({ field: "page_size" });
    await expect(queue.listSettlements({ account: "Not An Account" })).rejects.toMatchObject({ field: "account" });
    await expect(queue.listSettlements({ pageSize: -1 })).rejects.toBeInstanceOf(ValidationError);
  });
});

describe("SettleJob", () => {
  it("records the settlement once, as one job_settled event; the same key and units again answer the same", async () => {
    const id = await finalJob({ account: "acme", reservedUnits: 300 });
    const job = await queue.settleJob({ jobId: id, settlementKey: "inv-1", settledUnits: 250 });
    expect(job.settlement).toMatchObject({ settlementKey: "inv-1", settledUnits: 250 });
    expect(job.usage).toEqual({ gpu_ms: 201, tokens: 14 });
    expect(await settledEvents(id)).toEqual([{ settlement_key: "inv-1", settled_units: "250" }]);

    const again = await queue.settleJob({ jobId: id, settlementKey: "inv-1", settledUnits: 250 });
    expect(again.settlement).toEqual(job.settlement);
    expect(await settledEvents(id)).toHaveLength(1);
    expect((await queue.getJobStatus(id)).job.settlement).toEqual(job.settlement);
    expect(await unsettledIds()).not.toContain(id);
    // Nothing else about the job changed: no status event.
    expect(await fx.count("task_events", `job_id = '${id}' AND kind = 'job_status'`)).toBe(2);
  });

  it("refuses another key or other units, naming what was recorded, and writes nothing", async () => {
    const id = await finalJob({ billingKey: "b-2" }, "failed");
    await queue.settleJob({ jobId: id, settlementKey: "inv-2", settledUnits: 0 });
    for (const other of [
      { settlementKey: "inv-3", settledUnits: 0 },
      { settlementKey: "inv-2", settledUnits: 1 },
    ]) {
      const err = await queue.settleJob({ jobId: id, ...other }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(SettlementConflictError);
      expect((err as Error).message).toContain('settlement_key "inv-2"');
      expect((err as Error).message).toContain("settled_units 0");
    }
    expect(await settledEvents(id)).toEqual([{ settlement_key: "inv-2", settled_units: "0" }]);
  });

  it("refuses a job that is not final, one that is not billable, an unknown or foreign job, and bad input", async () => {
    const running = await newJob(1, { account: "acme" });
    const err = await queue.settleJob({ jobId: running, settlementKey: "k", settledUnits: 1 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(FailedPreconditionError);
    expect((err as Error).message).toMatch(/is pending: only a final job/);
    await queue.cancelJob({ jobId: running });

    const plain = await finalJob(null, "cancelled", 1);
    const notBillable = await queue.settleJob({ jobId: plain, settlementKey: "k", settledUnits: 1 }).catch((e: unknown) => e);
    expect(notBillable).toBeInstanceOf(FailedPreconditionError);
    expect((notBillable as Error).message).toMatch(/not billable/);

    await expect(
      queue.settleJob({ jobId: "00000000-0000-4000-8000-000000000000", settlementKey: "k", settledUnits: 1 }),
    ).rejects.toBeInstanceOf(NotFoundError);
    // A bound token's call on another account's job answers as for a job that does not exist.
    const foreign = await queue
      .settleJob({ jobId: running, settlementKey: "k", settledUnits: 1 }, { account: "globex" })
      .catch((e: unknown) => e);
    expect(foreign).toBeInstanceOf(NotFoundError);
    const missing = "00000000-0000-4000-8000-000000000000";
    const absent = await queue.settleJob({ jobId: missing, settlementKey: "k", settledUnits: 1 }).catch((e: unknown) => e);
    expect((foreign as Error).message).toBe((absent as Error).message.replace(missing, running));
    const own = await queue.settleJob({ jobId: running, settlementKey: "own", settledUnits: 1 }, { account: "acme" });
    expect(own.settlement?.settlementKey).toBe("own");

    const target = await finalJob({ account: "acme" }, "cancelled", 1);
    for (const [input, field] of [
      [{ jobId: target, settlementKey: "", settledUnits: 1 }, "settlement_key"],
      [{ jobId: target, settlementKey: "x".repeat(201), settledUnits: 1 }, "settlement_key"],
      [{ jobId: target, settlementKey: "k", settledUnits: -1 }, "settled_units"],
      [{ jobId: target, settlementKey: "k", settledUnits: 1.5 }, "settled_units"],
      [{ jobId: "nope", settlementKey: "k", settledUnits: 1 }, "job_id"],
    ] as const) {
      await expect(queue.settleJob(input)).rejects.toMatchObject({ field });
    }
    expect(await settledEvents(target)).toHaveLength(0);
    expect((await queue.getJobStatus(target)).job.settlement).toBeNull();
    expect((await queue.settleJob({ jobId: target, settlementKey: "x".repeat(200), settledUnits: 0 })).settlement?.settledUnits).toBe(0);
  });
});

describe("a settled job elsewhere", () => {
  async function collect(it: AsyncIterable<JobUpdate>): Promise<JobUpdate[]> {
    const out: JobUpdate[] = [];
    for await (const u of it) out.push(u);
    return out;
  }

  it("WatchJob: a new watch's snapshot carries the settlement; a resumed stream gets the job_settled event", async () => {
    const id = await finalJob({ account: "acme" }, "completed", 1);
    // A client that watched the job to its end saw its final event last.
    const { rows } = await fx.pool.query(`SELECT max(id)::text AS id FROM task_events WHERE job_id = $1`, [id]);
    const lastSeen = { id: rows[0].id as string };
    const first = await collect(queue.watchJob(id));
    expect(first.map((u) => (u.snapshot ? "snapshot" : u.event.kind))).toEqual(["snapshot"]);

    await queue.settleJob({ jobId: id, settlementKey: "w-1", settledUnits: 42 });
    const fresh = await collect(queue.watchJob(id));
    expect(fresh[0].snapshot?.job.settlement).toMatchObject({ settlementKey: "w-1", settledUnits: 42 });
    expect(fresh.filter((u) => u.event?.kind === "job_settled")).toHaveLength(0);

    const resumed = await collect(queue.watchJob(id, { afterEventId: lastSeen.id }));
    expect(resumed.map((u) => u.event?.kind)).toEqual(["job_settled"]);
    expect(resumed[0].event).toMatchObject({ jobId: id, settlementKey: "w-1", settledUnits: 42 });
    // From the start of the log: every event, the settlement last.
    const all = await collect(queue.watchJob(id, { afterEventId: "1" }));
    expect(all[all.length - 1].event?.kind).toBe("job_settled");
  });

  it("RetryJob: a settled job is refused; an unsettled final billable job is retried and leaves the listing until final again", async () => {
    const settled = await finalJob({ account: "acme" }, "failed", 1);
    await queue.settleJob({ jobId: settled, settlementKey: "r-1", settledUnits: 5 });
    const err = await queue.retryJob({ jobId: settled }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(FailedPreconditionError);
    expect((err as Error).message).toContain("settled jobs are not retried; create a new job");
    expect(await fx.count("tasks", `job_id = '${settled}' AND status = 'failed'`)).toBe(1);
    expect((await queue.getJobStatus(settled)).job.status).toBe("failed");

    const open = await finalJob({ account: "acme" }, "failed", 1);
    expect(await unsettledIds()).toContain(open);
    const r = await queue.retryJob({ jobId: open, maxAttempts: 1 });
    expect(r.retriedTasks).toBe(1);
    expect(r.job.status).toBe("running");
    expect(await unsettledIds()).not.toContain(open);
    await expect(queue.settleJob({ jobId: open, settlementKey: "r-2", settledUnits: 1 })).rejects.toBeInstanceOf(FailedPreconditionError);
    await finish(open, "completed");
    expect(await unsettledIds()).toContain(open);
    expect((await queue.settleJob({ jobId: open, settlementKey: "r-2", settledUnits: 1 })).status).toBe("completed");
  });

  it("retention never deletes an unsettled billable job or its tasks; settled and unbilled ones go", async () => {
    const retaining = new PostgresQueue(fx.pool, { ...TEST_STORE_OPTIONS, retentionDays: 1 });
    await settleAll();
    await retaining.maintain();
    const unsettled = await finalJob({ reservedUnits: 9 }, "completed", 2);
    const settled = await finalJob({ account: "acme" }, "completed", 2);
    const plain = await finalJob(null, "completed", 2);
    await queue.settleJob({ jobId: settled, settlementKey: "old", settledUnits: 9 });
    await fx.pool.query(`UPDATE jobs SET completed_at = now() - interval '30 days' WHERE id = ANY($1)`, [[unsettled, settled, plain]]);

    const r = await retaining.maintain();
    expect(r.deletedJobs).toBe(2);
    expect(await fx.count("jobs", `id IN ('${settled}', '${plain}')`)).toBe(0);
    expect(await fx.count("jobs", `id = '${unsettled}'`)).toBe(1);
    expect(await fx.count("tasks", `job_id = '${unsettled}'`)).toBe(2);
    expect((await retaining.maintain()).deletedJobs).toBe(0);

    // Once settled, it goes at the next pass.
    await queue.settleJob({ jobId: unsettled, settlementKey: "late", settledUnits: 9 });
    expect((await retaining.maintain()).deletedJobs).toBe(1);
    expect(await fx.count("tasks", `job_id = '${unsettled}'`)).toBe(0);
  });
});

describe("ListSettlements at 100,000 unsettled jobs", () => {
  it("reads a page of 1,000 through jobs_unsettled_idx (time printed, not asserted)", async () => {
    await settleAll();
    await fx.pool.query(`
      INSERT INTO jobs (id, workload, input_uri, parameters, status, priority, created_at, updated_at, completed_at,
                        failure_policy, max_failed_tasks, concurrency_key, account, reserved_units)
      SELECT gen_random_uuid(), '${W}', 's3://in', '{}', 'completed', 0, now(), now(), now() - make_interval(secs => g),
             'fail_fast', 0, '', CASE WHEN g % 2 = 0 THEN 'acme' ELSE 'globex' END, 100
      FROM generate_series(1, 100000) g`);
    await fx.pool.query(`ANALYZE jobs`);
    const c = await fx.pool.connect();
    try {
      const values = ["-infinity", "00000000-0000-0000-0000-000000000000", 1001, null];
      await c.query(`SET plan_cache_mode = force_generic_plan`);
      const { rows } = await c.query(`EXPLAIN (COSTS OFF) ${LIST_SETTLEMENTS.text}`, values);
      const plan = rows.map((r: { "QUERY PLAN": string }) => r["QUERY PLAN"]).join("\n");
      expect(plan).toContain("jobs_unsettled_idx");
      expect(plan).not.toMatch(/Seq Scan on jobs|Sort/);
      // Retention's probe and batches skip the unsettled jobs through their own index, not a walk over them.
      for (const [text, args] of [
        [MAINTENANCE_DUE, [1]],
        [DELETE_OLD_JOBS.text, [1, 20]],
      ] as const) {
        const { rows: r } = await c.query(`EXPLAIN (COSTS OFF) ${text}`, [...args]);
        expect(r.map((x: { "QUERY PLAN": string }) => x["QUERY PLAN"]).join("\n")).toContain("jobs_retention_idx");
      }
      // The statement's own time in PostgreSQL, apart from the transfer and the mapping of the rows.
      const server: number[] = [];
      for (let i = 0; i < 5; i++) {
        const { rows: analyzed } = await c.query(`EXPLAIN (ANALYZE, FORMAT JSON) ${LIST_SETTLEMENTS.text}`, values);
        server.push((analyzed[0]["QUERY PLAN"] as { "Execution Time": number }[])[0]["Execution Time"]);
      }
      server.sort((a, b) => a - b);
      console.log(`ListSettlements statement, page of 1,000: median ${server[2].toFixed(1)} ms in PostgreSQL (of 5)`);
    } finally {
      c.release();
    }
    const timings: number[] = [];
    let pageToken: string | undefined;
    for (let i = 0; i < 9; i++) {
      const t0 = performance.now();
      const page: { jobs: Job[]; nextPageToken: string } = await queue.listSettlements({ pageSize: 1000, pageToken });
      timings.push(performance.now() - t0);
      expect(page.jobs).toHaveLength(1000);
      pageToken = page.nextPageToken;
    }
    timings.sort((a, b) => a - b);
    console.log(
      `ListSettlements, page of 1,000 over 100,000 unsettled jobs: median ${timings[4].toFixed(1)} ms (of 9: ${timings.map((t) => t.toFixed(1)).join(", ")})`,
    );
  }, 120_000);
});
