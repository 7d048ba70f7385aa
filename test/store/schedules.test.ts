// Periodic schedules in one process against real PostgreSQL: PutSchedule and the other schedule
// RPCs over REST, gRPC, gRPC-Web and Connect; bad input answered 400 / INVALID_ARGUMENT naming
// the field with nothing written; the scheduler's passes (called one at a time here, so each
// tick's outcome is asserted on rows): catch-up after a simulated outage, overlap, a tick whose
// transaction fails half-way; and the cron arithmetic across DST changes. Several coordinator
// processes racing for the same ticks are schedules-race.test.ts.
import { Code, createClient, type Client } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { QueueService } from "../../gen/leasehold/queue/v1/queue_pb.js";
import { CronSchedule, planTicks } from "../../src/queue/schedule-rules.js";
import type { QueueObserver } from "../../src/queue/service.js";
import { NEXT_SCHEDULE_DUE, TAKE_DUE_SCHEDULE } from "../../src/store/postgres/background/schedule-ticks.js";
import { PostgresQueue } from "../../src/store/postgres/store.js";
import { sha, queueFixture, type QueueFixture } from "../support/queue.js";
import { restCall } from "../support/rest.js";
import { rpcError } from "../support/rpc.js";
import { apiServerFixture, type ApiServerFixture } from "../support/api-server.js";

let pool: pg.Pool;
let fx: QueueFixture;
let api: ApiServerFixture;
let base: string;
let queue: PostgresQueue;
let clients: Record<string, Client<typeof QueueService>>;
/** What the scheduler's observer was told. */
const ticks: { schedule: string; outcome: string; count: number }[] = [];

const W = "nightly";
const SCHEMA_W = "typed";
const TEMPLATE = { workload: W, input_uri: "s3://in/report", input_sha256: sha("report") };

async function snapshot(): Promise<string> {
  const { rows } = await pool.query(`
    SELECT (SELECT count(*) FROM jobs) AS jobs, (SELECT count(*) FROM schedule_ticks) AS ticks,
      (SELECT json_agg(s ORDER BY name) FROM (SELECT name, cron, timezone, job, paused, next_fire_at FROM schedules) s) AS schedules`);
  return JSON.stringify(rows[0]);
}

beforeAll(async () => {
  const observer: QueueObserver = {
    tasksClaimed() {},
    tasksCompleted() {},
    taskFailed() {},
    leasesExpired() {},
    scheduleTicks(schedule, outcome, count) {
      ticks.push({ schedule, outcome, count });
    },
  };
  // No grace: a tick found due after its time is missed, so each catch-up case is exact.
  fx = await queueFixture(
    {
      defaultLeaseSeconds: 60,
      defaultMaxAttempts: 3,
      maxTasksPerJob: 1000,
      observer,
      scheduler: { graceMs: 0 },
    },
    { max: 6 },
  );
  pool = fx.pool;
  queue = fx.queue;
  api = await apiServerFixture({ queue, maxBodyBytes: 1 << 20, requestTimeoutMs: 10_000 });
  base = api.base;
  clients = {
    grpc: createClient(QueueService, createGrpcTransport({ baseUrl: base })),
    "grpc-web": createClient(QueueService, createGrpcWebTransport({ baseUrl: base, httpVersion: "1.1" })),
    connect: createClient(QueueService, createConnectTransport({ baseUrl: base, httpVersion: "1.1" })),
  };
  await queue.putWorkload({ name: W });
  await queue.putWorkload({
    name: SCHEMA_W,
    parametersSchema: { type: "object", properties: { day: { type: "string" } }, required: ["day"] },
  });
});

afterAll(async () => {
  await api?.close();
  await fx?.close();
});

