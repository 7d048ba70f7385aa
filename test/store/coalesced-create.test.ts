// Coalesced CreateJob: small jobs whose calls arrive together are inserted by one statement
// (coalesced-create.ts), and each caller still gets exactly its own job. A real PostgresQueue over a
// real, migrated PostgreSQL; a lock on `jobs` held by the test keeps one insert in flight, so the
// calls behind it queue up and go in one batch, which the store's observer counts.
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DeadlineExceededError, ValidationError } from "../../src/queue/errors.js";
import type { CreateJobInput, CreateJobResult } from "../../src/queue/types.js";
import { PostgresQueue } from "../../src/store/postgres/store.js";
import { holdTable, until, waitingOnLock as waitingOnLockIn } from "../support/lock-hold.js";
import { batchRecorder, queueFixture, sha, TEST_STORE_OPTIONS, type QueueFixture } from "../support/queue.js";

let f: QueueFixture;
let seq = 0;
const { observer, batches: recorded } = batchRecorder();
/** The sizes of the CreateJob statements so far. */
const createBatches = () => recorded.filter((b) => b.kind === "create").map((b) => b.size);

beforeAll(async () => {
  f = await queueFixture({ observer, coalescing: { maxBatch: 64 } });
});
afterAll(async () => {
  await f?.close();
});

async function workload(opts: { maxAttempts?: number; parametersSchema?: Record<string, unknown> } = {}): Promise<string> {
  const name = `cc-${++seq}`;
  await f.queue.putWorkload({ name, maxAttempts: opts.maxAttempts ?? 3, parametersSchema: opts.parametersSchema as never });
  // One job first, so the workload is in the coordinator's cache (a job of uncached workloads goes alone).
  await f.queue.createJob(job(name, 0, 1, { parameters: { model: "m" } }));
  return name;
}

function job(w: string, i: number, tasks = 1, extra: Partial<CreateJobInput> = {}): CreateJobInput {
  return {
    workload: w,
    tasks: Array.from({ length: tasks }, (_, k) => ({ chunkIndex: k, inputUri: `s3://cc/${i}/${k}`, inputSha256: sha(i * 1000 + k) })),
    ...extra,
  };
}

/** Holds a lock every insert into `jobs` waits on, so calls queue up behind the one in flight. */
const holdJobs = <T>(fn: () => Promise<T>) => holdTable(f.db.url, "jobs", fn);
const waitingOnLock = () => waitingOnLockIn(f.pool);

/** Every call's job, or the first refusal thrown. */
function values(outcomes: PromiseSettledResult<CreateJobResult>[]): CreateJobResult[] {
  return outcomes.map((o) => {
    if (o.status === "rejected") throw o.reason;
    return o.value;
  });
}

/**
 * Sends `first` and waits until its insert waits on the lock, then sends the rest: they queue
 * behind it in the lane and go in the next statement once the lock is let go.
 */
async function burst(first: () => Promise<CreateJobResult>, rest: Array<() => Promise<CreateJobResult>>) {
  const before = createBatches().length;
  const settled = await holdJobs(async () => {
    const a = first();
    a.catch(() => {});
    await until(async () => (await waitingOnLock()) >= 1, "the first insert to wait on the lock");
    const others = rest.map((call) => {
      const p = call();
      p.catch(() => {});
      return p;
    });
    return [a, ...others];
  });
  const outcomes = await Promise.allSettled(settled);
  return { outcomes, batches: createBatches().slice(before) };
}

async function taskRows(jobId: string) {
  const { rows } = await f.pool.query(
    `SELECT t.id, t.job_id, t.chunk_index, t.workload, t.input_uri, t.input_sha256, t.parameters, t.max_attempts, t.priority,
            t.status::text, t.created_at, t.run_after, j.created_at AS job_created_at
       FROM tasks t JOIN jobs j ON j.id = t.job_id WHERE t.job_id = $1 ORDER BY t.chunk_index`,
    [jobId],
  );
  return rows;
}

