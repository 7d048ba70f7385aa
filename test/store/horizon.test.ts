// The horizon watch names a session that holds the MVCC horizon back: a real session holds a
// REPEATABLE READ snapshot (taken by its first statement), and the watch's sample, its warning,
// its metric and a coordinator's /readyz name that session's pid, while readiness stays 200.
import pg from "pg";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HorizonWatch, type HorizonReport } from "../../src/queue/horizon-watch.js";
import { createPool } from "../../src/store/postgres/sql/db.js";
import { HOT_TABLES, sampleHorizon } from "../../src/store/postgres/background/horizon.js";
import { Metrics } from "../../src/telemetry/metrics.js";
import { createTestDatabase, type TestDatabase } from "../support/db.js";
import { killAll, spawnCoordinator } from "../support/process.js";

let db: TestDatabase;
let pool: pg.Pool;

beforeAll(async () => {
  db = await createTestDatabase();
  pool = createPool({ connectionString: db.url, max: 2, statementTimeoutMs: 10_000, connectTimeoutMs: 10_000 });
});
afterAll(async () => {
  await killAll();
  await pool?.end();
  await db?.drop();
});

/** A session of its own holding a REPEATABLE READ snapshot from its first statement on, until release(). */
async function holdSnapshot(applicationName: string): Promise<{ pid: number; release(): Promise<void> }> {
  const c = new pg.Client({ connectionString: db.url, application_name: applicationName });
  c.on("error", () => {});
  await c.connect();
  await c.query("BEGIN ISOLATION LEVEL REPEATABLE READ");
  const { rows } = await c.query<{ pid: number }>("SELECT pg_backend_pid() AS pid, count(*) FROM tasks");
  return {
    pid: rows[0].pid,
    release: async () => {
      await c.query("COMMIT");
      await c.end();
    },
  };
}

/** Polls `probe` until it returns a value (not undefined), at most timeoutMs; fails with the last seen state. */
async function until<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 20_000): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const got = await probe();
    if (got !== undefined) return got;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

interface Line {
  level: number;
  msg: string;
  [k: string]: unknown;
}

function capturingLogger() {
  const lines: Line[] = [];
  const logger = pino({ level: "info" }, { write: (s: string) => void lines.push(JSON.parse(s) as Line) });
  return { logger, lines };
}

describe("horizon watch", () => {
  it("samples the session that holds the oldest snapshot, with its pid, application_name and state", async () => {
    const holder = await holdSnapshot("horizon-report");
    try {
      const sample = await sampleHorizon(pool);
      expect(sample.holder).toMatchObject({ kind: "session", pid: holder.pid, name: "horizon-report", state: "idle in transaction" });
      expect(sample.holder?.ageSeconds).toBeGreaterThanOrEqual(0);
      expect(sample.holder?.query).toContain("pg_backend_pid()");
      expect(sample.tables.map((t) => t.table).sort()).toEqual([...HOT_TABLES].sort());
    } finally {
      await holder.release();
    }
    // Let go: nothing holds a snapshot older than the sampler's own but short statements elsewhere.
    const after = await sampleHorizon(pool);
    expect(after.holder?.pid).not.toBe(holder.pid);
  });

  it("warns once naming the session past the threshold, sets the metric, notes it for /readyz, and says when it lets go", async () => {
    const { logger, lines } = capturingLogger();
    const metrics = new Metrics({ logger });
    const reports: HorizonReport[] = [];
    const watch = new HorizonWatch({ sampleHorizon: (o) => sampleHorizon(pool, o) }, logger, metrics, {
      warnAfterMs: 300,
      intervalMs: 50,
      onSample: (s) => void (s.report && reports.push(s.report)),
    });
    const holder = await holdSnapshot("horizon-held");
    watch.start();
    try {
      const warning = await until("the warning", async () =>
        lines.find((l) => l.level === 40 && l.pid === holder.pid && /MVCC horizon has been held back/.test(l.msg)),
      );
      expect(warning).toMatchObject({ application_name: "horizon-held", state: "idle in transaction", holder_kind: "session" });
      expect(warning.age_seconds).toBeGreaterThanOrEqual(0);
      expect(String(warning.query)).toContain("pg_backend_pid()");
      expect(warning.msg).toContain(`session pid ${holder.pid}`);

      const text = await metrics.render();
      const series = text.split("\n").find((l) => l.startsWith("leasehold_mvcc_horizon_holder_seconds{"));
      expect(series).toContain(`pid="${holder.pid}"`);
      expect(series).toContain('application_name="horizon-held"');
      expect(series).toContain('state="idle in transaction"');
      expect(Number(/^leasehold_mvcc_horizon_held_seconds (\S+)$/m.exec(text)?.[1])).toBeGreaterThanOrEqual(0.3);
      expect(text).toMatch(/leasehold_table_dead_tuples\{table="tasks"\} \d+/);
      expect(watch.note()).toContain(`session pid ${holder.pid}`);

      // More samples of the same holding: still one warning.
      const seen = reports.length;
      await until("two more samples", async () => (reports.length >= seen + 2 ? true : undefined));
      expect(lines.filter((l) => l.level === 40 && l.pid === holder.pid)).toHaveLength(1);
    } finally {
      await holder.release();
    }
    const released = await until("the release line", async () =>
      lines.find((l) => l.level === 30 && l.pid === holder.pid && /no longer held back/.test(l.msg)),
    );
    expect(released.application_name).toBe("horizon-held");
    await until("a sample without that holder past the threshold", async () => (watch.note() === undefined ? true : undefined));
    await watch.stop();
    expect((await metrics.render()).includes(`pid="${holder.pid}"`)).toBe(false);
  });

  it("a coordinator with a small threshold logs the warning naming the pid, shows it in /metrics, and /readyz stays 200 with the note", async () => {
    const holder = await holdSnapshot("nightly-report");
    try {
      const p = spawnCoordinator({ DATABASE_URL: db.url, PORT: "0", HORIZON_WARN_AFTER_MS: "500" });
      const url = await p.listening();
      const warning = await until("the coordinator's warning", async () =>
        p
          .stdout()
          .split("\n")
          .filter((l) => l.startsWith("{"))
          .map((l) => JSON.parse(l) as Line)
          .find((l) => l.pid === holder.pid && /MVCC horizon has been held back/.test(l.msg)),
      );
      expect(warning).toMatchObject({ level: 40, application_name: "nightly-report", state: "idle in transaction" });

      const metrics = await (await fetch(`${url}/metrics`)).text();
      expect(metrics).toMatch(
        new RegExp(
          `leasehold_mvcc_horizon_holder_seconds\\{kind="session",pid="${holder.pid}",application_name="nightly-report",state="idle in transaction"\\} [0-9.]+`,
        ),
      );
      const ready = await fetch(`${url}/readyz`);
      expect(ready.status).toBe(200);
      const body = (await ready.json()) as { status: string; detail?: string };
      expect(body.status).toBe("ready");
      expect(body.detail).toContain(`session pid ${holder.pid}`);
      expect(body.detail).toContain("nightly-report");

      // The coordinator only reports: the session is still there and still in its transaction.
      const { rows } = await pool.query<{ state: string }>("SELECT state FROM pg_stat_activity WHERE pid = $1", [holder.pid]);
      expect(rows).toEqual([{ state: "idle in transaction" }]);
    } finally {
      await holder.release();
    }
  });
});