describe("the cron arithmetic (croner)", () => {
  it("a 02:30 daily job runs once on a spring-forward day (at 03:00, the first valid time) and once on a fall-back day", () => {
    const cron = new CronSchedule("30 2 * * *", "America/New_York");
    // 2026-03-08: clocks go from 02:00 EST to 03:00 EDT; 02:30 does not exist.
    expect(cron.nextN(3, new Date("2026-03-07T00:00:00Z")).map((d) => d.toISOString())).toEqual([
      "2026-03-07T07:30:00.000Z", // 02:30 EST
      "2026-03-08T07:00:00.000Z", // 03:00 EDT, once
      "2026-03-09T06:30:00.000Z", // 02:30 EDT
    ]);
    // 2026-11-01: 01:30 happens twice (EDT, then EST); a 01:30 job runs at the first only.
    const early = new CronSchedule("30 1 * * *", "America/New_York");
    expect(early.nextN(3, new Date("2026-10-31T12:00:00Z")).map((d) => d.toISOString())).toEqual([
      "2026-11-01T05:30:00.000Z",
      "2026-11-02T06:30:00.000Z",
      "2026-11-03T06:30:00.000Z",
    ]);
    // In Berlin the same: 2026-03-29 has no 02:30 (runs at 03:00 CEST).
    const berlin = new CronSchedule("30 2 * * *", "Europe/Berlin");
    expect(berlin.nextN(2, new Date("2026-03-28T12:00:00Z")).map((d) => d.toISOString())).toEqual([
      "2026-03-29T01:00:00.000Z",
      "2026-03-30T00:30:00.000Z",
    ]);
  });

  it("an optional seconds field; the catch-up plan of a per-second schedule", () => {
    const cron = new CronSchedule("*/15 * * * * *", "UTC");
    expect(cron.nextN(2, new Date("2026-01-01T00:00:01Z")).map((d) => d.toISOString())).toEqual([
      "2026-01-01T00:00:15.000Z",
      "2026-01-01T00:00:30.000Z",
    ]);
    const every = new CronSchedule("* * * * * *", "UTC");
    const now = new Date("2026-01-01T00:01:00.400Z");
    const from = new Date("2026-01-01T00:00:00Z"); // 61 ticks due, 60 of them more than the grace ago
    const iso = (p: { fire: Date[] }) => p.fire.map((d) => d.toISOString().slice(14, 19));
    // The grace asked for is 5 s; half the interval (500 ms) bounds it.
    const skip = planTicks(every, { catchUp: "skip", maxCatchUp: 10 }, from, now, 5000);
    expect(iso(skip)).toEqual(["01:00"]);
    expect(skip.missedSkipped).toBe(60);
    expect(skip.next?.toISOString()).toBe("2026-01-01T00:01:01.000Z");
    const one = planTicks(every, { catchUp: "one", maxCatchUp: 10 }, from, now, 5000);
    expect(iso(one)).toEqual(["00:59", "01:00"]);
    const all = planTicks(every, { catchUp: "all", maxCatchUp: 3 }, from, now, 5000);
    expect(iso(all)).toEqual(["00:57", "00:58", "00:59", "01:00"]);
    expect(all.missedSkipped).toBe(57);
    // A minute schedule found 3 s late within a 5 s grace: late, not missed.
    const minutely = new CronSchedule("* * * * *", "UTC");
    const lateTick = planTicks(
      minutely,
      { catchUp: "skip", maxCatchUp: 10 },
      new Date("2026-01-01T00:01:00Z"),
      new Date("2026-01-01T00:01:03Z"),
      5000,
    );
    expect(iso(lateTick)).toEqual(["01:00"]);
    expect(lateTick.missedSkipped).toBe(0);
  });
});

