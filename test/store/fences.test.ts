// Every clause of every result path's fence, pinned: for each way a worker reports on a task it
// holds (CompleteTask alone, with claim_next of one and of several, CompleteTasks alone and with
// claim_next, FailTask, RenewLease, ReportProgress), a report that breaks exactly one clause is
// refused with the documented code and changes nothing, and the report that keeps every clause
// is accepted. Through REST against a real coordinator process, so whatever the coordinator puts
// between the API and the statements (direct or router transport, grouping of concurrent calls)
// is under the same tests; the rows are read from PostgreSQL.
//
// Each case breaks one clause only, so removing that clause from one statement fails the case:
// - lease_owner: another worker names the holder's attempt of a live lease;
// - attempt: the holder reclaimed its own expired lease (attempt 2) and reports attempt 1;
// - live lease: the holder's lease has expired (moved into the past through our own pool: the
//   reaper is off, so nothing but the report touches the row);
// - status: the job was cancelled while the lease ran, so only the status differs. FailTask,
//   RenewLease and ReportProgress are refused; a result is kept as a late result (late-result.ts),
//   which the completion must leave to that path: the event log says cancelled -> completed;
// - the late result's own fence (owner, attempt, lease still running), the idempotent replay
//   (same worker, attempt and manifest) and its refusals (another manifest, worker or attempt);
// - claim_next claims nothing for a refused result (the claim is gated on the completion).
//
// Mutation survey (each clause removed from one statement at a time; test names abbreviated):
//   statement or check : clause         before  failing here (the path's describe; names below)
//   COMPLETE_TASK:status                  0  late
//   COMPLETE_TASK:owner                  11  owner
//   COMPLETE_TASK:attempt                 1  attempt
//   COMPLETE_TASK:lease                   1  lease
//   COMPLETE_TASK_AND_CLAIM_ONE:status    0  late
//   COMPLETE_TASK_AND_CLAIM_ONE:owner     0  owner
//   COMPLETE_TASK_AND_CLAIM_ONE:attempt   1  attempt
//   COMPLETE_TASK_AND_CLAIM_ONE:lease     0  lease
//   COMPLETE_TASK_AND_CLAIM_ONE:gate      2  owner, attempt, lease, late-owner, late-attempt, late-lease, replay, replay-other
//   COMPLETE_TASK_AND_CLAIM:status        0  late
//   COMPLETE_TASK_AND_CLAIM:owner         0  owner
//   COMPLETE_TASK_AND_CLAIM:attempt       0  attempt
//   COMPLETE_TASK_AND_CLAIM:lease         0  lease
//   COMPLETE_TASK_AND_CLAIM:gate          0  owner, attempt, lease, late-owner, late-attempt, late-lease, replay-other
//   COMPLETE_TASKS:status                 0  late
//   COMPLETE_TASKS:owner                  2  owner
//   COMPLETE_TASKS:attempt                5  attempt
//   COMPLETE_TASKS:lease                  0  lease
//   COMPLETE_TASKS_AND_CLAIM:status       0  late
//   COMPLETE_TASKS_AND_CLAIM:owner        0  owner
//   COMPLETE_TASKS_AND_CLAIM:attempt      1  attempt
//   COMPLETE_TASKS_AND_CLAIM:lease        0  lease
//   RENEW_LEASE:status                    3  cancelled
//   RENEW_LEASE:owner                     2  owner
//   RENEW_LEASE:attempt                  10  attempt
//   RENEW_LEASE:lease                     0  lease
//   REPORT_PROGRESS:status                0  cancelled
//   REPORT_PROGRESS:owner                 0  owner
//   REPORT_PROGRESS:attempt               0  attempt
//   REPORT_PROGRESS:lease                 0  lease
//   FAIL_TASK:status                      1  cancelled
//   FAIL_TASK:owner                       1  owner
//   FAIL_TASK:attempt                     0  attempt
//   FAIL_TASK:lease                       0  lease
//   COMPLETE_CANCELLED_TASK:status        -  none (equivalent: the same check is made in code just before)
//   COMPLETE_CANCELLED_TASK:owner         -  none (equivalent: the same check is made in code just before)
//   COMPLETE_CANCELLED_TASK:attempt       -  none (equivalent: the same check is made in code just before)
//   COMPLETE_CANCELLED_TASK:lease         1  late-lease
//   late:owner(js+sql)                    1  late-owner
//   late:attempt(js+sql)                  0  late-attempt
//   late:off                              4  late, late-owner, late-attempt
//   replay:attempt                        0  replay-other
//   replay:owner                          0  replay-other
//   replay:manifest                      14  replay
// before: failing tests of queue, claim-next, api and failure-policy (- = not run there); owner
// and attempt of the liveLease statements were replaced by `$n::type IS NOT NULL`, keeping the
// parameter typed. The tests: owner, attempt, lease = the three "refuses ..." cases; late, late-owner,
// late-attempt, late-lease = the cancelled-task cases; cancelled = the status case of FailTask,
// RenewLease and ReportProgress; replay, replay-other = the replay cases.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import pg from "pg";
import { createTestDatabase, type TestDatabase } from "../support/db.js";
import { killAll, spawnCoordinator, coordinatorEnv } from "../support/process.js";
import { sha } from "../support/queue.js";
import { restCall, type RestAnswer } from "../support/rest.js";

