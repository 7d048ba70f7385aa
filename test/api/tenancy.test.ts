// Tenancy: every RPC × every role (admin, unbound submitter, submitter bound to an account,
// worker, billing) × the caller's own or another account's job, over REST, Connect and gRPC, generated
// from ACCESS (auth.ts) and the case table (tenancy-cases.ts) so a new RPC cannot skip it. Asserts
// the code (OK / PERMISSION_DENIED / NOT_FOUND), that a foreign job's NOT_FOUND is exactly a
// missing job's (code and message), and that a refused call changed no row of the job.
// A real server on port 0 over a real, migrated PostgreSQL.
import { randomUUID } from "node:crypto";
import { fromJson, type DescMethod, type JsonValue } from "@bufbuild/protobuf";
import { ConnectError, createClient, type Transport } from "@connectrpc/connect";
import { codeToString } from "@connectrpc/connect/protocol-connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { QueueService } from "../../gen/leasehold/queue/v1/queue_pb.js";
import { ACCESS, Authenticator, type MethodName } from "../../src/api/auth.js";
import { restRoutes, type RestRoute } from "../../src/api/rest-routes.js";
import type { AuthTokenEntry, Role } from "../../src/config/index.js";
import { createPool, PostgresQueue } from "../../src/store/postgres/store.js";
import { apiServerFixture, type ApiServerFixture } from "../support/api-server.js";
import { createTestDatabase, type TestDatabase } from "../support/db.js";
import { sha } from "../support/queue.js";
import { restCall } from "../support/rest.js";
import { LIST_JOBS_BY_ACCOUNT, LIST_TASKS, SELECT_ACCOUNT_TASK } from "../support/statements.js";
import { SWITCHES } from "../support/switches.js";
import { accountStates, type AccountStates } from "../support/tenancy-states.js";
import { CASES, IDLE_WORKLOAD, WORKER_PREFIX, WORKLOAD, type AccessCase, type Fixture } from "./tenancy-cases.js";

const OWN = "acme";
const FOREIGN = "globex";

interface Caller {
  name: string;
  role: Role;
  /** A bound submitter's account. */
  account?: string;
  token: string;
}

const CALLERS: Caller[] = [
  { name: "admin", role: "admin", token: `lh_admin_${randomUUID()}` },
  { name: "unbound submitter", role: "submitter", token: `lh_sub_${randomUUID()}` },
  { name: `submitter bound to ${OWN}`, role: "submitter", account: OWN, token: `lh_acme_${randomUUID()}` },
  { name: "worker", role: "worker", token: `lh_worker_${randomUUID()}` },
  { name: "billing", role: "billing", token: `lh_billing_${randomUUID()}` },
];
const BOUND = CALLERS[2];
const ADMIN = CALLERS[0];

function entry(c: Caller): AuthTokenEntry {
  if (c.role === "worker") return { sha256: sha(c.token), role: c.role, workerPrefix: WORKER_PREFIX };
  return c.account ? { sha256: sha(c.token), role: c.role, account: c.account } : { sha256: sha(c.token), role: c.role };
}

let db: TestDatabase;
let pool: pg.Pool;
let queue: PostgresQueue;
let api: ApiServerFixture;
let connect: Transport;
let grpc: Transport;

beforeAll(async () => {
  db = await createTestDatabase();
  pool = createPool({ connectionString: db.url, max: 6, statementTimeoutMs: 20_000, connectTimeoutMs: 5000 });
  queue = new PostgresQueue(pool, { coalescing: SWITCHES.coalescing, defaultLeaseSeconds: 60, defaultMaxAttempts: 3, maxTasksPerJob: 50 });
  api = await apiServerFixture({ queue, auth: new Authenticator(CALLERS.map(entry)) });
  connect = createConnectTransport({ baseUrl: api.base, httpVersion: "1.1" });
  grpc = createGrpcTransport({ baseUrl: api.base });
  // Until PutAccount is served, the accounts are rows of their own.
  await pool.query("INSERT INTO accounts (name) VALUES ($1), ($2)", [OWN, FOREIGN]);
  for (const name of [WORKLOAD, IDLE_WORKLOAD]) await queue.putWorkload({ name });
});

