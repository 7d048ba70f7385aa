// The coordinator as a real process: configuration errors, production mode
// against an unmigrated database, health endpoints, graceful shutdown under
// load, coalesced signals, the migrate CLI, and embedded mode reusing its data.
import { execFileSync } from "node:child_process";
import { chmodSync, existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createEmptyDatabase, createTestDatabase, type TestDatabase } from "../support/db.js";
import { freePort } from "../support/global-setup.js";
import { exitWithin, killAll, spawnCoordinator, spawnMigrate } from "../support/process.js";

const SHUTDOWN_TIMEOUT_MS = 5000;
const SHA = "a".repeat(64);

let db: TestDatabase;
const dropLater: TestDatabase[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  dropLater.push(db);
});

afterAll(async () => {
  await killAll();
  for (const d of dropLater) await d.drop();
});

function production(env: Record<string, string> = {}) {
  return spawnCoordinator({ DATABASE_URL: db.url, PORT: "0", SHUTDOWN_TIMEOUT_MS: String(SHUTDOWN_TIMEOUT_MS), ...env });
}

describe("configuration", () => {
  it("a bad value exits 2 with one stderr line naming the variable", async () => {
    const p = spawnCoordinator({ PORT: "eighty" });
    const exit = await exitWithin(p, 20_000);
    expect(exit.code).toBe(2);
    expect(p.stderrLines()).toHaveLength(1);
    expect(p.stderrLines()[0]).toMatch(/PORT/);
  }, 30_000);

  it("production mode refuses an unmigrated database with one clear line", async () => {
    const empty = await createEmptyDatabase();
    dropLater.push(empty);
    const p = spawnCoordinator({ DATABASE_URL: empty.url, PORT: "0" });
    const exit = await exitWithin(p, 20_000);
    expect(exit.code).not.toBe(0);
    expect(exit.code).not.toBeNull();
    expect(p.stderrLines()).toHaveLength(1);
    expect(p.stderrLines()[0]).toMatch(/schema is behind the code: \d+ migration\(s\) pending \(first: .+\); run `npm run migrate -- up`/);
  }, 30_000);
});

describe("migrate CLI", () => {
  it("without DATABASE_URL: one line, exit 2", async () => {
    const p = spawnMigrate(["up"], {});
    expect((await exitWithin(p, 20_000)).code).toBe(2);
    expect(p.stderrLines()).toHaveLength(1);
    expect(p.stderrLines()[0]).toMatch(/DATABASE_URL/);
  }, 30_000);

  it("up makes an empty database acceptable to the coordinator; down makes it pending again", async () => {
    const empty = await createEmptyDatabase();
    dropLater.push(empty);
    const up = spawnMigrate(["up"], { DATABASE_URL: empty.url });
    expect((await exitWithin(up, 30_000)).code, up.stderr()).toBe(0);
    expect(up.stdout()).toMatch(/schema is current/);

    const c = spawnCoordinator({ DATABASE_URL: empty.url, PORT: "0" });
    const base = await c.listening();
    expect((await fetch(`${base}/readyz`)).status).toBe(200);
    c.signal("SIGTERM");
    expect((await exitWithin(c, 15_000)).code).toBe(0);

    const down = spawnMigrate(["down"], { DATABASE_URL: empty.url });
    expect((await exitWithin(down, 30_000)).code, down.stderr()).toBe(0);
    expect(down.stdout()).toMatch(/1 migration\(s\) pending|migration\(s\) pending/);
  }, 90_000);
});