let db: TestDatabase;
let pool: pg.Pool;
let base: string;
let seq = 0;
/**
 * Where CompleteTasks' claim_next claims: another workload, as that claim runs whatever the
 * results' outcomes and would otherwise reclaim an expired target under test.
 */
const NEXT = "fence_next";

beforeAll(async () => {
  db = await createTestDatabase();
  pool = new pg.Pool({ connectionString: db.url, max: 4 });
  pool.on("error", () => {});
  base = await spawnCoordinator(coordinatorEnv(db.url, { REAPER_INTERVAL_MS: "3600000" })).listening(60_000);
  await ok(await restCall(base, "PUT", `/workloads/${NEXT}`, {}));
  await createJob(NEXT, 200);
});

afterAll(async () => {
  await killAll();
  await pool?.end();
  await db?.drop();
});

const rest = (path: string, body: unknown): Promise<RestAnswer> => restCall(base, "POST", path, body);

interface Ref {
  id: string;
  worker: string;
  attempt: number;
}

/** One scenario's workload: job A holds the task under test, job B the batch companions and the work claim_next finds. */
interface Scene {
  w: string;
  jobA: string;
  target: string;
  companions: Ref[];
}

async function ok(a: RestAnswer, status = 200): Promise<RestAnswer> {
  expect(a.status, a.text).toBe(status);
  return a;
}

async function createJob(w: string, n: number): Promise<string> {
  const tasks = Array.from({ length: n }, (_, i) => ({ chunk_index: i, input_uri: `s3://in/${w}/${i}`, input_sha256: sha(`${w}${i}`) }));
  return (await ok(await rest("/jobs", { workload: w, tasks }), 201)).body.job.id;
}

async function claim(w: string, worker: string, max = 1, leaseSeconds?: number): Promise<Ref[]> {
  const a = await ok(await rest("/tasks/claim", { worker_id: worker, workloads: [w], max_tasks: max, lease_seconds: leaseSeconds }));
  return a.body.tasks.map((t: { id: string; attempt: number }) => ({ id: t.id, worker, attempt: t.attempt }));
}

/** The holder's lease ran out (the database clock decides, as the fence does). */
async function expire(id: string): Promise<void> {
  await pool.query("UPDATE tasks SET lease_expires_at = now() - interval '1 second' WHERE id = $1", [id]);
}

/** The target leased to w1 (attempt 1); two companions leased to wb; four tasks pending. */
async function scene(): Promise<Scene> {
  const w = `fence${++seq}`;
  await ok(await restCall(base, "PUT", `/workloads/${w}`, {}));
  const jobA = await createJob(w, 1);
  await createJob(w, 6);
  const [t] = await claim(w, "w1");
  const companions = await claim(w, "wb", 2);
  expect(companions).toHaveLength(2);
  return { w, jobA, target: t.id, companions };
}

