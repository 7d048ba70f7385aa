// Idle WatchJob streams: the poll floor is per coordinator (one statement per interval for all of
// its streams), not per stream, and an event still reaches every stream through it.
import { setMaxListeners } from "node:events";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { JobUpdate } from "../../src/queue/types.js";
import { queueFixture, sha, type QueueFixture } from "../support/queue.js";

let f: QueueFixture;

beforeAll(async () => {
  // No LISTEN connection: whatever reaches the streams comes through the floor.
  f = await queueFixture({ watchPollIntervalMs: 50 });
});
afterAll(async () => {
  await f?.close();
});

const STREAMS_PER_JOB = 100;

describe("idle watch streams", () => {
  it(`${2 * STREAMS_PER_JOB} idle streams cost one statement per floor check, and an event reaches every one`, async () => {
    const q = f.queue;
    await q.putWorkload({ name: "hub" });
    const jobs = await Promise.all(
      [0, 1].map(
        async () =>
          (
            await q.createJob({
              workload: "hub",
              tasks: [0, 1].map((i) => ({ chunkIndex: i, inputUri: `s3://h/${i}`, inputSha256: sha(i) })),
            })
          ).job.id,
      ),
    );
    const stop = new AbortController();
    setMaxListeners(0, stop.signal); // one listener per stream
    const streams = jobs.flatMap((jobId) =>
      Array.from({ length: STREAMS_PER_JOB }, () => {
        const updates: JobUpdate[] = [];
        const done = (async () => {
          for await (const u of q.watchJob(jobId, { signal: stop.signal })) updates.push(u);
        })();
        return { jobId, updates, done };
      }),
    );
    await expect.poll(() => q.watchStats().streams, { timeout: 30_000 }).toBe(streams.length);
    expect(streams.every((s) => s.updates.length === 1 && s.updates[0].snapshot)).toBe(true);
    expect(await f.count("job_watchers" as "jobs")).toBe(streams.length);

    // Idle: count every connection checkout of the store's pool (each statement goes through one)
    // against the floor checks made in the same span.
    let checkouts = 0;
    const onAcquire = () => checkouts++;
    f.pool.on("acquire", onAcquire);
    const checks0 = q.watchStats().checks;
    await expect.poll(() => q.watchStats().checks, { timeout: 30_000 }).toBeGreaterThanOrEqual(checks0 + 10);
    f.pool.off("acquire", onAcquire);
    const checks = q.watchStats().checks - checks0;
    // One checkout per check, plus at most one check in flight at either end.
    expect(checkouts).toBeLessThanOrEqual(checks + 2);
    expect(streams.every((s) => s.updates.length === 1)).toBe(true);

    // An event on each job (a claim: task leased, job running) reaches all of its streams.
    const claimed = await q.claimTasks({ workerId: "hub-w", workloads: ["hub"], maxTasks: 4 });
    expect(claimed).toHaveLength(4);
    await expect
      .poll(() => streams.filter((s) => s.updates.some((u) => u.event?.kind === "task_status" && u.event.status === "leased")).length, {
        timeout: 30_000,
      })
      .toBe(streams.length);
    for (const s of streams) {
      const leased = s.updates.filter((u) => u.event?.kind === "task_status" && u.event.status === "leased");
      // Each stream sees its own job's two claims, once each.
      expect(leased.map((u) => u.event!.jobId)).toEqual([s.jobId, s.jobId]);
    }

    stop.abort();
    await Promise.all(streams.map((s) => s.done));
    expect(q.watchStats().streams).toBe(0);
    await expect.poll(() => f.count("job_watchers" as "jobs")).toBe(0);
  });
});