describe("production mode", () => {
  it("serves /healthz and /readyz with 200 against a migrated database", async () => {
    const p = production();
    const base = await p.listening();
    const line = p.stderrLines().find((l) => l.includes("listening on")) ?? "";
    expect(line).toContain(db.name);
    const password = new URL(db.url).password;
    if (password) expect(line).not.toContain(`:${password}@`);
    expect((await fetch(`${base}/healthz`)).status).toBe(200);
    expect((await fetch(`${base}/readyz`)).status).toBe(200);
    p.signal("SIGTERM");
    expect((await exitWithin(p, 15_000)).code).toBe(0);
  }, 60_000);

  it("wires long polls: a parked claim is woken by a new job", async () => {
    const p = production({ POLL_INTERVAL_MS: "60000" }); // only a notification can wake it in time
    const base = await p.listening();
    const json = { "content-type": "application/json" };
    expect((await fetch(`${base}/workloads/wake`, { method: "PUT", headers: json, body: "{}" })).status).toBe(200);
    const started = Date.now();
    const claim = fetch(`${base}/tasks/claim`, {
      method: "POST",
      headers: json,
      body: JSON.stringify({ worker_id: "w", workloads: ["wake"], wait_seconds: 20 }),
    });
    await new Promise((r) => setTimeout(r, 300));
    const job = await fetch(`${base}/jobs`, {
      method: "POST",
      headers: json,
      body: JSON.stringify({ workload: "wake", input_uri: "s3://b/k", input_sha256: SHA }),
    });
    expect(job.status).toBe(201);
    const res = await claim;
    expect(res.status).toBe(200);
    expect(Date.now() - started).toBeLessThan(10_000);
    p.signal("SIGTERM");
    expect((await exitWithin(p, 15_000)).code).toBe(0);
  }, 60_000);

  it("SIGTERM under load: exits 0 within the shutdown bound and answers no request with a 5xx", async () => {
    const p = production();
    const base = await p.listening();
    for (const name of ["load", "idle"]) {
      const put = await fetch(`${base}/workloads/${name}`, {
        method: "PUT",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ max_attempts: 3, lease_seconds: 30 }),
      });
      expect(put.status).toBe(200);
    }

    let signalledAt = Infinity;
    const statuses = new Map<number, number>();
    let connectionErrors = 0;
    /** Connection errors of requests sent well before SIGTERM: those the server had and should have answered. */
    const droppedInFlight: string[] = [];
    let sent = 0;
    let stop = false;
    const call = async (method: string, route: string, body?: unknown) => {
      sent++;
      const started = Date.now();
      try {
        const res = await fetch(`${base}${route}`, {
          method,
          headers: body === undefined ? {} : { "content-type": "application/json" },
          body: body === undefined ? undefined : JSON.stringify(body),
        });
        statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
        const text = await res.text();
        return {
          status: res.status,
          json: res.status === 200 || res.status === 201 ? (JSON.parse(text) as Record<string, unknown>) : undefined,
        };
      } catch (err) {
        connectionErrors++;
        if (started < signalledAt - 250) droppedInFlight.push(`${method} ${route}: ${String((err as Error).cause ?? err)}`);
        throw err;
      }
    };
    const loop = async (n: number) => {
      while (!stop) {
        try {
          await call("PUT", "/workloads/load", { max_attempts: 3, lease_seconds: 30 });
          const created = await call("POST", "/jobs", { workload: "load", input_uri: `s3://bucket/${n}`, input_sha256: SHA });
          await call("POST", "/tasks/claim", { worker_id: `w${n}`, workloads: ["load"], max_tasks: 1 });
          const job = created.json?.job as { id?: string } | undefined;
          if (job?.id) await call("GET", `/jobs/${job.id}`);
        } catch {
          await new Promise((r) => setTimeout(r, 5));
        }
      }
    };
    const loops = Array.from({ length: 8 }, (_, i) => loop(i));
    // Under load means some calls made before the signal: waited for, not timed (a busy machine is slower).
    for (const until = Date.now() + 30_000; sent <= 60 && Date.now() < until;) await new Promise((r) => setTimeout(r, 50));
    // A long poll on an empty workload is parked when the signal arrives; shutdown answers it empty at once.
    const parked = call("POST", "/tasks/claim", { worker_id: "parked", workloads: ["idle"], wait_seconds: 25 });
    await new Promise((r) => setTimeout(r, 300));
    const beforeSignal = sent;
    signalledAt = Date.now();
    p.signal("SIGTERM");
    const exit = await exitWithin(p, SHUTDOWN_TIMEOUT_MS + 5000);
    const took = Date.now() - signalledAt;
    stop = true;
    await Promise.all(loops);

    const summary = { statuses: Object.fromEntries(statuses), connectionErrors, droppedInFlight, beforeSignal, sent, took };
    expect(exit.code, JSON.stringify(summary) + p.stderr()).toBe(0);
    expect(took, "the parked long poll held up the shutdown").toBeLessThan(SHUTDOWN_TIMEOUT_MS);
    expect(beforeSignal, JSON.stringify(summary)).toBeGreaterThan(50);
    expect(
      [...statuses].filter(([s]) => s >= 500),
      JSON.stringify(summary),
    ).toEqual([]);
    expect(droppedInFlight, JSON.stringify(summary)).toEqual([]);
    expect([200, 204]).toContain((await parked).status);
  }, 60_000);

  it("two SIGINTs a few ms apart are one request: graceful, exit 0", async () => {
    const p = production();
    const base = await p.listening();
    expect((await fetch(`${base}/healthz`)).status).toBe(200);
    p.signal("SIGINT");
    await new Promise((r) => setTimeout(r, 5));
    p.signal("SIGINT");
    const exit = await exitWithin(p, 15_000);
    expect(exit.code, p.stderr()).toBe(0);
  }, 60_000);
});