async function row(id: string) {
  const { rows } = await pool.query(
    `SELECT status::text, attempt, lease_owner, lease_expires_at, result_uri, result_sha256, error_code, version,
       (SELECT count(*)::int FROM task_events e WHERE e.task_id = t.id) AS events
     FROM tasks t WHERE id = $1`,
    [id],
  );
  return rows[0];
}

async function leasedIn(w: string): Promise<number> {
  const { rows } = await pool.query("SELECT count(*)::int AS n FROM tasks WHERE workload = $1 AND status = 'leased'", [w]);
  return rows[0].n;
}

interface Manifest {
  result_uri: string;
  result_sha256: string;
}

/** The result a holder computes for its attempt; `tag` makes another one. */
const manifestOf = (ref: Ref, tag = ""): Manifest => ({
  result_uri: `s3://out/${ref.id}/${ref.attempt}${tag}`,
  result_sha256: sha(`${ref.id}${ref.attempt}${tag}`),
});
const report = (ref: Ref, m = manifestOf(ref)) => ({ worker_id: ref.worker, attempt: ref.attempt, ...m });

interface Outcome {
  /** the Connect code of a refusal, "ok" when accepted */
  code: string;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  task?: any;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  next?: any[];
}

function outcomeOf(a: RestAnswer): Outcome {
  if (a.status === 200) return { code: "ok", task: a.body.task, next: a.body.next_tasks };
  expect(a.body?.error?.code, a.text).toBeTypeOf("string");
  return { code: a.body.error.code };
}

interface Path {
  name: string;
  /** a completion (a result report), rather than a heartbeat, progress report or failure */
  result: boolean;
  /** claim_next of one or more tasks with the result */
  claims: boolean;
  send(s: Scene, ref: Ref, m?: Manifest): Promise<Outcome>;
}

/** A batch carries the report under test first and a companion's good result after it: the companion is never held back by it. */
async function batch(s: Scene, ref: Ref, m: Manifest | undefined, claimNext: boolean): Promise<Outcome> {
  const companion = s.companions.shift()!;
  const results = [
    { task_id: ref.id, ...report(ref, m) },
    { task_id: companion.id, ...report(companion) },
  ];
  const body = claimNext ? { results, claim_next: { worker_id: "wb", workloads: [NEXT], max_tasks: 2 } } : { results };
  const a = await ok(await rest("/tasks/results", body));
  expect(a.body.outcomes.map((o: { task_id: string }) => o.task_id)).toEqual([ref.id, companion.id]);
  expect(a.body.outcomes[1].task, a.text).toMatchObject({ status: "TASK_STATUS_COMPLETED", lease_owner: "wb" });
  if (claimNext) expect(a.body.next_tasks.length).toBeGreaterThan(0);
  const o = a.body.outcomes[0];
  return o.error ? { code: o.error.code } : { code: "ok", task: o.task };
}

const PATHS: Path[] = [
  {
    name: "CompleteTask",
    result: true,
    claims: false,
    send: async (_s, ref, m) => outcomeOf(await rest(`/tasks/${ref.id}/result`, report(ref, m))),
  },
  ...[1, 3].map((n): Path => ({
    name: `CompleteTask with claim_next of ${n}`,
    result: true,
    claims: true,
    send: async (s, ref, m) =>
      outcomeOf(await rest(`/tasks/${ref.id}/result`, { ...report(ref, m), claim_next: { workloads: [s.w], max_tasks: n } })),
  })),
  { name: "CompleteTasks", result: true, claims: false, send: (s, ref, m) => batch(s, ref, m, false) },
  { name: "CompleteTasks with claim_next", result: true, claims: false, send: (s, ref, m) => batch(s, ref, m, true) },
  {
    name: "FailTask",
    result: false,
    claims: false,
    send: async (_s, ref) =>
      outcomeOf(
        await rest(`/tasks/${ref.id}/failure`, { worker_id: ref.worker, attempt: ref.attempt, error_code: "boom", retryable: false }),
      ),
  },
  {
    name: "RenewLease",
    result: false,
    claims: false,
    send: async (_s, ref) => outcomeOf(await rest(`/tasks/${ref.id}/heartbeat`, { worker_id: ref.worker, attempt: ref.attempt })),
  },
  {
    name: "ReportProgress",
    result: false,
    claims: false,
    send: async (_s, ref) =>
      outcomeOf(await rest(`/tasks/${ref.id}/progress`, { worker_id: ref.worker, attempt: ref.attempt, progress: 0.5 })),
  },
];