/** Bad PutSchedule requests: the REST body, the RPC request, the field named. */
const badPuts: { name: string; rest: Record<string, unknown>; rpc: Record<string, unknown>; field: string; message?: RegExp }[] = [
  {
    name: "an invalid cron expression, with the parser's message",
    rest: { cron: "61 * * * *", job: TEMPLATE },
    rpc: { cron: "61 * * * *", job: { workload: W, inputUri: "s3://x", inputSha256: sha("x") } },
    field: "cron",
    message: /Invalid value for minute: 61/,
  },
  {
    name: "a cron expression of three fields",
    rest: { cron: "* * *", job: TEMPLATE },
    rpc: { cron: "* * *", job: { workload: W, inputUri: "s3://x", inputSha256: sha("x") } },
    field: "cron",
  },
  {
    name: "an expression that matches no time (February 31st)",
    rest: { cron: "0 0 31 2 *", job: TEMPLATE },
    rpc: { cron: "0 0 31 2 *", job: { workload: W, inputUri: "s3://x", inputSha256: sha("x") } },
    field: "cron",
  },
  {
    name: "an unknown timezone",
    rest: { cron: "0 3 * * *", timezone: "Mars/Olympus_Mons", job: TEMPLATE },
    rpc: { cron: "0 3 * * *", timezone: "Mars/Olympus_Mons", job: { workload: W, inputUri: "s3://x", inputSha256: sha("x") } },
    field: "timezone",
  },
  {
    name: "no job template",
    rest: { cron: "0 3 * * *" },
    rpc: { cron: "0 3 * * *" },
    field: "job",
  },
  {
    name: "a template CreateJob would refuse (no input_sha256)",
    rest: { cron: "0 3 * * *", job: { workload: W, input_uri: "s3://in" } },
    rpc: { cron: "0 3 * * *", job: { workload: W, inputUri: "s3://in" } },
    field: "job.input_sha256",
  },
  {
    name: "a template with a run_at (a repeating template has no one due time)",
    rest: { cron: "0 3 * * *", job: { ...TEMPLATE, run_at: "2030-01-01T00:00:00Z" } },
    rpc: {
      cron: "0 3 * * *",
      job: { workload: W, inputUri: "s3://x", inputSha256: sha("x"), runAt: { seconds: 1_893_456_000n, nanos: 0 } },
    },
    field: "job.run_at",
  },
  {
    name: "a template with a task's run_at",
    rest: {
      cron: "0 3 * * *",
      job: { workload: W, tasks: [{ chunk_index: 0, input_uri: "s3://x", input_sha256: sha("x"), run_at: "2030-01-01T00:00:00Z" }] },
    },
    rpc: {
      cron: "0 3 * * *",
      job: {
        workload: W,
        tasks: [{ chunkIndex: 0, inputUri: "s3://x", inputSha256: sha("x"), runAt: { seconds: 1_893_456_000n, nanos: 0 } }],
      },
    },
    field: "job.tasks[0].run_at",
  },
  {
    name: "a template whose parameters break the workload's schema",
    rest: { cron: "0 3 * * *", job: { ...TEMPLATE, workload: SCHEMA_W, parameters: { day: 3 } } },
    rpc: { cron: "0 3 * * *", job: { workload: SCHEMA_W, inputUri: "s3://x", inputSha256: sha("x"), parameters: { day: 3 } } },
    field: "job.parameters.day",
  },
  {
    name: "a template with an idempotency key",
    rest: { cron: "0 3 * * *", job: { ...TEMPLATE, idempotency_key: "once" } },
    rpc: { cron: "0 3 * * *", job: { workload: W, inputUri: "s3://x", inputSha256: sha("x"), idempotencyKey: "once" } },
    field: "job.idempotency_key",
  },
  {
    name: "a max_catch_up past its bound",
    rest: { cron: "0 3 * * *", job: TEMPLATE, catch_up: "all", max_catch_up: 5000 },
    rpc: { cron: "0 3 * * *", job: { workload: W, inputUri: "s3://x", inputSha256: sha("x") }, maxCatchUp: 5000 },
    field: "max_catch_up",
  },
];

