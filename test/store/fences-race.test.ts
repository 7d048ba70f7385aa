// Fences under concurrency: reports that conflict arrive in one burst, as a coordinator that groups
// concurrent single-task calls into one statement would put them in the same statement. Whether
// or not it groups them, each report gets its own outcome, exactly as when sent alone: one of two
// competing results wins, a stale attempt is refused beside a fresh one, a replay is a success that
// writes nothing, and a worker never receives a task leased to another. Two coordinator processes
// on one database; the reports on one task go to the same coordinator (so they can meet in one
// statement), the tasks alternate between the two.
import { createClient, type Client } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { QueueService } from "../../gen/leasehold/queue/v1/queue_pb.js";
import { createTestDatabase, type TestDatabase } from "../support/db.js";
import { killAll, spawnCoordinator, coordinatorEnv } from "../support/process.js";
import { sha } from "../support/queue.js";
import { restCall, type RestAnswer } from "../support/rest.js";

let db: TestDatabase;
let pool: pg.Pool;
let bases: string[];
let grpc: Client<typeof QueueService>[];
let seq = 0;
const NEXT = "race_next";

beforeAll(async () => {
  db = await createTestDatabase();
  pool = new pg.Pool({ connectionString: db.url, max: 4 });
  pool.on("error", () => {});
  bases = await Promise.all(
    [0, 1].map(() => spawnCoordinator(coordinatorEnv(db.url, { REAPER_INTERVAL_MS: "3600000" })).listening(60_000)),
  );
  grpc = bases.map((baseUrl) => createClient(QueueService, createGrpcTransport({ baseUrl })));
  await ok(await restCall(bases[0], "PUT", `/workloads/${NEXT}`, {}));
  await createJob(NEXT, 400);
});

afterAll(async () => {
  await killAll();
  await pool?.end();
  await db?.drop();
});

const rest = (i: number, path: string, body: unknown): Promise<RestAnswer> => restCall(bases[i % 2], "POST", path, body);

async function ok(a: RestAnswer, status = 200): Promise<RestAnswer> {
  expect(a.status, a.text).toBe(status);
  return a;
}

async function createJob(w: string, n: number): Promise<string> {
  const tasks = Array.from({ length: n }, (_, i) => ({ chunk_index: i, input_uri: `s3://in/${w}/${i}`, input_sha256: sha(`${w}${i}`) }));
  return (await ok(await rest(0, "/jobs", { workload: w, tasks }), 201)).body.job.id;
}

async function workload(n: number): Promise<string> {
  const w = `race${++seq}`;
  await ok(await restCall(bases[0], "PUT", `/workloads/${w}`, {}));
  await createJob(w, n);
  return w;
}

interface Ref {
  id: string;
  worker: string;
  attempt: number;
  /** which coordinator this task's reports go to */
  via: number;
}

async function claim(w: string, worker: string, via: number): Promise<Ref> {
  const a = await ok(await rest(via, "/tasks/claim", { worker_id: worker, workloads: [w] }));
  expect(a.body.tasks, a.text).toHaveLength(1);
  return { id: a.body.tasks[0].id, worker, attempt: a.body.tasks[0].attempt, via };
}

async function rows(ids: string[]) {
  const { rows } = await pool.query(
    `SELECT id, status::text, attempt, lease_owner, result_uri, error_code, version,
       (SELECT count(*)::int FROM task_events e WHERE e.task_id = t.id AND e.kind = 'task_status' AND e.status = 'completed') AS completions
     FROM tasks t WHERE id = ANY($1::uuid[])`,
    [ids],
  );
  return new Map(rows.map((r) => [r.id as string, r]));
}

const uri = (r: Ref) => `s3://out/${r.id}/${r.worker}/${r.attempt}`;
const result = (r: Ref) => ({ worker_id: r.worker, attempt: r.attempt, result_uri: uri(r), result_sha256: sha(uri(r)) });

/** A report kind as the coalescing coordinator groups them; `ok` is what an accepted report wrote. */
interface Kind {
  name: string;
  send(r: Ref): Promise<RestAnswer>;
  wrote(row: { status: string; result_uri: string | null; error_code: string | null }, r: Ref): void;
}