/** postgres processes whose command line names dir (the embedded cluster's data directory). */
function postgresFor(dir: string): string[] {
  try {
    return execFileSync("pgrep", ["-af", dir], { encoding: "utf8" })
      .split("\n")
      .filter((l) => /postgres/.test(l) && !/pgrep/.test(l));
  } catch {
    return []; // pgrep exits 1 when nothing matches
  }
}

describe("embedded mode", () => {
  let tmp: string;
  beforeAll(() => {
    tmp = mkdtempSync(path.join(os.tmpdir(), "leasehold-run-test-"));
    chmodSync(tmp, 0o755); // as root, Postgres runs as the postgres user and must reach its data directory
  });
  afterAll(async () => {
    await killAll();
    rmSync(tmp, { recursive: true, force: true });
  });

  it("initialises, stops its Postgres on SIGTERM, and a second start reuses the data", async () => {
    const dataDir = path.join(tmp, "pg");
    const env = { EMBEDDED_PG_DIR: dataDir, EMBEDDED_PG_PORT: String(await freePort()), PORT: "0" };

    const first = spawnCoordinator(env);
    const base1 = await first.listening(90_000);
    expect(first.stderrLines().find((l) => l.includes("listening on"))).toMatch(/embedded PostgreSQL/);
    const names1 = ((await (await fetch(`${base1}/workloads`)).json()) as { workloads: { name: string }[] }).workloads.map((w) => w.name);
    expect(names1).toEqual(expect.arrayContaining(["scimesh", "video"]));
    const put = await fetch(`${base1}/workloads/kept`, {
      method: "PUT",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ max_attempts: 7, lease_seconds: 42 }),
    });
    expect(put.status).toBe(200);
    first.signal("SIGTERM");
    expect((await exitWithin(first, 20_000)).code, first.stderr()).toBe(0);
    expect(postgresFor(dataDir)).toEqual([]);
    expect(existsSync(path.join(dataDir, "postmaster.pid"))).toBe(false);
    const files = readdirSync(dataDir);
    expect(files).toContain("PG_VERSION");

    const second = spawnCoordinator(env);
    const base2 = await second.listening(60_000);
    const workloads = ((await (await fetch(`${base2}/workloads`)).json()) as { workloads: { name: string; max_attempts: number }[] })
      .workloads;
    expect(workloads.find((w) => w.name === "kept")?.max_attempts).toBe(7);

    // A second coordinator on the same data directory cannot start; its hint names both settings.
    const third = spawnCoordinator(env);
    expect((await exitWithin(third, 60_000)).code, third.stderr()).toBe(1);
    const hint = third.stderrLines().find((l) => l.includes("embedded PostgreSQL failed to start"));
    expect(hint, third.stderr()).toContain(dataDir);
    expect(hint).toContain("EMBEDDED_PG_DIR");
    expect(hint).toContain("EMBEDDED_PG_PORT");
    expect((await fetch(`${base2}/healthz`)).status).toBe(200);

    second.signal("SIGINT");
    expect((await exitWithin(second, 20_000)).code, second.stderr()).toBe(0);
    expect(postgresFor(dataDir)).toEqual([]);
  }, 180_000);
});
