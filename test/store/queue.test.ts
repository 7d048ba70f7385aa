// The core queue through QueueService against a real PostgreSQL: one describe per numbered
// point of the core-queue issue.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import {
  IdempotencyConflictError,
  LeaseConflictError,
  NotFoundError,
  ResultConflictError,
  ValidationError,
} from "../../src/queue/errors.js";
import type { Task, TaskSpec } from "../../src/queue/types.js";
import { PostgresQueue } from "../../src/store/postgres/store.js";
import { queueFixture, sha, TEST_STORE_OPTIONS, type QueueFixture } from "../support/queue.js";

let f: QueueFixture;
let q: PostgresQueue;

beforeAll(async () => {
  f = await queueFixture();
  q = f.queue;
});
afterAll(async () => {
  await f?.close();
});

/** Each test works on workloads of its own so tests cannot see each other's tasks. */
let seq = 0;
async function workload(opts: { maxAttempts?: number; leaseSeconds?: number; parametersSchema?: Record<string, unknown> } = {}) {
  const name = `w${++seq}_${Math.random().toString(36).slice(2, 8)}`;
  await q.putWorkload({
    name,
    maxAttempts: opts.maxAttempts,
    leaseSeconds: opts.leaseSeconds,
    parametersSchema: opts.parametersSchema as never,
  });
  return name;
}

function specs(n: number, make: (i: number) => Partial<TaskSpec> = () => ({})): TaskSpec[] {
  return Array.from({ length: n }, (_, i) => ({ chunkIndex: i, inputUri: `s3://in/${i}`, inputSha256: sha(i), ...make(i) }));
}

async function rowCounts() {
  return { jobs: await f.count("jobs"), tasks: await f.count("tasks") };
}