describe("bad input writes nothing, on every transport", () => {
  it.each(badPuts)("REST: $name", async (c) => {
    const before = await snapshot();
    const r = await restCall(base, "PUT", "/schedules/bad", c.rest);
    expect(r.status, r.text).toBe(400);
    expect(r.body.error.code).toBe("invalid_argument");
    expect(r.body.error.request_id).toBeTruthy();
    expect(r.body.error.violations.map((v: { field: string }) => v.field)).toContain(c.field);
    if (c.message) expect(r.body.error.message).toMatch(c.message);
    expect(await snapshot()).toBe(before);
  });

  for (const transport of ["grpc", "grpc-web", "connect"]) {
    it.each(badPuts)(`${transport}: $name`, async (c) => {
      const before = await snapshot();
      const err = await rpcError(clients[transport].putSchedule({ name: "bad", ...c.rpc }));
      expect(err.code).toBe(Code.InvalidArgument);
      expect(err.rawMessage).toContain(c.field);
      if (c.message) expect(err.rawMessage).toMatch(c.message);
      expect(await snapshot()).toBe(before);
    });
  }

  it("an unknown schedule is 404 / NOT_FOUND on get, delete, pause and resume", async () => {
    const before = await snapshot();
    for (const [method, path] of [
      ["GET", "/schedules/nosuch"],
      ["DELETE", "/schedules/nosuch"],
      ["POST", "/schedules/nosuch/pause"],
      ["POST", "/schedules/nosuch/resume"],
    ] as const) {
      const r = await restCall(base, method, path, method === "POST" ? {} : undefined);
      expect(r.status, `${method} ${path}`).toBe(404);
      expect(r.body.error.code).toBe("not_found");
      expect(r.body.error.message).toContain("schedule");
    }
    for (const client of Object.values(clients)) {
      for (const call of [client.getSchedule, client.deleteSchedule, client.pauseSchedule, client.resumeSchedule]) {
        expect((await rpcError(call({ name: "nosuch" }))).code).toBe(Code.NotFound);
      }
    }
    expect(await snapshot()).toBe(before);
  });
});

describe("CRUD, pause and resume", () => {
  it("PUT creates then replaces; GET, list, pause (no next fire times), resume, DELETE; over REST and RPC", async () => {
    const put = await restCall(base, "PUT", "/schedules/report", {
      cron: "0 30 2 * * *",
      timezone: "Europe/Berlin",
      job: { ...TEMPLATE, parameters: { kind: "daily" }, priority: 5 },
      overlap: "skip",
      catch_up: "all",
      max_catch_up: 3,
    });
    expect(put.status, put.text).toBe(200);
    expect(put.body.created).toBe(true);
    const s = put.body.schedule;
    expect(s).toMatchObject({
      name: "report",
      cron: "0 30 2 * * *",
      timezone: "Europe/Berlin",
      overlap: "OVERLAP_POLICY_SKIP",
      catch_up: "CATCH_UP_POLICY_ALL",
      max_catch_up: 3,
      job: { workload: W, input_uri: TEMPLATE.input_uri, parameters: { kind: "daily" }, priority: 5 },
    });
    expect(s.paused ?? false).toBe(false);
    const times = (s.next_fire_times as string[]).map((t) => Date.parse(t));
    expect(times).toHaveLength(5);
    for (let i = 1; i < times.length; i++) expect(times[i]).toBeGreaterThan(times[i - 1]);
    expect(times[0]).toBeGreaterThan(Date.now() - 1000);
    // Each is 02:30 in Berlin.
    for (const t of times) expect(new Date(t).toLocaleTimeString("en-GB", { timeZone: "Europe/Berlin" })).toBe("02:30:00");

    const again = await restCall(base, "PUT", "/schedules/report", { cron: "0 4 * * *", job: TEMPLATE });
    expect(again.status, again.text).toBe(200);
    expect(again.body.created).toBe(false);
    expect(again.body.schedule).toMatchObject({
      cron: "0 4 * * *",
      timezone: "UTC",
      overlap: "OVERLAP_POLICY_ALLOW",
      catch_up: "CATCH_UP_POLICY_ONE",
      max_catch_up: 10,
    });

    const got = await clients.connect.getSchedule({ name: "report" });
    expect(got.schedule?.cron).toBe("0 4 * * *");
    expect(got.schedule?.nextFireTimes.map((t) => new Date(Number(t.seconds) * 1000).toISOString().slice(11))).toEqual(
      Array(5).fill("04:00:00.000Z"),
    );
    const listed = await restCall(base, "GET", "/schedules");
    expect(listed.body.schedules.map((x: { name: string }) => x.name)).toContain("report");

    const paused = await clients.grpc.pauseSchedule({ name: "report" });
    expect(paused.schedule?.paused).toBe(true);
    expect(paused.schedule?.nextFireTimes).toEqual([]);
    // Replacing keeps it paused.
    expect((await restCall(base, "PUT", "/schedules/report", { cron: "0 5 * * *", job: TEMPLATE })).body.schedule.paused).toBe(true);
    const resumed = await restCall(base, "POST", "/schedules/report/resume", {});
    expect(resumed.status).toBe(200);
    expect(resumed.body.schedule.paused ?? false).toBe(false);
    expect(resumed.body.schedule.next_fire_times).toHaveLength(5);

    const deleted = await restCall(base, "DELETE", "/schedules/report");
    expect(deleted.status).toBe(200);
    expect(deleted.body.schedule.name).toBe("report");
    expect((await restCall(base, "GET", "/schedules/report")).status).toBe(404);
    expect((await pool.query(`SELECT count(*)::int AS n FROM schedules WHERE name = 'report'`)).rows[0].n).toBe(0);
  });
});

