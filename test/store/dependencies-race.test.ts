// The promotion race: 200 parents of one child (a workflow's nodes) finished concurrently on three
// coordinators (three stores, each with its own pool: separate sessions and transactions against
// one database). The
// child is promoted exactly once, also when parents fail, are cancelled, or are retried while the
// others finish; a child whose policy a failure breaks is cancelled exactly once and never promoted.
import { afterAll, beforeAll, expect, it } from "vitest";
import { DeadlineExceededError, LeaseConflictError, UnavailableError } from "../../src/queue/errors.js";
import type { CompleteOutcome, Task } from "../../src/queue/types.js";
import { PostgresQueue } from "../../src/store/postgres/store.js";
import { queueFixture, sha, TEST_STORE_OPTIONS, type QueueFixture } from "../support/queue.js";

let f: QueueFixture;
let coordinators: PostgresQueue[];
const W = "race_parent";
const CHILD = "race_child";
const PARENTS = 200;

beforeAll(async () => {
  f = await queueFixture({}, { max: 6 });
  coordinators = [f.queue, new PostgresQueue(f.newPool(), TEST_STORE_OPTIONS), new PostgresQueue(f.newPool(), TEST_STORE_OPTIONS)];
  await f.queue.putWorkload({ name: W, maxAttempts: 1 });
  await f.queue.putWorkload({ name: CHILD, maxAttempts: 1 });
});
afterAll(async () => {
  await f?.close();
});

/**
 * `call`, sent again while it fails as a call may under load (UnavailableError: no connection in
 * time, or a deadlock or serialization failure that rolled it back; DeadlineExceededError: a
 * statement timeout), as a worker sends it again: a failed call no longer leaves its parent leased
 * until its lease expires (its attempt is the last, so only a reaper would end it; none runs here)
 * and the round waiting past its timeout. A fencing refusal (LeaseConflictError: the task was
 * cancelled while leased, or a call sent again finds it already finished) is an answer, undefined;
 * anything else fails the test.
 */
async function untilAnswered<T>(call: () => Promise<T>): Promise<T | undefined> {
  for (let tries = 1; ; tries++) {
    try {
      return await call();
    } catch (err) {
      if (err instanceof LeaseConflictError) return undefined;
      if (!(err instanceof UnavailableError || err instanceof DeadlineExceededError) || tries >= 20) throw err;
      await new Promise((res) => setTimeout(res, 20 * tries));
    }
  }
}

/** A batch's per-result refusals: only fencing (a parent cancelled while its task was leased). */
function expectFencedOnly(outcomes: CompleteOutcome[] | undefined): void {
  for (const o of outcomes ?? []) if (o.error && !(o.error instanceof LeaseConflictError)) throw o.error;
}

interface Round {
  /** parent i: fails (and is maybe retried), is cancelled, or completes */
  fate: (i: number) => "complete" | "fail" | "fail_then_retry" | "cancel";
}