async function expireLease(taskId: string) {
  await f.pool.query(`UPDATE tasks SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, [taskId]);
}

async function taskRow(id: string) {
  const { rows } = await f.pool.query(`SELECT *, now() AS db_now FROM tasks WHERE id = $1`, [id]);
  return rows[0];
}

async function jobRow(id: string) {
  const { rows } = await f.pool.query(`SELECT * FROM jobs WHERE id = $1`, [id]);
  return rows[0];
}

async function claimOne(w: string, worker = "worker-1", leaseSeconds?: number): Promise<Task> {
  const tasks = await q.claimTasks({ workerId: worker, workloads: [w], leaseSeconds });
  expect(tasks).toHaveLength(1);
  return tasks[0];
}

describe("1. create is all or nothing", () => {
  it("a job without a task list gets one task, chunk 0, from its own input", async () => {
    const w = await workload({ maxAttempts: 4 });
    const { job, tasks, created } = await q.createJob({
      workload: w,
      inputUri: "s3://in/video.mp4",
      inputSha256: sha("v"),
      priority: 7,
      parameters: { fps: 30 },
    });
    expect(created).toBe(true);
    expect(job.status).toBe("pending");
    expect(tasks).toHaveLength(1);
    expect(tasks[0]).toMatchObject({
      chunkIndex: 0,
      inputUri: "s3://in/video.mp4",
      inputSha256: sha("v"),
      status: "pending",
      attempt: 0,
      maxAttempts: 4,
      priority: 7,
      parameters: { fps: 30 },
      version: 0,
    });
    expect(await f.count("tasks", `job_id = '${job.id}'`)).toBe(1);
  });

  it("requires the job's own input when there is no task list", async () => {
    const w = await workload();
    const before = await rowCounts();
    await expect(q.createJob({ workload: w, inputUri: "s3://x" })).rejects.toThrow(/input_sha256/);
    await expect(q.createJob({ workload: w, inputSha256: sha(1) })).rejects.toBeInstanceOf(ValidationError);
    expect(await rowCounts()).toEqual(before);
  });

  it("a 1,000-task job with one bad task in position 900 leaves no row", async () => {
    const w = await workload({ parametersSchema: { type: "object", properties: { level: { type: "integer" } }, required: ["level"] } });
    const before = await rowCounts();
    const cases: Array<[Partial<TaskSpec>, unknown]> = [
      [{ chunkIndex: 3 }, ValidationError], // duplicate chunk_index
      [{ workload: "no_such_workload" }, NotFoundError],
      [{ inputSha256: "abc" }, ValidationError],
      [{ parameters: { level: "high" } }, ValidationError],
    ];
    for (const [bad, errorClass] of cases) {
      const tasks = specs(1000, (i) => (i === 900 ? bad : {}));
      await expect(q.createJob({ workload: w, parameters: { level: 1 }, tasks })).rejects.toBeInstanceOf(errorClass);
    }
    expect(await rowCounts()).toEqual(before);
  });

  it("rejects an unregistered workload and writes nothing", async () => {
    const before = await rowCounts();
    const err = await q.createJob({ workload: "never_registered", inputUri: "s3://x", inputSha256: sha(1) }).catch((e) => e);
    expect(err).toBeInstanceOf(NotFoundError);
    expect(err.message).toMatch(/^workload:/);
    expect(await rowCounts()).toEqual(before);
  });

  it("the same idempotency key with the same request returns the job and writes nothing; a different request conflicts", async () => {
    const w = await workload();
    const request = { workload: w, idempotencyKey: `key-${w}`, tasks: specs(3) };
    const first = await q.createJob(request);
    const before = await rowCounts();
    const again = await q.createJob(request);
    expect(again.created).toBe(false);
    expect(again.job.id).toBe(first.job.id);
    expect(again.tasks.map((t) => t.id)).toEqual(first.tasks.map((t) => t.id));
    expect(await rowCounts()).toEqual(before);
    await expect(q.createJob({ ...request, tasks: specs(4) })).rejects.toBeInstanceOf(IdempotencyConflictError);
    expect(await rowCounts()).toEqual(before);
  });

  it("racing submissions with one idempotency key create one job", async () => {
    const w = await workload();
    const request = { workload: w, idempotencyKey: `race-${w}`, tasks: specs(50) };
    const results = await Promise.all(Array.from({ length: 6 }, () => q.createJob(request)));
    expect(new Set(results.map((r) => r.job.id)).size).toBe(1);
    expect(results.filter((r) => r.created)).toHaveLength(1);
    expect(await f.count("jobs", `idempotency_key = 'race-${w}'`)).toBe(1);
  });

  it("creates a 10,000-task job in one go and refuses one task more", async () => {
    const w = await workload();
    const { job, tasks } = await q.createJob({ workload: w, tasks: specs(10_000) });
    expect(tasks).toHaveLength(10_000);
    expect(await f.count("tasks", `job_id = '${job.id}'`)).toBe(10_000);
    const before = await rowCounts();
    await expect(q.createJob({ workload: w, tasks: specs(10_001) })).rejects.toThrow(/tasks: must hold at most 10000/);
    expect(await rowCounts()).toEqual(before);
  });
});

describe("2. claim is one statement", () => {
  it("leases a task: leased, attempt + 1, owner, lease from the database clock, started_at, version + 1, job running", async () => {
    const w = await workload({ leaseSeconds: 120 });
    const { job } = await q.createJob({ workload: w, tasks: specs(1) });
    const t = await claimOne(w, "gpu-7");
    const row = await taskRow(t.id);
    expect(row.status).toBe("leased");
    expect(row.attempt).toBe(1);
    expect(row.lease_owner).toBe("gpu-7");
    expect(row.version).toBe(1);
    expect(row.started_at).not.toBeNull();
    const leaseLeft = (row.lease_expires_at.getTime() - row.db_now.getTime()) / 1000;
    expect(leaseLeft).toBeGreaterThan(110);
    expect(leaseLeft).toBeLessThanOrEqual(120);
    expect((await jobRow(job.id)).status).toBe("running");
    // A requested lease overrides the workload's.
    await q.createJob({ workload: w, tasks: specs(1) });
    const short = await claimOne(w, "gpu-7", 5);
    const shortRow = await taskRow(short.id);
    expect((shortRow.lease_expires_at.getTime() - shortRow.db_now.getTime()) / 1000).toBeLessThanOrEqual(5);
  });

  it("orders by priority, then age, then chunk, and never hands out tasks in backoff", async () => {
    const w = await workload();
    const low = await q.createJob({ workload: w, priority: 0, tasks: specs(3) });
    const high = await q.createJob({ workload: w, priority: 5, tasks: specs(2) });
    await f.pool.query(`UPDATE tasks SET run_after = now() + interval '1 hour' WHERE id = $1`, [low.tasks[2].id]);
    const claimed = await q.claimTasks({ workerId: "w", workloads: [w], maxTasks: 10 });
    expect(claimed.map((t) => t.id)).toEqual([high.tasks[0].id, high.tasks[1].id, low.tasks[0].id, low.tasks[1].id]);
    expect(await q.claimTasks({ workerId: "w", workloads: [w] })).toEqual([]);
  });

  it("reclaims an expired lease with attempts left ahead of fresh work", async () => {
    const w = await workload({ maxAttempts: 3 });
    await q.createJob({ workload: w, priority: 0, tasks: specs(1) });
    const zombie = await claimOne(w, "dead-worker");
    await q.createJob({ workload: w, priority: 100, tasks: specs(1) });
    await expireLease(zombie.id);
    const [next] = await q.claimTasks({ workerId: "alive", workloads: [w] });
    expect(next.id).toBe(zombie.id);
    expect(next.attempt).toBe(2);
    expect(next.leaseOwner).toBe("alive");
  });

  it("claims from several workloads and batches up to max_tasks", async () => {
    const a = await workload();
    const b = await workload();
    await q.createJob({ workload: a, tasks: specs(3) });
    await q.createJob({ workload: b, priority: 1, tasks: specs(3) });
    const claimed = await q.claimTasks({ workerId: "w", workloads: [a, b], maxTasks: 4 });
    expect(claimed).toHaveLength(4);
    expect(claimed.filter((t) => t.workload === b)).toHaveLength(3);
    expect(claimed.every((t) => t.status === "leased" && t.attempt === 1)).toBe(true);
  });

  it("rejects an unknown workload and a bad batch size", async () => {
    await expect(q.claimTasks({ workerId: "w", workloads: ["not_there"] })).rejects.toBeInstanceOf(NotFoundError);
    const w = await workload();
    await expect(q.claimTasks({ workerId: "w", workloads: [w], maxTasks: 101 })).rejects.toThrow(/max_tasks/);
    await expect(q.claimTasks({ workerId: "", workloads: [w] })).rejects.toThrow(/worker_id/);
  });

  it("uses its partial index for an index-ordered top-N on a 100,000-task backlog of mixed workloads", async () => {
    const names = [await workload(), await workload(), await workload()];
    const jobId = (i: number) => `00000000-0000-4000-8000-${String(i).padStart(12, "0")}`;
    await f.pool.query(`INSERT INTO jobs (id, workload) SELECT unnest($1::uuid[]), unnest($2::text[])`, [[1, 2, 3].map(jobId), names]);
    // A quarter of the rows finished, the rest pending, spread over three workloads and seven priorities.
    await f.pool.query(
      `INSERT INTO tasks (job_id, chunk_index, workload, input_uri, input_sha256, max_attempts, priority, status, result_uri, result_sha256)
       SELECT ($1::uuid[])[1 + i % 3], i, ($2::text[])[1 + i % 3], 's3://x', $3, 3, i % 7,
              CASE WHEN i % 4 = 0 THEN 'completed' ELSE 'pending' END::task_status,
              CASE WHEN i % 4 = 0 THEN 's3://r' END, CASE WHEN i % 4 = 0 THEN $3 END
       FROM generate_series(0, 99999) i`,
      [[1, 2, 3].map(jobId), names, sha("x")],
    );
    await f.pool.query("ANALYZE tasks");
    const { CLAIM_TASKS } = await import("../support/statements.js");
    const client = await f.pool.connect();
    try {
      await client.query("BEGIN");
      const { rows } = await client.query(`EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) ${CLAIM_TASKS}`, [
        [names[0]],
        10,
        "explain",
        null,
        "{}",
        "{}",
      ]);
      await client.query("ROLLBACK");
      const plan = rows.map((r) => r["QUERY PLAN"]).join("\n");
      if (process.env.SHOW_PLAN) console.log(plan);
      expect(plan).toMatch(/Index Scan using tasks_claim_pending_idx on tasks/);
      // The zombie arm reads the expired-lease range of the lease index.
      expect(plan).toMatch(/Index Scan using tasks_lease_expiry_idx on tasks/);
      // No sort over the backlog: every Sort node handles at most the few picked candidates.
      const sortSizes = [...plan.matchAll(/Sort \(actual rows=(\d+)/g)].map((m) => Number(m[1]));
      expect(sortSizes.length).toBeGreaterThan(0);
      expect(Math.max(...sortSizes)).toBeLessThanOrEqual(20);
      expect(plan).not.toMatch(/Seq Scan on tasks/);
      expect(plan).toMatch(/tasks_claim_pending_idx on tasks \S+ \(actual rows=10(\.00)? loops=1\)/);
    } finally {
      client.release();
    }
  });

  it("passes over tasks in retry backoff inside the claim index, without reading them from the table", async () => {
    const w = await workload({ maxAttempts: 5 });
    const { tasks } = await q.createJob({ workload: w, tasks: specs(400) });
    // The oldest 300 wait out a backoff: at the head of the claim order, none of them claimable.
    await f.pool.query(`UPDATE tasks SET run_after = now() + interval '10 minutes' WHERE job_id = $1 AND chunk_index < 300`, [
      tasks[0].jobId,
    ]);
    await f.pool.query("VACUUM ANALYZE tasks");
    const { CLAIM_TASKS } = await import("../support/statements.js");
    const client = await f.pool.connect();
    try {
      // The generic plan, as the store runs it.
      await client.query(`PREPARE backoff_claim AS ${CLAIM_TASKS}`);
      await client.query("BEGIN");
      const { rows } = await client.query(
        `EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, SUMMARY OFF) EXECUTE backoff_claim(ARRAY[${client.escapeLiteral(w)}], 1, 'x', NULL, '{}', '{}')`,
      );
      await client.query("ROLLBACK");
      const plan = rows.map((r) => r["QUERY PLAN"]).join("\n");
      if (process.env.SHOW_PLAN) console.log(plan);
      const scan = plan.slice(plan.indexOf("Index Scan using tasks_claim_pending_idx"));
      expect(scan).toMatch(/^[^\n]*\n\s+Index Cond: \(\(workload = \S+\) AND \(run_after <= now\(\)\)\)/);
      // One heap page for the task it takes, not one per task it passes over.
      const heapReads = Number(/Buffers: shared hit=(\d+)/.exec(scan)![1]);
      expect(heapReads).toBeLessThan(30);
      await client.query("DEALLOCATE backoff_claim");
    } finally {
      client.release();
    }
    const [next] = await q.claimTasks({ workerId: "w", workloads: [w] });
    expect(next.chunkIndex).toBe(300);
  });
});

describe("3. leases expire", () => {
  it("returns expired leases to pending while attempts remain, else fails them with lease_expired and fails the job", async () => {
    const w = await workload({ maxAttempts: 2 });
    const { job, tasks } = await q.createJob({ workload: w, tasks: specs(3) });
    const [a, b] = await q.claimTasks({ workerId: "w", workloads: [w], maxTasks: 2 });
    await expireLease(a.id);
    const first = await q.expireLeases();
    expect(first.requeued).toBeGreaterThanOrEqual(1);
    expect((await taskRow(a.id)).status).toBe("pending");
    expect((await taskRow(a.id)).attempt).toBe(1);
    expect((await taskRow(b.id)).status).toBe("leased");

    // Second and last attempt of task a also dies.
    const again = (await q.claimTasks({ workerId: "w2", workloads: [w], maxTasks: 3 })).find((t) => t.id === a.id)!;
    expect(again.attempt).toBe(2);
    await expireLease(a.id);
    const second = await q.expireLeases();
    expect(second.failed).toBeGreaterThanOrEqual(1);
    const dead = await taskRow(a.id);
    expect(dead.status).toBe("failed");
    expect(dead.error_code).toBe("lease_expired");
    expect((await jobRow(job.id)).status).toBe("failed");
    // The job's other unfinished tasks are cancelled.
    for (const t of tasks.filter((t) => t.id !== a.id)) expect((await taskRow(t.id)).status).toBe("cancelled");
  });

  it("several reapers at once never double-count", async () => {
    const w = await workload({ maxAttempts: 5 });
    await q.createJob({ workload: w, tasks: specs(300) });
    const claimed = await q.claimTasks({ workerId: "w", workloads: [w], maxTasks: 100 });
    await q.claimTasks({ workerId: "w", workloads: [w], maxTasks: 100 });
    await f.pool.query(`UPDATE tasks SET lease_expires_at = now() - interval '1 second' WHERE workload = $1 AND status = 'leased'`, [w]);
    const other = new PostgresQueue(f.newPool(), TEST_STORE_OPTIONS);
    const results = await Promise.all([q.expireLeases(), other.expireLeases(), q.expireLeases(), other.expireLeases()]);
    const requeued = results.reduce((n, r) => n + r.requeued, 0);
    expect(requeued).toBeGreaterThanOrEqual(200);
    expect(await f.count("tasks", `workload = '${w}' AND status = 'pending'`)).toBe(300);
    expect(await f.count("tasks", `workload = '${w}' AND status = 'pending' AND attempt = 1`)).toBe(200);
    expect(claimed).toHaveLength(100);
  });
});

describe("4. only the leaseholder acts", () => {
  it("refuses a foreign worker, an older attempt, an expired lease and a cancelled task, writing nothing", async () => {
    const w = await workload({ maxAttempts: 3 });
    const { job } = await q.createJob({ workload: w, tasks: specs(1) });
    const first = await claimOne(w, "owner");
    await expireLease(first.id);
    const current = await claimOne(w, "owner"); // attempt 2 of the same task
    expect(current.attempt).toBe(2);
    const manifest = { resultUri: "s3://out/0", resultSha256: sha("out") };
    const cases: Array<[string, () => Promise<unknown>, string]> = [
      ["foreign worker renews", () => q.renewLease({ taskId: current.id, workerId: "thief", attempt: 2 }), "not_leaseholder"],
      [
        "foreign worker completes",
        () => q.completeTask({ taskId: current.id, workerId: "thief", attempt: 2, ...manifest }),
        "not_leaseholder",
      ],
      [
        "foreign worker fails",
        () => q.failTask({ taskId: current.id, workerId: "thief", attempt: 2, errorCode: "boom" }),
        "not_leaseholder",
      ],
      [
        "stale attempt completes",
        () => q.completeTask({ taskId: current.id, workerId: "owner", attempt: 1, ...manifest }),
        "stale_attempt",
      ],
      ["stale attempt renews", () => q.renewLease({ taskId: current.id, workerId: "owner", attempt: 1 }), "stale_attempt"],
    ];
    const before = await taskRow(current.id);
    for (const [what, call, reason] of cases) {
      const err = (await call().catch((e) => e)) as LeaseConflictError;
      expect(err, what).toBeInstanceOf(LeaseConflictError);
      expect(err.reason, what).toBe(reason);
    }
    await expireLease(current.id);
    const expiredRow = await taskRow(current.id);
    const err = await q.completeTask({ taskId: current.id, workerId: "owner", attempt: 2, ...manifest }).catch((e) => e);
    expect(err.reason).toBe("lease_expired");
    const after = await taskRow(current.id);
    expect(after.version).toBe(expiredRow.version);
    expect(after.status).toBe("leased");
    expect(before.version).toBe(expiredRow.version);

    await expect(q.renewLease({ taskId: "00000000-0000-4000-8000-000000000000", workerId: "owner", attempt: 1 })).rejects.toBeInstanceOf(
      NotFoundError,
    );
    await q.cancelJob({ jobId: job.id });
    const cancelled = await q.renewLease({ taskId: current.id, workerId: "owner", attempt: 2 }).catch((e) => e);
    expect(cancelled.reason).toBe("task_cancelled");
  });

  it("renews a live lease from the database clock", async () => {
    const w = await workload({ leaseSeconds: 10 });
    await q.createJob({ workload: w, tasks: specs(1) });
    const t = await claimOne(w);
    const renewed = await q.renewLease({ taskId: t.id, workerId: "worker-1", attempt: 1, leaseSeconds: 600 });
    const row = await taskRow(t.id);
    expect(renewed.version).toBe(t.version + 1);
    expect((row.lease_expires_at.getTime() - row.db_now.getTime()) / 1000).toBeGreaterThan(590);
  });
});

describe("5. results are idempotent", () => {
  it("the same manifest again returns the same task without a write; a different one conflicts", async () => {
    const w = await workload();
    await q.createJob({ workload: w, tasks: specs(2) });
    const t = await claimOne(w);
    const manifest = {
      taskId: t.id,
      workerId: "worker-1",
      attempt: 1,
      resultUri: "s3://out/0",
      resultSha256: sha("r0"),
      metrics: { frames: 10, psnr: 41.5 },
    };
    const done = await q.completeTask(manifest);
    expect(done.status).toBe("completed");
    expect(done.metrics).toEqual({ frames: 10, psnr: 41.5 });
    const again = await q.completeTask({ ...manifest, metrics: { psnr: 41.5, frames: 10 } });
    expect(again.version).toBe(done.version);
    expect((await taskRow(t.id)).version).toBe(done.version);
    await expect(q.completeTask({ ...manifest, resultSha256: sha("other") })).rejects.toBeInstanceOf(ResultConflictError);
    await expect(q.completeTask({ ...manifest, resultUri: "s3://out/elsewhere" })).rejects.toBeInstanceOf(ResultConflictError);
    // The result is its uri and checksum: other metrics (a retry that recomputed a duration) are the same result; the first metrics stay.
    const remeasured = await q.completeTask({ ...manifest, metrics: { frames: 11 } });
    expect(remeasured.version).toBe(done.version);
    expect((await taskRow(t.id)).result_sha256).toBe(sha("r0"));
    expect((await taskRow(t.id)).metrics).toEqual({ frames: 10, psnr: 41.5 });
  });
});

describe("6. failures retry with backoff", () => {
  it("retryable with attempts left goes back to pending after an exponential, jittered backoff", async () => {
    const w = await workload({ maxAttempts: 3 });
    await q.createJob({ workload: w, tasks: specs(1) });
    const t = await claimOne(w);
    const failed = await q.failTask({
      taskId: t.id,
      workerId: "worker-1",
      attempt: 1,
      errorCode: "oom",
      errorMessage: "ran out\u0007 of memory\nagain",
    });
    expect(failed.status).toBe("pending");
    expect(failed.errorCode).toBe("oom");
    expect(failed.errorMessage).toBe("ran out of memory\nagain");
    const row = await taskRow(t.id);
    const delay = (row.run_after.getTime() - row.db_now.getTime()) / 1000;
    // 2^1 s ± 25%
    expect(delay).toBeGreaterThan(1.4);
    expect(delay).toBeLessThanOrEqual(2.5);
    expect(await q.claimTasks({ workerId: "w", workloads: [w] })).toEqual([]);
  });

  it("honours retry_after_seconds, fails for good when not retryable or out of attempts", async () => {
    const w = await workload({ maxAttempts: 2 });
    const { job } = await q.createJob({ workload: w, tasks: specs(2) });
    const t = await claimOne(w);
    await q.failTask({ taskId: t.id, workerId: "worker-1", attempt: 1, errorCode: "flaky", retryAfterSeconds: 0 });
    const t2 = (await q.claimTasks({ workerId: "worker-1", workloads: [w], maxTasks: 2 })).find((x) => x.id === t.id)!;
    expect(t2.attempt).toBe(2);
    const last = await q.failTask({
      taskId: t.id,
      workerId: "worker-1",
      attempt: 2,
      errorCode: "flaky",
      retryAfterSeconds: 0,
      errorMessage: "x".repeat(5000),
    });
    expect(last.status).toBe("failed");
    expect(last.errorMessage).toHaveLength(2000);
    expect((await jobRow(job.id)).status).toBe("failed");

    const w2 = await workload({ maxAttempts: 5 });
    await q.createJob({ workload: w2, tasks: specs(1) });
    const u = await claimOne(w2);
    expect((await q.failTask({ taskId: u.id, workerId: "worker-1", attempt: 1, errorCode: "bad_input", retryable: false })).status).toBe(
      "failed",
    );
    await expect(q.failTask({ taskId: u.id, workerId: "worker-1", attempt: 1, errorCode: "Bad Code" })).rejects.toThrow(/error_code/);
  });
});

describe("7. job status follows its tasks", () => {
  it("pending → running at the first claim → completed with the last task", async () => {
    const w = await workload();
    const { job } = await q.createJob({ workload: w, tasks: specs(3) });
    expect((await jobRow(job.id)).status).toBe("pending");
    const claimed = await q.claimTasks({ workerId: "w", workloads: [w], maxTasks: 3 });
    expect((await jobRow(job.id)).status).toBe("running");
    for (const [i, t] of claimed.entries()) {
      await q.completeTask({ taskId: t.id, workerId: "w", attempt: 1, resultUri: `s3://o/${i}`, resultSha256: sha(i) });
      expect((await jobRow(job.id)).status).toBe(i === 2 ? "completed" : "running");
    }
    expect((await jobRow(job.id)).completed_at).not.toBeNull();
  });

  it("completions racing for the last tasks still complete the job", async () => {
    const w = await workload();
    const other = new PostgresQueue(f.newPool(), TEST_STORE_OPTIONS);
    for (let round = 0; round < 15; round++) {
      const { job } = await q.createJob({ workload: w, tasks: specs(4) });
      const claimed = await q.claimTasks({ workerId: "w", workloads: [w], maxTasks: 4 });
      await Promise.all(
        claimed.map((t, i) =>
          (i % 2 ? q : other).completeTask({ taskId: t.id, workerId: "w", attempt: 1, resultUri: "s3://o", resultSha256: sha(i) }),
        ),
      );
      expect((await jobRow(job.id)).status).toBe("completed");
    }
  });

  it("a task failing for good fails the job and cancels its unfinished tasks", async () => {
    const w = await workload();
    const { job, tasks } = await q.createJob({ workload: w, tasks: specs(3) });
    const t = await claimOne(w);
    await q.failTask({ taskId: t.id, workerId: "worker-1", attempt: 1, errorCode: "corrupt_input", retryable: false });
    expect((await jobRow(job.id)).status).toBe("failed");
    expect(await f.count("tasks", `job_id = '${job.id}' AND status = 'cancelled'`)).toBe(2);
    expect(tasks).toHaveLength(3);
  });

  it("cancelJob cancels the job and its pending and leased tasks; the leaseholder learns it at its heartbeat", async () => {
    const w = await workload();
    const { job } = await q.createJob({ workload: w, tasks: specs(3) });
    const t = await claimOne(w, "holder");
    const cancelled = await q.cancelJob({ jobId: job.id, reason: "user asked" });
    expect(cancelled.status).toBe("cancelled");
    expect(cancelled.cancelReason).toBe("user asked");
    expect(await f.count("tasks", `job_id = '${job.id}' AND status = 'cancelled'`)).toBe(3);
    const err = await q.renewLease({ taskId: t.id, workerId: "holder", attempt: 1 }).catch((e) => e);
    expect(err).toBeInstanceOf(LeaseConflictError);
    expect(err.reason).toBe("task_cancelled");
    expect((await q.cancelJob({ jobId: job.id })).status).toBe("cancelled");
    await expect(q.cancelJob({ jobId: "00000000-0000-4000-8000-00000000dead" })).rejects.toBeInstanceOf(NotFoundError);
  });
});