afterAll(async () => {
  await api?.close();
  await pool?.end();
  await db?.drop();
});

/** A fresh one-task job of `account`, readied for the case. */
async function fixture(account: string, c?: AccessCase): Promise<Fixture> {
  if (c?.target === "workflow") {
    const { workflow } = await queue.createWorkflow({
      account,
      nodes: [{ name: "only", job: { workload: WORKLOAD, inputUri: "s3://in/tenancy", inputSha256: sha(randomUUID()) } }],
    });
    if (c.ready === "cancelled") await queue.cancelWorkflow({ workflowId: workflow.id });
    const jobId = workflow.nodes[0].jobId;
    return { jobId, taskId: (await queue.listTasks({ jobId })).tasks[0].task.id, workflowId: workflow.id };
  }
  const r = await queue.createJob({ workload: WORKLOAD, inputUri: "s3://in/tenancy", inputSha256: sha(randomUUID()) });
  await pool.query("UPDATE jobs SET account = $2 WHERE id = $1", [r.job.id, account]);
  if (c?.ready === "cancelled") await queue.cancelJob({ jobId: r.job.id });
  return { jobId: r.job.id, taskId: r.tasks[0].id, workflowId: randomUUID() };
}

/** Everything a call could change of a job: its row, its tasks, its events and watchers. */
async function rowsOf(jobId: string): Promise<unknown> {
  const { rows } = await pool.query(
    `SELECT (SELECT to_jsonb(j) FROM jobs j WHERE j.id = $1) AS job,
            (SELECT jsonb_agg(to_jsonb(t) ORDER BY t.chunk_index) FROM tasks t WHERE t.job_id = $1) AS tasks,
            (SELECT count(*)::int FROM task_events e WHERE e.job_id = $1) AS events,
            (SELECT count(*)::int FROM job_watchers w WHERE w.job_id = $1) AS watchers`,
    [jobId],
  );
  return rows[0];
}

interface Outcome {
  /** "ok", or the Connect code's name ("not_found", …) */
  code: string;
  message: string;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  response?: any;
}

type Call = (rpc: DescMethod, json: Record<string, unknown>, token: string) => Promise<Outcome>;

async function callClient(transport: Transport, rpc: DescMethod, json: Record<string, unknown>, token: string): Promise<Outcome> {
  const client = createClient(QueueService, transport) as unknown as Record<string, (req: unknown, o: unknown) => unknown>;
  const req = fromJson(rpc.input, json as JsonValue);
  const options = { headers: { authorization: `Bearer ${token}` } };
  try {
    if (rpc.methodKind === "server_streaming") {
      const messages: unknown[] = [];
      for await (const m of client[rpc.localName](req, options) as AsyncIterable<unknown>) messages.push(m);
      return { code: "ok", message: "", response: messages };
    }
    return { code: "ok", message: "", response: await client[rpc.localName](req, options) };
  } catch (err) {
    const e = ConnectError.from(err);
    return { code: codeToString(e.code), message: e.rawMessage };
  }
}

const ROUTES = new Map<string, RestRoute>();
for (const route of restRoutes(QueueService)) if (!ROUTES.has(route.rpc.name)) ROUTES.set(route.rpc.name, route);

async function callRest(rpc: DescMethod, json: Record<string, unknown>, token: string): Promise<Outcome> {
  const route = ROUTES.get(rpc.name)!;
  const rest = { ...json };
  let path = route.pattern.replace(/\{([a-z0-9_]+)\}/g, (_, name: string) => {
    const field = rpc.input.fields.find((f) => f.name === name)!;
    const value = rest[field.jsonName];
    delete rest[field.jsonName];
    return encodeURIComponent(String(value));
  });
  let body: unknown;
  if (route.from === "query") {
    const query = new URLSearchParams(Object.entries(rest).map(([k, v]): [string, string] => [k, String(v)]));
    if ([...query.keys()].length > 0) path += `?${query}`;
  } else {
    body = rest;
  }
  const r = await restCall(api.base, route.method, path, body, { authorization: `Bearer ${token}` });
  if (r.status < 300) return { code: "ok", message: "", response: r.body };
  return { code: String(r.body?.error?.code ?? `http ${r.status}`).toLowerCase(), message: String(r.body?.error?.message ?? r.text) };
}

