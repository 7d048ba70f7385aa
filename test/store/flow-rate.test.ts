// A rate limit shared by three coordinators (three stores on one database, each with its long
// poll): over 10 s, 32 claimers lease at most rate × time + burst tasks, and not much fewer; a
// claim refused for want of a token waits for the next one instead of spinning.
import { afterAll, beforeAll, expect, it } from "vitest";
import { LongPollingQueue } from "../../src/queue/long-poll.js";
import type { CallOptions, ClaimTasksInput, Task } from "../../src/queue/types.js";
import { TaskListener } from "../../src/store/postgres/state/listener.js";
import { PostgresQueue } from "../../src/store/postgres/store.js";
import { queueFixture, sha, TEST_STORE_OPTIONS, type QueueFixture } from "../support/queue.js";

let f: QueueFixture;
let listener: TaskListener;

/** A store that counts the claim statements it runs. */
class CountingQueue extends PostgresQueue {
  claims = 0;
  override claimTasks(input: ClaimTasksInput, opts?: CallOptions): Promise<Task[]> {
    this.claims++;
    return super.claimTasks(input, opts);
  }
}

beforeAll(async () => {
  f = await queueFixture();
  listener = new TaskListener(f.db.url);
  await listener.start();
});
afterAll(async () => {
  await listener?.stop();
  await f?.close();
});

it("20 leases/s with a burst of 10, shared by 3 coordinators and 32 claimers: leases over 10 s within ±10% of 210, no second above 30", async () => {
  const RATE = 20;
  const BURST = 10;
  const SECONDS = 10;
  await f.queue.putWorkload({ name: "rated", leaseSeconds: 60, maxLeasesPerSecond: RATE, leasesBurst: BURST });
  await f.queue.createJob({
    workload: "rated",
    tasks: Array.from({ length: 2000 }, (_, i) => ({ chunkIndex: i, inputUri: `s3://r/${i}`, inputSha256: sha(i) })),
  });
  const stores = [0, 1, 2].map(() => new CountingQueue(f.newPool(), TEST_STORE_OPTIONS));
  const polls = stores.map((s) => new LongPollingQueue(s, listener, { pollIntervalMs: 60_000 }));
  // Connections open and statements prepared before the clock starts (an empty claim of another workload).
  await f.queue.putWorkload({ name: "warmup" });
  await Promise.all(
    Array.from({ length: 32 }, (_, w) => stores[w % 3].claimTasks({ workerId: "warm", workloads: ["warmup"], maxTasks: 1 + (w % 4) })),
  );
  for (const s of stores) s.claims = 0;
  const stopAt = Date.now() + SECONDS * 1000 + 1500;
  let leased = 0;
  await Promise.all(
    Array.from({ length: 32 }, async (_, w) => {
      const q = polls[w % 3];
      while (Date.now() < stopAt) {
        for (const t of await q.claimTasks({ workerId: `r${w}`, workloads: ["rated"], maxTasks: 1 + (w % 4), waitSeconds: 1 })) {
          leased++;
          await stores[w % 3].completeTask({
            taskId: t.id,
            workerId: t.leaseOwner!,
            attempt: t.attempt,
            resultUri: "s3://o",
            resultSha256: sha("o"),
          });
        }
      }
    }),
  );
  for (const p of polls) p.close();
  // The leases by the database clock, from the first: the window [first, first + 10 s).
  const { rows } = await f.pool.query(
    `WITH l AS (SELECT e.created_at FROM task_events e JOIN tasks t ON t.id = e.task_id WHERE t.workload = 'rated' AND e.status = 'leased'),
          s AS (SELECT min(created_at) AS t0 FROM l)
     SELECT floor(extract(epoch FROM l.created_at - s.t0))::int AS second, count(*)::int AS n
     FROM l, s WHERE l.created_at < s.t0 + make_interval(secs => $1) GROUP BY 1 ORDER BY 1`,
    [SECONDS],
  );
  const perSecond = rows.map((r) => r.n as number);
  const total = perSecond.reduce((a, b) => a + b, 0);
  const claims = stores.reduce((n, s) => n + s.claims, 0);
  console.log(
    `rate limit: ${total} leases in ${SECONDS} s (expected ${RATE * SECONDS + BURST}), per second ${perSecond.join(" ")}; ${claims} claim statements for ${leased} leases`,
  );
  const expected = RATE * SECONDS + BURST;
  expect(total).toBeGreaterThanOrEqual(Math.floor(expected * 0.9));
  expect(total).toBeLessThanOrEqual(expected);
  // Any one second: at most a second's tokens plus the burst.
  for (const n of perSecond) expect(n).toBeLessThanOrEqual(RATE + BURST);
  // No storm: claims parked on the limit wait for a token rather than claiming on every wake. Each
  // of the 32 claimers still re-claims about every half second (its wait spread over the claims
  // parked on its own coordinator only): about 8 statements per lease here, a known cost.
  expect(claims).toBeLessThan(leased * 10);
}, 120_000);
