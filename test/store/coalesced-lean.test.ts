// The lean complete-and-claim statement (coalesced-statements.ts, claim.ts ClaimArms): results with
// claim_next run without the arm of expired leases and the flow claim while the coordinator knows
// neither can take anything. It answers as the full statement does, and a view of flow control
// gone stale (a cap set through another coordinator) costs no cap: the callers are topped up
// through the full claim. One connection a pool, so the statements a coordinator prepared are those
// of the session the test reads.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Task } from "../../src/queue/types.js";
import { TaskListener } from "../../src/store/postgres/state/listener.js";
import { PostgresQueue } from "../../src/store/postgres/store.js";
import { until } from "../support/lock-hold.js";
import { queueFixture, sha, TEST_STORE_OPTIONS, type QueueFixture } from "../support/queue.js";
import { SWITCHES } from "../support/switches.js";

let f: QueueFixture;
let seq = 0;
const listeners: TaskListener[] = [];

beforeAll(async () => {
  f = await queueFixture({ coalescing: { maxBatch: 64 } }, { max: 1 });
});
afterAll(async () => {
  await Promise.all(listeners.map((l) => l.stop()));
  await f?.close();
});

interface Internals {
  ctx: {
    claimHints: { leasesProbed(expired: boolean): void; begin(w: string[], labels: string): { expiredOff: boolean } };
    flow: { workloads: { noneOf(w: string[]): boolean } };
  };
}
const internals = (q: PostgresQueue) => q as unknown as Internals;

/** A coordinator of its own (one connection) that knows no lease has expired and has read which workloads are flow-controlled. */
async function leanCoordinator(w: string): Promise<{ q: PostgresQueue; prepared(): Promise<string[]> }> {
  const pool = f.newPool();
  // Claim hints, which carry "no lease has expired", are sent while the coordinator listens for wake-ups.
  const listener = new TaskListener(f.db.url);
  listeners.push(listener);
  await listener.start();
  const q = new PostgresQueue(pool, { ...TEST_STORE_OPTIONS, coalescing: { maxBatch: 64 }, taskWakes: listener, jobWakes: listener });
  await until(async () => internals(q).ctx.flow.workloads.noneOf([w]), "the coordinator to read which workloads are flow-controlled");
  await until(async () => {
    internals(q).ctx.claimHints.leasesProbed(false);
    return internals(q).ctx.claimHints.begin([w], "{}").expiredOff;
  }, "the coordinator's claim hints to say no lease has expired");
  const prepared = async () =>
    (
      await pool.query<{ name: string }>(
        "SELECT name FROM pg_prepared_statements WHERE name LIKE 'leasehold_coalesced_complete_and_claim%'",
      )
    ).rows.map((r) => r.name);
  return { q, prepared };
}

async function workload(): Promise<string> {
  const name = `lean-${++seq}`;
  await f.queue.putWorkload({ name, leaseSeconds: 30, maxAttempts: 3 });
  return name;
}

async function enqueue(w: string, n: number): Promise<string> {
  const job = await f.queue.createJob({
    workload: w,
    tasks: Array.from({ length: n }, (_, i) => ({ chunkIndex: i, inputUri: `s3://in/${i}`, inputSha256: sha(i) })),
  });
  return job.job.id;
}

const result = (t: Task) => ({
  taskId: t.id,
  workerId: t.leaseOwner!,
  attempt: t.attempt,
  resultUri: `s3://out/${t.id}`,
  resultSha256: sha(t.id),
});

async function leasedBy(q: PostgresQueue, w: string, n: number): Promise<Task[]> {
  const out: Task[] = [];
  for (let i = 0; i < n; i++) out.push(...(await q.claimTasks({ workerId: `${w}-w${i}`, workloads: [w] })));
  return out;
}

// Without claim hints (CLAIM_HINTS=false) the coordinator never knows that no lease has expired, and sends the full statement.
describe.skipIf(!SWITCHES.claimHints)("the lean complete-and-claim statement", () => {
  it("answers results with claim_next as the full statement does: each result accepted, each next task leased to its worker, with its events", async () => {
    const w = await workload();
    const { q, prepared } = await leanCoordinator(w);
    const job = await enqueue(w, 8);
    const held = await leasedBy(q, w, 4);
    const answers = await Promise.all(held.map((t) => q.completeTaskAndClaim(result(t), { workerId: t.leaseOwner!, workloads: [w] })));
    expect(await prepared()).toContain("leasehold_coalesced_complete_and_claim_lean");
    expect(await prepared()).not.toContain("leasehold_coalesced_complete_and_claim");
    const { rows } = await f.pool.query<{ id: string; status: string; lease_owner: string | null }>(
      "SELECT id, status::text, lease_owner FROM tasks WHERE job_id = $1",
      [job],
    );
    const byId = new Map(rows.map((r) => [r.id, r]));
    answers.forEach((a, i) => {
      expect(a.task.status).toBe("completed");
      expect(byId.get(held[i].id)?.status).toBe("completed");
      expect(a.next).toHaveLength(1);
      expect(byId.get(a.next[0].id)).toMatchObject({ status: "leased", lease_owner: held[i].leaseOwner });
    });
    expect(new Set(answers.map((a) => a.next[0].id)).size).toBe(4);
    // One leased event a lease, from pending; one completed event a result.
    const events = await f.pool.query<{ status: string; previous_status: string; n: number }>(
      `SELECT status::text, previous_status::text, count(*)::int AS n FROM task_events
       WHERE job_id = $1 AND kind = 'task_status' GROUP BY 1, 2 ORDER BY 1, 2`,
      [job],
    );
    expect(events.rows).toEqual([
      { status: "completed", previous_status: "leased", n: 4 },
      { status: "leased", previous_status: "pending", n: 8 },
    ]);
    q.stopTimers();
  });

  it("a workload capped through another coordinator after this one read its view: nothing of it is leased past the cap, and the callers are topped up under it", async () => {
    const w = await workload();
    const { q, prepared } = await leanCoordinator(w);
    await enqueue(w, 3);
    const held = await leasedBy(q, w, 3);
    // Through the fixture's coordinator: this one's view still says no flow control.
    await f.queue.putWorkload({ name: w, leaseSeconds: 30, maxAttempts: 3, maxLeased: 2 });
    await enqueue(w, 5);
    expect(internals(q).ctx.flow.workloads.noneOf([w])).toBe(true);
    const answers = await Promise.all(held.map((t) => q.completeTaskAndClaim(result(t), { workerId: t.leaseOwner!, workloads: [w] })));
    expect(await prepared()).toContain("leasehold_coalesced_complete_and_claim_lean");
    expect(answers.every((a) => a.task.status === "completed")).toBe(true);
    // The statement said the workload is flow-controlled; the full claim took what the cap allows.
    expect(answers.flatMap((a) => a.next)).toHaveLength(2);
    expect(await f.count("tasks", `workload = '${w}' AND status = 'leased'`)).toBe(2);
    expect(internals(q).ctx.flow.workloads.noneOf([w])).toBe(false);
    q.stopTimers();
  });
});