describe("8. reading", () => {
  it("getJobStatus counts tasks per status and the completed fraction", async () => {
    const w = await workload();
    const { job } = await q.createJob({ workload: w, tasks: specs(4) });
    const [a, b] = await q.claimTasks({ workerId: "w", workloads: [w], maxTasks: 2 });
    await q.completeTask({ taskId: a.id, workerId: "w", attempt: 1, resultUri: "s3://o", resultSha256: sha(1) });
    const s = await q.getJobStatus(job.id);
    expect(s.taskCounts).toEqual({ pending: 2, leased: 1, completed: 1, failed: 0, cancelled: 0, waiting: 0 });
    expect(s.totalTasks).toBe(4);
    expect(s.progress).toBe(0.25);
    expect(s.job.status).toBe("running");
    expect(b.status).toBe("leased");
    await expect(q.getJobStatus("not-a-uuid")).rejects.toBeInstanceOf(ValidationError);
    await expect(q.getJobStatus("11111111-0000-4000-8000-000000000001")).rejects.toBeInstanceOf(NotFoundError);
  });

  it("lists completed results in chunk order, page by page", async () => {
    const w = await workload();
    const { job } = await q.createJob({ workload: w, tasks: specs(7) });
    const claimed = await q.claimTasks({ workerId: "w", workloads: [w], maxTasks: 7 });
    // Complete in reverse, and leave chunk 3 unfinished.
    for (const t of [...claimed].reverse()) {
      if (t.chunkIndex === 3) continue;
      await q.completeTask({
        taskId: t.id,
        workerId: "w",
        attempt: 1,
        resultUri: `s3://o/${t.chunkIndex}`,
        resultSha256: sha(t.chunkIndex),
        metrics: { i: t.chunkIndex },
      });
    }
    const seen: number[] = [];
    let token = "";
    let pages = 0;
    do {
      const page = await q.listCompletedResults({ jobId: job.id, pageSize: 2, pageToken: token });
      seen.push(...page.results.map((r) => r.chunkIndex));
      for (const r of page.results)
        expect(r).toMatchObject({ resultUri: `s3://o/${r.chunkIndex}`, resultSha256: sha(r.chunkIndex), metrics: { i: r.chunkIndex } });
      token = page.nextPageToken;
      pages++;
    } while (token);
    expect(seen).toEqual([0, 1, 2, 4, 5, 6]);
    expect(pages).toBe(3);
    await expect(q.listCompletedResults({ jobId: job.id, pageToken: "garbage!" })).rejects.toThrow(/page_token/);
    await expect(q.listCompletedResults({ jobId: "11111111-0000-4000-8000-000000000002" })).rejects.toBeInstanceOf(NotFoundError);
  });
});