const KINDS: Kind[] = [
  {
    name: "CompleteTask",
    send: (r) => rest(r.via, `/tasks/${r.id}/result`, result(r)),
    wrote: (row, r) => expect(row).toMatchObject({ status: "completed", result_uri: uri(r) }),
  },
  {
    name: "CompleteTask with claim_next",
    send: (r) => rest(r.via, `/tasks/${r.id}/result`, { ...result(r), claim_next: { workloads: [NEXT], max_tasks: 1 } }),
    wrote: (row, r) => expect(row).toMatchObject({ status: "completed", result_uri: uri(r) }),
  },
  {
    name: "FailTask",
    // Retryable, far in the future: a failure for good would fail the job and cancel the burst's other tasks.
    send: (r) =>
      rest(r.via, `/tasks/${r.id}/failure`, {
        worker_id: r.worker,
        attempt: r.attempt,
        error_code: r.worker,
        retryable: true,
        retry_after_seconds: 3600,
      }),
    wrote: (row, r) => expect(row).toMatchObject({ status: "pending", error_code: r.worker }),
  },
  {
    name: "RenewLease",
    send: (r) => rest(r.via, `/tasks/${r.id}/heartbeat`, { worker_id: r.worker, attempt: r.attempt }),
    wrote: (row) => expect(row.status).toBe("leased"),
  },
];

for (const k of KINDS) {
  describe(`${k.name} in one burst`, () => {
    it("of the holder and another worker on each of 16 tasks: the holder's is accepted, the other refused", async () => {
      const w = await workload(16);
      const held = await Promise.all(Array.from({ length: 16 }, (_, i) => claim(w, `h${i}`, i)));
      const before = await rows(held.map((r) => r.id));
      // Each task's intruder is the holder of the next task: a worker, just not this task's.
      const intruders = held.map((r, i) => ({ ...r, worker: held[(i + 1) % held.length].worker }));
      const answers = await Promise.all(held.flatMap((r, i) => [k.send(r), k.send(intruders[i])]));
      const after = await rows(held.map((r) => r.id));
      held.forEach((r, i) => {
        expect(answers[2 * i].status, answers[2 * i].text).toBe(200);
        expect(answers[2 * i + 1].status, answers[2 * i + 1].text).toBe(409);
        expect(answers[2 * i + 1].body.error.code).toBe("aborted");
        const row = after.get(r.id)!;
        expect(row).toMatchObject({ lease_owner: r.worker, attempt: 1, version: before.get(r.id)!.version + 1 });
        k.wrote(row, r);
      });
    });

    it("of a stale attempt beside the fresh one on each of 8 reclaimed tasks, among 8 others: only the stale are refused", async () => {
      const w = await workload(16);
      const stale = await Promise.all(Array.from({ length: 8 }, (_, i) => claim(w, `old${i}`, i)));
      await pool.query("UPDATE tasks SET lease_expires_at = now() - interval '1 second' WHERE id = ANY($1::uuid[])", [
        stale.map((r) => r.id),
      ]);
      // Reclaimed by new holders (the expired leases go first), each on the coordinator its old holder reports to.
      const fresh: Ref[] = [];
      for (let i = 0; i < 8; i++) fresh.push(await claim(w, `new${i}`, i));
      expect(new Set(fresh.map((r) => r.id))).toEqual(new Set(stale.map((r) => r.id)));
      for (const r of fresh) r.via = stale.find((s) => s.id === r.id)!.via;
      const others = await Promise.all(Array.from({ length: 8 }, (_, i) => claim(w, `other${i}`, i)));
      const burst = [
        ...stale.map((r) => ({ r, accept: false })),
        ...fresh.map((r) => ({ r, accept: true })),
        ...others.map((r) => ({ r, accept: true })),
      ];
      burst.sort(() => Math.random() - 0.5);
      const answers = await Promise.all(burst.map((b) => k.send(b.r)));
      const after = await rows(burst.map((b) => b.r.id));
      burst.forEach((b, i) => {
        expect(answers[i].status, answers[i].text).toBe(b.accept ? 200 : 409);
        if (!b.accept) expect(answers[i].body.error.code).toBe("aborted");
      });
      for (const r of [...fresh, ...others]) {
        const row = after.get(r.id)!;
        expect(row).toMatchObject({ lease_owner: r.worker, attempt: r.attempt });
        k.wrote(row, r);
      }
      expect(fresh.every((r) => r.attempt === 2)).toBe(true);
    });
  });
}

