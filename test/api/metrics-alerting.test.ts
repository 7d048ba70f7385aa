// The metrics the alert rules of deploy/prometheus need beyond the queue's counters: the
// settlement backlog (leasehold_settlements_waiting, leasehold_oldest_unsettled_seconds) read from
// a real, migrated PostgreSQL at scrape time; readiness (leasehold_ready) as /readyz would answer;
// and failed scheduler passes (leasehold_scheduler_pass_failures_total) from the scheduler loop.
import { Writable } from "node:stream";
import { pino, type Logger } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SchedulerLoop } from "../../src/queue/scheduler.js";
import { Metrics } from "../../src/telemetry/metrics.js";
import { queueFixture, sha, type QueueFixture } from "../support/queue.js";
import { until } from "../support/lock-hold.js";

const W = "alerting_w";
let fx: QueueFixture;

beforeAll(async () => {
  fx = await queueFixture();
  await fx.queue.putWorkload({ name: W, maxAttempts: 1, leaseSeconds: 60 });
});

afterAll(async () => {
  await fx?.close();
});

/** The value of the unlabelled sample `name` in an exposition; undefined when absent. */
function sample(text: string, name: string): number | undefined {
  const m = new RegExp(`^${name} (\\S+)$`, "m").exec(text);
  return m ? Number(m[1]) : undefined;
}

function logSink(): { logger: Logger; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  const logger = pino(
    { level: "warn" },
    new Writable({
      write(chunk: Buffer, _e, cb) {
        for (const line of chunk.toString().split("\n")) if (line) lines.push(JSON.parse(line) as Record<string, unknown>);
        cb();
      },
    }),
  );
  return { logger, lines };
}

async function job(opts: { billing?: { reservedUnits?: number; billingKey?: string }; account?: string }): Promise<string> {
  const r = await fx.queue.createJob({
    workload: W,
    tasks: [{ chunkIndex: 0, inputUri: "s3://in/0", inputSha256: sha(0) }],
    ...(opts.billing ? { billing: opts.billing } : {}),
  });
  if (opts.account) await fx.pool.query(`UPDATE jobs SET account = $2 WHERE id = $1`, [r.job.id, opts.account]);
  return r.job.id;
}

describe("the settlement backlog", () => {
  it("counts final billable jobs not yet settled and ages the oldest by the database's clock; settled, open and unbillable jobs do not count", async () => {
    const metrics = new Metrics({ logger: pino({ level: "silent" }), settlements: fx.queue, settlementsTtlMs: 0 });
    let text = await metrics.render();
    expect(sample(text, "leasehold_settlements_waiting")).toBe(0);
    expect(sample(text, "leasehold_oldest_unsettled_seconds")).toBe(0);

    await fx.pool.query(`INSERT INTO accounts (name) VALUES ('acme') ON CONFLICT DO NOTHING`);
    const old = await job({ billing: { reservedUnits: 100, billingKey: "order-1" } });
    const byAccount = await job({ account: "acme" });
    const open = await job({ billing: { billingKey: "order-open" } });
    const unbillable = await job({});
    const settled = await job({ billing: { reservedUnits: 5 } });
    for (const id of [old, byAccount, unbillable, settled]) await fx.queue.cancelJob({ jobId: id });
    await fx.queue.settleJob({ jobId: settled, settlementKey: "s-1", settledUnits: 0 });
    // The oldest one became final an hour ago.
    await fx.pool.query(`UPDATE jobs SET completed_at = now() - interval '1 hour' WHERE id = $1`, [old]);

    text = await metrics.render();
    expect(sample(text, "leasehold_settlements_waiting")).toBe(2);
    const oldest = sample(text, "leasehold_oldest_unsettled_seconds") ?? -1;
    expect(oldest).toBeGreaterThanOrEqual(3600);
    expect(oldest).toBeLessThan(3600 + 600);
    expect(open).toBeTruthy();

    await fx.queue.settleJob({ jobId: old, settlementKey: "s-2", settledUnits: 40 });
    await fx.queue.settleJob({ jobId: byAccount, settlementKey: "s-3", settledUnits: 0 });
    text = await metrics.render();
    expect(sample(text, "leasehold_settlements_waiting")).toBe(0);
    expect(sample(text, "leasehold_oldest_unsettled_seconds")).toBe(0);
  });

  it("is read once per TTL however many scrapes, and a failing read keeps the last values and warns", async () => {
    let calls = 0;
    let fail = false;
    const { logger, lines } = logSink();
    const metrics = new Metrics({
      logger,
      settlementsTtlMs: 60_000,
      settlements: {
        settlementBacklog: async () => {
          calls++;
          if (fail) throw new Error("database unreachable (test)");
          return { waiting: 3, oldestSeconds: 90_000 };
        },
      },
    });
    await Promise.all([metrics.render(), metrics.render()]);
    await metrics.render();
    expect(calls).toBe(1);

    const failing = new Metrics({
      logger,
      settlementsTtlMs: 0,
      settlements: {
        settlementBacklog: async () => {
          if (fail) throw new Error("database unreachable (test)");
          return { waiting: 3, oldestSeconds: 90_000 };
        },
      },
    });
    expect(sample(await failing.render(), "leasehold_settlements_waiting")).toBe(3);
    fail = true;
    const text = await failing.render();
    expect(sample(text, "leasehold_settlements_waiting")).toBe(3);
    expect(sample(text, "leasehold_oldest_unsettled_seconds")).toBe(90_000);
    expect(lines).toContainEqual(
      expect.objectContaining({ level: 40, scope: "settlements", msg: expect.stringContaining("settlement backlog") }),
    );
  });
});

