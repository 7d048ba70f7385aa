// A leader that cannot be reached, and a database that cannot be written: the coordinator answers
// UNAVAILABLE quickly instead of hanging, never exits, refuses readiness, and says why.
import net from "node:net";
import pg from "pg";
import { afterAll, afterEach, describe, expect, it, inject } from "vitest";
import { createTestDatabase, type TestDatabase } from "../support/db.js";
import { freePort } from "../support/global-setup.js";
import { exitWithin, killAll, spawnCoordinator } from "../support/process.js";

const SHA = "a".repeat(64);
const dbs: TestDatabase[] = [];
afterEach(async () => {
  await killAll();
});
afterAll(async () => {
  await Promise.all(dbs.map((d) => d.drop()));
});

async function database(): Promise<TestDatabase> {
  const d = await createTestDatabase();
  dbs.push(d);
  return d;
}

/**
 * A TCP hop to PostgreSQL that can go silent like a leader cut off by the network: while cut, it
 * forwards nothing either way on open connections and accepts new ones without ever answering
 * (no FIN, no RST: the client's only clue is silence). Healing drops what it held.
 */
class SilentHop {
  private cut = false;
  private readonly sockets = new Set<net.Socket>();
  private readonly server: net.Server;
  constructor(private readonly target: { host: string; port: number }) {
    this.server = net.createServer((client) => this.accept(client));
  }
  async listen(): Promise<number> {
    await new Promise<void>((resolve) => this.server.listen(0, "127.0.0.1", resolve));
    return (this.server.address() as net.AddressInfo).port;
  }
  private track(s: net.Socket): void {
    this.sockets.add(s);
    s.on("close", () => this.sockets.delete(s));
    s.on("error", () => {});
  }
  private accept(client: net.Socket): void {
    this.track(client);
    if (this.cut) return; // held, never answered
    const upstream = net.connect(this.target);
    this.track(upstream);
    client.on("data", (d) => {
      if (!this.cut) upstream.write(d);
    });
    upstream.on("data", (d) => {
      if (!this.cut) client.write(d);
    });
    client.on("close", () => upstream.destroy());
    upstream.on("close", () => client.destroy());
  }
  goSilent(): void {
    this.cut = true;
  }
  heal(): void {
    this.cut = false;
    for (const s of this.sockets) s.destroy();
  }
  close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}

async function call(base: string, method: string, route: string, body?: unknown) {
  const t0 = Date.now();
  const res = await fetch(new URL(route, base), {
    method,
    headers: body === undefined ? {} : { "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(30_000),
  });
  const text = await res.text();
  return { status: res.status, body: text ? (JSON.parse(text) as Record<string, unknown>) : null, ms: Date.now() - t0 };
}

async function until(cond: () => Promise<boolean>, timeoutMs: number, what: string): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe("an unreachable leader", () => {
  it("calls that start while it is silent answer 503 within PG_CONNECT_TIMEOUT_MS; the coordinator neither hangs nor exits, and recovers", async () => {
    const db = await database();
    const u = new URL(db.url);
    const hop = new SilentHop({ host: u.hostname, port: Number(u.port) });
    const hopPort = await hop.listen();
    u.host = `127.0.0.1:${hopPort}`;
    try {
      const CONNECT_MS = 1000;
      const c = spawnCoordinator({
        DATABASE_URL: u.toString(),
        PORT: String(await freePort()),
        PG_CONNECT_TIMEOUT_MS: String(CONNECT_MS),
        PG_STATEMENT_TIMEOUT_MS: "3000",
        REQUEST_TIMEOUT_MS: "8000",
      });
      const base = await c.listening();
      expect((await call(base, "PUT", "/workloads/cut", { lease_seconds: 30 })).status).toBe(200);
      const tasks = Array.from({ length: 10 }, (_, i) => ({ chunk_index: i, input_uri: `s3://in/${i}`, input_sha256: SHA }));
      const created = await call(base, "POST", "/jobs", { workload: "cut", tasks });
      expect(created.status).toBe(201);
      const jobId = (created.body!.job as { id: string }).id;
      expect((await call(base, "POST", "/tasks/claim", { worker_id: "w", workloads: ["cut"] })).status).toBe(200);

      hop.goSilent();
      // The pool's connections go idle, as they would between calls while the leader is away.
      await new Promise((r) => setTimeout(r, 1200));
      const answers = await Promise.all([
        call(base, "POST", "/tasks/claim", { worker_id: "w", workloads: ["cut"] }),
        call(base, "GET", `/jobs/${jobId}`),
        call(base, "POST", "/jobs", { workload: "cut", tasks }),
        call(base, "PUT", "/workloads/cut2", {}),
      ]);
      for (const a of answers) {
        expect(a.status).toBe(503);
        expect(a.ms).toBeLessThan(CONNECT_MS + 1500);
        const error = a.body!.error as { code: string; message: string; request_id: string };
        expect(error.code).toBe("unavailable");
        expect(error.request_id).toBeTruthy();
        expect(error.message).not.toMatch(/ETIMEDOUT|timeout|postgres/i);
      }
      const ready = await call(base, "GET", "/readyz");
      expect(ready.status).toBe(503);
      expect(ready.ms).toBeLessThan(3000);
      expect((await call(base, "GET", "/healthz")).status).toBe(200);
      expect(c.child.exitCode).toBeNull();

      hop.heal();
      await until(async () => (await call(base, "GET", "/readyz")).status === 200, 20_000, "ready again");
      const after = await call(base, "POST", "/tasks/claim", { worker_id: "w", workloads: ["cut"], max_tasks: 9 });
      expect(after.status).toBe(200);
      expect((after.body!.tasks as unknown[]).length).toBe(9);
      c.signal("SIGTERM");
      expect((await exitWithin(c, 20_000)).code).toBe(0);
    } finally {
      await hop.close();
    }
  }, 90_000);
});

describe("a read-only database", () => {
  it("a coordinator started against it stays unready and says why; a write answers 503, never 500", async () => {
    const db = await database();
    const admin = new pg.Client({ connectionString: inject("adminDatabaseUrl") });
    await admin.connect();
    try {
      // What a hot standby looks like to a session, as far as writes go.
      await admin.query(`ALTER DATABASE ${db.name} SET default_transaction_read_only = on`);
    } finally {
      await admin.end();
    }
    const c = spawnCoordinator({ DATABASE_URL: db.url, PORT: String(await freePort()) });
    const base = await c.listening();
    expect(c.stderr()).toMatch(/not ready: .*read-only/);
    const ready = await call(base, "GET", "/readyz");
    expect(ready.status).toBe(503);
    expect(ready.body).toMatchObject({ status: "not_ready" });
    expect(String(ready.body!.detail)).toMatch(/read-only .*default_transaction_read_only/);
    const write = await call(base, "PUT", "/workloads/ro", {});
    expect(write.status).toBe(503);
    expect((write.body!.error as { code: string }).code).toBe("unavailable");
    // Reads still work: the process is up, only not ready for traffic.
    expect((await call(base, "GET", "/workloads")).status).toBe(200);
    expect(c.child.exitCode).toBeNull();
  }, 60_000);
});
