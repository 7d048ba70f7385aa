// CreateJob in one statement: the tasks it answers are the rows it wrote, and the workloads it
// validates against (cached per coordinator) are never stale, whichever coordinator changed them.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { NotFoundError, ValidationError } from "../../src/queue/errors.js";
import type { CreateJobResult } from "../../src/queue/types.js";
import { toJob } from "../../src/store/postgres/sql/rows.js";
import { createPool, PostgresQueue } from "../../src/store/postgres/store.js";
import { queueFixture, sha, TEST_STORE_OPTIONS, type QueueFixture } from "../support/queue.js";

let f: QueueFixture;
let a: PostgresQueue;
let b: PostgresQueue;

beforeAll(async () => {
  f = await queueFixture();
  a = f.queue;
  // Another coordinator on the same database.
  b = new PostgresQueue(f.newPool(), TEST_STORE_OPTIONS);
});
afterAll(async () => {
  await f?.close();
});

const spec = (i: number, parameters?: Record<string, unknown>) => ({
  chunkIndex: i,
  inputUri: `s3://in/${i}`,
  inputSha256: sha(i),
  parameters: parameters as never,
});

describe("CreateJob", () => {
  it("answers exactly the rows it wrote, in chunk order, with time-ordered ids", async () => {
    await a.putWorkload({ name: "cj_rows", maxAttempts: 4 });
    const r = await a.createJob({
      workload: "cj_rows",
      parameters: { shared: 1 },
      priority: 3,
      tasks: [spec(2, { own: "x" }), spec(0), spec(1)],
    });
    const { rows } = await f.pool.query(
      `SELECT id, job_id, chunk_index, workload, input_uri, input_sha256, parameters, status, attempt, max_attempts, priority,
              lease_owner, lease_expires_at, result_uri, created_at, started_at, completed_at, run_after, version, traceparent
       FROM tasks WHERE job_id = $1 ORDER BY chunk_index`,
      [r.job.id],
    );
    expect(rows).toHaveLength(3);
    expect(r.tasks.map((t) => t.chunkIndex)).toEqual([0, 1, 2]);
    r.tasks.forEach((t, i) => {
      const row = rows[i];
      expect({
        id: t.id,
        jobId: t.jobId,
        chunkIndex: t.chunkIndex,
        workload: t.workload,
        inputUri: t.inputUri,
        inputSha256: t.inputSha256,
        parameters: t.parameters,
        status: t.status,
        attempt: t.attempt,
        maxAttempts: t.maxAttempts,
        priority: t.priority,
        leaseOwner: t.leaseOwner,
        leaseExpiresAt: t.leaseExpiresAt,
        resultUri: t.resultUri,
        createdAt: t.createdAt,
        startedAt: t.startedAt,
        completedAt: t.completedAt,
        runAfter: t.runAfter,
        version: t.version,
        traceparent: t.traceparent,
      }).toEqual({
        id: row.id,
        jobId: row.job_id,
        chunkIndex: row.chunk_index,
        workload: row.workload,
        inputUri: row.input_uri,
        inputSha256: row.input_sha256,
        parameters: row.parameters,
        status: row.status,
        attempt: row.attempt,
        maxAttempts: row.max_attempts,
        priority: row.priority,
        leaseOwner: row.lease_owner,
        leaseExpiresAt: row.lease_expires_at,
        resultUri: row.result_uri,
        createdAt: row.created_at,
        startedAt: row.started_at,
        completedAt: row.completed_at,
        runAfter: row.run_after,
        version: row.version,
        traceparent: row.traceparent,
      });
    });
    expect(rows[2].parameters).toEqual({ shared: 1, own: "x" });
    expect(rows.every((row) => row.max_attempts === 4 && row.priority === 3)).toBe(true);
    // Version 7: the version nibble, and ids of one job share their millisecond prefix.
    expect(r.tasks.every((t) => t.id[14] === "7")).toBe(true);
    expect(r.job.id[14]).toBe("7");
    expect(new Set(r.tasks.map((t) => t.id.slice(0, 13))).size).toBe(1);
  });

  it("uses the workload as another coordinator last changed it", async () => {
    await a.putWorkload({ name: "cj_stale", maxAttempts: 2 });
    const first = await a.createJob({ workload: "cj_stale", tasks: [spec(0)] });
    expect(first.tasks[0].maxAttempts).toBe(2);
    // b changes it; a's cached copy is now stale.
    await b.putWorkload({ name: "cj_stale", maxAttempts: 7 });
    const second = await a.createJob({ workload: "cj_stale", tasks: [spec(0)] });
    expect(second.tasks[0].maxAttempts).toBe(7);
    const { rows } = await f.pool.query(`SELECT max_attempts FROM tasks WHERE job_id = $1`, [second.job.id]);
    expect(rows).toEqual([{ max_attempts: 7 }]);

    // A schema added elsewhere is enforced at once, and the rejected job writes nothing.
    await b.putWorkload({ name: "cj_stale", maxAttempts: 7, parametersSchema: { type: "object", required: ["model"] } as never });
    const before = await f.count("jobs");
    await expect(a.createJob({ workload: "cj_stale", tasks: [spec(0)] })).rejects.toBeInstanceOf(ValidationError);
    expect(await f.count("jobs")).toBe(before);
    const ok = await a.createJob({ workload: "cj_stale", parameters: { model: "m" }, tasks: [spec(0)] });
    expect(await f.count("tasks", `job_id = '${ok.job.id}'`)).toBe(1);
  });

  it("retries a delayed job whose cached workload went stale, and writes it once", async () => {
    await a.putWorkload({ name: "cj_stale_delayed", maxAttempts: 2 });
    await a.createJob({ workload: "cj_stale_delayed", tasks: [spec(0)] });
    await b.putWorkload({ name: "cj_stale_delayed", maxAttempts: 5 });
    const runAt = new Date(Date.now() + 3_600_000);
    const r = await a.createJob({ workload: "cj_stale_delayed", runAt, tasks: [spec(0), spec(1)] });
    expect(r.tasks.map((t) => t.maxAttempts)).toEqual([5, 5]);
    const { rows } = await f.pool.query(`SELECT run_at FROM jobs WHERE id = $1`, [r.job.id]);
    expect(rows.map((row) => (row.run_at as Date).getTime())).toEqual([runAt.getTime()]);
    expect(await f.count("tasks", `job_id = '${r.job.id}'`)).toBe(2);
    expect(await f.count("jobs", `workload = 'cj_stale_delayed'`)).toBe(2);
  });

  it("succeeds while another coordinator rewrites the workload without pause", async () => {
    await a.putWorkload({ name: "cj_churn", maxAttempts: 3 });
    await a.createJob({ workload: "cj_churn", tasks: [spec(0)] }); // cached from here on
    let stop = false;
    let puts = 0;
    const churn = Array.from({ length: 4 }, async () => {
      while (!stop) {
        await b.putWorkload({ name: "cj_churn", maxAttempts: 3 });
        puts++;
      }
    });
    const created = [];
    for (let i = 0; i < 30; i++) created.push(await a.createJob({ workload: "cj_churn", tasks: [spec(0), spec(1)] }));
    stop = true;
    await Promise.all(churn);
    expect(puts).toBeGreaterThan(0);
    expect(created.every((r) => r.created && r.tasks.length === 2)).toBe(true);
    expect(await f.count("tasks", `workload = 'cj_churn'`)).toBe(1 + 30 * 2);
  });

  it("finds a workload registered elsewhere after this coordinator was told it did not exist", async () => {
    await expect(a.createJob({ workload: "cj_late", tasks: [spec(0)] })).rejects.toBeInstanceOf(NotFoundError);
    await b.putWorkload({ name: "cj_late" });
    const r = await a.createJob({ workload: "cj_late", tasks: [spec(0)] });
    expect(await f.count("tasks", `job_id = '${r.job.id}'`)).toBe(1);
  });

  it("an idempotent replay inserts nothing and answers the first job's rows", async () => {
    await a.putWorkload({ name: "cj_idem" });
    const first = await a.createJob({ workload: "cj_idem", idempotencyKey: "cj-key", tasks: [spec(0), spec(1)] });
    const again = await b.createJob({ workload: "cj_idem", idempotencyKey: "cj-key", tasks: [spec(0), spec(1)] });
    expect(again.created).toBe(false);
    expect(again.job.id).toBe(first.job.id);
    expect(again.tasks.map((t) => t.id)).toEqual(first.tasks.map((t) => t.id));
    expect(await f.count("jobs", `workload = 'cj_idem'`)).toBe(1);
    expect(await f.count("tasks", `workload = 'cj_idem'`)).toBe(2);
  });
});