const TRANSPORTS: [string, Call][] = [
  ["REST", callRest],
  ["Connect", (rpc, json, token) => callClient(connect, rpc, json, token)],
  ["gRPC", (rpc, json, token) => callClient(grpc, rpc, json, token)],
];

/** What ACCESS and the bound account make of a call: its code, or only "authorized" for calls on no account's data. */
function expectation(method: MethodName, caller: Caller, target: AccessCase["target"], own: boolean): string {
  const allowed = caller.role === "admin" || (ACCESS[method].roles as readonly Role[]).includes(caller.role);
  if (!allowed) return "permission_denied";
  if ((target === "job" || target === "task" || target === "workflow") && caller.account !== undefined && !own) return "not_found";
  return target === "none" ? "authorized" : "ok";
}

const METHODS = Object.keys(ACCESS) as MethodName[];

it("the table has a case for every RPC of the service, and ACCESS a row", () => {
  const names = QueueService.methods.map((m) => m.localName).sort();
  expect(Object.keys(CASES).sort()).toEqual(names);
  expect([...METHODS].sort()).toEqual(names);
});

describe.each(TRANSPORTS)("%s: every RPC × role × own/foreign job", (_transport, call) => {
  it.each(METHODS)("%s", async (method) => {
    const c = CASES[method];
    const rpc = QueueService.method[method] as DescMethod;
    const ownIds = async () =>
      new Set((await pool.query<{ id: string }>("SELECT id FROM jobs WHERE account = $1", [OWN])).rows.map((r) => r.id));
    for (const caller of CALLERS) {
      for (const own of c.target === "none" ? [true] : [true, false]) {
        const account = own ? OWN : FOREIGN;
        const f = await fixture(account, c);
        const before = await rowsOf(f.jobId);
        const want = expectation(method, caller, c.target, own);
        const got = await call(rpc, c.request(f, account), caller.token);
        const where = `${method} by ${caller.name} on ${own ? "its own" : "another"} account's job: ${got.code} ${got.message}`;
        if (want === "authorized") {
          expect(["permission_denied", "unauthenticated"], where).not.toContain(got.code);
          continue;
        }
        expect(got.code, where).toBe(want);
        if (want !== "ok") expect(await rowsOf(f.jobId), where).toEqual(before);
        if (want === "not_found") {
          // Exactly as for an id that does not exist: same code, same message but for the id.
          const missing: Fixture = { jobId: randomUUID(), taskId: randomUUID(), workflowId: randomUUID() };
          const gone = await call(rpc, c.request(missing, account), caller.token);
          const id = c.target === "task" ? "taskId" : c.target === "workflow" ? "workflowId" : "jobId";
          expect(gone.code, where).toBe("not_found");
          expect(got.message.replace(f[id], "<id>"), where).toBe(gone.message.replace(missing[id], "<id>"));
          expect(got.message, where).toContain(f[id]);
        }
        if (want === "ok" && c.target === "list") {
          const listed: string[] = (got.response?.jobs ?? []).map((j: { id: string }) => j.id);
          if (caller.account === undefined) expect(listed, where).toContain(f.jobId);
          else if (own) {
            expect(listed, where).toContain(f.jobId);
            const mine = await ownIds();
            expect(
              listed.filter((id) => !mine.has(id)),
              where,
            ).toEqual([]);
          } else expect(listed, where).toEqual([]);
        }
      }
    }
  });
});