/** Sends a report that must be refused with `code`, and checks it changed nothing: the row, its events, and no claim. */
async function refused(p: Path, s: Scene, ref: Ref, code: string, m?: Manifest): Promise<void> {
  const before = await row(s.target);
  const leased = await leasedIn(s.w);
  const o = await p.send(s, ref, m);
  expect(o.code).toBe(code);
  expect(await row(s.target)).toEqual(before);
  if (p.claims) expect(await leasedIn(s.w)).toBe(leased);
}

/** Sends a report that must be accepted, and checks what it wrote. */
async function accepted(p: Path, s: Scene, ref: Ref): Promise<void> {
  const before = await row(s.target);
  const o = await p.send(s, ref);
  expect(o.code).toBe("ok");
  const after = await row(s.target);
  expect(after.version).toBe(before.version + 1);
  expect(after).toMatchObject({ attempt: ref.attempt, lease_owner: ref.worker });
  if (p.result) {
    expect(after).toMatchObject({ status: "completed", result_uri: manifestOf(ref).result_uri, lease_expires_at: null });
    expect(o.task).toMatchObject({ id: ref.id, status: "TASK_STATUS_COMPLETED", attempt: ref.attempt });
  } else if (p.name === "FailTask") {
    expect(after).toMatchObject({ status: "failed", error_code: "boom", lease_expires_at: null });
  } else {
    expect(after.status).toBe("leased");
    expect(after.lease_expires_at.getTime()).toBeGreaterThan(before.lease_expires_at.getTime());
    expect(after.events).toBe(before.events + (p.name === "ReportProgress" ? 1 : 0));
  }
  if (p.claims) for (const t of o.next ?? []) expect((await row(t.id)).lease_owner).toBe(ref.worker);
}

async function cancel(jobId: string): Promise<void> {
  await ok(await rest(`/jobs/${jobId}/cancel`, { reason: "fence test" }));
}

/** The target's status events as "previous>status", oldest first. */
async function transitions(id: string): Promise<string[]> {
  const { rows } = await pool.query(
    "SELECT previous_status || '>' || status AS t FROM task_events WHERE task_id = $1 AND kind = 'task_status' ORDER BY id",
    [id],
  );
  return rows.map((r) => r.t);
}