// From 1,000 tasks the tasks go in by COPY, in a transaction with the job row (create-job.ts).
describe("CreateJob of a large job (by COPY)", () => {
  const specs = (n: number) => Array.from({ length: n }, (_, i) => spec(i));

  it("answers the rows it wrote, with ascending ids, and uses the workload as another coordinator changed it", async () => {
    await a.putWorkload({ name: "cj_big", maxAttempts: 2 });
    const first = await a.createJob({ workload: "cj_big", tasks: specs(1500) });
    expect(first.tasks.every((t) => t.maxAttempts === 2)).toBe(true);
    const ids = first.tasks.map((t) => t.id);
    expect([...ids].sort()).toEqual(ids);
    // b changes it: a's first try finds its copy stale, and the second runs in the transaction that holds the workload.
    await b.putWorkload({ name: "cj_big", maxAttempts: 5 });
    const second = await a.createJob({ workload: "cj_big", priority: 4, tasks: specs(1500) });
    const { rows } = await f.pool.query(
      `SELECT count(*)::int AS n, min(max_attempts) AS lo, max(max_attempts) AS hi, min(priority) AS p,
              bool_and(t.created_at = j.created_at AND t.run_after = j.created_at) AS job_time
       FROM tasks t, (SELECT created_at FROM jobs WHERE id = $1) j WHERE t.job_id = $1`,
      [second.job.id],
    );
    expect(rows[0]).toEqual({ n: 1500, lo: 5, hi: 5, p: 4, job_time: true });
    expect(second.tasks.every((t) => t.maxAttempts === 5 && t.createdAt.getTime() === second.job.createdAt.getTime())).toBe(true);
  });

  it("racing submissions with one idempotency key create one job with all its tasks", async () => {
    await a.putWorkload({ name: "cj_big_race" });
    const request = { workload: "cj_big_race", idempotencyKey: "cj-big-race", tasks: specs(1200) };
    const results = await Promise.all([a, b, a, b].map((q) => q.createJob(request)));
    expect(new Set(results.map((r) => r.job.id)).size).toBe(1);
    expect(results.filter((r) => r.created)).toHaveLength(1);
    expect(results.every((r) => r.tasks.length === 1200)).toBe(true);
    expect(await f.count("jobs", `workload = 'cj_big_race'`)).toBe(1);
    expect(await f.count("tasks", `workload = 'cj_big_race'`)).toBe(1200);
  });

  it("a COPY that fails writes nothing and leaves its connection out of any transaction", async () => {
    await a.putWorkload({ name: "cj_big_fail" });
    // One connection, so the next calls run on the one the failed COPY used.
    const pool = createPool({ connectionString: f.db.url, max: 1, statementTimeoutMs: 30_000, connectTimeoutMs: 10_000 });
    const one = new PostgresQueue(pool, TEST_STORE_OPTIONS);
    await f.pool.query(
      `ALTER TABLE tasks ADD CONSTRAINT test_no_chunk_1100 CHECK (chunk_index <> 1100 OR workload <> 'cj_big_fail') NOT VALID`,
    );
    try {
      const jobs = await f.count("jobs");
      const tasks = await f.count("tasks");
      await expect(one.createJob({ workload: "cj_big_fail", tasks: specs(1500) })).rejects.toThrow(/contains a value the database/);
      expect(await f.count("jobs")).toBe(jobs);
      expect(await f.count("tasks")).toBe(tasks);
      const { rows } = await pool.query("SELECT now() = statement_timestamp() AS outside");
      expect(rows[0].outside).toBe(true);
      const small = await one.createJob({ workload: "cj_big_fail", tasks: specs(3) });
      const large = await one.createJob({ workload: "cj_big_fail", tasks: specs(1000) });
      expect(await f.count("tasks", `job_id IN ('${small.job.id}', '${large.job.id}')`)).toBe(1003);
    } finally {
      await f.pool.query("ALTER TABLE tasks DROP CONSTRAINT test_no_chunk_1100");
      await pool.end();
    }
  });

  it("hands its result over while PostgreSQL copies, and returns that very result, the rows it wrote", async () => {
    await a.putWorkload({ name: "cj_early", maxAttempts: 5 });
    const tasks = Array.from({ length: 1200 }, (_, i) => spec(1199 - i, i % 100 === 0 ? { own: i } : undefined));
    const seen: CreateJobResult[] = [];
    const r = await a.createJob(
      { workload: "cj_early", parameters: { shared: true }, priority: 2, tasks },
      { prepared: (early) => seen.push(early) },
    );
    expect(seen).toHaveLength(1);
    expect(r).toBe(seen[0]);
    const { rows } = await f.pool.query(
      `SELECT id, chunk_index, parameters, max_attempts, priority, created_at, run_after FROM tasks WHERE job_id = $1 ORDER BY chunk_index`,
      [r.job.id],
    );
    expect(rows).toHaveLength(1200);
    expect(
      r.tasks.map((t) => ({
        id: t.id,
        chunk_index: t.chunkIndex,
        parameters: t.parameters,
        max_attempts: t.maxAttempts,
        priority: t.priority,
        created_at: t.createdAt,
        run_after: t.runAfter,
      })),
    ).toEqual(rows);
    const { rows: job } = await f.pool.query(`SELECT * FROM jobs WHERE id = $1`, [r.job.id]);
    expect(r.job).toEqual(toJob(job[0]));
    // Small jobs keep their one statement and hand nothing over.
    await a.createJob({ workload: "cj_early", tasks: [spec(0)] }, { prepared: (early) => seen.push(early) });
    expect(seen).toHaveLength(1);
  });

  it("hands over only a job it inserted: not a stale try, not a replay; a callback that throws writes nothing", async () => {
    await a.putWorkload({ name: "cj_early_stale", maxAttempts: 2 });
    const many = specs(1000);
    await a.createJob({ workload: "cj_early_stale", tasks: many }, { prepared: () => {} });
    await b.putWorkload({ name: "cj_early_stale", maxAttempts: 6 });
    let handed = 0;
    const r = await a.createJob({ workload: "cj_early_stale", tasks: many }, { prepared: () => handed++ });
    expect(handed).toBe(1); // the stale try inserted nothing; the one under FOR SHARE did
    expect(r.tasks.every((t) => t.maxAttempts === 6)).toBe(true);
    expect(await f.count("tasks", `job_id = '${r.job.id}'`)).toBe(1000);
    const before = await f.count("jobs");
    await expect(
      a.createJob(
        { workload: "cj_early_stale", tasks: many },
        {
          prepared: () => {
            throw new Error("boom");
          },
        },
      ),
    ).rejects.toThrow("boom");
    expect(await f.count("jobs")).toBe(before);
    const first = await a.createJob({ workload: "cj_early_stale", idempotencyKey: "cj-early", tasks: many }, { prepared: () => {} });
    handed = 0;
    const again = await b.createJob({ workload: "cj_early_stale", idempotencyKey: "cj-early", tasks: many }, { prepared: () => handed++ });
    expect(again.created).toBe(false);
    expect(handed).toBe(0);
    expect(again.tasks.map((t) => t.id)).toEqual(first.tasks.map((t) => t.id));
  });
});
