// ListWorkloadKeys (REST GET /workloads/{name}/keys): a workload's concurrency keys with their
// pending and live-leased counts and caps, busiest first, over REST and Connect; keys with only
// an own cap are listed, the list is cut at `limit` (and says so), an unknown workload is 404 and
// a bad limit 400 naming it.
import { Code, createClient, type Client } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { QueueService } from "../../gen/leasehold/queue/v1/queue_pb.js";
import { PostgresQueue } from "../../src/store/postgres/store.js";
import { sha, queueFixture, type QueueFixture } from "../support/queue.js";
import { restCall } from "../support/rest.js";
import { rpcError } from "../support/rpc.js";
import { apiServerFixture, type ApiServerFixture } from "../support/api-server.js";

let pool: pg.Pool;
let fx: QueueFixture;
let queue: PostgresQueue;
let api: ApiServerFixture;
let base: string;
let client: Client<typeof QueueService>;

const W = "keyed";

beforeAll(async () => {
  fx = await queueFixture(
    {
      defaultLeaseSeconds: 60,
      defaultMaxAttempts: 3,
      maxTasksPerJob: 1000,
    },
    { max: 4 },
  );
  pool = fx.pool;
  queue = fx.queue;
  api = await apiServerFixture({ queue, maxBodyBytes: 1 << 20, requestTimeoutMs: 10_000 });
  base = api.base;
  client = createClient(QueueService, createConnectTransport({ baseUrl: base, httpVersion: "1.1" }));
});

afterAll(async () => {
  await api?.close();
  await fx?.close();
});

async function job(workload: string, n: number, concurrencyKey: string): Promise<void> {
  await queue.createJob({
    workload,
    concurrencyKey,
    tasks: Array.from({ length: n }, (_, i) => ({ chunkIndex: i, inputUri: `s3://in/${concurrencyKey}/${i}`, inputSha256: sha(i) })),
  });
}

describe("ListWorkloadKeys", () => {
  it("counts pending and live leases per key, with each key's cap, busiest first", async () => {
    await queue.putWorkload({ name: W, maxLeasedPerKey: 2 });
    await queue.putKeyLimit({ name: W, key: "premium", maxLeased: 5 });
    await queue.putKeyLimit({ name: W, key: "idle", maxLeased: 3 });
    await job(W, 4, "acme");
    await job(W, 6, "premium");
    await job(W, 1, "");
    // Round robin over the keys: 2 of acme (its cap), 2 of premium, 1 of "" leased.
    const claimed = await queue.claimTasks({ workerId: "w1", workloads: [W], maxTasks: 5 });
    expect(claimed).toHaveLength(5);
    // One of premium's leases has expired: the caps do not count it, nor does the list.
    const premium = claimed.find((t) => t.concurrencyKey === "premium")!;
    await pool.query("UPDATE tasks SET lease_expires_at = now() - interval '1 second' WHERE id = $1", [premium.id]);

    const rest = await restCall(base, "GET", `/workloads/${W}/keys`);
    expect(rest.status, rest.text).toBe(200);
    expect(rest.body).toEqual({
      keys: [
        { key: "acme", pending: 2, leased: 2, max_leased: 2, own_limit: false },
        { key: "premium", pending: 4, leased: 1, max_leased: 5, own_limit: true },
        { key: "", pending: 0, leased: 1, max_leased: 2, own_limit: false },
        { key: "idle", pending: 0, leased: 0, max_leased: 3, own_limit: true },
      ],
      truncated: false,
    });
    const { rows } = await pool.query(
      "SELECT concurrency_key, count(*)::int AS n FROM tasks WHERE workload = $1 AND status = 'pending' GROUP BY 1 ORDER BY 1",
      [W],
    );
    expect(rows).toEqual([
      { concurrency_key: "acme", n: 2 },
      { concurrency_key: "premium", n: 4 },
    ]);

    const cut = await client.listWorkloadKeys({ name: W, limit: 2 });
    expect(cut.keys.map((k) => [k.key, k.leased, k.pending])).toEqual([
      ["acme", 2, 2],
      ["premium", 1, 4],
    ]);
    expect(cut.truncated).toBe(true);
  });

  it("is empty for a workload without keys or tasks, 404 for an unknown one, 400 for a bad limit", async () => {
    await queue.putWorkload({ name: "keyless" });
    expect(await client.listWorkloadKeys({ name: "keyless" })).toMatchObject({ keys: [], truncated: false });
    const unknown = await restCall(base, "GET", "/workloads/no_such/keys");
    expect(unknown.status).toBe(404);
    expect(unknown.body.error.code).toBe("not_found");
    expect(unknown.body.error.request_id).toBeTruthy();
    const bad = await restCall(base, "GET", `/workloads/${W}/keys?limit=1001`);
    expect(bad.status, bad.text).toBe(400);
    expect(bad.text).toContain("limit");
    expect((await rpcError(client.listWorkloadKeys({ name: W, limit: -1 }))).code).toBe(Code.InvalidArgument);
  });
});

describe("PutKeyLimit with clear", () => {
  it("removes a key's own cap: the key is back under the workload's max_leased_per_key, and its claims see it", async () => {
    const w = "clearable";
    await queue.putWorkload({ name: w, maxLeasedPerKey: 1 });
    const own = await restCall(base, "PUT", `/workloads/${w}/keys/vip`, { max_leased: 3 });
    expect(own.status, own.text).toBe(200);
    await job(w, 4, "vip");
    expect(await queue.claimTasks({ workerId: "c1", workloads: [w], maxTasks: 4 })).toHaveLength(3);

    const cleared = await restCall(base, "PUT", `/workloads/${w}/keys/vip`, { clear: true });
    expect(cleared.status, cleared.text).toBe(200);
    expect(cleared.body).toEqual({ name: w, key: "vip", max_leased: 0 });
    expect((await pool.query("SELECT count(*)::int AS n FROM workload_key_limits WHERE workload = $1", [w])).rows).toEqual([{ n: 0 }]);
    const keys = await client.listWorkloadKeys({ name: w });
    expect(keys.keys.map((k) => [k.key, k.leased, k.maxLeased, k.ownLimit])).toEqual([["vip", 3, 1, false]]);
    // Three leased against the workload's cap of 1 per key: the fourth waits.
    expect(await queue.claimTasks({ workerId: "c2", workloads: [w], maxTasks: 4 })).toHaveLength(0);

    // Clearing a key without a cap of its own is not an error; over Connect too.
    expect(await client.putKeyLimit({ name: w, key: "vip", clear: true })).toMatchObject({ name: w, key: "vip", maxLeased: 0 });
  });

  it("refuses clear with a max_leased, and answers not_found for an unknown workload, writing nothing", async () => {
    await queue.putWorkload({ name: "clear_bad" });
    await queue.putKeyLimit({ name: "clear_bad", key: "k", maxLeased: 2 });
    const both = await restCall(base, "PUT", "/workloads/clear_bad/keys/k", { clear: true, max_leased: 4 });
    expect(both.status, both.text).toBe(400);
    expect(both.text).toContain("max_leased");
    expect((await rpcError(client.putKeyLimit({ name: "no_such", key: "k", clear: true }))).code).toBe(Code.NotFound);
    const { rows } = await pool.query("SELECT key, max_leased FROM workload_key_limits WHERE workload = 'clear_bad'");
    expect(rows).toEqual([{ key: "k", max_leased: 2 }]);
  });
});