describe("9. concurrency", () => {
  async function race(queues: PostgresQueue[], w: string, total: number) {
    const leased: Task[] = [];
    await Promise.all(
      Array.from({ length: 8 }, async (_, i) => {
        const mine = queues[i % queues.length];
        for (;;) {
          const got = await mine.claimTasks({ workerId: `racer-${i}`, workloads: [w], maxTasks: 1 + (i % 3) });
          if (got.length === 0) return;
          leased.push(...got);
        }
      }),
    );
    expect(leased).toHaveLength(total);
    expect(new Set(leased.map((t) => t.id)).size).toBe(total);
    expect(leased.every((t) => t.attempt === 1)).toBe(true);
    expect(await f.count("tasks", `workload = '${w}' AND status = 'leased' AND attempt = 1`)).toBe(total);
  }

  beforeEach(() => {});

  it("8 claimers over 2,000 tasks lease each exactly once and miss none", async () => {
    const w = await workload();
    await q.createJob({ workload: w, tasks: specs(2000) });
    await race([q], w, 2000);
  });

  it("the same with two pools standing for two coordinators", async () => {
    const w = await workload();
    await q.createJob({ workload: w, tasks: specs(2000) });
    await race([q, new PostgresQueue(f.newPool(), TEST_STORE_OPTIONS)], w, 2000);
  });
});

