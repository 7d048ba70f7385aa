// Settlement over the transports: REST POST /jobs/{job_id}/settle and GET /settlements, and the
// same calls over Connect, with their codes (ALREADY_EXISTS 409, FAILED_PRECONDITION 400,
// NOT_FOUND 404, INVALID_ARGUMENT 400, PERMISSION_DENIED 403 for a submitter), a request id on
// every answer, nothing written by a refused call, and the settlement in the job's events.
//
// Jobs are made billable by SQL (an account, reserved_units): CreateJob's billing context is
// another part of the money path.
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { JobEventKind, QueueService } from "../../gen/leasehold/queue/v1/queue_pb.js";
import { Authenticator } from "../../src/api/auth.js";
import { apiServerFixture, type ApiServerFixture } from "../support/api-server.js";
import { queueFixture, sha, type QueueFixture } from "../support/queue.js";

const W = "billed_api";
const TOKENS = { admin: "admin-token-0123456789", billing: "billing-token-0123456789", submitter: "submitter-token-0123456789" };

let fx: QueueFixture;
let api: ApiServerFixture;

beforeAll(async () => {
  fx = await queueFixture();
  await fx.queue.putWorkload({ name: W, maxAttempts: 1, leaseSeconds: 60 });
  await fx.pool.query(`INSERT INTO accounts (name) VALUES ('acme')`);
  api = await apiServerFixture({
    queue: fx.queue,
    auth: new Authenticator([
      { sha256: sha(TOKENS.admin), role: "admin" },
      { sha256: sha(TOKENS.billing), role: "billing" },
      { sha256: sha(TOKENS.submitter), role: "submitter" },
    ]),
  });
});

afterAll(async () => {
  await api?.close();
  await fx?.close();
});

async function job(final: boolean, billable = true): Promise<string> {
  const r = await fx.queue.createJob({ workload: W, tasks: [{ chunkIndex: 0, inputUri: "s3://in/0", inputSha256: sha(0) }] });
  if (billable) await fx.pool.query(`UPDATE jobs SET account = 'acme', reserved_units = 100 WHERE id = $1`, [r.job.id]);
  if (final) await fx.queue.cancelJob({ jobId: r.job.id });
  return r.job.id;
}

interface Answer {
  status: number;
  requestId: string | null;
  body: {
    job?: { id: string; settlement?: { settlement_key: string; settled_units: string } };
    jobs?: { id: string; account?: string; status: string }[];
    next_page_token?: string;
    error?: { code: string; message: string; request_id?: string };
  };
}