async function round(r: Round): Promise<{ lenient: string; strict: string; parents: string[] }> {
  // One workflow: 200 parent nodes and two children after all of them (a job's own after takes at
  // most 100 jobs; a workflow's edges are bounded by its nodes).
  const names = Array.from({ length: PARENTS }, (_, i) => `p${i}`);
  const { workflow } = await f.queue.createWorkflow({
    nodes: [
      ...names.map((name, i) => ({ name, job: { workload: W, inputUri: `s3://p/${i}`, inputSha256: sha(`p${i}`) } })),
      {
        name: "lenient",
        job: {
          workload: CHILD,
          dependencyPolicy: "all_final" as const,
          tasks: [0, 1, 2].map((i) => ({ chunkIndex: i, inputUri: `s3://c/${i}`, inputSha256: sha(`c${i}`) })),
        },
        after: names.map((node) => ({ node })),
      },
      {
        name: "strict",
        job: { workload: CHILD, inputUri: "s3://strict", inputSha256: sha("strict") },
        after: names.map((node) => ({ node })),
      },
    ],
  });
  const byName = new Map(workflow.nodes.map((n) => [n.name, n.jobId]));
  const parents = names.map((n) => byName.get(n)!);
  const lenient = byName.get("lenient")!;
  const strict = byName.get("strict")!;
  const fateOf = new Map(parents.map((id, i) => [id, r.fate(i)]));
  const retried = new Set<string>();

  // Cancels race the workers, from whichever coordinator.
  const cancels = parents
    .filter((id) => fateOf.get(id) === "cancel")
    .map((id, k) => untilAnswered(() => coordinators[k % 3].cancelJob({ jobId: id, reason: "race" })));
  const worker = async (q: PostgresQueue, n: number) => {
    for (;;) {
      const tasks: Task[] = (await untilAnswered(() => q.claimTasks({ workerId: `w${n}`, workloads: [W], maxTasks: 7 }))) ?? [];
      if (tasks.length === 0) {
        const open = await f.pool.query(
          `SELECT count(*)::int AS n FROM jobs WHERE id = ANY($1::uuid[]) AND status IN ('pending', 'running')`,
          [parents],
        );
        if (open.rows[0].n === 0) return;
        await new Promise((res) => setTimeout(res, 5));
        continue;
      }
      const done: Task[] = [];
      for (const t of tasks) {
        const fate = fateOf.get(t.jobId);
        if ((fate === "fail" || fate === "fail_then_retry") && !retried.has(t.jobId)) {
          await untilAnswered(() =>
            q.failTask({ taskId: t.id, workerId: `w${n}`, attempt: t.attempt, errorCode: "boom", retryable: false }),
          );
          if (fate === "fail_then_retry") {
            retried.add(t.jobId);
            // From another coordinator, while the others still finish.
            await untilAnswered(() => coordinators[(n + 1) % 3].retryJob({ jobId: t.jobId }));
          }
        } else done.push(t);
      }
      if (done.length > 0) {
        const outcomes = await untilAnswered(() =>
          q.completeTasks(
            done.map((t) => ({
              taskId: t.id,
              workerId: `w${n}`,
              attempt: t.attempt,
              resultUri: `s3://o/${t.id}`,
              resultSha256: sha(t.id),
            })),
          ),
        );
        expectFencedOnly(outcomes);
      }
    }
  };
  await Promise.all([...coordinators.map((q, n) => worker(q, n)), ...cancels]);
  // Every parent final: the lenient child is pending (once), the strict one as its parents' ends decide.
  const open = await f.pool.query(`SELECT count(*)::int AS n FROM jobs WHERE id = ANY($1::uuid[]) AND status IN ('pending', 'running')`, [
    parents,
  ]);
  expect(open.rows[0].n).toBe(0);
  return { lenient, strict, parents };
}

async function events(jobId: string, where: string): Promise<number> {
  const { rows } = await f.pool.query(`SELECT count(*)::int AS n FROM task_events WHERE job_id = $1 AND ${where}`, [jobId]);
  return rows[0].n as number;
}

async function expectPromotedOnce(jobId: string, tasks: number): Promise<void> {
  const job = (await f.queue.getJobStatus(jobId)).job;
  expect(job).toMatchObject({ status: "pending", waitingParents: 0 });
  expect(await events(jobId, `kind = 'job_status' AND previous_status = 'waiting' AND status = 'pending'`)).toBe(1);
  expect(await events(jobId, `kind = 'task_status' AND previous_status = 'waiting' AND status = 'pending'`)).toBe(tasks);
  expect(await f.count("tasks", `job_id = '${jobId}' AND status = 'pending'`)).toBe(tasks);
  const edges = await f.pool.query(`SELECT count(*) FILTER (WHERE NOT resolved)::int AS open FROM job_dependencies WHERE child_id = $1`, [
    jobId,
  ]);
  expect(edges.rows[0].open).toBe(0);
}