describe.each(TRANSPORTS)("%s: a bound token", (_transport, call) => {
  it("ListJobs naming no account lists every job of its own and none of another's", async () => {
    const [mine, theirs] = [await fixture(OWN), await fixture(FOREIGN)];
    const got = await call(QueueService.method.listJobs, { pageSize: 1000 }, BOUND.token);
    expect(got.code).toBe("ok");
    const listed: string[] = got.response.jobs.map((j: { id: string }) => j.id);
    const { rows } = await pool.query<{ id: string }>("SELECT id FROM jobs WHERE account = $1", [OWN]);
    expect(new Set(listed)).toEqual(new Set(rows.map((r) => r.id)));
    expect(listed).toContain(mine.jobId);
    expect(listed).not.toContain(theirs.jobId);
    // The unbound admin lists both.
    const all = await call(QueueService.method.listJobs, { pageSize: 1000 }, ADMIN.token);
    expect(all.response.jobs.map((j: { id: string }) => j.id)).toEqual(expect.arrayContaining([mine.jobId, theirs.jobId]));
  });

  it("ListWorkflows lists its own account's workflows and none of another's", async () => {
    const mine = await fixture(OWN, { target: "workflow", request: () => ({}) });
    const theirs = await fixture(FOREIGN, { target: "workflow", request: () => ({}) });
    for (const named of [{}, { account: FOREIGN }]) {
      const got = await call(QueueService.method.listWorkflows, { pageSize: 1000, ...named }, BOUND.token);
      expect(got.code).toBe("ok");
      const listed: string[] = (got.response.workflows ?? []).map((w: { id: string }) => w.id);
      expect(listed).not.toContain(theirs.workflowId);
      if (!("account" in named)) expect(listed).toContain(mine.workflowId);
    }
    const all = await call(QueueService.method.listWorkflows, { pageSize: 1000 }, ADMIN.token);
    expect(all.response.workflows.map((w: { id: string }) => w.id)).toEqual(expect.arrayContaining([mine.workflowId, theirs.workflowId]));
  });

  it("WatchJob resumed after an event id: another account's job is not found, as a missing one", async () => {
    const theirs = await fixture(FOREIGN, { target: "job", ready: "cancelled", request: () => ({}) });
    const before = await rowsOf(theirs.jobId);
    const got = await call(QueueService.method.watchJob, { jobId: theirs.jobId, afterEventId: "1" }, BOUND.token);
    expect(got.code).toBe("not_found");
    expect(await rowsOf(theirs.jobId)).toEqual(before);
    const mine = await fixture(OWN, { target: "job", ready: "cancelled", request: () => ({}) });
    expect((await call(QueueService.method.watchJob, { jobId: mine.jobId, afterEventId: "1" }, BOUND.token)).code).toBe("ok");
  });

  it("CreateJob: its account when none is named; naming another is PERMISSION_DENIED and writes nothing", async (ctx) => {
    // CreateJob's account rule is the accounts part's (create-job-core.ts): this runs once it stores the account.
    const probe = await call(
      QueueService.method.createJob,
      { workload: WORKLOAD, account: OWN, inputUri: "s3://in/p", inputSha256: sha("p") },
      ADMIN.token,
    );
    const stored =
      probe.code === "ok" ? (await pool.query("SELECT account FROM jobs WHERE id = $1", [probe.response.job.id])).rows[0]?.account : null;
    if (stored !== OWN) ctx.skip();
    const create = (account?: string) =>
      call(
        QueueService.method.createJob,
        { workload: WORKLOAD, inputUri: "s3://in/c", inputSha256: sha(randomUUID()), ...(account ? { account } : {}) },
        BOUND.token,
      );
    for (const named of [undefined, OWN]) {
      const r = await create(named);
      expect(r.code).toBe("ok");
      expect((await pool.query("SELECT account FROM jobs WHERE id = $1", [r.response.job.id])).rows[0].account).toBe(OWN);
    }
    const count = async () => (await pool.query<{ n: number }>("SELECT count(*)::int AS n FROM jobs")).rows[0].n;
    const n = await count();
    const refused = await create(FOREIGN);
    expect(refused.code).toBe("permission_denied");
    expect(refused.message).toMatch(/account/);
    expect(await count()).toBe(n);
  });
});

