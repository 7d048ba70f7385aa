// Exactly one job per tick across coordinators: three real coordinator processes on one database
// run the scheduler against a per-second schedule; one is SIGKILLed while the ticks go on. Every
// tick from the first to the last must have exactly one job: no gap (a tick the killed one held
// is fired by another) and no double (the tick's unique key and its job commit together). Then a
// real outage: the only coordinator killed, none for 6 s, a new one started; each catch-up policy
// fires what it says of the missed ticks.
import pg from "pg";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { createTestDatabase, type TestDatabase } from "../support/db.js";
import { freePort } from "../support/global-setup.js";
import { killAll, spawnCoordinator, type Spawned } from "../support/process.js";
import { sha } from "../support/queue.js";
import { restCall } from "../support/rest.js";

let db: TestDatabase | undefined;
let client: pg.Client | undefined;

afterEach(async () => {
  await killAll();
});
afterAll(async () => {
  await client?.end();
  await db?.drop();
});

async function startCoordinator(url: string): Promise<{ proc: Spawned; base: string }> {
  const port = await freePort();
  const proc = spawnCoordinator({ DATABASE_URL: url, PORT: String(port), PG_POOL_MAX: "4" });
  return { proc, base: await proc.listening() };
}

/** Polls until `fn` is true or `timeoutMs` passes (then fails with `what`). */
async function until(what: string, fn: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await fn())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe("a per-second schedule on three coordinators", () => {
  it("fires every tick exactly once, with one coordinator SIGKILLed mid-run", async () => {
    db = await createTestDatabase();
    client = new pg.Client({ connectionString: db.url });
    await client.connect();
    const coordinators = await Promise.all([0, 1, 2].map(() => startCoordinator(db!.url)));
    const [a, victim] = coordinators;
    expect((await restCall(a.base, "PUT", "/workloads/tick", {})).status).toBe(200);
    const put = await restCall(a.base, "PUT", "/schedules/every-second", {
      cron: "* * * * * *",
      // Every missed tick caught up, so a machine too loaded to keep up within the grace still shows no gap.
      catch_up: "all",
      max_catch_up: 1000,
      job: { workload: "tick", input_uri: "s3://in/tick", input_sha256: sha("tick") },
    });
    expect(put.status, put.text).toBe(200);

    const count = async () =>
      (await client!.query(`SELECT count(*)::int AS n FROM jobs WHERE schedule_name = 'every-second'`)).rows[0].n as number;
    await until("5 ticks", async () => (await count()) >= 5, 30_000);
    victim.proc.signal("SIGKILL");
    const killedAt = await count();
    await until("8 more ticks after the kill", async () => (await count()) >= killedAt + 8, 30_000);
    expect((await restCall(a.base, "POST", "/schedules/every-second/pause", {})).status).toBe(200);
    // A pass that took the schedule before the pause may still commit its tick; wait for it (a
    // transaction holding the row) to end before reading.
    await client.query(`SELECT 1 FROM schedules WHERE name = 'every-second' FOR UPDATE`);

    const { rows: perTick } = await client.query(`
      SELECT extract(epoch FROM schedule_fire_at)::bigint AS t, count(*)::int AS n
      FROM jobs WHERE schedule_name = 'every-second' GROUP BY 1 ORDER BY 1`);
    expect(perTick.length).toBeGreaterThanOrEqual(13);
    expect(perTick.filter((r) => r.n !== 1)).toEqual([]); // no double
    const seconds = perTick.map((r) => Number(r.t));
    const gaps = seconds.slice(1).flatMap((t, i) => (t - seconds[i] === 1 ? [] : [[seconds[i], t]]));
    expect(gaps).toEqual([]); // no gap
    const { rows: ticks } = await client.query(
      `SELECT outcome, count(*)::int AS n FROM schedule_ticks WHERE schedule_name = 'every-second' GROUP BY outcome`,
    );
    expect(ticks).toEqual([{ outcome: "fired", n: perTick.length }]);
    // Each job is the template's: one task, pending.
    const { rows: tasks } = await client.query(
      `SELECT count(*)::int AS n FROM tasks t JOIN jobs j ON j.id = t.job_id WHERE j.schedule_name = 'every-second'`,
    );
    expect(tasks[0].n).toBe(perTick.length);
    // The survivors' metrics count the ticks they fired: together at least the ticks after the kill.
    let fired = 0;
    for (const c of coordinators.filter((c) => c !== victim)) {
      const metrics = await (await fetch(`${c.base}/metrics`)).text();
      const m = /leasehold_schedule_ticks_fired_total\{schedule="every-second"\} (\d+)/.exec(metrics);
      fired += m ? Number(m[1]) : 0;
    }
    expect(fired).toBeGreaterThanOrEqual(perTick.length - killedAt - 1);
  });

  it("catch-up after a real outage: the coordinator is SIGKILLed, stays down 6 s, restarts; skip fires no missed tick, one the latest, all the latest 3", async () => {
    db ??= await createTestDatabase();
    if (!client) {
      client = new pg.Client({ connectionString: db.url });
      await client.connect();
    }
    const first = await startCoordinator(db.url);
    expect((await restCall(first.base, "PUT", "/workloads/outage", {})).status).toBe(200);
    const job = { workload: "outage", input_uri: "s3://in/o", input_sha256: sha("o") };
    for (const policy of ["skip", "one", "all"]) {
      const put = await restCall(first.base, "PUT", `/schedules/outage-${policy}`, {
        cron: "* * * * * *",
        catch_up: policy,
        max_catch_up: 3,
        job,
      });
      expect(put.status, put.text).toBe(200);
    }
    const jobs = async (policy: string) =>
      (await client!.query(`SELECT count(*)::int AS n FROM jobs WHERE schedule_name = $1`, [`outage-${policy}`])).rows[0].n as number;
    // One query at a time on the one client (pg 9 refuses a query queued behind another).
    const counts = async () => {
      const n: number[] = [];
      for (const policy of ["skip", "one", "all"]) n.push(await jobs(policy));
      return n;
    };
    await until("two ticks of each", async () => (await counts()).every((n) => n >= 2), 30_000);
    first.proc.signal("SIGKILL");
    await first.proc.exited;
    const before = (await client.query(`SELECT max(schedule_fire_at) AS last FROM jobs WHERE schedule_name LIKE 'outage-%'`)).rows[0]
      .last as Date;
    // The outage: no coordinator for 6 s (a per-second schedule misses 6 ticks and more while the next one starts).
    await new Promise((r) => setTimeout(r, 6000));
    await startCoordinator(db.url);
    await until(
      "a tick after the restart for each",
      async () =>
        (
          await client!.query(
            `SELECT count(DISTINCT schedule_name)::int AS n FROM jobs WHERE schedule_name LIKE 'outage-%' AND schedule_fire_at > $1::timestamptz + interval '8 seconds'`,
            [before],
          )
        ).rows[0].n === 3,
      60_000,
    );
    const caughtUp: Record<string, number> = {};
    for (const policy of ["skip", "one", "all"]) {
      // The jobs of ticks in the outage: fired by the restarted coordinator's first pass for ticks
      // more than the grace (500 ms) before it.
      const { rows } = await client.query(
        `WITH after AS (SELECT * FROM jobs WHERE schedule_name = $1 AND schedule_fire_at > $2)
         SELECT count(*)::int AS n FROM after WHERE schedule_fire_at < (SELECT min(created_at) FROM after) - interval '500 milliseconds'`,
        [`outage-${policy}`, before],
      );
      caughtUp[policy] = rows[0].n;
      const { rows: doubles } = await client.query(
        `SELECT schedule_fire_at FROM jobs WHERE schedule_name = $1 GROUP BY 1 HAVING count(*) > 1`,
        [`outage-${policy}`],
      );
      expect(doubles).toEqual([]);
    }
    expect(caughtUp).toEqual({ skip: 0, one: 1, all: 3 });
  });
});
