// A watch stream sends a job's events in id order even when their transactions commit out of it,
// so resuming after the last id a client saw neither repeats nor skips an event.
import { setMaxListeners } from "node:events";
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { JobUpdate } from "../../src/queue/types.js";
import { queueFixture, sha, type QueueFixture } from "../support/queue.js";

let f: QueueFixture;
let other: pg.Pool;
const HOLD_MS = 1500;

beforeAll(async () => {
  f = await queueFixture({ watchPollIntervalMs: 50, watchHoldMs: HOLD_MS });
  other = f.newPool();
  other.on("error", () => {});
  await f.queue.putWorkload({ name: "order" });
});
afterAll(async () => {
  await f?.close();
});

async function newJob(): Promise<{ jobId: string; taskId: string }> {
  const { job, tasks } = await f.queue.createJob({
    workload: "order",
    tasks: [{ chunkIndex: 0, inputUri: "s3://o/0", inputSha256: sha(0) }],
  });
  return { jobId: job.id, taskId: tasks[0].id };
}

/** Opens a transaction that has an xid and, unless `jobId` is undefined, one progress event of the job (not committed). */
async function openWriter(jobId: string | undefined, taskId?: string): Promise<{ c: pg.PoolClient; eventId?: string }> {
  const c = await other.connect();
  await c.query("BEGIN");
  await c.query("SELECT pg_current_xact_id()");
  if (jobId === undefined) return { c };
  const { rows } = await c.query<{ id: string }>(
    `INSERT INTO task_events (job_id, task_id, chunk_index, kind, status, attempt, progress)
     VALUES ($1, $2, 0, 'task_progress', 'pending', 0, 0.5) RETURNING id::text`,
    [jobId, taskId],
  );
  return { c, eventId: rows[0].id };
}

async function writeEvent(jobId: string, taskId: string): Promise<string> {
  const w = await openWriter(jobId, taskId);
  await w.c.query("COMMIT");
  w.c.release();
  return w.eventId!;
}

function watch(jobId: string, afterEventId?: string) {
  const stop = new AbortController();
  setMaxListeners(0, stop.signal);
  const updates: JobUpdate[] = [];
  const done = (async () => {
    for await (const u of f.queue.watchJob(jobId, { signal: stop.signal, afterEventId })) updates.push(u);
  })().catch(() => {});
  const ids = () => updates.flatMap((u) => (u.event ? [u.event.id] : []));
  return { updates, ids, stop: () => (stop.abort(), done) };
}

describe("watch streams in id order", () => {
  it("holds a committed event back until a lower id commits, then sends both in order; a resume after the lower one repeats nothing", async () => {
    const { jobId, taskId } = await newJob();
    const w = watch(jobId);
    await expect.poll(() => w.updates.length).toBe(1); // the snapshot

    const a = await openWriter(jobId, taskId); // event a, not committed
    const b = await writeEvent(jobId, taskId); // event b > a, committed first
    expect(BigInt(b)).toBeGreaterThan(BigInt(a.eventId!));
    // The stream has read b by the time the floor check sees nothing new for it; it must not send it.
    const checks = f.queue.watchStats().checks;
    await expect.poll(() => f.queue.watchStats().checks, { timeout: 10_000 }).toBeGreaterThanOrEqual(checks + 4);
    expect(w.ids()).toEqual([]);

    await a.c.query("COMMIT");
    a.c.release();
    await expect.poll(() => w.ids(), { timeout: 10_000 }).toEqual([a.eventId, b]);

    // A client that left right after a resumes after it: it gets b once, and nothing it had.
    const resumed = watch(jobId, a.eventId);
    await expect.poll(() => resumed.ids(), { timeout: 10_000 }).toEqual([b]);
    const c = await writeEvent(jobId, taskId);
    await expect.poll(() => resumed.ids(), { timeout: 10_000 }).toEqual([b, c]);
    await expect.poll(() => w.ids(), { timeout: 10_000 }).toEqual([a.eventId, b, c]);
    await Promise.all([w.stop(), resumed.stop()]);
  });

  it("an aborted transaction holds nothing back once it has ended", async () => {
    const { jobId, taskId } = await newJob();
    const w = watch(jobId);
    await expect.poll(() => w.updates.length).toBe(1);
    const a = await openWriter(jobId, taskId);
    const b = await writeEvent(jobId, taskId);
    await a.c.query("ROLLBACK");
    a.c.release();
    await expect.poll(() => w.ids(), { timeout: 10_000 }).toEqual([b]);
    await w.stop();
  });

  it("a transaction open longer than the hold (not the coordinator's) stops holding events back", async () => {
    const { jobId, taskId } = await newJob();
    const w = watch(jobId);
    await expect.poll(() => w.updates.length).toBe(1);
    const foreign = await openWriter(undefined); // a long transaction elsewhere on the database
    const b = await writeEvent(jobId, taskId);
    const c = await writeEvent(jobId, taskId);
    // Sent while the foreign transaction is still open, once it has been open HOLD_MS.
    await expect.poll(() => w.ids(), { timeout: 20_000 }).toEqual([b, c]);
    const open = await other.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM pg_stat_activity WHERE backend_xid IS NOT NULL AND state = 'idle in transaction' AND datname = current_database()",
    );
    expect(open.rows[0].n).toBe(1);
    // Later events are not held for it again.
    const d = await writeEvent(jobId, taskId);
    await expect.poll(() => w.ids(), { timeout: 5_000 }).toEqual([b, c, d]);
    await foreign.c.query("ROLLBACK");
    foreign.c.release();
    await w.stop();
  });

  it("ends after the job's final events even while an unrelated transaction is open", async () => {
    await f.queue.putWorkload({ name: "order-final" });
    const { job } = await f.queue.createJob({
      workload: "order-final",
      tasks: [{ chunkIndex: 0, inputUri: "s3://o/0", inputSha256: sha(0) }],
    });
    const w = watch(job.id);
    await expect.poll(() => w.updates.length).toBe(1);
    const foreign = await openWriter(undefined);
    try {
      const [t] = await f.queue.claimTasks({ workerId: "o-w", workloads: ["order-final"], maxTasks: 1 });
      await f.queue.completeTask({ taskId: t.id, workerId: "o-w", attempt: t.attempt, resultUri: "s3://o/r", resultSha256: sha(9) });
      await expect
        .poll(() => w.updates.at(-1)?.event?.kind === "job_status" && w.updates.at(-1)?.event?.status, { timeout: 20_000 })
        .toBe("completed");
      const ids = w.ids().map(BigInt);
      expect([...ids].sort((x, y) => (x < y ? -1 : 1))).toEqual(ids);
    } finally {
      await foreign.c.query("ROLLBACK");
      foreign.c.release();
    }
    await w.stop();
  });
});
