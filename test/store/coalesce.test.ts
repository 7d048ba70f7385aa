// Coalescing: single-task calls that arrive together share one statement per kind, and each
// caller still gets exactly its own answer. A real PostgresQueue over a real, migrated PostgreSQL;
// the store's observer counts the calls each coalesced statement answered. A table lock held by
// the test keeps a statement in flight, so the calls behind it queue up and go in one batch.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DeadlineExceededError, LeaseConflictError, ResultConflictError } from "../../src/queue/errors.js";
import type { Task } from "../../src/queue/types.js";
import { GroupCommit, RIDERS_KEY, type Outcome } from "../../src/store/postgres/coalescing/group-commit.js";
import { PostgresQueue } from "../../src/store/postgres/store.js";
import { holdTable, until, waitingOnLock as waitingOnLockIn } from "../support/lock-hold.js";
import { batchRecorder, queueFixture, sha, TEST_STORE_OPTIONS, type QueueFixture } from "../support/queue.js";

let f: QueueFixture;
let seq = 0;
const { observer, batches } = batchRecorder();

beforeAll(async () => {
  f = await queueFixture({ observer, coalescing: { maxBatch: 64 } });
});
afterAll(async () => {
  await f?.close();
});

async function workload(leaseSeconds = 30): Promise<string> {
  const name = `co-${++seq}`;
  await f.queue.putWorkload({ name, leaseSeconds, maxAttempts: 3 });
  return name;
}

async function enqueue(w: string, n: number): Promise<void> {
  await f.queue.createJob({
    workload: w,
    tasks: Array.from({ length: n }, (_, i) => ({ chunkIndex: i, inputUri: `s3://in/${i}`, inputSha256: sha(i) })),
  });
}

/** Holds a lock every task statement waits on, so calls queue up behind the one in flight. */
const holdTasks = <T>(fn: () => Promise<T>) => holdTable(f.db.url, "tasks", fn);
const waitingOnLock = () => waitingOnLockIn(f.pool);

/** A result report of a leased task as its worker would send it; `over` makes it stale or another's. */
const result = (t: Task, over: Partial<{ workerId: string; attempt: number; resultUri: string }> = {}) => ({
  taskId: t.id,
  workerId: t.leaseOwner!,
  attempt: t.attempt,
  resultUri: `s3://out/${t.id}`,
  resultSha256: sha(t.id),
  ...over,
});

async function leaseRows(w: string) {
  const { rows } = await f.pool.query(
    `SELECT id, status::text, lease_owner, attempt, result_uri FROM tasks WHERE workload = $1 ORDER BY chunk_index`,
    [w],
  );
  return rows as Array<{ id: string; status: string; lease_owner: string | null; attempt: number; result_uri: string | null }>;
}