async function rest(method: string, path: string, body?: unknown, token = TOKENS.billing): Promise<Answer> {
  const res = await fetch(`${api.base}${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, requestId: res.headers.get("x-request-id"), body: (await res.json()) as Answer["body"] };
}

const settle = (id: string, key: string, units: number | string, token?: string) =>
  rest("POST", `/jobs/${id}/settle`, { settlement_key: key, settled_units: units }, token);

async function settledEvents(id: string): Promise<number> {
  return fx.count("task_events", `job_id = '${id}' AND kind = 'job_settled'`);
}

describe("REST", () => {
  it("POST /jobs/{job_id}/settle records once; the same again answers the same; another key is 409 naming what was recorded", async () => {
    const id = await job(true);
    const first = await settle(id, "inv-1", 40);
    expect(first.status).toBe(200);
    expect(first.requestId).toBeTruthy();
    expect(first.body.job?.settlement).toMatchObject({ settlement_key: "inv-1", settled_units: "40" });

    const again = await settle(id, "inv-1", "40");
    expect(again.status).toBe(200);
    expect(again.body.job?.settlement).toEqual(first.body.job?.settlement);

    const other = await settle(id, "inv-2", 40);
    expect(other.status).toBe(409);
    expect(other.body.error?.code).toBe("already_exists");
    expect(other.body.error?.message).toContain('settlement_key "inv-1"');
    expect(other.body.error?.message).toContain("settled_units 40");
    expect(other.requestId).toBeTruthy();
    expect(other.body.error?.request_id).toBe(other.requestId);
    expect(await settledEvents(id)).toBe(1);

    // The billing role's read of jobs comes with the role table's rows for it; an admin reads it here.
    const read = await rest("GET", `/jobs/${id}`, undefined, TOKENS.admin);
    expect(read.status).toBe(200);
    expect(read.body.job?.settlement).toEqual(first.body.job?.settlement);
  });

  it("refuses a job not final, not billable, unknown, and bad input, each 4xx with a request id and nothing written", async () => {
    const running = await job(false);
    const plain = await job(true, false);
    const target = await job(true);
    const cases: [Promise<Answer>, number, string, RegExp][] = [
      [settle(running, "k", 1), 400, "failed_precondition", /only a final job/],
      [settle(plain, "k", 1), 400, "failed_precondition", /not billable/],
      [settle("3f1e2d4c-5b6a-4978-8a9b-0c1d2e3f4a5b", "k", 1), 404, "not_found", /job/],
      [settle(target, "", 1), 400, "invalid_argument", /settlement_key/],
      [settle(target, "x".repeat(201), 1), 400, "invalid_argument", /settlement_key/],
      [settle(target, "k", -1), 400, "invalid_argument", /settled_units/],
      [settle(target, "k", "9007199254740993"), 400, "invalid_argument", /settled_units/],
      [settle("not-a-uuid", "k", 1), 400, "invalid_argument", /job_id/],
      [settle(target, "k", 1, TOKENS.submitter), 403, "permission_denied", /./],
    ];
    for (const [call, status, code, message] of cases) {
      const a = await call;
      expect(a.status, JSON.stringify(a.body)).toBe(status);
      expect(a.body.error?.code).toBe(code);
      expect(a.body.error?.message).toMatch(message);
      expect(a.requestId).toBeTruthy();
      expect(a.body.error?.request_id).toBe(a.requestId);
    }
    for (const id of [running, plain, target]) expect(await settledEvents(id)).toBe(0);
    expect(await fx.count("jobs", "settled_at IS NOT NULL AND id IN ('" + [running, plain, target].join("','") + "')")).toBe(0);
  });

  it("GET /settlements lists final unsettled billable jobs, filtered by account and paged; a submitter is refused", async () => {
    // Earlier tests' jobs settled first, so the listing holds only this test's.
    for (const j of (await fx.queue.listSettlements({ pageSize: 1000 })).jobs)
      await fx.queue.settleJob({ jobId: j.id, settlementKey: "clear", settledUnits: 0 });
    const ids = [await job(true), await job(true), await job(true)];
    await job(false);
    await job(true, false);

    const first = await rest("GET", "/settlements?account=acme&page_size=2");
    expect(first.status).toBe(200);
    expect(first.body.jobs?.map((j) => j.id)).toEqual(ids.slice(0, 2));
    expect(first.body.jobs?.[0]).toMatchObject({ status: "JOB_STATUS_CANCELLED" });
    const second = await rest("GET", `/settlements?account=acme&page_size=2&page_token=${first.body.next_page_token}`);
    expect(second.body.jobs?.map((j) => j.id)).toEqual(ids.slice(2));
    expect(second.body.next_page_token ?? "").toBe("");

    const admin = await rest("GET", "/settlements", undefined, TOKENS.admin);
    expect(admin.body.jobs?.map((j) => j.id)).toEqual(ids);

    const refused = await rest("GET", "/settlements", undefined, TOKENS.submitter);
    expect(refused.status).toBe(403);
    expect(refused.requestId).toBeTruthy();
    const bad = await rest("GET", "/settlements?page_token=nope");
    expect(bad.status).toBe(400);
    expect(bad.body.error?.message).toMatch(/page_token/);
  });
});

describe("Connect", () => {
  const clientOf = (token: string) =>
    createClient(
      QueueService,
      createConnectTransport({
        baseUrl: api.base,
        httpVersion: "1.1",
        interceptors: [
          (next) => (req) => {
            req.header.set("authorization", `Bearer ${token}`);
            return next(req);
          },
        ],
      }),
    );

  it("SettleJob answers ALREADY_EXISTS for another key, and the settlement is a JOB_EVENT_KIND_SETTLED event of a resumed watch", async () => {
    const client = clientOf(TOKENS.billing);
    const id = await job(true);
    const r = await client.settleJob({ jobId: id, settlementKey: "c-1", settledUnits: 7n });
    expect(r.job?.settlement?.settledUnits).toBe(7n);
    const err = await client.settleJob({ jobId: id, settlementKey: "c-2", settledUnits: 7n }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(Code.AlreadyExists);

    const { rows } = await fx.pool.query(`SELECT min(id)::text AS id FROM task_events WHERE job_id = $1`, [id]);
    const kinds: { kind: JobEventKind; key: string; units: bigint }[] = [];
    for await (const u of clientOf(TOKENS.admin).watchJob({ jobId: id, afterEventId: BigInt(rows[0].id) - 1n })) {
      if (u.update.case === "event")
        kinds.push({ kind: u.update.value.kind, key: u.update.value.settlementKey, units: u.update.value.settledUnits });
    }
    expect(kinds[kinds.length - 1]).toEqual({ kind: JobEventKind.SETTLED, key: "c-1", units: 7n });
    expect(kinds.filter((k) => k.kind === JobEventKind.SETTLED)).toHaveLength(1);
  });
});