describe("leasehold_ready", () => {
  it("is what the readiness check answers at each scrape: 1 ready, 0 not ready or failing, absent without a check", async () => {
    let answer: Promise<{ ready: boolean }> = Promise.resolve({ ready: true });
    const { logger, lines } = logSink();
    const metrics = new Metrics({ logger, readiness: () => answer });
    expect(sample(await metrics.render(), "leasehold_ready")).toBe(1);
    answer = Promise.resolve({ ready: false });
    expect(sample(await metrics.render(), "leasehold_ready")).toBe(0);
    answer = Promise.reject(new Error("pool closed (test)"));
    expect(sample(await metrics.render(), "leasehold_ready")).toBe(0);
    expect(lines).toContainEqual(expect.objectContaining({ level: 40, msg: "readiness for metrics failed" }));

    const without = await new Metrics({ logger: pino({ level: "silent" }) }).render();
    expect(sample(without, "leasehold_ready")).toBeUndefined();
  });
});

describe("leasehold_scheduler_pass_failures_total", () => {
  it("counts the scheduler loop's failed passes, from 0, and not the pass a stop cuts short", async () => {
    const metrics = new Metrics({ logger: pino({ level: "silent" }) });
    expect(sample(await metrics.render(), "leasehold_scheduler_pass_failures_total")).toBe(0);

    let passes = 0;
    const failing = new SchedulerLoop(
      { fireSchedules: async () => Promise.reject(new Error("database away (test)")) },
      { info: () => {}, warn: () => {} },
      { retryMs: 5, onPass: () => passes++, onPassFailed: () => metrics.schedulerPassFailed() },
    );
    failing.start();
    await until(() => passes >= 3, "three failed scheduler passes");
    await failing.stop();
    const counted = sample(await metrics.render(), "leasehold_scheduler_pass_failures_total") ?? 0;
    expect(counted).toBeGreaterThanOrEqual(3);
    expect(counted).toBe(passes);

    // A pass in progress when stop() comes fails because of the stop: not counted.
    let started!: () => void;
    const inPass = new Promise<void>((resolve) => (started = resolve));
    const stopped = new SchedulerLoop(
      {
        fireSchedules: (opts) =>
          new Promise((_, reject) => {
            started();
            opts?.signal?.addEventListener("abort", () => reject(new Error("aborted")));
          }),
      },
      { info: () => {}, warn: () => {} },
      { onPassFailed: () => metrics.schedulerPassFailed() },
    );
    stopped.start();
    await inPass;
    await stopped.stop();
    expect(sample(await metrics.render(), "leasehold_scheduler_pass_failures_total")).toBe(counted);
  });
});
