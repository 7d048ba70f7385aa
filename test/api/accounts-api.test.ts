// Accounts through the transports: PutAccount/GetAccount/ListAccounts by REST (PUT/GET
// /accounts/{name}, GET /accounts) and Connect, and CreateJob's account rules as a client sees
// them: NOT_FOUND for an unknown account, RESOURCE_EXHAUSTED (429) naming the numbers past a quota,
// INVALID_ARGUMENT naming the field, each with the request id and nothing written; Job.account and
// Job.billing on GetJob and ListJobs' account filter.
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createPool, PostgresQueue } from "../../src/store/postgres/store.js";
import { createTestDatabase, type TestDatabase } from "../support/db.js";
import { restCall, type RestAnswer } from "../support/rest.js";
import { SWITCHES } from "../support/switches.js";
import { sha } from "../support/queue.js";
import { apiServerFixture, type ApiServerFixture } from "../support/api-server.js";

const W = "acc_api_w";

let db: TestDatabase;
let pool: pg.Pool;
let api: ApiServerFixture;
let base: string;

const rest = (method: string, path: string, body?: unknown, headers?: Record<string, string>): Promise<RestAnswer> =>
  restCall(base, method, path, body, headers);
/** A Connect JSON unary call. */
const connect = (method: string, body: unknown, headers: Record<string, string> = {}): Promise<RestAnswer> =>
  restCall(base, "POST", `/leasehold.queue.v1.QueueService/${method}`, body, headers);

const oneTask = (account: string, extra: Record<string, unknown> = {}) => ({
  workload: W,
  input_uri: "s3://acc/in",
  input_sha256: sha("acc"),
  account,
  ...extra,
});

async function written(): Promise<unknown> {
  const { rows } = await pool.query(
    `SELECT (SELECT count(*)::int FROM accounts) AS accounts, (SELECT count(*)::int FROM jobs) AS jobs,
            (SELECT count(*)::int FROM tasks) AS tasks,
            (SELECT string_agg(name || ':' || max_pending_tasks || ':' || priority, ',' ORDER BY name) FROM accounts) AS settings`,
  );
  return rows[0];
}

beforeAll(async () => {
  db = await createTestDatabase();
  pool = createPool({ connectionString: db.url, max: 6, statementTimeoutMs: 20_000, connectTimeoutMs: 5000 });
  const queue = new PostgresQueue(pool, {
    coalescing: SWITCHES.coalescing,
    defaultLeaseSeconds: 60,
    defaultMaxAttempts: 3,
    maxTasksPerJob: 50,
  });
  await queue.putWorkload({ name: W });
  api = await apiServerFixture({ queue });
  base = api.base;
});

afterAll(async () => {
  await api?.close();
  await pool?.end();
  await db?.drop();
});

describe("accounts over REST", () => {
  it("PUT /accounts/{name}, GET /accounts/{name} and GET /accounts", async () => {
    const put = await rest("PUT", "/accounts/acme", { max_pending_tasks: 3, priority: 7 });
    expect(put.status, put.text).toBe(200);
    expect(put.body.account).toMatchObject({ name: "acme", max_pending_tasks: 3, priority: 7 });
    const job = await rest("POST", "/jobs", oneTask("acme"));
    expect(job.status, job.text).toBe(201);
    expect(job.body.job).toMatchObject({ account: "acme", priority: 7, concurrency_key: "acme" });
    const get = await rest("GET", "/accounts/acme");
    expect(get.status, get.text).toBe(200);
    expect(get.body.account).toMatchObject({ name: "acme", max_pending_tasks: 3, priority: 7, pending_tasks: 1 });
    await rest("PUT", "/accounts/beta", {});
    const list = await rest("GET", "/accounts");
    expect(list.status, list.text).toBe(200);
    expect(list.body.accounts.map((a: { name: string }) => a.name)).toEqual(["acme", "beta"]);
  });

  it("GET of an unknown account is 404 with the request id", async () => {
    const r = await rest("GET", "/accounts/nobody", undefined, { "x-request-id": "acc-404" });
    expect(r.status, r.text).toBe(404);
    expect(r.headers.get("x-request-id")).toBe("acc-404");
    expect(r.body.error).toMatchObject({ code: "not_found", request_id: "acc-404" });
    expect(r.body.error.message).toContain("nobody");
  });

  it("refuses bad settings with 400 naming the field, writing nothing", async () => {
    const before = await written();
    for (const [path, body, field] of [
      ["/accounts/Bad", {}, "name"],
      ["/accounts/gamma", { max_pending_tasks: -1 }, "max_pending_tasks"],
      ["/accounts/gamma", { priority: 2_000_000 }, "priority"],
    ] as const) {
      const r = await rest("PUT", path, body, { "x-request-id": `acc-bad-${field}` });
      expect(r.status, r.text).toBe(400);
      expect(r.body.error.request_id).toBe(`acc-bad-${field}`);
      expect(r.body.error.violations.map((v: { field: string }) => v.field)).toEqual([field]);
    }
    expect(await written()).toEqual(before);
  });
});

