// Nothing lost: real coordinator processes on one database, killed, starved and cut off from
// PostgreSQL, with workers that die. Every test is bounded in time and kills what it started.
import http from "node:http";
import { chmodSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import pg from "pg";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { QueueService } from "../../gen/leasehold/queue/v1/queue_pb.js";
import { startEmbeddedPostgres, type EmbeddedDatabase } from "../../src/store/postgres/schema/embedded.js";
import { migrate } from "../../src/store/postgres/schema/migrate.js";
import { createTestDatabase, type TestDatabase } from "../support/db.js";
import { freePort } from "../support/global-setup.js";
import { killAll, spawnCoordinator, type Spawned } from "../support/process.js";
import { call as httpCall, closeAgent, type Answer } from "../support/http.js";
import { sha } from "../support/queue.js";
import { switchEnv, SWITCHES } from "../support/switches.js";

const SHA = sha("fault");
const dbs: TestDatabase[] = [];

afterEach(async () => {
  await killAll();
});
afterAll(async () => {
  await Promise.all(dbs.map((d) => d.drop()));
});

/** One REST call (support/http.ts: keep-alive node:http, a fraction of fetch's CPU); no answer within 15 s is status 0, the coordinator gone. */
const call = (base: string, method: string, route: string, body?: unknown, timeoutMs = 15_000): Promise<Answer> =>
  httpCall(base, method, route, body, timeoutMs);
afterAll(closeAgent);

async function database(): Promise<TestDatabase> {
  const d = await createTestDatabase();
  dbs.push(d);
  return d;
}

async function startCoordinators(
  n: number,
  env: Record<string, string>,
): Promise<Array<{ proc: Spawned; base: string; port: number; env: Record<string, string> }>> {
  return Promise.all(
    Array.from({ length: n }, async () => {
      const port = await freePort();
      // The run's switches (this suite runs again with COALESCE=false and CLAIM_HINTS=false): the
      // coordinators it kills and restarts are the ones that project is about.
      const full = { PORT: String(port), REAPER_INTERVAL_MS: "200", POLL_INTERVAL_MS: "200", ...switchEnv(), ...env };
      const proc = spawnCoordinator(full);
      return { proc, base: await proc.listening(), port, env: full };
    }),
  );
}

function manyTasks(n: number) {
  return Array.from({ length: n }, (_, i) => ({ chunk_index: i, input_uri: `s3://in/${i}`, input_sha256: SHA }));
}

interface Claim {
  worker: string;
  attempt: number;
}

describe("several coordinators, one of them killed", () => {
  // The one-statement project (COALESCE=false) drains half as many: each call its own statement
  // is what that project is about, and 10,000 tasks still take the same faults (a coordinator
  // killed -9 a quarter of the way in and restarted, leases expiring, stale attempts refused) in
  // about half the time; the default project keeps the volume of 20,000.
  const TOTAL = SWITCHES.coalescing ? 20_000 : 10_000;
  it(`${TOTAL.toLocaleString("en")} tasks over 3 coordinators and 32 workers all complete, each accepted exactly once, stale attempts refused`, async () => {
    const db = await database();
    const coordinators = await startCoordinators(3, { DATABASE_URL: db.url, PG_POOL_MAX: "4" });
    const base0 = coordinators[0].base;
    expect((await call(base0, "PUT", "/workloads/fault", { lease_seconds: 3, max_attempts: 10 })).status).toBe(200);
    const jobs: string[] = [];
    for (let i = 0; i < TOTAL / 5000; i++) {
      const created = await call(base0, "POST", "/jobs", { workload: "fault", tasks: manyTasks(5000) }, 60_000);
      expect(created.status).toBe(201);
      jobs.push((created.body!.job as { id: string }).id);
    }

    const claims = new Map<string, Claim[]>();
    const accepted = new Map<string, Claim[]>();
    let bad5xx = 0;
    let done = 0;
    let killed = false;
    // Generous: CI may run this file next to another one on the same two cores.
    const deadline = Date.now() + 420_000;

    const worker = async (w: number) => {
      const me = `w${w}`;
      const target = () => coordinators[w % 3].base;
      while (Date.now() < deadline && done < TOTAL) {
        const claim = await call(target(), "POST", "/tasks/claim", { worker_id: me, workloads: ["fault"], max_tasks: 4 });
        if (claim.status >= 500) bad5xx++;
        if (claim.status === 0) {
          await new Promise((r) => setTimeout(r, 100)); // coordinator down: wait for it (or its lease expiry)
          continue;
        }
        if (claim.status === 204) {
          await new Promise((r) => setTimeout(r, 50));
          continue;
        }
        for (const t of (claim.body!.tasks as Array<{ id: string; attempt: number }>) ?? []) {
          claims.set(t.id, [...(claims.get(t.id) ?? []), { worker: me, attempt: t.attempt }]);
          // A coordinator killed after committing the result never answers: keep asking (its
          // replacement answers the replay with 200) until it is back, well past its restart.
          for (let tries = 0; tries < 600; tries++) {
            const res = await call(target(), "POST", `/tasks/${t.id}/result`, {
              worker_id: me,
              attempt: t.attempt,
              result_uri: `s3://out/${t.id}`,
              result_sha256: SHA,
            });
            if (res.status >= 500) bad5xx++;
            if (res.status === 200) {
              accepted.set(t.id, [...(accepted.get(t.id) ?? []), { worker: me, attempt: t.attempt }]);
              done++;
            }
            if (res.status !== 0) break;
            await new Promise((r) => setTimeout(r, 100));
          }
        }
      }
    };

    // Kill -9 one coordinator a few seconds in, then start it again on the same port.
    const chaos = (async () => {
      while (done < TOTAL / 4 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      const victim = coordinators[1];
      victim.proc.signal("SIGKILL");
      await victim.proc.exited;
      killed = true;
      await new Promise((r) => setTimeout(r, 500));
      const again = spawnCoordinator(victim.env);
      coordinators[1] = { ...victim, proc: again, base: await again.listening() };
    })();

    await Promise.all([chaos, ...Array.from({ length: 32 }, (_, w) => worker(w))]);
    expect(killed).toBe(true);
    expect(bad5xx).toBe(0);

    const probe = new pg.Client({ connectionString: db.url });
    await probe.connect();
    try {
      const { rows: statuses } = await probe.query(`SELECT status, count(*)::int AS n FROM tasks GROUP BY status`);
      expect(statuses).toEqual([{ status: "completed", n: TOTAL }]);
      const { rows: jobRows } = await probe.query(`SELECT status, count(*)::int AS n FROM jobs GROUP BY status`);
      expect(jobRows).toEqual([{ status: "completed", n: jobs.length }]);
      // Exactly one accepted (worker, attempt) per task, and it is the one the row holds.
      expect(accepted.size).toBe(TOTAL);
      const { rows } = await probe.query(`SELECT id, lease_owner, attempt FROM tasks`);
      for (const r of rows) {
        const a = accepted.get(r.id)!;
        expect(a).toHaveLength(1);
        expect(a[0]).toEqual({ worker: r.lease_owner, attempt: r.attempt });
      }
      // Fencing: every other (worker, attempt) that ever held the task is refused now.
      const stale = [...claims].flatMap(([id, cs]) =>
        cs
          .filter((c) => !(c.worker === accepted.get(id)![0].worker && c.attempt === accepted.get(id)![0].attempt))
          .map((c) => ({ id, ...c })),
      );
      for (const s of stale.slice(0, 200)) {
        const late = () =>
          call(coordinators[0].base, "POST", `/tasks/${s.id}/result`, {
            worker_id: s.worker,
            attempt: s.attempt,
            result_uri: "s3://late",
            result_sha256: SHA,
          });
        // Status 0 is a transport failure (a keep-alive connection the server closed as it was
        // reused, or a timeout on a loaded machine), not an answer: ask again.
        let res = await late();
        for (let i = 0; i < 3 && res.status === 0; i++) res = await late();
        expect(res.status).toBe(409);
      }
      const { rows: late } = await probe.query(`SELECT count(*)::int AS n FROM tasks WHERE result_uri = 's3://late'`);
      expect(late[0].n).toBe(0);
    } finally {
      await probe.end();
    }
  }, 540_000);
});

describe("workers that die", () => {
  it("an abandoned lease comes back with attempt + 1; a task whose every attempt dies fails with lease_expired and fails its job", async () => {
    const db = await database();
    const [c] = await startCoordinators(1, { DATABASE_URL: db.url });
    await call(c.base, "PUT", "/workloads/flaky", { lease_seconds: 1, max_attempts: 3 });
    const job = await call(c.base, "POST", "/jobs", { workload: "flaky", tasks: manyTasks(2) });
    const jobId = (job.body!.job as { id: string }).id;

    // Task 0: the first worker vanishes, the second completes it.
    const first = await call(c.base, "POST", "/tasks/claim", { worker_id: "vanishes", workloads: ["flaky"] });
    const t0 = (first.body!.tasks as Array<{ id: string; attempt: number; chunk_index: number }>)[0];
    expect(t0.attempt).toBe(1);
    await new Promise((r) => setTimeout(r, 1500));
    const again = await call(c.base, "POST", "/tasks/claim", { worker_id: "healthy", workloads: ["flaky"], max_tasks: 2 });
    const back = (again.body!.tasks as Array<{ id: string; attempt: number }>).find((t) => t.id === t0.id)!;
    expect(back.attempt).toBe(2);
    expect(
      (await call(c.base, "POST", `/tasks/${t0.id}/result`, { worker_id: "healthy", attempt: 2, result_uri: "s3://o", result_sha256: SHA }))
        .status,
    ).toBe(200);
    // The vanished worker's late result is refused.
    expect(
      (
        await call(c.base, "POST", `/tasks/${t0.id}/result`, {
          worker_id: "vanishes",
          attempt: 1,
          result_uri: "s3://o",
          result_sha256: SHA,
        })
      ).status,
    ).toBe(409);

    // Task 1: every attempt dies. The reaper (every 200 ms) and claims bring it back until none are left.
    const other = (again.body!.tasks as Array<{ id: string; attempt: number }>).find((t) => t.id !== t0.id)!;
    let attempts = other.attempt;
    for (let i = 0; i < 20 && attempts < 3; i++) {
      await new Promise((r) => setTimeout(r, 1200));
      const res = await call(c.base, "POST", "/tasks/claim", { worker_id: `dies-${i}`, workloads: ["flaky"] });
      if (res.status === 200) attempts = (res.body!.tasks as Array<{ attempt: number }>)[0].attempt;
    }
    expect(attempts).toBe(3);
    let status = "";
    for (let i = 0; i < 40 && status !== "JOB_STATUS_FAILED"; i++) {
      await new Promise((r) => setTimeout(r, 200));
      status = ((await call(c.base, "GET", `/jobs/${jobId}`)).body!.job as { status: string }).status;
    }
    expect(status).toBe("JOB_STATUS_FAILED");
    const probe = new pg.Client({ connectionString: db.url });
    await probe.connect();
    const { rows } = await probe.query(`SELECT status, error_code, attempt FROM tasks WHERE id = $1`, [other.id]);
    await probe.end();
    expect(rows[0]).toEqual({ status: "failed", error_code: "lease_expired", attempt: 3 });
  }, 60_000);
});

/**
 * A PostgreSQL cluster of the test's own, which it may stop and start, with a migrated database
 * "leasehold"; dir holds it (the caller removes it).
 */
async function ownCluster(prefix: string): Promise<{ dir: string; dataDir: string; port: number; cluster: EmbeddedDatabase; url: string }> {
  const dir = mkdtempSync(path.join(os.tmpdir(), prefix));
  chmodSync(dir, 0o755);
  const port = await freePort();
  const dataDir = path.join(dir, "db");
  const cluster = await startEmbeddedPostgres({ dataDir, port, persistent: true });
  try {
    const c0 = new pg.Client({ connectionString: cluster.url });
    await c0.connect();
    await c0.query("CREATE DATABASE leasehold");
    await c0.end();
    const url = cluster.urlFor("leasehold");
    await migrate(url, "up");
    return { dir, dataDir, port, cluster, url };
  } catch (err) {
    await cluster.stop().catch(() => {});
    throw err;
  }
}

describe("PostgreSQL restarts", () => {
  let pgDir: string | undefined;
  afterAll(() => {
    if (pgDir) rmSync(pgDir, { recursive: true, force: true });
  });

  it("calls fail fast with 503 while it is down, and the same coordinator recovers when it is back", async () => {
    const own = await ownCluster("leasehold-restart-");
    pgDir = own.dir;
    const { dataDir, port, url } = own;
    let cluster = own.cluster;
    try {
      const [c] = await startCoordinators(1, { DATABASE_URL: url, REQUEST_TIMEOUT_MS: "3000", PG_CONNECT_TIMEOUT_MS: "1000" });
      // Long enough to outlast the restart on a loaded machine: the leases taken before it are completed after it.
      await call(c.base, "PUT", "/workloads/restart", { lease_seconds: 60 });
      await call(c.base, "POST", "/jobs", { workload: "restart", tasks: manyTasks(40) });
      const first = await call(c.base, "POST", "/tasks/claim", { worker_id: "w", workloads: ["restart"], max_tasks: 10 });
      expect(first.status).toBe(200);

      await cluster.stop();
      const down = await call(c.base, "POST", "/tasks/claim", { worker_id: "w", workloads: ["restart"] });
      expect(down.status).toBe(503);
      expect(down.ms).toBeLessThan(3000);
      expect(down.requestId).toBeTruthy();
      expect(JSON.stringify(down.body)).not.toMatch(/ECONNREFUSED|terminat|postgres/i);
      const ready = await call(c.base, "GET", "/readyz");
      expect(ready.status).toBe(503);
      expect((await call(c.base, "GET", "/healthz")).status).toBe(200);

      cluster = await startEmbeddedPostgres({ dataDir, port, persistent: true });
      let readyAgain = 0;
      for (let i = 0; i < 50 && readyAgain !== 200; i++) {
        await new Promise((r) => setTimeout(r, 200));
        readyAgain = (await call(c.base, "GET", "/readyz")).status;
      }
      expect(readyAgain).toBe(200);
      // The run completes: the ten leased before the restart and the thirty still pending.
      for (const t of first.body!.tasks as Array<{ id: string; attempt: number }>) {
        expect(
          (
            await call(c.base, "POST", `/tasks/${t.id}/result`, {
              worker_id: "w",
              attempt: t.attempt,
              result_uri: "s3://o",
              result_sha256: SHA,
            })
          ).status,
        ).toBe(200);
      }
      let completed = 10;
      for (let i = 0; i < 100 && completed < 40; i++) {
        const res = await call(c.base, "POST", "/tasks/claim", { worker_id: "w", workloads: ["restart"], max_tasks: 10 });
        expect(res.status).toBe(200);
        for (const t of res.body!.tasks as Array<{ id: string; attempt: number }>) {
          expect(
            (
              await call(c.base, "POST", `/tasks/${t.id}/result`, {
                worker_id: "w",
                attempt: t.attempt,
                result_uri: "s3://o",
                result_sha256: SHA,
              })
            ).status,
          ).toBe(200);
          completed++;
        }
      }
      expect(completed).toBe(40);
      c.proc.signal("SIGTERM");
      expect((await c.proc.exited).code).toBe(0);
    } finally {
      await cluster.stop().catch(() => {});
    }
  }, 90_000);
});

/** `pg_ctl stop -m MODE` by hand (pg_ctl refuses to run as root): signal the postmaster, wait for it to go. */
async function stopPostgres(dataDir: string, mode: "fast" | "immediate"): Promise<void> {
  const pid = Number(readFileSync(path.join(dataDir, "postmaster.pid"), "utf8").split("\n")[0]);
  process.kill(pid, mode === "fast" ? "SIGINT" : "SIGQUIT");
  await until(() => {
    try {
      process.kill(pid, 0);
      return false;
    } catch {
      return true;
    }
  }, 30_000);
}

/** Polls cond every 50 ms until it holds; throws after timeoutMs. */
async function until(cond: () => boolean | Promise<boolean>, timeoutMs: number, what = "condition"): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe("PostgreSQL restarts under load", () => {
  let pgDir: string | undefined;
  afterAll(() => {
    if (pgDir) rmSync(pgDir, { recursive: true, force: true });
  });

  it("with workers, parked long polls, a watch stream and readiness probes running, fast and immediate restarts kill no coordinator and lose or double nothing", async () => {
    const own = await ownCluster("leasehold-restarts-");
    pgDir = own.dir;
    const { dataDir, port, url } = own;
    let cluster = own.cluster;
    try {
      const coordinators = await startCoordinators(3, {
        DATABASE_URL: url,
        PG_POOL_MAX: "4",
        REQUEST_TIMEOUT_MS: "3000",
        PG_CONNECT_TIMEOUT_MS: "1000",
      });
      const exits = coordinators.map((c) => c.proc.exited.then((e) => ({ ...e, stderr: c.proc.stderr() })));
      const base = (i: number) => coordinators[i % coordinators.length].base;
      expect((await call(base(0), "PUT", "/workloads/churn", { lease_seconds: 4, max_attempts: 20 })).status).toBe(200);
      expect((await call(base(0), "PUT", "/workloads/quiet", {})).status).toBe(200);
      const TOTAL = 3000;
      const created = await call(base(0), "POST", "/jobs", { workload: "churn", tasks: manyTasks(TOTAL) }, 60_000);
      expect(created.status).toBe(201);
      const jobId = (created.body!.job as { id: string }).id;

      const accepted = new Map<string, Claim[]>();
      const statuses = new Map<number, number>();
      const count = (s: number) => statuses.set(s, (statuses.get(s) ?? 0) + 1);
      let done = 0;
      let finished = false;
      const deadline = Date.now() + 240_000;
      const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

      // Workers: claim five, then one result per task, retried through outages until it is
      // accepted (200) or the lease has moved on (409: the task comes back to someone else).
      const worker = async (w: number) => {
        const me = `w${w}`;
        while (!finished && Date.now() < deadline) {
          const claim = await call(base(w), "POST", "/tasks/claim", { worker_id: me, workloads: ["churn"], max_tasks: 5 });
          count(claim.status);
          if (claim.status !== 200) {
            await pause(claim.status === 204 ? 20 : 100);
            continue;
          }
          for (const t of claim.body!.tasks as Array<{ id: string; attempt: number }>) {
            for (;;) {
              const res = await call(base(w), "POST", `/tasks/${t.id}/result`, {
                worker_id: me,
                attempt: t.attempt,
                result_uri: `s3://out/${t.id}`,
                result_sha256: SHA,
              });
              count(res.status);
              if (res.status === 200) {
                accepted.set(t.id, [...(accepted.get(t.id) ?? []), { worker: me, attempt: t.attempt }]);
                done++;
              }
              if (res.status === 200 || res.status === 409 || Date.now() > deadline) break;
              await pause(100);
            }
          }
        }
      };
      // Long polls parked on a workload that never gets work, on every coordinator.
      const parked = async (i: number) => {
        while (!finished && Date.now() < deadline) {
          const res = await call(base(i), "POST", "/tasks/claim", { worker_id: `idle${i}`, workloads: ["quiet"], wait_seconds: 2 });
          count(res.status);
          if (res.status !== 204) await pause(100);
        }
      };
      // Readiness probes, as a load balancer would send them.
      const readiness = coordinators.map(() => 0);
      const probe = async (i: number) => {
        while (!finished && Date.now() < deadline) {
          readiness[i] = (await call(base(i), "GET", "/readyz", undefined, 2000)).status;
          await pause(100);
        }
      };
      // A WatchJob stream (SSE), reopened whenever an outage ends it, until it reports the job final.
      let watchFinal = "";
      let watchOpens = 0;
      const watch = async () => {
        while (!watchFinal && !finished && Date.now() < deadline) {
          watchOpens++;
          await new Promise<void>((resolve) => {
            const req = http.get(new URL(`/jobs/${jobId}/events`, base(watchOpens)), { agent: false }, (res) => {
              let buf = "";
              res.setEncoding("utf8");
              res.on("data", (d: string) => {
                buf += d;
                const m = /"status":"(JOB_STATUS_(?:COMPLETED|FAILED|CANCELLED))"/.exec(buf);
                if (m) watchFinal = m[1];
                buf = buf.slice(-200);
              });
              res.on("end", resolve);
              res.on("error", () => resolve());
            });
            req.on("error", () => resolve());
          });
          if (!watchFinal) await pause(200);
        }
      };
      // A coordinator that exits fails the test at once, with what it printed.
      const alive = () => {
        const dead = coordinators.find((c) => c.proc.child.exitCode !== null || c.proc.child.signalCode !== null);
        if (dead)
          throw new Error(
            `a coordinator exited (${dead.proc.child.exitCode ?? dead.proc.child.signalCode}):\n${dead.proc.stderr().slice(-3000)}`,
          );
        return true;
      };
      const allReady = (status: number) => alive() && readiness.every((s) => s === status);

      const chaos = (async () => {
        for (const mode of ["fast", "immediate", "fast", "immediate"] as const) {
          const before = done;
          await until(() => alive() && (done >= before + 300 || Date.now() > deadline), 120_000, "progress before a restart");
          await stopPostgres(dataDir, mode);
          await until(() => allReady(503), 30_000, `every coordinator unready after -m ${mode}`);
          cluster = await startEmbeddedPostgres({ dataDir, port, persistent: true });
          await until(() => allReady(200), 30_000, `every coordinator ready again after -m ${mode}`);
        }
      })();

      const watching = watch();
      const load = Promise.all([
        ...Array.from({ length: 12 }, (_, w) => worker(w)),
        ...coordinators.map((_, i) => parked(i)),
        ...coordinators.map((_, i) => probe(i)),
      ]);
      // On a failure, stop the load before reporting it.
      await chaos.catch((err: unknown) => {
        finished = true;
        throw err;
      });
      await until(() => done >= TOTAL || Date.now() > deadline, 240_000, "every task completed");
      await until(() => watchFinal !== "" || Date.now() > deadline, 30_000, "the watch stream to see the job final");
      finished = true;
      await Promise.all([load, watching]);

      // Every coordinator is still the process that was started, and each is ready.
      for (const c of coordinators) expect(c.proc.child.exitCode, c.proc.stderr()).toBeNull();
      expect(await Promise.race([Promise.all(exits), pause(10).then(() => "running")])).toBe("running");
      for (const c of coordinators) expect((await call(c.base, "GET", "/readyz")).status).toBe(200);
      expect(watchFinal).toBe("JOB_STATUS_COMPLETED");
      // Outages are 503 (or 504 at a deadline), never a 500.
      expect([...statuses.keys()].filter((s) => s >= 500 && s !== 503 && s !== 504)).toEqual([]);
      expect(statuses.get(0) ?? 0).toBe(0);

      const check = new pg.Client({ connectionString: url });
      await check.connect();
      try {
        const { rows } = await check.query(`SELECT id, status, lease_owner, attempt FROM tasks`);
        expect(rows.filter((r) => r.status !== "completed")).toEqual([]);
        // Each task accepted exactly once, and the row holds that acceptance.
        expect(accepted.size).toBe(TOTAL);
        for (const r of rows) expect(accepted.get(r.id)).toEqual([{ worker: r.lease_owner, attempt: r.attempt }]);
        const { rows: job } = await check.query(`SELECT status FROM jobs WHERE id = $1`, [jobId]);
        expect(job[0].status).toBe("completed");
      } finally {
        await check.end();
      }
    } finally {
      await cluster.stop().catch(() => {});
    }
  }, 300_000);
});

describe("overload", () => {
  it("with the pool busy, requests get 503/504 within their bound, never a hang or a 500, and the pool recovers", async () => {
    const db = await database();
    const [c] = await startCoordinators(1, {
      DATABASE_URL: db.url,
      PG_POOL_MAX: "2",
      PG_CONNECT_TIMEOUT_MS: "500",
      REQUEST_TIMEOUT_MS: "1500",
      PG_STATEMENT_TIMEOUT_MS: "10000",
    });
    await call(c.base, "PUT", "/workloads/busy", {});
    await call(c.base, "POST", "/jobs", { workload: "busy", tasks: manyTasks(10) });
    // Hold a lock every claim needs, so each claim occupies a pooled connection until it is cancelled.
    const locker = new pg.Client({ connectionString: db.url });
    await locker.connect();
    await locker.query("BEGIN");
    await locker.query("LOCK TABLE tasks IN ACCESS EXCLUSIVE MODE");
    try {
      const answers = await Promise.all(
        Array.from({ length: 12 }, (_, i) => call(c.base, "POST", "/tasks/claim", { worker_id: `o${i}`, workloads: ["busy"] }, 10_000)),
      );
      for (const a of answers) {
        expect([503, 504, 429]).toContain(a.status);
        expect(a.ms).toBeLessThan(4000);
        expect(a.requestId).toBeTruthy();
      }
      expect(answers.some((a) => a.status === 504)).toBe(true);
      // A Connect deadline shorter than REQUEST_TIMEOUT_MS is honoured: answered at it, query cancelled.
      const t0 = Date.now();
      const res = await fetch(`${c.base}/leasehold.queue.v1.QueueService/ClaimTasks`, {
        method: "POST",
        headers: { "content-type": "application/json", "connect-timeout-ms": "300" },
        body: JSON.stringify({ worker_id: "short", workloads: ["busy"] }),
      });
      expect(Date.now() - t0).toBeLessThan(1400);
      expect(((await res.json()) as { code: string }).code).toBe("deadline_exceeded");
      // So is a gRPC deadline (grpc-timeout), as grpcio sends it.
      const grpc = createClient(QueueService, createGrpcTransport({ baseUrl: c.base }));
      const t1 = Date.now();
      const err = await grpc.claimTasks({ workerId: "short-grpc", workloads: ["busy"] }, { timeoutMs: 300 }).then(
        () => undefined,
        (e: unknown) => ConnectError.from(e),
      );
      expect(Date.now() - t1).toBeLessThan(1400);
      expect(err?.code).toBe(Code.DeadlineExceeded);
      // The deadlines cancelled the claims: none of them is still waiting on the lock.
      await new Promise((r) => setTimeout(r, 500));
      const { rows } = await locker.query(
        `SELECT count(*)::int AS n FROM pg_stat_activity
         WHERE datname = current_database() AND application_name = 'leasehold' AND wait_event_type = 'Lock' AND query LIKE '%CROSS JOIN LATERAL%'`,
      );
      expect(rows[0].n).toBe(0);
    } finally {
      await locker.query("ROLLBACK");
      await locker.end();
    }
    // The pool is healthy afterwards.
    const after = await call(c.base, "POST", "/tasks/claim", { worker_id: "after", workloads: ["busy"], max_tasks: 10 });
    expect(after.status).toBe(200);
    expect((after.body!.tasks as unknown[]).length).toBe(10);
  }, 60_000);
});