for (const p of PATHS) {
  describe(p.name, () => {
    it("refuses another worker's report on the holder's live lease (lease_owner)", async () => {
      const s = await scene();
      await refused(p, s, { id: s.target, worker: "w2", attempt: 1 }, "aborted");
      await accepted(p, s, { id: s.target, worker: "w1", attempt: 1 });
    });

    it("refuses the holder's stale attempt once it holds a newer one (attempt)", async () => {
      const s = await scene();
      await expire(s.target);
      const [again] = await claim(s.w, "w1");
      expect(again).toEqual({ id: s.target, worker: "w1", attempt: 2 });
      await refused(p, s, { id: s.target, worker: "w1", attempt: 1 }, "aborted");
      await accepted(p, s, again);
    });

    it("refuses the holder's report once its lease has expired (live lease), and accepts the next holder's", async () => {
      const s = await scene();
      await expire(s.target);
      await refused(p, s, { id: s.target, worker: "w1", attempt: 1 }, "aborted");
      const [next] = await claim(s.w, "w2");
      expect(next).toEqual({ id: s.target, worker: "w2", attempt: 2 });
      await accepted(p, s, next);
    });

    if (!p.result) {
      it("refuses the holder's report on a task cancelled while its lease ran (status)", async () => {
        const s = await scene();
        await cancel(s.jobA);
        expect((await row(s.target)).status).toBe("cancelled");
        await refused(p, s, { id: s.target, worker: "w1", attempt: 1 }, "aborted");
      });
      return;
    }

    it("keeps the holder's result of a task cancelled while its lease ran, as a late result (status)", async () => {
      const s = await scene();
      await cancel(s.jobA);
      const o = await p.send(s, { id: s.target, worker: "w1", attempt: 1 });
      expect(o.code).toBe("ok");
      expect(await row(s.target)).toMatchObject({
        status: "completed",
        result_uri: manifestOf({ id: s.target, worker: "w1", attempt: 1 }).result_uri,
      });
      // Taken by the late-result path, not by the completion of a leased task.
      expect(await transitions(s.target)).toEqual(["pending>leased", "leased>cancelled", "cancelled>completed"]);
      const { rows } = await pool.query("SELECT status::text FROM jobs WHERE id = $1", [s.jobA]);
      expect(rows[0].status).toBe("cancelled");
    });

    it("refuses a late result from a worker that did not hold the cancelled task's lease", async () => {
      const s = await scene();
      await cancel(s.jobA);
      await refused(p, s, { id: s.target, worker: "w2", attempt: 1 }, "aborted");
      expect((await p.send(s, { id: s.target, worker: "w1", attempt: 1 })).code).toBe("ok");
    });

    it("refuses a late result of an attempt older than the one cancelled", async () => {
      const s = await scene();
      await expire(s.target);
      expect(await claim(s.w, "w1")).toEqual([{ id: s.target, worker: "w1", attempt: 2 }]);
      await cancel(s.jobA);
      await refused(p, s, { id: s.target, worker: "w1", attempt: 1 }, "aborted");
      expect((await p.send(s, { id: s.target, worker: "w1", attempt: 2 })).code).toBe("ok");
    });

    it("refuses a late result that comes after the cancelled task's lease would have expired", async () => {
      const s = await scene();
      await cancel(s.jobA);
      await expire(s.target);
      await refused(p, s, { id: s.target, worker: "w1", attempt: 1 }, "aborted");
    });

    it("answers a replay of the accepted result with the task and writes nothing; refuses another manifest", async () => {
      const s = await scene();
      const holder = { id: s.target, worker: "w1", attempt: 1 };
      await ok(await rest(`/tasks/${s.target}/result`, report(holder)));
      const before = await row(s.target);
      const again = await p.send(s, holder);
      expect(again.code).toBe("ok");
      expect(again.task).toMatchObject({ id: s.target, status: "TASK_STATUS_COMPLETED", result_uri: before.result_uri });
      expect(await row(s.target)).toEqual(before);
      await refused(p, s, holder, "already_exists", manifestOf(holder, "-other"));
    });

    it("refuses the accepted manifest from another worker or an older attempt", async () => {
      const s = await scene();
      await expire(s.target);
      const [again] = await claim(s.w, "w1");
      expect((await ok(await rest(`/tasks/${s.target}/result`, report(again)))).body.task.attempt).toBe(2);
      // The same manifest under another worker or attempt is no replay: only its sender's is.
      await refused(p, s, { ...again, worker: "w2" }, "aborted", manifestOf(again));
      await refused(p, s, { ...again, attempt: 1 }, "aborted", manifestOf(again));
    });

    it("answers not_found for a task that does not exist", async () => {
      const s = await scene();
      const o = await p.send(s, { id: "0190b3c0-0000-7000-8000-000000000000", worker: "w1", attempt: 1 });
      expect(o.code).toBe("not_found");
    });
  });
}
