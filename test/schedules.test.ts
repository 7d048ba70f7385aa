// Periodic schedules in one process against real PostgreSQL: PutSchedule and the other schedule
// RPCs over REST, gRPC, gRPC-Web and Connect; bad input answered 400 / INVALID_ARGUMENT naming
// the field with nothing written; the scheduler's passes (called one at a time here, so each
// tick's outcome is asserted on rows): catch-up after a simulated outage, overlap, a tick whose
// transaction fails half-way; and the cron arithmetic across DST changes. Several coordinator
// processes racing for the same ticks are schedules-race.test.ts.
import { Code, createClient, type Client } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import pino from "pino";
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { QueueService } from "../gen/leasehold/queue/v1/queue_pb.js";
import { createApiServer, type ApiServer } from "../src/api/server.js";
import { CronSchedule, planTicks } from "../src/queue/schedules.js";
import type { QueueObserver } from "../src/queue/service.js";
import { createPool, PostgresQueue } from "../src/store/postgres/store.js";
import { createTestDatabase, type TestDatabase } from "./support/db.js";
import { sha } from "./support/queue.js";
import { restCall } from "./support/rest.js";
import { rpcError } from "./support/rpc.js";

let db: TestDatabase;
let pool: pg.Pool;
let server: ApiServer;
let base: string;
let queue: PostgresQueue;
let clients: Record<string, Client<typeof QueueService>>;
/** What the scheduler's observer was told, and a hook that may throw (a tick failing half-way). */
const ticks: { schedule: string; outcome: string; count: number }[] = [];
let onFired: ((schedule: string) => void) | undefined;

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
  db = await createTestDatabase();
  pool = createPool({ connectionString: db.url, max: 6, statementTimeoutMs: 10_000, connectTimeoutMs: 5000 });
  const observer: QueueObserver = {
    tasksClaimed() {},
    tasksCompleted() {},
    taskFailed() {},
    leasesExpired() {},
    scheduleTicks(schedule, outcome, count) {
      ticks.push({ schedule, outcome, count });
      if (outcome === "fired") onFired?.(schedule);
    },
  };
  // No grace: a tick found due after its time is missed, so each catch-up case is exact.
  queue = new PostgresQueue(pool, {
    defaultLeaseSeconds: 60,
    defaultMaxAttempts: 3,
    maxTasksPerJob: 1000,
    observer,
    scheduler: { graceMs: 0 },
  });
  server = createApiServer({
    queue,
    logger: pino({ level: "silent" }),
    maxBodyBytes: 1 << 20,
    requestTimeoutMs: 10_000,
    readiness: async () => ({ ready: true }),
  });
  const port = await server.listen(0, "127.0.0.1");
  base = `http://127.0.0.1:${port}`;
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
  await server?.close(2000);
  await pool?.end();
  await db?.drop();
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
    const from = new Date("2026-01-01T00:00:00Z"); // 60 ticks due, 55 of them more than 5 s ago
    const iso = (p: { fire: Date[] }) => p.fire.map((d) => d.toISOString().slice(14, 19));
    const skip = planTicks(every, { catchUp: "skip", maxCatchUp: 10 }, from, now, 5000);
    expect(iso(skip)).toEqual(["00:56", "00:57", "00:58", "00:59", "01:00"]);
    expect(skip.missedSkipped).toBe(56);
    expect(skip.next?.toISOString()).toBe("2026-01-01T00:01:01.000Z");
    const one = planTicks(every, { catchUp: "one", maxCatchUp: 10 }, from, now, 5000);
    expect(iso(one)).toEqual(["00:55", "00:56", "00:57", "00:58", "00:59", "01:00"]);
    const all = planTicks(every, { catchUp: "all", maxCatchUp: 3 }, from, now, 5000);
    expect(iso(all)).toEqual(["00:53", "00:54", "00:55", "00:56", "00:57", "00:58", "00:59", "01:00"]);
    expect(all.missedSkipped).toBe(53);
  });
});
