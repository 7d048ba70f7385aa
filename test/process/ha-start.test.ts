// The HA rig's start (deploy/ha), in the parts that run without Patroni: where its ports lie, how
// it waits for a leader, and its database setup when the setup's own session is cut. The whole
// rig runs in `npm run test:ha`.
import { randomUUID } from "node:crypto";
import net from "node:net";
import pg from "pg";
import { afterAll, describe, expect, inject, it } from "vitest";
import { layout, RIG_PORT_SPAN, rigPorts } from "../../deploy/ha/config.js";
import { chooseBasePort, DEFAULT_BASE_PORT, ephemeralRange, overlapsEphemeral, TEST_BASE_PORT } from "../../deploy/ha/ports.js";
import { setUpAppDatabase, stableLeader, type LeaderObservation } from "../../deploy/ha/setup.js";

const passwords = { superuser: "s", replication: "r", app: "a" };

describe("the rig's ports", () => {
  // The kernel gives outgoing connections local ports from this range: a rig listening inside it
  // found its port held by a client connection (in TIME-WAIT) now and then.
  const range = ephemeralRange();

  it("lie below the kernel's ephemeral range, for ha:up and for test:ha", () => {
    expect(range.low).toBeGreaterThan(1024);
    for (const base of [DEFAULT_BASE_PORT, TEST_BASE_PORT]) {
      const ports = rigPorts(layout(base, "/tmp/x", 3, 3, passwords));
      expect(ports.filter((p) => p >= range.low && p <= range.high)).toEqual([]);
      expect(Math.max(...ports)).toBeLessThan(base + RIG_PORT_SPAN);
      expect(overlapsEphemeral(base, range)).toBe(false);
    }
  });

  it("an operator's base inside the ephemeral range is refused, naming the range", async () => {
    const inside = range.low + 100;
    await expect(chooseBasePort({ explicit: inside, preferred: DEFAULT_BASE_PORT })).rejects.toThrow(
      new RegExp(`ephemeral range ${range.low}-${range.high}`),
    );
  });

  it("when a port of the preferred block is taken, the rig moves to a free block below the range", async () => {
    const preferred = await chooseBasePort({ preferred: DEFAULT_BASE_PORT + 1000 });
    const holder = net.createServer();
    await new Promise<void>((resolve) => holder.listen(preferred + 12, "127.0.0.1", resolve));
    try {
      await expect(chooseBasePort({ explicit: preferred, preferred })).rejects.toThrow(`port ${preferred + 12} is in use`);
      const moved = await chooseBasePort({ preferred });
      expect(moved).not.toBe(preferred);
      expect(moved + RIG_PORT_SPAN - 1).toBeLessThan(range.low);
      expect(preferred + 12 >= moved && preferred + 12 < moved + RIG_PORT_SPAN).toBe(false);
    } finally {
      await new Promise((r) => holder.close(r));
    }
  });
});

describe("waiting for a stable leader", () => {
  const looks = (seq: Array<LeaderObservation | undefined | Error>) => {
    let i = 0;
    const observe = async () => {
      const v = seq[Math.min(i++, seq.length - 1)];
      if (v instanceof Error) throw v;
      return v;
    };
    return { observe, count: () => i };
  };

  it("takes a leader only once the same one, on the same timeline, was seen the given times in a row", async () => {
    const a = { leader: "pg1", timeline: 1 };
    const b = { leader: "pg2", timeline: 2 };
    // pg1 twice, a look without a whole cluster, pg1 again, then pg2 (a failover) until stable.
    const seq = looks([a, a, undefined, a, new Error("no member answers"), a, a, b, b, b]);
    const got = await stableLeader(seq.observe, { times: 3, everyMs: 0, timeoutMs: 60_000 });
    expect(got).toEqual(b);
    expect(seq.count()).toBe(10);
  });

  it("gives up after its timeout, saying what it saw last", async () => {
    const seq = looks([undefined]);
    await expect(stableLeader(seq.observe, { times: 2, everyMs: 5, timeoutMs: 50 })).rejects.toThrow(
      /stable leader \(last: no leader with a streaming synchronous standby\)/,
    );
  });
});

describe("the rig's database setup", () => {
  const admin = inject("adminDatabaseUrl");
  const created: Array<{ role: string; database: string }> = [];

  const target = () => {
    const id = randomUUID().replace(/-/g, "").slice(0, 12);
    const app = { role: `ha_role_${id}`, password: `pw_${id}`, database: `ha_db_${id}`, statementTimeoutMs: 5000 };
    created.push(app);
    const u = new URL(admin);
    u.username = app.role;
    u.password = app.password;
    u.pathname = `/${app.database}`;
    return { app, appUrl: u.toString() };
  };

  afterAll(async () => {
    const c = new pg.Client({ connectionString: admin });
    await c.connect();
    try {
      for (const { role, database } of created) {
        await c.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`);
        await c.query(`DROP ROLE IF EXISTS ${role}`);
      }
    } finally {
      await c.end();
    }
  });

  /** The setup's own session, cut after `step` on the first attempt (as HAProxy cuts a member's). */
  const cutOnce =
    (at: string) =>
    async (step: string, client: pg.Client, attempt: number): Promise<void> => {
      if (step !== at || attempt !== 1) return;
      await client.query("SELECT pg_terminate_backend(pg_backend_pid())");
    };

  async function facts(app: { role: string; database: string }) {
    const c = new pg.Client({ connectionString: admin });
    await c.connect();
    try {
      const role = await c.query<{ settings: string[] }>(
        `SELECT s.setconfig AS settings FROM pg_roles r JOIN pg_db_role_setting s ON s.setrole = r.oid AND s.setdatabase = 0 WHERE r.rolname = $1`,
        [app.role],
      );
      const db = await c.query("SELECT 1 FROM pg_database WHERE datname = $1", [app.database]);
      return { settings: role.rows[0]?.settings ?? [], database: db.rowCount };
    } finally {
      await c.end();
    }
  }

  it("a session cut during the setup fails it without a retry", async () => {
    const { app, appUrl } = target();
    await expect(setUpAppDatabase(admin, appUrl, app, { attempts: 1, afterStep: cutOnce("role") })).rejects.toThrow(
      /terminat|Connection terminated/i,
    );
  });

  for (const step of ["role", "settings", "database"]) {
    it(`a session cut after the ${step} step is set up again, and the setup completes`, async () => {
      const { app, appUrl } = target();
      const attempts = await setUpAppDatabase(admin, appUrl, app, { attempts: 3, afterStep: cutOnce(step) });
      expect(attempts).toBe(2);
      const f = await facts(app);
      expect(f.database).toBe(1);
      expect(f.settings).toEqual(expect.arrayContaining(["statement_timeout=5000", "plan_cache_mode=force_generic_plan"]));
      // Migrated: the schema is there, and the setup run once more changes nothing.
      const c = new pg.Client({ connectionString: appUrl });
      await c.connect();
      try {
        const before = (await c.query("SELECT count(*)::int AS n FROM pgmigrations")).rows[0].n as number;
        expect(before).toBeGreaterThan(0);
        expect(await setUpAppDatabase(admin, appUrl, app, { attempts: 1 })).toBe(1);
        expect((await c.query("SELECT count(*)::int AS n FROM pgmigrations")).rows[0].n).toBe(before);
      } finally {
        await c.end();
      }
    });
  }
});