describe.each(TRANSPORTS)("%s: a bound token on another account's jobs in every state", (_transport, call) => {
  // Another account's jobs as callers and workers leave them (tenancy-states.ts), so that every
  // statement's scope meets a row it must not return: a result to read, a failure, a settlement, a
  // finalizer's job, a tick's job. Each RPC on each answers as for a job that does not exist, and
  // changes nothing; listings hold none of them.
  let foreign: AccountStates;
  const TARGETED = METHODS.filter((m) => CASES[m].target === "job" || CASES[m].target === "task");

  beforeAll(async () => {
    foreign = await accountStates(queue, pool, FOREIGN, `api_${_transport.toLowerCase()}`);
  });

  it.each(TARGETED)("%s: NOT_FOUND as for a missing job, nothing changed", async (method) => {
    const rpc = QueueService.method[method] as DescMethod;
    const c = CASES[method];
    for (const s of foreign.states) {
      const f: Fixture = { jobId: s.jobId, taskId: s.taskId, workflowId: foreign.workflowId };
      const before = await rowsOf(s.jobId);
      const got = await call(rpc, c.request(f, FOREIGN), BOUND.token);
      const where = `${method} on another account's ${s.state} job: ${got.code} ${got.message}`;
      expect(got.code, where).toBe("not_found");
      const missing: Fixture = { jobId: randomUUID(), taskId: randomUUID(), workflowId: randomUUID() };
      const gone = await call(rpc, c.request(missing, FOREIGN), BOUND.token);
      const id = c.target === "task" ? "taskId" : "jobId";
      expect(got.message.replace(f[id], "<id>"), where).toBe(gone.message.replace(missing[id], "<id>"));
      expect(got.response, where).toBeUndefined();
      expect(await rowsOf(s.jobId), where).toEqual(before);
      // The admin finds it: the NOT_FOUND was the scope's.
      if (method === "getJob") expect((await call(rpc, c.request(f, FOREIGN), ADMIN.token)).code, where).toBe("ok");
    }
  });

  it("ListJobs, of a schedule or not, holds none of them", async () => {
    const ids = new Set(foreign.states.map((s) => s.jobId));
    for (const request of [
      { pageSize: 1000 },
      { pageSize: 1000, account: FOREIGN },
      { scheduleName: foreign.scheduleName, pageSize: 1000 },
    ]) {
      const got = await call(QueueService.method.listJobs, request, BOUND.token);
      expect(got.code).toBe("ok");
      const listed: string[] = (got.response?.jobs ?? []).map((j: { id: string }) => j.id);
      expect(
        listed.filter((id) => ids.has(id)),
        JSON.stringify(request),
      ).toEqual([]);
    }
  });
});

describe("plans", () => {
  async function plan(text: string, values: unknown[]): Promise<string> {
    const { rows } = await pool.query(`EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) ${text}`, values);
    return rows.map((r: Record<string, string>) => r["QUERY PLAN"]).join("\n");
  }

  it("a bound token's ListJobs reads its page off the account's index, however many jobs other accounts hold", async () => {
    await pool.query(
      `INSERT INTO jobs (workload, status, account, created_at)
       SELECT $1, 'completed', $2, now() - interval '1 day' - g * interval '1 second' FROM generate_series(1, 20000) g`,
      [WORKLOAD, FOREIGN],
    );
    await pool.query("ANALYZE jobs");
    const page = await plan(LIST_JOBS_BY_ACCOUNT, ["infinity", "ffffffff-ffff-ffff-ffff-ffffffffffff", 11, "", OWN, null]);
    expect(page).toMatch(/Index Scan using jobs_account_idx on jobs/);
    expect(page).not.toMatch(/Sort \(|Seq Scan|Rows Removed by Filter: \d{3,}/);
  });

  it("GetTask of another account's task reads the task by its key and its job by its key, nothing more", async () => {
    const theirs = await fixture(FOREIGN);
    const p = await plan(SELECT_ACCOUNT_TASK, [theirs.taskId, OWN]);
    expect(p).toMatch(/Index Scan using tasks_pkey on tasks/);
    expect(p).toMatch(/Index Scan using jobs_pkey on jobs/);
    expect(p).not.toMatch(/Seq Scan/);
  });

  it("ListTasks of another account's job checks the job once and reads no task", async () => {
    const theirs = await fixture(FOREIGN);
    const p = await plan(LIST_TASKS, [theirs.jobId, -1, 11, OWN]);
    expect(p).toMatch(/One-Time Filter/);
    expect(p).toMatch(/Index Scan using jobs_pkey on jobs/);
    expect(p).toMatch(/Index Scan using tasks_job_chunk_idx on tasks \(never executed\)/);
  });
});