describe("CreateJob with an account", () => {
  it("an unknown account is 404 naming it, writing nothing (REST and Connect)", async () => {
    const before = await written();
    const r = await rest("POST", "/jobs", oneTask("ghost"), { "x-request-id": "acc-ghost" });
    expect(r.status, r.text).toBe(404);
    expect(r.body.error).toMatchObject({ code: "not_found", request_id: "acc-ghost" });
    expect(r.body.error.message).toMatch(/^account: account "ghost" not found/);
    const c = await connect("CreateJob", { workload: W, inputUri: "s3://x", inputSha256: sha("x"), account: "ghost" });
    expect(c.status, c.text).toBe(404);
    expect(c.body.code).toBe("not_found");
    expect(c.headers.get("x-request-id")).toBeTruthy();
    expect(await written()).toEqual(before);
  });

  it("past max_pending_tasks is 429 RESOURCE_EXHAUSTED naming the numbers, writing nothing (REST and Connect)", async () => {
    await rest("PUT", "/accounts/small", { max_pending_tasks: 2 });
    const ok = await rest("POST", "/jobs", oneTask("small"));
    expect(ok.status, ok.text).toBe(201);
    const before = await written();
    const tasks = [0, 1].map((i) => ({ chunk_index: i, input_uri: `s3://t/${i}`, input_sha256: sha(i) }));
    const r = await rest("POST", "/jobs", { workload: W, account: "small", tasks }, { "x-request-id": "acc-quota" });
    expect(r.status, r.text).toBe(429);
    expect(r.headers.get("x-request-id")).toBe("acc-quota");
    expect(r.body.error).toMatchObject({ code: "resource_exhausted", request_id: "acc-quota" });
    expect(r.body.error.message).toContain("has 1 pending tasks; 2 more would pass its max_pending_tasks of 2");
    const c = await connect(
      "CreateJob",
      {
        workload: W,
        account: "small",
        tasks: tasks.map((t) => ({ chunkIndex: t.chunk_index, inputUri: t.input_uri, inputSha256: t.input_sha256 })),
      },
      { "x-request-id": "acc-quota-c" },
    );
    expect(c.status, c.text).toBe(429);
    expect(c.body.code).toBe("resource_exhausted");
    expect(c.headers.get("x-request-id")).toBe("acc-quota-c");
    expect(await written()).toEqual(before);
  });

  it("bad billing is 400 naming the field, writing nothing", async () => {
    const before = await written();
    for (const [billing, field] of [
      [{ reserved_units: "-5" }, "billing.reserved_units"],
      [{ reserved_units: "1.5" }, "billing.reserved_units"],
    ] as const) {
      const r = await rest("POST", "/jobs", oneTask("acme", { billing }), { "x-request-id": "acc-billing" });
      expect(r.status, r.text).toBe(400);
      expect(r.body.error.request_id).toBe("acc-billing");
      expect(r.body.error.message).toContain(field);
    }
    expect(await written()).toEqual(before);
  });

  it("a schedule's template naming an unknown account is 404 naming job.account at PutSchedule, writing nothing", async () => {
    const before = await written();
    const r = await rest("PUT", "/schedules/acc-ghost", { cron: "0 0 1 1 *", job: oneTask("ghost") }, { "x-request-id": "acc-sched" });
    expect(r.status, r.text).toBe(404);
    expect(r.body.error).toMatchObject({ code: "not_found", request_id: "acc-sched" });
    expect(r.body.error.message).toMatch(/^job\.account: account "ghost" not found/);
    expect(await written()).toEqual(before);
    expect((await pool.query(`SELECT count(*)::int AS n FROM schedules`)).rows[0].n).toBe(0);
  });

  it("stores the billing context, answers a reused billing key with the first job, and GetJob and ListJobs show them", async () => {
    await rest("PUT", "/accounts/billed", {});
    const body = oneTask("billed", { billing: { reserved_units: "1200", billing_key: "order-7" } });
    const first = await rest("POST", "/jobs", body);
    expect(first.status, first.text).toBe(201);
    expect(first.body.job).toMatchObject({ account: "billed", billing: { reserved_units: "1200", billing_key: "order-7" } });
    const again = await rest("POST", "/jobs", body);
    expect(again.status, again.text).toBeLessThan(300);
    expect(again.body.job.id).toBe(first.body.job.id);
    const before = await written();
    const other = await rest("POST", "/jobs", { ...body, parameters: { other: true } });
    expect(other.status, other.text).toBe(409);
    expect(other.body.error.message).toContain("billing.billing_key");
    expect(await written()).toEqual(before);
    const get = await rest("GET", `/jobs/${first.body.job.id}`);
    expect(get.body.job).toMatchObject({ account: "billed", billing: { reserved_units: "1200", billing_key: "order-7" } });
    const listed = await rest("GET", "/jobs?account=billed");
    expect(listed.status, listed.text).toBe(200);
    expect(listed.body.jobs.map((j: { id: string }) => j.id)).toEqual([first.body.job.id]);
    const byConnect = await connect("ListJobs", { account: "billed" });
    expect(byConnect.body.jobs.map((j: { id: string }) => j.id)).toEqual([first.body.job.id]);
    expect(byConnect.body.jobs[0].billing).toEqual({ reserved_units: "1200", billing_key: "order-7" });
  });
});
