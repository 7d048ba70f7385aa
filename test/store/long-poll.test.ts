// Long-poll claims over LISTEN/NOTIFY, against a real PostgreSQL.
import { afterAll, beforeAll, expect, it } from "vitest";
import { LongPollingQueue } from "../../src/queue/long-poll.js";
import { TaskListener } from "../../src/store/postgres/state/listener.js";
import { queueFixture, sha, type QueueFixture } from "../support/queue.js";

let f: QueueFixture;
let listener: TaskListener;
let seq = 0;

beforeAll(async () => {
  f = await queueFixture();
  listener = new TaskListener(f.db.url);
  await listener.start();
});
afterAll(async () => {
  await listener?.stop();
  await f?.close();
});

async function workload() {
  const name = `lp${++seq}`;
  await f.queue.putWorkload({ name });
  return name;
}

function oneTask(w: string, n = 1) {
  return f.queue.createJob({
    workload: w,
    tasks: Array.from({ length: n }, (_, i) => ({ chunkIndex: i, inputUri: `s3://x/${i}`, inputSha256: sha(i) })),
  });
}

const until = async (cond: () => boolean, ms = 5000) => {
  const end = Date.now() + ms;
  while (!cond() && Date.now() < end) await new Promise((r) => setTimeout(r, 10));
  return cond();
};

it("a parked claim is woken by the commit of new work, not by the poll", async () => {
  // A poll interval far beyond the wait: only the notification can deliver the task in time.
  const q = new LongPollingQueue(f.queue, listener, { pollIntervalMs: 60_000 });
  const w = await workload();
  const parked = q.claimTasks({ workerId: "w1", workloads: [w], waitSeconds: 10 });
  expect(await until(() => q.parked === 1)).toBe(true);
  const { tasks } = await oneTask(w);
  const got = await parked;
  expect(got.map((t) => t.id)).toEqual([tasks[0].id]);
  q.close();
});

it("wakes no more parked claims than there are new tasks", async () => {
  const q = new LongPollingQueue(f.queue, listener, { pollIntervalMs: 60_000 });
  const w = await workload();
  const results: number[] = [];
  const claims = Array.from({ length: 5 }, (_, i) =>
    q.claimTasks({ workerId: `w${i}`, workloads: [w], waitSeconds: 20 }).then((t) => results.push(t.length)),
  );
  expect(await until(() => q.parked === 5)).toBe(true);
  await oneTask(w, 2);
  expect(await until(() => results.length === 2)).toBe(true);
  // The other three stay parked (allow the loop a moment to prove it).
  await new Promise((r) => setTimeout(r, 300));
  expect(q.parked).toBe(3);
  expect(results).toEqual([1, 1]);
  q.close();
  await Promise.all(claims);
  expect(results).toEqual([1, 1, 0, 0, 0]);
});

it("answers empty when the wait or the caller's deadline ends, and at once on close", async () => {
  const q = new LongPollingQueue(f.queue, listener, { pollIntervalMs: 60_000 });
  const w = await workload();
  expect(await q.claimTasks({ workerId: "w", workloads: [w], waitSeconds: 1 })).toEqual([]);
  const start = Date.now();
  expect(await q.claimTasks({ workerId: "w", workloads: [w], waitSeconds: 30 }, { deadline: Date.now() + 400 })).toEqual([]);
  expect(Date.now() - start).toBeLessThan(400);
  const parked = q.claimTasks({ workerId: "w", workloads: [w], waitSeconds: 30 });
  expect(await until(() => q.parked === 1)).toBe(true);
  q.close();
  expect(await parked).toEqual([]);
  expect(q.parked).toBe(0);
});

it("polling is the floor: without any notification a parked claim still finds work", async () => {
  const silent = { subscribe: () => () => {} };
  const q = new LongPollingQueue(f.queue, silent, { pollIntervalMs: 100 });
  const w = await workload();
  const parked = q.claimTasks({ workerId: "w", workloads: [w], waitSeconds: 10 });
  expect(await until(() => q.parked === 1)).toBe(true);
  await oneTask(w);
  expect(await parked).toHaveLength(1);
  q.close();
});

it("the LISTEN connection comes back after its backend is killed", async () => {
  const q = new LongPollingQueue(f.queue, listener, { pollIntervalMs: 60_000 });
  const w = await workload();
  const { rows } = await f.pool.query(
    `SELECT pg_terminate_backend(pid) AS killed FROM pg_stat_activity WHERE application_name = 'leasehold-listener' AND datname = current_database()`,
  );
  expect(rows).toHaveLength(1);
  expect(await until(() => !listener.listening, 2000)).toBe(true);
  expect(await until(() => listener.listening, 5000)).toBe(true);
  const parked = q.claimTasks({ workerId: "w", workloads: [w], waitSeconds: 10 });
  expect(await until(() => q.parked === 1)).toBe(true);
  await oneTask(w);
  expect(await parked).toHaveLength(1);
  q.close();
});