/** A per-second schedule whose next tick is `seconds` ago (a simulated outage), for one pass. */
async function dueSince(name: string, seconds: number): Promise<void> {
  await pool.query(`UPDATE schedules SET next_fire_at = date_trunc('second', now()) - make_interval(secs => $2) WHERE name = $1`, [
    name,
    seconds,
  ]);
}

async function jobsOf(name: string): Promise<{ id: string; fire: string; status: string }[]> {
  const { rows } = await pool.query(
    `SELECT id, to_char(schedule_fire_at AT TIME ZONE 'UTC', 'HH24:MI:SS') AS fire, status FROM jobs WHERE schedule_name = $1 ORDER BY schedule_fire_at`,
    [name],
  );
  return rows;
}

describe("the scheduler's passes", () => {
  it("catch-up after an outage: skip fires none of the missed ticks, one the latest, all the latest max_catch_up", async () => {
    for (const policy of ["skip", "one", "all"] as const) {
      const name = `catch-${policy}`;
      // A tick each minute at second 0: 10 minutes missed.
      await queue.putSchedule({
        name,
        cron: "0 * * * * *",
        job: { workload: W, inputUri: "s3://x", inputSha256: sha("x") },
        catchUp: policy,
        maxCatchUp: 4,
      });
      await pool.query(`UPDATE schedules SET next_fire_at = date_trunc('minute', now()) - interval '9 minutes' WHERE name = $1`, [name]);
      const { rows } = await pool.query(`SELECT now() AS now`);
      const now = rows[0].now as Date;
      await queue.fireSchedules();
      const fired = await jobsOf(name);
      const minute = (back: number) => new Date(Math.floor(now.getTime() / 60_000) * 60_000 - back * 60_000).toISOString().slice(11, 19);
      const expected = { skip: [], one: [minute(0)], all: [minute(3), minute(2), minute(1), minute(0)] }[policy];
      expect(
        fired.map((j) => j.fire),
        policy,
      ).toEqual(expected);
      const skippedCatchUp = ticks.filter((t) => t.schedule === name && t.outcome === "catch_up").reduce((n, t) => n + t.count, 0);
      expect(skippedCatchUp, policy).toBe(10 - expected.length);
      // The schedule goes on from its next tick after now.
      const s = await queue.getSchedule(name);
      expect(s.nextFireTimes[0].getTime()).toBe(Math.floor(now.getTime() / 60_000) * 60_000 + 60_000);
      await queue.deleteSchedule(name);
    }
  });

  it("overlap skip: a tick while the previous job is not final creates nothing; allow creates one anyway", async () => {
    const template = { workload: W, inputUri: "s3://x", inputSha256: sha("x") };
    await queue.putSchedule({ name: "no-overlap", cron: "* * * * * *", job: template, overlap: "skip" });
    await queue.putSchedule({ name: "overlap", cron: "* * * * * *", job: template, overlap: "allow" });
    const pass = async () => {
      await dueSince("no-overlap", 0);
      await dueSince("overlap", 0);
      await queue.fireSchedules();
    };
    await pass();
    const [first] = await jobsOf("no-overlap");
    expect(first.status).toBe("pending");
    // Next second: the first job is still pending.
    await new Promise((r) => setTimeout(r, 1100));
    await pass();
    // (A pass that runs past a second boundary may find the next tick due as well: counts are "at least".)
    expect(await jobsOf("no-overlap")).toHaveLength(1);
    const allowed = await jobsOf("overlap");
    expect(allowed.length).toBeGreaterThanOrEqual(2);
    expect(allowed.filter((j) => j.status === "pending").length).toBe(allowed.length);
    const { rows: outcomes } = await pool.query(
      `SELECT outcome, job_id FROM schedule_ticks WHERE schedule_name = 'no-overlap' ORDER BY fire_at`,
    );
    expect(outcomes[0]).toMatchObject({ outcome: "fired", job_id: first.id });
    expect(outcomes.length).toBeGreaterThanOrEqual(2);
    expect(outcomes.slice(1).every((r) => r.outcome === "skipped" && r.job_id === null)).toBe(true);
    // One observer call per pass, counting every tick the pass skipped (a pass may span two seconds).
    const overlapTicks = ticks.filter((t) => t.schedule === "no-overlap" && t.outcome === "overlap").reduce((n, t) => n + t.count, 0);
    expect(overlapTicks).toBe(outcomes.length - 1);
    // Once the job is final, the next tick fires again.
    await queue.cancelJob({ jobId: first.id });
    await new Promise((r) => setTimeout(r, 1100));
    await pass();
    expect(await jobsOf("no-overlap")).toHaveLength(2);
    await queue.deleteSchedule("no-overlap");
    await queue.deleteSchedule("overlap");
  });

  it("a tick whose transaction fails after its job was inserted leaves nothing, and the next pass fires it exactly once", async () => {
    // Catch-up "all": the retried tick is fired however many seconds the failed pass and the
    // clean-up take (with "one", a retry after the next second fires that later tick instead).
    await queue.putSchedule({
      name: "flaky",
      cron: "* * * * * *",
      catchUp: "all",
      job: { workload: W, inputUri: "s3://x", inputSha256: sha("x") },
    });
    await dueSince("flaky", 0);
    // The coordinator's transaction fails at its last statement (moving next_fire_at on), after the
    // tick's key and its job were inserted: what a coordinator dying before its commit leaves.
    await pool.query(`
      CREATE TABLE test_fail_schedules (name text PRIMARY KEY);
      CREATE FUNCTION test_fail_schedule() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF EXISTS (SELECT 1 FROM test_fail_schedules WHERE name = NEW.name) THEN RAISE EXCEPTION 'coordinator lost mid-tick'; END IF;
        RETURN NEW;
      END $$;
      CREATE TRIGGER test_fail_schedule BEFORE UPDATE OF next_fire_at ON schedules FOR EACH ROW EXECUTE FUNCTION test_fail_schedule();
      INSERT INTO test_fail_schedules VALUES ('flaky');`);
    const jobsBefore = (await pool.query(`SELECT count(*)::int AS n FROM jobs`)).rows[0].n;
    const firedBefore = ticks.filter((t) => t.schedule === "flaky").length;
    await expect(queue.fireSchedules()).rejects.toThrow();
    expect((await pool.query(`SELECT count(*)::int AS n FROM jobs`)).rows[0].n).toBe(jobsBefore);
    expect((await pool.query(`SELECT count(*)::int AS n FROM schedule_ticks WHERE schedule_name = 'flaky'`)).rows[0].n).toBe(0);
    expect(ticks.filter((t) => t.schedule === "flaky")).toHaveLength(firedBefore); // nothing counted
    const due = (await pool.query(`SELECT to_char(next_fire_at AT TIME ZONE 'UTC', 'HH24:MI:SS') AS t FROM schedules WHERE name = 'flaky'`))
      .rows[0].t;
    await pool.query(`DROP TRIGGER test_fail_schedule ON schedules; DROP FUNCTION test_fail_schedule(); DROP TABLE test_fail_schedules`);
    // Retried by the next pass (this store has no grace, so the retried tick counts as missed and
    // is fired by catch-up "all", with any tick that fell due meanwhile, each once).
    await queue.fireSchedules();
    const fired = await jobsOf("flaky");
    expect(fired.map((j) => j.fire)).toContain(due);
    expect(new Set(fired.map((j) => j.fire)).size).toBe(fired.length);
    expect((await pool.query(`SELECT count(*)::int AS n FROM jobs`)).rows[0].n).toBe(jobsBefore + fired.length);
    await queue.pauseSchedule("flaky");
  });

  it("jobs carry their schedule and tick, and ListJobs filters by schedule_name", async () => {
    await queue.putSchedule({ name: "listed", cron: "* * * * * *", job: { workload: W, inputUri: "s3://x", inputSha256: sha("x") } });
    await dueSince("listed", 0);
    await queue.fireSchedules();
    await queue.pauseSchedule("listed");
    // Usually one tick; two when the pass ran into the next second (a tick every second), so the
    // listing is compared with every job the schedule made, newest first.
    const fired = (await jobsOf("listed")).reverse();
    const job = fired[0];
    expect(fired.length).toBeGreaterThanOrEqual(1);
    const r = await restCall(base, "GET", "/jobs?schedule_name=listed");
    expect(r.status, r.text).toBe(200);
    expect(r.body.jobs.map((j: { id: string }) => j.id)).toEqual(fired.map((j) => j.id));
    expect(r.body.jobs[0].schedule_name).toBe("listed");
    expect(r.body.jobs[0].schedule_fire_time).toMatch(new RegExp(`T${job.fire}Z$`));
    const viaRpc = await clients.grpc.listJobs({ scheduleName: "listed" });
    expect(viaRpc.jobs.map((j) => j.id)).toEqual(fired.map((j) => j.id));
    const got = await clients.connect.getJob({ jobId: job.id });
    expect(got.job?.scheduleName).toBe("listed");
    expect((await restCall(base, "GET", "/jobs?schedule_name=nosuch")).body.jobs ?? []).toEqual([]);
  });
});