describe("claims", () => {
  it("16 claims that arrive together take 16 different tasks, each leased to its own worker, in few statements", async () => {
    const w = await workload();
    await enqueue(w, 40);
    batches.length = 0;
    const answers = await holdTasks(async () => {
      const first = f.queue.claimTasks({ workerId: "c0", workloads: [w] });
      await until(async () => (await waitingOnLock()) >= 1, "the first claim to wait on the lock");
      const rest = Array.from({ length: 15 }, (_, i) => f.queue.claimTasks({ workerId: `c${i + 1}`, workloads: [w] }));
      return { first, rest };
    }).then(async ({ first, rest }) => [await first, ...(await Promise.all(rest))]);
    const ids = answers.flat().map((t) => t.id);
    expect(ids).toHaveLength(16);
    expect(new Set(ids).size).toBe(16);
    const rows = new Map((await leaseRows(w)).map((r) => [r.id, r]));
    answers.forEach((tasks, i) => {
      expect(tasks).toHaveLength(1);
      expect(rows.get(tasks[0].id)).toMatchObject({ status: "leased", lease_owner: `c${i}`, attempt: 1 });
      expect(tasks[0].leaseOwner).toBe(`c${i}`);
    });
    // The first ran alone on an idle lane; the fifteen behind it went in one statement.
    expect(batches.filter((b) => b.kind === "claim").map((b) => b.size)).toEqual([1, 15]);
    // The earlier caller gets the earlier chunk, as it would have claimed first.
    const chunks = answers.map((t) => t[0].chunkIndex);
    expect(chunks.slice(1)).toEqual([...chunks.slice(1)].sort((a, b) => a - b));
  });

  it("claims asking for several tasks each get what they asked for, and callers past the work get none", async () => {
    const w = await workload();
    await enqueue(w, 7);
    batches.length = 0;
    const answers = await holdTasks(async () => {
      const first = f.queue.claimTasks({ workerId: "m0", workloads: [w], maxTasks: 2 });
      await until(async () => (await waitingOnLock()) >= 1, "the first claim to wait");
      const rest = [3, 3, 2].map((n, i) => f.queue.claimTasks({ workerId: `m${i + 1}`, workloads: [w], maxTasks: n }));
      return { first, rest };
    }).then(async ({ first, rest }) => [await first, ...(await Promise.all(rest))]);
    expect(answers.map((a) => a.length)).toEqual([2, 3, 2, 0]);
    const rows = new Map((await leaseRows(w)).map((r) => [r.id, r]));
    answers.forEach((tasks, i) => {
      for (const t of tasks) expect(rows.get(t.id)?.lease_owner).toBe(`m${i}`);
    });
    expect([...rows.values()].filter((r) => r.status === "leased")).toHaveLength(7);
  });

  it("a claim whose deadline passes while it waits behind a statement is answered DEADLINE_EXCEEDED and takes no task", async () => {
    const w = await workload();
    await enqueue(w, 5);
    const late = new AbortController();
    const { first, second } = await holdTasks(async () => {
      const first = f.queue.claimTasks({ workerId: "d0", workloads: [w] });
      await until(async () => (await waitingOnLock()) >= 1, "the first claim to wait");
      const second = f.queue.claimTasks({ workerId: "d1", workloads: [w] }, { signal: late.signal });
      second.catch(() => {});
      late.abort();
      await expect(second).rejects.toBeInstanceOf(DeadlineExceededError);
      return { first, second };
    });
    expect(await first).toHaveLength(1);
    await expect(second).rejects.toBeInstanceOf(DeadlineExceededError);
    const rows = await leaseRows(w);
    expect(rows.filter((r) => r.lease_owner === "d1")).toEqual([]);
    expect(rows.filter((r) => r.status === "leased")).toHaveLength(1);
  });

  it("a caller that leaves while its batch runs is answered at once, and the task leased for it goes back to pending", async () => {
    const w = await workload();
    await enqueue(w, 5);
    const leaving = new AbortController();
    const kept = await holdTasks(async () => {
      const blocker = f.queue.claimTasks({ workerId: "g0", workloads: [w] });
      await until(async () => (await waitingOnLock()) >= 1, "the first claim to wait");
      const stays = f.queue.claimTasks({ workerId: "g1", workloads: [w] });
      const leaves = f.queue.claimTasks({ workerId: "g2", workloads: [w] }, { signal: leaving.signal });
      leaves.catch(() => {});
      // Let the first statement end (its deadline-free caller stays), so the two behind it go in the next.
      return { blocker, stays, leaves };
    });
    // The lock is gone: the blocker's statement and then the pair's statement run.
    expect(await kept.blocker).toHaveLength(1);
    leaving.abort();
    const stays = await kept.stays;
    const left = await kept.leaves.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(stays).toHaveLength(1);
    if (left === undefined) return; // the pair's statement answered before the abort: nothing to give back
    expect(left).toBeInstanceOf(DeadlineExceededError);
    await until(async () => (await leaseRows(w)).every((r) => r.lease_owner !== "g2"), "g2's task to be given back");
    const rows = await leaseRows(w);
    expect(
      rows
        .filter((r) => r.status === "leased")
        .map((r) => r.lease_owner)
        .sort(),
    ).toEqual(["g0", "g1"]);
    expect(rows.filter((r) => r.status === "pending").every((r) => r.attempt === 0)).toBe(true);
  });

  it("claims of a capped workload coalesce too: one statement for the callers behind, the cap counted over all of them, each task to its caller", async () => {
    const w = await workload();
    await f.queue.putWorkload({ name: w, leaseSeconds: 30, maxAttempts: 3, maxLeased: 6 });
    await enqueue(w, 20);
    batches.length = 0;
    const answers = await holdTasks(async () => {
      const first = f.queue.claimTasks({ workerId: "k0", workloads: [w] });
      await until(async () => (await waitingOnLock()) >= 1, "the first claim to wait on the lock");
      const rest = Array.from({ length: 15 }, (_, i) =>
        f.queue.claimTasks({ workerId: `k${i + 1}`, workloads: [w], maxTasks: 1 + (i % 2) }),
      );
      return { first, rest };
    }).then(async ({ first, rest }) => [await first, ...(await Promise.all(rest))]);
    expect(batches.filter((b) => b.kind === "claim").map((b) => b.size)).toEqual([1, 15]);
    // k0 alone, then in arrival order k1 (1), k2 (2), k3 (1), k4 (asks 2, gets the last 1): 6 in all.
    expect(answers.map((a) => a.length)).toEqual([1, 1, 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    const rows = new Map((await leaseRows(w)).map((r) => [r.id, r]));
    answers.forEach((tasks, i) => {
      for (const t of tasks) {
        expect(rows.get(t.id)).toMatchObject({ status: "leased", lease_owner: `k${i}`, attempt: 1 });
        expect(t.leaseOwner).toBe(`k${i}`);
      }
    });
    expect([...rows.values()].filter((r) => r.status === "leased")).toHaveLength(6);
  });

  it("coalesced claims of a rate-limited workload lease no more than its tokens, and the callers left empty learn when the next is due", async () => {
    const w = await workload();
    await f.queue.putWorkload({ name: w, leaseSeconds: 30, maxAttempts: 3, maxLeasesPerSecond: 0.5, leasesBurst: 3 });
    await enqueue(w, 20);
    batches.length = 0;
    const answers = await holdTasks(async () => {
      const first = f.queue.claim({ workerId: "q0", workloads: [w] });
      await until(async () => (await waitingOnLock()) >= 1, "the first claim to wait on the lock");
      const rest = Array.from({ length: 7 }, (_, i) => f.queue.claim({ workerId: `q${i + 1}`, workloads: [w] }));
      return { first, rest };
    }).then(async ({ first, rest }) => [await first, ...(await Promise.all(rest))]);
    expect(batches.filter((b) => b.kind === "claim").map((b) => b.size)).toEqual([1, 7]);
    expect(answers.map((a) => a.tasks.length)).toEqual([1, 1, 1, 0, 0, 0, 0, 0]);
    expect((await leaseRows(w)).filter((r) => r.status === "leased")).toHaveLength(3);
    for (const [i, o] of answers.entries()) {
      if (i < 3) expect(o.retryAfterMs).toBeUndefined();
      else expect(o.retryAfterMs).toBeGreaterThan(0);
    }
  });

  it("a workload capped through another coordinator is claimed under its cap at once, before this one's view of caps is refreshed", async () => {
    const other = new PostgresQueue(f.newPool(), { ...TEST_STORE_OPTIONS, coalescing: { maxBatch: 64 } });
    const w = await workload();
    // The other coordinator reads which workloads are flow-controlled now, while this one is not.
    expect(await other.claimTasks({ workerId: "v0", workloads: [w] })).toEqual([]);
    await f.queue.putWorkload({ name: w, leaseSeconds: 30, maxAttempts: 3, maxLeased: 2 });
    await enqueue(w, 5);
    const got = await Promise.all([1, 2, 3].map((i) => other.claimTasks({ workerId: `v${i}`, workloads: [w], maxTasks: 2 })));
    // The coalesced statement claims flow-controlled workloads through leasehold_flow_claim, which
    // reads the cap from the database, so the two slots are taken and no more.
    expect(got.flat()).toHaveLength(2);
    expect((await leaseRows(w)).filter((r) => r.status === "leased")).toHaveLength(2);
    other.stopTimers();
  });
});

describe("results", () => {
  async function leased(w: string, n: number): Promise<Task[]> {
    await enqueue(w, n);
    const out: Task[] = [];
    for (let i = 0; i < n; i++) out.push(...(await f.queue.claimTasks({ workerId: `r${i}`, workloads: [w] })));
    return out;
  }

  it("results with claim_next from 16 workers: each accepted, each worker's next task leased to that worker", async () => {
    const w = await workload();
    const tasks = await leased(w, 16);
    await enqueue(w, 16);
    batches.length = 0;
    const answers = await holdTasks(async () => {
      const calls = tasks.map((t) => f.queue.completeTaskAndClaim(result(t), { workerId: t.leaseOwner!, workloads: [w] }));
      await until(async () => (await waitingOnLock()) >= 1, "a statement to wait");
      return calls;
    }).then((calls) => Promise.all(calls));
    const rows = new Map((await leaseRows(w)).map((r) => [r.id, r]));
    answers.forEach((a, i) => {
      expect(a.task.status).toBe("completed");
      expect(rows.get(a.task.id)?.result_uri).toBe(`s3://out/${tasks[i].id}`);
      expect(a.next).toHaveLength(1);
      expect(rows.get(a.next[0].id)).toMatchObject({ status: "leased", lease_owner: tasks[i].leaseOwner });
    });
    expect(new Set(answers.map((a) => a.next[0].id)).size).toBe(16);
    expect(Math.max(...batches.filter((b) => b.kind === "complete_and_claim").map((b) => b.size))).toBeGreaterThan(1);
  });

  it("a stale attempt beside fresh results in one batch is refused alone; the same task twice never shares a statement", async () => {
    const w = await workload();
    const tasks = await leased(w, 4);
    batches.length = 0;
    const answers = await holdTasks(async () => {
      const calls = [
        f.queue.completeTask(result(tasks[0])),
        f.queue.completeTask(result(tasks[1], { attempt: tasks[1].attempt + 1 })),
        f.queue.completeTask(result(tasks[2])),
        // the same task by another worker, and the same result twice (a replay)
        f.queue.completeTask(result(tasks[2], { workerId: "intruder" })),
        f.queue.completeTask(result(tasks[3])),
        f.queue.completeTask(result(tasks[3])),
      ].map((p) =>
        p.then(
          (t): Outcome<Task> => ({ value: t }),
          (error: unknown): Outcome<Task> => ({ error }),
        ),
      );
      await until(async () => (await waitingOnLock()) >= 1, "a statement to wait");
      return calls;
    }).then((calls) => Promise.all(calls));
    expect("value" in answers[0] && answers[0].value.status).toBe("completed");
    expect("error" in answers[1] && answers[1].error).toBeInstanceOf(LeaseConflictError);
    expect("value" in answers[2] && answers[2].value.status).toBe("completed");
    expect("error" in answers[3] && answers[3].error).toBeInstanceOf(LeaseConflictError);
    expect("value" in answers[4] && answers[4].value.status).toBe("completed");
    expect("value" in answers[5] && answers[5].value.status).toBe("completed");
    const rows = new Map((await leaseRows(w)).map((r) => [r.id, r]));
    expect(rows.get(tasks[1].id)).toMatchObject({ status: "leased", result_uri: null });
    expect(rows.get(tasks[2].id)).toMatchObject({ status: "completed", lease_owner: tasks[2].leaseOwner });
  });

  it("batched reports with claim_next (CompleteTasks) from 8 workers share a statement: each result fenced alone, each claim its own", async () => {
    const w = await workload();
    // 8 workers holding 4 tasks each; 32 more pending for their claims of 4.
    await enqueue(w, 32);
    const held: Task[][] = [];
    for (let i = 0; i < 8; i++) held.push(await f.queue.claimTasks({ workerId: `b${i}`, workloads: [w], maxTasks: 4 }));
    await enqueue(w, 32);
    batches.length = 0;
    const answers = await holdTasks(async () => {
      const calls = held.map((ts, i) =>
        f.queue.completeTasksAndClaim(
          // worker 0 reports one of its tasks at a stale attempt: that result alone is refused
          ts.map((t, k) => (i === 0 && k === 0 ? result(t, { attempt: t.attempt + 1 }) : result(t))),
          { workerId: `b${i}`, workloads: [w], maxTasks: 4 },
        ),
      );
      await until(async () => (await waitingOnLock()) >= 1, "a statement to wait");
      return calls;
    }).then((calls) => Promise.all(calls));
    const rows = new Map((await leaseRows(w)).map((r) => [r.id, r]));
    answers.forEach((a, i) => {
      expect(a.outcomes).toHaveLength(4);
      a.outcomes.forEach((o, k) => {
        if (i === 0 && k === 0) {
          expect(o.error).toBeInstanceOf(LeaseConflictError);
          expect(rows.get(held[0][0].id)).toMatchObject({ status: "leased", result_uri: null });
        } else {
          expect(o.task?.id).toBe(held[i][k].id);
          expect(rows.get(held[i][k].id)).toMatchObject({ status: "completed", result_uri: `s3://out/${held[i][k].id}` });
        }
      });
      expect(a.next).toHaveLength(4);
      for (const t of a.next) expect(rows.get(t.id)).toMatchObject({ status: "leased", lease_owner: `b${i}` });
    });
    expect(new Set(answers.flatMap((a) => a.next.map((t) => t.id))).size).toBe(32);
    expect(Math.max(...batches.filter((b) => b.kind === "complete_and_claim").map((b) => b.size))).toBeGreaterThan(1);
  });

  it("a batched report claims even when none of its results is accepted; a single report refused beside it claims nothing in the statement", async () => {
    const w = await workload();
    await enqueue(w, 3);
    const [a] = await f.queue.claimTasks({ workerId: "x1", workloads: [w] });
    const [b] = await f.queue.claimTasks({ workerId: "x2", workloads: [w] });
    const [c] = await f.queue.claimTasks({ workerId: "x3", workloads: [w] });
    await enqueue(w, 4);
    batches.length = 0;
    const [, batched, single] = await holdTasks(async () => {
      // x3's report goes first and waits on the lock; the two behind it share the next statement.
      const first = f.queue.completeTasksAndClaim([result(c)], { workerId: "x3", workloads: [w] });
      await until(async () => (await waitingOnLock()) >= 1, "a statement to wait");
      const calls = [
        first,
        f.queue.completeTasksAndClaim([result(a, { workerId: "intruder" })], { workerId: "x1", workloads: [w], maxTasks: 2 }),
        f.queue.completeTaskAndClaim(result(b, { attempt: b.attempt + 1 }), { workerId: "x2", workloads: [w], maxTasks: 2 }).then(
          (v) => v,
          (e: unknown) => e,
        ),
      ] as const;
      return calls;
    }).then((calls) => Promise.all(calls));
    expect(batched.outcomes[0].error).toBeInstanceOf(LeaseConflictError);
    expect(batched.next).toHaveLength(2);
    expect(single).toBeInstanceOf(LeaseConflictError);
    const rows = await leaseRows(w);
    // a and b still leased to their holders, the batched caller's two claims, x3's one, and nothing else taken.
    expect(
      rows
        .filter((r) => r.status === "leased")
        .map((r) => r.lease_owner)
        .sort(),
    ).toEqual(["x1", "x1", "x1", "x2", "x3"]);
    expect(rows.filter((r) => r.status === "pending")).toHaveLength(1);
    expect(batches.filter((x) => x.kind === "complete_and_claim").map((x) => x.size)).toContain(2);
  });

  it("a replay with another manifest in the same burst is a conflict, and the row keeps the first", async () => {
    const w = await workload();
    const [t] = await leased(w, 1);
    const [a, b] = await Promise.all([
      f.queue.completeTask(result(t)).then(
        (v) => v,
        (e: unknown) => e,
      ),
      f.queue.completeTask(result(t, { resultUri: "s3://other" })).then(
        (v) => v,
        (e: unknown) => e,
      ),
    ]);
    expect((a as Task).status).toBe("completed");
    expect(b).toBeInstanceOf(ResultConflictError);
    expect((await leaseRows(w))[0].result_uri).toBe(`s3://out/${t.id}`);
  });

  it("renewals and failures of many workers in one batch: each fenced on its own", async () => {
    const w = await workload();
    const tasks = await leased(w, 6);
    const [renewed, stale, failed, failedStale] = await holdTasks(async () => {
      const calls = [
        Promise.all(
          tasks
            .slice(0, 3)
            .map((t) => f.queue.renewLease({ taskId: t.id, workerId: t.leaseOwner!, attempt: t.attempt, leaseSeconds: 120 })),
        ),
        f.queue.renewLease({ taskId: tasks[3].id, workerId: "nobody", attempt: tasks[3].attempt }).then(
          () => undefined,
          (e: unknown) => e,
        ),
        f.queue.failTask({
          taskId: tasks[4].id,
          workerId: tasks[4].leaseOwner!,
          attempt: tasks[4].attempt,
          errorCode: "e",
          retryAfterSeconds: 60,
        }),
        f.queue.failTask({ taskId: tasks[5].id, workerId: tasks[5].leaseOwner!, attempt: 99, errorCode: "e" }).then(
          () => undefined,
          (e: unknown) => e,
        ),
      ] as const;
      await until(async () => (await waitingOnLock()) >= 1, "a statement to wait");
      return calls;
    }).then((calls) => Promise.all(calls));
    expect(renewed.map((t) => t.status)).toEqual(["leased", "leased", "leased"]);
    for (const t of renewed) expect(t.leaseExpiresAt!.getTime() - Date.now()).toBeGreaterThan(60_000);
    expect(stale).toBeInstanceOf(LeaseConflictError);
    expect(failed.status).toBe("pending");
    expect(failedStale).toBeInstanceOf(LeaseConflictError);
    const rows = await leaseRows(w);
    expect(rows.map((r) => r.status)).toEqual(["leased", "leased", "leased", "leased", "pending", "leased"]);
  });
});

describe("results riding with claims (COALESCE_MIX)", () => {
  /** Four leased tasks; then, behind a claim held on the lock, their results (one stale) and three more claims. */
  async function claimThenResults(queue: PostgresQueue, recorded = batches) {
    const w = await workload();
    await enqueue(w, 10);
    const leased: Task[] = [];
    for (let i = 0; i < 4; i++) leased.push(...(await queue.claimTasks({ workerId: `x${i}`, workloads: [w] })));
    recorded.length = 0;
    const settle = <T>(p: Promise<T>) =>
      p.then(
        (v): Outcome<T> => ({ value: v }),
        (error: unknown): Outcome<T> => ({ error }),
      );
    const { first, results, claims } = await holdTasks(async () => {
      const first = queue.claimTasks({ workerId: "y0", workloads: [w] });
      await until(async () => (await waitingOnLock()) >= 1, "the first claim to wait on the lock");
      const results = leased.map((t, i) => settle(queue.completeTask(i === 1 ? result(t, { attempt: t.attempt + 1 }) : result(t))));
      const claims = [1, 2, 3].map((i) => queue.claimTasks({ workerId: `y${i}`, workloads: [w] }));
      return { first, results, claims };
    });
    return { w, leased, first: await first, results: await Promise.all(results), claims: await Promise.all(claims) };
  }

  it("results that arrive while a claim statement runs go with the next claim statement, each answered as alone", async () => {
    const { w, leased, first, results, claims } = await claimThenResults(f.queue);
    // The first claim alone on an idle lane; the four results and three claims behind it in one statement.
    expect(batches).toEqual([
      { kind: "claim", size: 1 },
      { kind: "complete_then_claim", size: 7 },
    ]);
    expect(first).toHaveLength(1);
    expect(results.map((r) => ("value" in r ? r.value.status : r.error))).toEqual([
      "completed",
      expect.any(LeaseConflictError),
      "completed",
      "completed",
    ]);
    const rows = new Map((await leaseRows(w)).map((r) => [r.id, r]));
    expect(rows.get(leased[0].id)).toMatchObject({ status: "completed", result_uri: `s3://out/${leased[0].id}` });
    expect(rows.get(leased[1].id)).toMatchObject({ status: "leased", result_uri: null });
    claims.forEach((tasks, i) => {
      expect(tasks).toHaveLength(1);
      expect(rows.get(tasks[0].id)).toMatchObject({ status: "leased", lease_owner: `y${i + 1}`, attempt: 1 });
    });
    expect(new Set([first[0].id, ...claims.map((t) => t[0].id)]).size).toBe(4);
    // Each completion and each lease wrote its one event.
    const { rows: events } = await f.pool.query(
      `SELECT e.status::text, count(*)::int AS n FROM task_events e JOIN tasks t ON t.id = e.task_id
       WHERE t.workload = $1 AND e.kind = 'task_status' GROUP BY e.status ORDER BY e.status::text`,
      [w],
    );
    expect(events).toEqual([
      { status: "completed", n: 3 },
      { status: "leased", n: 8 },
    ]);
  });

  it("with COALESCE_MIX=false the same calls take a statement per kind, with the same answers", async () => {
    const recorder = batchRecorder();
    const unmixed = new PostgresQueue(f.newPool(), {
      ...TEST_STORE_OPTIONS,
      observer: recorder.observer,
      coalescing: { maxBatch: 64, mixResults: false },
    });
    try {
      const { first, results, claims } = await claimThenResults(unmixed, recorder.batches);
      // Each kind keeps a statement of its own in flight: the first result runs at once beside the held claim.
      expect(recorder.batches.filter((b) => b.kind === "claim").map((b) => b.size)).toEqual([1, 3]);
      expect(recorder.batches.filter((b) => b.kind === "complete").map((b) => b.size)).toEqual([1, 3]);
      expect(first).toHaveLength(1);
      expect(results.map((r) => "value" in r)).toEqual([true, false, true, true]);
      expect(claims.map((c) => c.length)).toEqual([1, 1, 1]);
    } finally {
      unmixed.stopTimers();
    }
  });
});

describe("group commit", () => {
  it("keeps conflicting items and items past maxBatch for the next statement, in arrival order", async () => {
    const seen: number[][] = [];
    let release: () => void = () => {};
    const gate = new Promise<void>((r) => (release = r));
    const gc = new GroupCommit<number, number>(
      {
        async run(_key, items) {
          seen.push(items);
          if (seen.length === 1) await gate;
          return items.map((i) => ({ value: i * 10 }));
        },
        conflict: (a, b) => a % 100 === b % 100,
      },
      { maxBatch: 3 },
    );
    const all = [1, 2, 102, 3, 4, 5].map((i) => gc.submit("k", i));
    release();
    expect(await Promise.all(all)).toEqual([10, 20, 1020, 30, 40, 50]);
    expect(seen).toEqual([[1], [2, 3, 4], [102, 5]]);
  });

  it("weighs items where the hooks say so: a statement holds at most maxBatch weight, and a heavier item still runs alone", async () => {
    const seen: number[][] = [];
    let release: () => void = () => {};
    const gate = new Promise<void>((r) => (release = r));
    const gc = new GroupCommit<number, number>(
      {
        async run(_key, items) {
          seen.push(items);
          if (seen.length === 1) await gate;
          return items.map((i) => ({ value: i }));
        },
        weight: (i) => i,
      },
      { maxBatch: 10 },
    );
    const all = [1, 4, 5, 2, 12, 3].map((i) => gc.submit("k", i));
    release();
    expect(await Promise.all(all)).toEqual([1, 4, 5, 2, 12, 3]);
    expect(seen).toEqual([[1], [4, 5], [2, 3], [12]]);
  });

  it("riders run alone when no lane is busy, and otherwise go with a busy lane's next statement", async () => {
    const seen: Array<[string, number[]]> = [];
    let release: () => void = () => {};
    const gate = new Promise<void>((r) => (release = r));
    const gc = new GroupCommit<number, number>(
      {
        async run(key, items) {
          seen.push([key, items]);
          if (key === "k" && seen.length === 2) await gate;
          return items.map((i) => ({ value: i * 10 }));
        },
      },
      { maxBatch: 64 },
    );
    expect(await gc.submitRider(1)).toBe(10);
    const all = [gc.submit("k", 2), gc.submitRider(3), gc.submit("k", 4), gc.submitRider(5)];
    release();
    expect(await Promise.all(all)).toEqual([20, 30, 40, 50]);
    expect(seen).toEqual([
      [RIDERS_KEY, [1]],
      ["k", [2]],
      ["k", [4, 3, 5]],
    ]);
  });
});