describe("workloads", () => {
  it("puts, updates and lists workloads, rejecting bad names and schemas", async () => {
    const name = await workload({ maxAttempts: 2, leaseSeconds: 15 });
    const updated = await q.putWorkload({ name, maxAttempts: 9, leaseSeconds: 45, parametersSchema: { type: "object" } });
    expect(updated).toMatchObject({ name, maxAttempts: 9, leaseSeconds: 45, parametersSchema: { type: "object" } });
    expect((await q.listWorkloads()).find((x) => x.name === name)?.maxAttempts).toBe(9);
    const defaults = await q.putWorkload({ name: `${name}_d` });
    expect(defaults).toMatchObject({
      maxAttempts: TEST_STORE_OPTIONS.defaultMaxAttempts,
      leaseSeconds: TEST_STORE_OPTIONS.defaultLeaseSeconds,
    });
    await expect(q.putWorkload({ name: "Bad Name" })).rejects.toThrow(/^name:/);
    await expect(q.putWorkload({ name: "ok", parametersSchema: { type: "no-such-type" } })).rejects.toThrow(/parameters_schema/);
  });
});

describe("batch completion", () => {
  it("completes many leased tasks in one call, each under its own lease rules, and finishes the job", async () => {
    const w = await workload();
    const { job } = await q.createJob({ workload: w, tasks: specs(5) });
    const claimed = await q.claimTasks({ workerId: "batcher", workloads: [w], maxTasks: 5 });
    const results = claimed.map((t) => ({
      taskId: t.id,
      workerId: "batcher",
      attempt: 1,
      resultUri: `s3://o/${t.chunkIndex}`,
      resultSha256: sha(t.chunkIndex),
    }));
    // One foreign worker and one stale attempt in the batch: refused alone, the rest complete.
    const first = await q.completeTasks([...results.slice(0, 3), { ...results[3], workerId: "thief" }, { ...results[4], attempt: 2 }]);
    expect(first.map((o) => o.task?.status ?? o.error?.kind)).toEqual([
      "completed",
      "completed",
      "completed",
      "lease_conflict",
      "lease_conflict",
    ]);
    expect(await f.count("tasks", `job_id = '${job.id}' AND status = 'completed'`)).toBe(3);
    expect((await jobRow(job.id)).status).toBe("running");
    // Replays of accepted manifests come back unchanged next to the last two completions.
    const second = await q.completeTasks([results[0], results[3], results[4]]);
    expect(second.every((o) => o.task?.status === "completed")).toBe(true);
    expect(second[0].task?.version).toBe(first[0].task?.version);
    expect((await jobRow(job.id)).status).toBe("completed");
    const conflict = await q.completeTasks([{ ...results[1], resultSha256: sha("different") }]);
    expect(conflict[0].error).toBeInstanceOf(ResultConflictError);
    await expect(q.completeTasks([results[0], results[0]])).rejects.toThrow(/names one task twice/);
    await expect(q.completeTasks([{ ...results[0], resultSha256: "nope" }])).rejects.toThrow(/^results\[0\]\.result_sha256/);
  });
  it("finds a batch's rows through the primary key in its generic plan, never by walking the lease index", async () => {
    // The lease index holds an entry for every task completed within the last lease length (its
    // old version's); a completion that walked it would slow down the longer the queue ran.
    const w = await workload();
    await q.createJob({ workload: w, tasks: specs(30) });
    const claimed = await q.claimTasks({ workerId: "planner", workloads: [w], maxTasks: 30 });
    const batch = claimed.slice(0, 10);
    const payload = JSON.stringify(
      batch.map((t) => ({
        task_id: t.id,
        worker_id: "planner",
        attempt: 1,
        result_uri: "s3://o",
        result_sha256: sha(t.chunkIndex),
        metrics: null,
      })),
    );
    const { COMPLETE_TASKS } = await import("../support/statements.js");
    const client = await f.pool.connect();
    try {
      await client.query(`PREPARE batch_plan AS ${COMPLETE_TASKS}`);
      await client.query("BEGIN");
      const { rows } = await client.query(
        `EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) EXECUTE batch_plan(${client.escapeLiteral(payload)}, ${client.escapeLiteral(
          `{${batch.map((t) => t.id).join(",")}}`,
        )})`,
      );
      await client.query("ROLLBACK");
      await client.query("DEALLOCATE batch_plan");
      const plan = rows.map((r) => r["QUERY PLAN"]).join("\n");
      if (process.env.SHOW_PLAN) console.log(plan);
      expect(plan).toMatch(/Update on tasks t \(actual rows=10(\.00)? loops=1\)/);
      expect(plan).toMatch(/(Index Scan using|Bitmap Index Scan on) tasks_pkey/);
      expect(plan).not.toMatch(/tasks_lease_expiry_idx/);
    } finally {
      client.release();
    }
  });

  it("claims read a workload they have not seen once, then never again, on a store that never created its jobs", async () => {
    // Jobs are often submitted through another coordinator than the one the workers report to.
    const w = await workload();
    await q.createJob({ workload: w, tasks: specs(4) });
    const pool = f.newPool();
    const reads: string[] = [];
    pool.on("connect", (client) => {
      const query = client.query.bind(client) as (...args: unknown[]) => unknown;
      (client as unknown as { query: (...args: unknown[]) => unknown }).query = (...args: unknown[]) => {
        const text = typeof args[0] === "string" ? args[0] : (args[0] as { text: string }).text;
        if (/FROM workloads WHERE name = ANY/.test(text)) reads.push(text);
        return query(...args);
      };
    });
    const other = new PostgresQueue(pool, TEST_STORE_OPTIONS);
    let [task] = await other.claimTasks({ workerId: "w", workloads: [w], maxTasks: 1 });
    for (let i = 0; i < 3; i++) {
      const { next } = await other.completeTaskAndClaim(
        { taskId: task.id, workerId: "w", attempt: 1, resultUri: "s3://o", resultSha256: sha(i) },
        { workerId: "w", workloads: [w], maxTasks: 1 },
      );
      expect(next).toHaveLength(1);
      task = next[0];
    }
    expect(reads).toHaveLength(1);
    expect(await f.count("tasks", `workload = '${w}' AND status = 'completed'`)).toBe(3);
    // Nor does a claim that finds the queue empty read it again.
    await other.completeTask({ taskId: task.id, workerId: "w", attempt: 1, resultUri: "s3://o", resultSha256: sha(9) });
    expect(await other.claimTasks({ workerId: "w", workloads: [w], maxTasks: 1 })).toEqual([]);
    expect(reads).toHaveLength(1);
    await expect(other.claimTasks({ workerId: "w", workloads: [w, "no_such_workload"] })).rejects.toBeInstanceOf(NotFoundError);
  });

  it("a batch that finishes one job while its claim_next takes another's tasks completes the first job", async () => {
    const w = await workload();
    const { job: first } = await q.createJob({ workload: w, tasks: specs(2) });
    const held = await q.claimTasks({ workerId: "w", workloads: [w], maxTasks: 2 });
    const { job: second } = await q.createJob({ workload: w, tasks: specs(3) });
    const results = held.map((t) => ({ taskId: t.id, workerId: "w", attempt: 1, resultUri: "s3://o", resultSha256: sha(t.chunkIndex) }));
    const { next } = await q.completeTasksAndClaim(results, { workerId: "w", workloads: [w], maxTasks: 2 });
    expect(next.map((t) => t.jobId)).toEqual([second.id, second.id]);
    expect((await jobRow(first.id)).status).toBe("completed");
    expect((await jobRow(second.id)).status).toBe("running");
  });

  it("batches racing for a job's last tasks still complete the job, whichever commits last", async () => {
    const w = await workload();
    const other = new PostgresQueue(f.newPool(), TEST_STORE_OPTIONS);
    for (let round = 0; round < 15; round++) {
      const { job } = await q.createJob({ workload: w, tasks: specs(6) });
      const claimed = await q.claimTasks({ workerId: "w", workloads: [w], maxTasks: 6 });
      const results = claimed.map((t, i) => ({ taskId: t.id, workerId: "w", attempt: 1, resultUri: "s3://o", resultSha256: sha(i) }));
      await Promise.all([q.completeTasks(results.slice(0, 3)), other.completeTasks(results.slice(3))]);
      expect((await jobRow(job.id)).status).toBe("completed");
    }
  });

  it("a batch over several jobs finishes the one it leaves with nothing pending or leased, and only that one", async () => {
    const w = await workload();
    // Created one after another, so claims take x's tasks, then y's, z's and v's.
    const { job: x } = await q.createJob({ workload: w, tasks: specs(3) });
    const { job: y } = await q.createJob({ workload: w, tasks: specs(2) });
    const { job: z } = await q.createJob({ workload: w, tasks: specs(2) });
    const { job: v } = await q.createJob({ workload: w, tasks: specs(2) });
    const xs = await q.claimTasks({ workerId: "w", workloads: [w], maxTasks: 2 });
    const rest = await q.claimTasks({ workerId: "w", workloads: [w], maxTasks: 6 });
    expect(rest.map((t) => t.jobId)).toEqual([x.id, y.id, y.id, z.id, z.id, v.id]);
    const report = (t: { id: string; chunkIndex: number }) => ({
      taskId: t.id,
      workerId: "w",
      attempt: 1,
      resultUri: "s3://o",
      resultSha256: sha(t.chunkIndex),
    });
    const statuses = async () => Promise.all([x, y, z, v].map(async (j) => (await jobRow(j.id)).status));
    // Left: x and z a leased task each, v a pending one; y nothing.
    const outcomes = await q.completeTasks([...xs, rest[1], rest[2], rest[3], rest[5]].map(report));
    expect(outcomes.map((o) => o.task?.status)).toEqual(Array(6).fill("completed"));
    expect(await statuses()).toEqual(["running", "completed", "running", "running"]);
    await q.completeTasks([report(rest[0]), report(rest[4])]);
    expect(await statuses()).toEqual(["completed", "completed", "completed", "running"]);
    // v's last task, claimed and reported in a batch: its completion finds nothing pending.
    const last = await q.claimTasks({ workerId: "w", workloads: [w], maxTasks: 2 });
    expect(last.map((t) => t.jobId)).toEqual([v.id]);
    await q.completeTasks(last.map(report));
    expect(await statuses()).toEqual(["completed", "completed", "completed", "completed"]);
  });

  it("a batch whose claim_next takes the job's last pending tasks leaves the job running until they complete", async () => {
    const w = await workload();
    const { job } = await q.createJob({ workload: w, tasks: specs(4) });
    const first = await q.claimTasks({ workerId: "w", workloads: [w], maxTasks: 2 });
    const results = first.map((t) => ({ taskId: t.id, workerId: "w", attempt: 1, resultUri: "s3://o", resultSha256: sha(t.chunkIndex) }));
    const { outcomes, next } = await q.completeTasksAndClaim(results, { workerId: "w", workloads: [w], maxTasks: 2 });
    expect(outcomes.map((o) => o.task?.status)).toEqual(["completed", "completed"]);
    expect(next).toHaveLength(2);
    expect((await jobRow(job.id)).status).toBe("running");
    const last = next.map((t) => ({ taskId: t.id, workerId: "w", attempt: 1, resultUri: "s3://o", resultSha256: sha(t.chunkIndex) }));
    const done = await q.completeTasksAndClaim(last, { workerId: "w", workloads: [w], maxTasks: 2 });
    expect(done.next).toHaveLength(0);
    expect((await jobRow(job.id)).status).toBe("completed");
    // One job_status event per change: pending → running → completed.
    expect(await f.count("task_events", `job_id = '${job.id}' AND kind = 'job_status'`)).toBe(2);
  });
});