describe("a burst of replays", () => {
  for (const claimNext of [false, true]) {
    it(`answers both copies of each of 12 results sent twice at once with the same task${claimNext ? ", each claiming its own next" : ""}`, async () => {
      const w = await workload(12);
      const held = await Promise.all(Array.from({ length: 12 }, (_, i) => claim(w, `r${i}`, i)));
      const before = await rows(held.map((r) => r.id));
      const body = (r: Ref) => (claimNext ? { ...result(r), claim_next: { workloads: [NEXT], max_tasks: 1 } } : result(r));
      const answers = await Promise.all(held.flatMap((r) => [0, 1].map(() => rest(r.via, `/tasks/${r.id}/result`, body(r)))));
      const after = await rows(held.map((r) => r.id));
      held.forEach((r, i) => {
        for (const a of [answers[2 * i], answers[2 * i + 1]]) {
          expect(a.status, a.text).toBe(200);
          expect(a.body.task).toMatchObject({
            id: r.id,
            status: "TASK_STATUS_COMPLETED",
            lease_owner: r.worker,
            attempt: 1,
            result_uri: uri(r),
          });
        }
        // Written once: one version step, one completed event.
        expect(after.get(r.id)).toMatchObject({
          status: "completed",
          result_uri: uri(r),
          version: before.get(r.id)!.version + 1,
          completions: 1,
        });
      });
      if (claimNext) {
        const next = answers.map((a, i) => ({ id: a.body.next_tasks[0]?.id as string, worker: held[Math.floor(i / 2)].worker }));
        expect(next.every((n) => n.id)).toBe(true);
        expect(new Set(next.map((n) => n.id)).size).toBe(next.length);
        const leased = await rows(next.map((n) => n.id));
        for (const n of next) expect(leased.get(n.id)).toMatchObject({ status: "leased", lease_owner: n.worker });
      }
    });
  }
});

describe("32 workers completing with claim_next of one at once", () => {
  it("never hand a worker a task leased to another, nor one task to two, over REST and gRPC, three rounds", async () => {
    const w = await workload(32 * 4);
    let held = await Promise.all(Array.from({ length: 32 }, (_, i) => claim(w, `g${i}`, i)));
    const handedOut = new Set(held.map((r) => r.id));
    for (let round = 0; round < 3; round++) {
      const next = await Promise.all(
        held.map(async (r, i): Promise<Ref> => {
          if (i % 2 === 0) {
            const a = await ok(await rest(r.via, `/tasks/${r.id}/result`, { ...result(r), claim_next: { workloads: [w], max_tasks: 1 } }));
            expect(a.body.next_tasks, a.text).toHaveLength(1);
            return { id: a.body.next_tasks[0].id, worker: r.worker, attempt: a.body.next_tasks[0].attempt, via: r.via };
          }
          const a = await grpc[r.via % 2].completeTask({
            taskId: r.id,
            workerId: r.worker,
            attempt: r.attempt,
            resultUri: uri(r),
            resultSha256: sha(uri(r)),
            claimNext: { workloads: [w], maxTasks: 1 },
          });
          expect(a.nextTasks).toHaveLength(1);
          expect(a.nextTasks[0].leaseOwner).toBe(r.worker);
          return { id: a.nextTasks[0].id, worker: r.worker, attempt: a.nextTasks[0].attempt, via: r.via };
        }),
      );
      const done = await rows(held.map((r) => r.id));
      for (const r of held) expect(done.get(r.id)).toMatchObject({ status: "completed", lease_owner: r.worker, result_uri: uri(r) });
      const leased = await rows(next.map((r) => r.id));
      for (const r of next) {
        expect(handedOut.has(r.id), `task ${r.id} handed out twice`).toBe(false);
        handedOut.add(r.id);
        expect(leased.get(r.id)).toMatchObject({ status: "leased", lease_owner: r.worker, attempt: r.attempt });
      }
      held = next;
    }
    expect(handedOut.size).toBe(32 * 4);
  });
});