describe("a pass costs O(schedules due)", () => {
  it("with 5,000 schedules not due, the probe and the take read schedules_due_idx only; a pass fires the due one alone", async () => {
    await pool.query(
      `
      INSERT INTO schedules (name, cron, timezone, job, overlap, catch_up, max_catch_up, next_fire_at)
      SELECT 'idle-' || i, '0 0 1 1 *', 'UTC', $1::jsonb, 'allow', 'one', 10, now() + interval '300 days' + i * interval '1 second'
      FROM generate_series(1, 5000) AS i`,
      [JSON.stringify({ workload: W, inputUri: "s3://x", inputSha256: sha("x") })],
    );
    await pool.query(`ANALYZE schedules`);
    for (const { text } of [NEXT_SCHEDULE_DUE, TAKE_DUE_SCHEDULE]) {
      const c = await pool.connect();
      try {
        await c.query("BEGIN");
        const { rows } = await c.query(`EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${text}`);
        await c.query("ROLLBACK");
        // The execution's plan (the planner's own catalog reads are listed apart, under "Planning").
        const plan = JSON.stringify(rows[0]["QUERY PLAN"][0].Plan);
        expect(plan, text).toContain("schedules_due_idx");
        expect(plan, text).not.toContain('"Seq Scan"');
        // A handful of index pages, not the table's.
        const shared = [...plan.matchAll(/"Shared Hit Blocks": ?(\d+)/g)].map((m) => Number(m[1]));
        expect(shared.length, text).toBeGreaterThan(0);
        expect(Math.max(...shared), text).toBeLessThan(20);
      } finally {
        c.release();
      }
    }
    await queue.putSchedule({
      name: "due-among-many",
      cron: "* * * * * *",
      job: { workload: W, inputUri: "s3://x", inputSha256: sha("x") },
    });
    await dueSince("due-among-many", 0);
    const r = await queue.fireSchedules();
    expect(r.fired).toBeGreaterThanOrEqual(1);
    expect((await jobsOf("due-among-many")).length).toBe(r.fired);
    expect((await pool.query(`SELECT count(*)::int AS n FROM schedule_ticks WHERE schedule_name LIKE 'idle-%'`)).rows[0].n).toBe(0);
    await queue.pauseSchedule("due-among-many");
    await pool.query(`DELETE FROM schedules WHERE name LIKE 'idle-%'`);
  });
});