describe("coalesced CreateJob", () => {
  it("16 small jobs that arrive together: two statements, each caller its own job, its rows as answered", async () => {
    const w = await workload({ maxAttempts: 4 });
    const { outcomes, batches: seen } = await burst(
      () => f.queue.createJob(job(w, 1)),
      Array.from({ length: 15 }, (_, i) => () => f.queue.createJob(job(w, i + 2, 1 + (i % 3), { priority: i % 2, parameters: { n: i } }))),
    );
    expect(seen).toEqual([1, 15]);
    const results = values(outcomes);
    expect(new Set(results.map((r) => r.job.id)).size).toBe(16);
    for (const [k, r] of results.entries()) {
      const rows = await taskRows(r.job.id);
      // Each caller's job carries its own tasks, parameters and priority, exactly as its answer says.
      expect(rows.map((t) => t.input_uri)).toEqual(job(w, k + 1, k === 0 ? 1 : 1 + ((k - 1) % 3)).tasks!.map((t) => t.inputUri));
      expect(r.tasks.map((t) => t.id)).toEqual(rows.map((t) => t.id));
      expect(rows.every((t) => t.status === "pending" && t.max_attempts === 4 && t.job_id === r.job.id)).toBe(true);
      expect(rows.every((t) => t.priority === r.job.priority)).toBe(true);
      expect(
        rows.every((t) => t.created_at.getTime() === r.job.createdAt.getTime() && t.run_after.getTime() === t.created_at.getTime()),
      ).toBe(true);
      expect(r.tasks.every((t) => t.createdAt.getTime() === r.job.createdAt.getTime() && t.maxAttempts === 4)).toBe(true);
      if (k > 0) {
        expect(r.job.priority).toBe((k - 1) % 2);
        expect(rows.every((t) => JSON.stringify(t.parameters) === JSON.stringify({ n: k - 1 }))).toBe(true);
      }
    }
  });

  it("a job that fails its workload's schema is refused alone; the others in its batch are written, and nothing of it", async () => {
    const w = await workload({ parametersSchema: { type: "object", required: ["model"] } });
    const jobsBefore = await f.count("jobs", `workload = '${w}'`);
    const good = (i: number) => () => f.queue.createJob(job(w, i, 1, { parameters: { model: "m" } }));
    const { outcomes, batches: seen } = await burst(good(1), [
      good(2),
      () => f.queue.createJob(job(w, 3, 2, { parameters: { other: 1 } })),
      good(4),
    ]);
    expect(seen).toEqual([1, 3]);
    expect(outcomes.map((o) => o.status)).toEqual(["fulfilled", "fulfilled", "rejected", "fulfilled"]);
    expect((outcomes[2] as PromiseRejectedResult).reason).toBeInstanceOf(ValidationError);
    expect(await f.count("jobs", `workload = '${w}'`)).toBe(jobsBefore + 3);
    expect(await f.count("tasks", `workload = '${w}' AND input_uri LIKE 's3://cc/3/%'`)).toBe(0);
  });

  it("a workload changed through another coordinator since it was cached: every job is written with its new values", async () => {
    const w = await workload({ maxAttempts: 2 });
    const other = new PostgresQueue(f.newPool(), TEST_STORE_OPTIONS);
    await other.putWorkload({ name: w, maxAttempts: 7 });
    const { outcomes } = await burst(
      () => f.queue.createJob(job(w, 1)),
      Array.from({ length: 5 }, (_, i) => () => f.queue.createJob(job(w, i + 2))),
    );
    const results = values(outcomes);
    expect(results).toHaveLength(6);
    for (const r of results) {
      expect(r.tasks[0].maxAttempts).toBe(7);
      expect((await taskRows(r.job.id)).map((t) => t.max_attempts)).toEqual([7]);
    }
    expect(await f.count("jobs", `workload = '${w}'`)).toBe(7);
  });

  it("wakes parked claims once per workload and priority, counting every task of the batch", async () => {
    const w = await workload();
    const listener = new pg.Client({ connectionString: f.db.url });
    listener.on("error", () => {});
    await listener.connect();
    const heard: string[] = [];
    listener.on("notification", (n) => {
      if (n.payload?.startsWith(`${w}:`)) heard.push(n.payload);
    });
    await listener.query("LISTEN leasehold_tasks");
    try {
      const { batches: seen } = await burst(
        () => f.queue.createJob(job(w, 1, 2)),
        Array.from({ length: 8 }, (_, i) => () => f.queue.createJob(job(w, i + 2, 2, { priority: i % 2 }))),
      );
      expect(seen).toEqual([1, 8]);
      await until(() => heard.length >= 3, "three notifications");
      // The first job's own, then the batch's: one per priority, each counting its 4 jobs' 8 tasks.
      const parsed = heard.map((p) => {
        const [name, count, head] = p.split(":");
        const [priority, rank] = head.split(";");
        return { name, count: Number(count), priority: Number(priority), rank: Number(rank) };
      });
      expect(parsed.reduce((n, p) => n + p.count, 0)).toBe(18);
      expect(parsed.slice(1).sort((a, b) => a.priority - b.priority)).toEqual([
        { name: w, count: 8, priority: 0, rank: 0 },
        { name: w, count: 8, priority: 1, rank: 0 },
      ]);
    } finally {
      await listener.end();
    }
  });

  it("jobs that must not share a statement are written alone, beside a batch, and answered as before", async () => {
    const w = await workload();
    const keyed = await workload();
    const runAt = new Date(Date.now() + 3_600_000);
    const { outcomes, batches: seen } = await burst(
      () => f.queue.createJob(job(w, 1)),
      [
        () => f.queue.createJob(job(w, 2, 1, { idempotencyKey: `cc-key-${w}` })),
        () => f.queue.createJob(job(keyed, 3, 1, { concurrencyKey: "tenant-a" })),
        () => f.queue.createJob(job(w, 4, 1, { runAt })),
        () => f.queue.createJob(job(w, 5, 101)),
        () => f.queue.createJob(job(w, 6)),
        () => f.queue.createJob(job(w, 7)),
      ],
    );
    const results = values(outcomes);
    // Only the first and the last two went through the lane.
    expect(seen).toEqual([1, 2]);
    expect(results.map((r) => r.tasks.length)).toEqual([1, 1, 1, 1, 101, 1, 1]);
    expect(await f.count("tasks", `job_id = '${results[4].job.id}'`)).toBe(101);
    const again = await f.queue.createJob(job(w, 2, 1, { idempotencyKey: `cc-key-${w}` }));
    expect(again.created).toBe(false);
    expect(again.job.id).toBe(results[1].job.id);
  });

  it("a caller whose deadline passes while its job waits in the lane is answered DEADLINE_EXCEEDED, and its job is never written", async () => {
    const w = await workload();
    const late = new AbortController();
    const { outcomes } = await burst(
      () => f.queue.createJob(job(w, 1)),
      [
        () => {
          const p = f.queue.createJob(job(w, 2), { signal: late.signal });
          late.abort();
          return p;
        },
        () => f.queue.createJob(job(w, 3)),
      ],
    );
    expect(outcomes.map((o) => o.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
    expect((outcomes[1] as PromiseRejectedResult).reason).toBeInstanceOf(DeadlineExceededError);
    expect(await f.count("tasks", `workload = '${w}' AND input_uri LIKE 's3://cc/2/%'`)).toBe(0);
    expect(await f.count("jobs", `workload = '${w}'`)).toBe(3);
  });
});