async function drainChildren(): Promise<void> {
  for (;;) {
    const tasks = await f.queue.claimTasks({ workerId: "c", workloads: [CHILD], maxTasks: 100 });
    if (tasks.length === 0) return;
    for (const t of tasks)
      await f.queue.completeTask({ taskId: t.id, workerId: "c", attempt: t.attempt, resultUri: "s3://c", resultSha256: sha("c") });
  }
}

it("200 parents completed at once on three coordinators promote their child exactly once (5 rounds)", async () => {
  for (let k = 0; k < 5; k++) {
    const { lenient, strict } = await round({ fate: () => "complete" });
    await expectPromotedOnce(lenient, 3);
    await expectPromotedOnce(strict, 1);
    await drainChildren();
  }
}, 240_000);

it("parents failing, cancelled and retried during the race: the all_final child is promoted once, the strict one cancelled once (5 rounds)", async () => {
  for (let k = 0; k < 5; k++) {
    const fates = ["fail", "fail_then_retry", "cancel", "fail_then_retry"] as const;
    const { lenient, strict, parents } = await round({ fate: (i) => (i % 10 === 3 ? fates[((i / 10 + k) % 4) | 0] : "complete") });
    await expectPromotedOnce(lenient, 3);
    const s = (await f.queue.getJobStatus(strict)).job;
    expect(s.status).toBe("cancelled");
    expect(s.cancelReason).toMatch(/^parent "p\d+" \([0-9a-f-]{36}\) ended (failed|cancelled)$/);
    expect(await events(strict, `kind = 'job_status' AND status = 'cancelled'`)).toBe(1);
    expect(await events(strict, `kind = 'job_status' AND previous_status = 'waiting'`)).toBe(0);
    expect(await f.count("tasks", `job_id = '${strict}' AND status <> 'cancelled'`)).toBe(0);
    // The lenient child's parents, as its claimed tasks carry them: every parent, each final.
    const [t] = await f.queue.claimTasks({ workerId: "c", workloads: [CHILD], maxTasks: 1 });
    expect(t.jobId).toBe(lenient);
    expect(t.parents).toHaveLength(PARENTS);
    expect(new Set(t.parents!.map((p) => p.jobId))).toEqual(new Set(parents));
    expect(t.parents!.every((p) => ["completed", "failed", "cancelled"].includes(p.status))).toBe(true);
    await f.queue.completeTask({ taskId: t.id, workerId: "c", attempt: t.attempt, resultUri: "s3://c", resultSha256: sha("c") });
    await drainChildren();
  }
}, 240_000);

it("the last three parents completed at the same instant on three coordinators: one promotion (20 rounds)", async () => {
  for (let k = 0; k < 20; k++) {
    const names = Array.from({ length: 12 }, (_, i) => `p${i}`);
    const { workflow } = await f.queue.createWorkflow({
      nodes: [
        ...names.map((name, i) => ({ name, job: { workload: W, inputUri: `s3://q/${i}`, inputSha256: sha(`q${i}`) } })),
        {
          name: "child",
          job: { workload: CHILD, inputUri: "s3://child", inputSha256: sha("child") },
          after: names.map((node) => ({ node })),
        },
      ],
    });
    const child = workflow.nodes.find((n) => n.name === "child")!.jobId;
    const first = await f.queue.claimTasks({ workerId: "w", workloads: [W], maxTasks: 9 });
    await f.queue.completeTasks(
      first.map((t) => ({ taskId: t.id, workerId: "w", attempt: t.attempt, resultUri: "s3://o", resultSha256: sha(t.id) })),
    );
    const last = await Promise.all(coordinators.map((q, n) => q.claimTasks({ workerId: `w${n}`, workloads: [W], maxTasks: 1 })));
    expect(last.flat()).toHaveLength(3);
    await Promise.all(
      last.map(([t], n) =>
        coordinators[n].completeTask({ taskId: t.id, workerId: `w${n}`, attempt: t.attempt, resultUri: "s3://o", resultSha256: sha(t.id) }),
      ),
    );
    await expectPromotedOnce(child, 1);
    await drainChildren();
  }
}, 240_000);
