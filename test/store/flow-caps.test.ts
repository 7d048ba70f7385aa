// Concurrency caps hold across coordinators: three coordinator processes on one database, 48
// claimers racing for the slots of a workload capped at 8 (and of keys capped at 2, one key at 5),
// the leased count sampled continuously from PostgreSQL; a worker killed with SIGKILL while
// holding slots gives them back when its leases expire, and not before.
import { spawn } from "node:child_process";
import pg from "pg";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import type { TestDatabase } from "../support/db.js";
import { call, closeAgent } from "../support/http.js";
import { killAll } from "../support/process.js";
import { raceRig } from "../support/flow-race.js";
import { sha } from "../support/queue.js";

const SHA = sha("flow-caps");
const dbs: TestDatabase[] = [];

afterEach(async () => {
  await killAll();
});
afterAll(async () => {
  closeAgent();
  await Promise.all(dbs.map((d) => d.drop()));
});

const setup = () => raceRig(dbs, { REAPER_INTERVAL_MS: "200" });

function tasks(n: number, from = 0) {
  return Array.from({ length: n }, (_, i) => ({ chunk_index: from + i, input_uri: `s3://caps/${from + i}`, input_sha256: SHA }));
}

/** Live leases of a workload per concurrency key, as one consistent snapshot. */
async function liveByKey(c: pg.Client, workload: string): Promise<Map<string, number>> {
  const { rows } = await c.query(
    `SELECT concurrency_key AS key, count(*)::int AS n FROM tasks
     WHERE workload = $1 AND status = 'leased' AND lease_expires_at > now() GROUP BY 1`,
    [workload],
  );
  return new Map(rows.map((r) => [r.key as string, r.n as number]));
}

/** Samples liveByKey until stopped; returns the largest count seen per key and in all, and the number of samples. */
function sample(c: pg.Client, workload: string): { stop(): Promise<{ total: number; byKey: Map<string, number>; samples: number }> } {
  let running = true;
  const byKey = new Map<string, number>();
  let total = 0;
  let samples = 0;
  const loop = (async () => {
    while (running) {
      const now = await liveByKey(c, workload).catch((err) => {
        if (running) throw err;
        return new Map<string, number>();
      });
      samples++;
      let sum = 0;
      for (const [k, n] of now) {
        sum += n;
        byKey.set(k, Math.max(byKey.get(k) ?? 0, n));
      }
      total = Math.max(total, sum);
    }
  })();
  // A failure of the test stops the sampler (its connection closes); stop() reports the error.
  void loop.catch(() => (running = false));
  return {
    async stop() {
      running = false;
      await loop;
      return { total, byKey, samples };
    },
  };
}

/** 48 claimers, 16 per coordinator: claim one task (long poll), hold it a little, complete it; until `done` says so. */
async function claimers(bases: string[], workload: string, done: () => boolean): Promise<number> {
  let completed = 0;
  await Promise.all(
    Array.from({ length: 48 }, async (_, w) => {
      const base = bases[w % bases.length];
      const worker = `cap-${w}`;
      while (!done()) {
        const r = await call(base, "POST", "/tasks/claim", { worker_id: worker, workloads: [workload], wait_seconds: 1 });
        if (r.status === 204) continue;
        expect(r.status).toBe(200);
        for (const t of r.body.tasks) {
          await new Promise((resolve) => setTimeout(resolve, 5 + Math.random() * 20));
          const c = await call(base, "POST", `/tasks/${t.id}/result`, {
            worker_id: worker,
            attempt: t.attempt,
            result_uri: `s3://out/${t.id}`,
            result_sha256: SHA,
          });
          expect(c.status).toBe(200);
          completed++;
        }
      }
    }),
  );
  return completed;
}

/** A worker process that claims `max` tasks with a short lease, says so, and then hangs until killed. */
function holder(base: string, workload: string, max: number, leaseSeconds: number) {
  const script = `
    const r = await fetch(${JSON.stringify(base)} + "/tasks/claim", { method: "POST", headers: { "content-type": "application/json" },
      body: JSON.stringify({ worker_id: "doomed", workloads: [${JSON.stringify(workload)}], max_tasks: ${max}, lease_seconds: ${leaseSeconds} }) });
    const body = r.status === 200 ? await r.json() : { tasks: [] };
    console.log("held " + body.tasks.length);
    setInterval(() => {}, 1 << 30);`;
  const child = spawn(process.execPath, ["--input-type=module", "-e", script], { stdio: ["ignore", "pipe", "inherit"] });
  const held = new Promise<number>((resolve) => {
    let out = "";
    child.stdout.setEncoding("utf8").on("data", (d: string) => {
      out += d;
      const m = /held (\d+)/.exec(out);
      if (m) resolve(Number(m[1]));
    });
  });
  return { child, held };
}

async function until(condition: () => Promise<boolean>, timeoutMs: number): Promise<number> {
  const start = Date.now();
  while (!(await condition())) {
    if (Date.now() - start > timeoutMs) throw new Error(`condition not met within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return Date.now() - start;
}

describe("concurrency caps over three coordinators", () => {
  it("max_leased 8: 48 claimers never lease a ninth task; a SIGKILLed worker's slots come back when its leases expire", async () => {
    const { bases, sampler } = await setup();
    try {
      expect((await call(bases[0], "PUT", "/workloads/capped", { max_leased: 8, lease_seconds: 30 })).status).toBe(200);
      const TOTAL = 400;
      expect((await call(bases[1], "POST", "/jobs", { workload: "capped", tasks: tasks(TOTAL) })).status).toBe(201);
      const s = sample(sampler, "capped");
      const completedCount = async () =>
        (await sampler.query(`SELECT count(*)::int AS n FROM tasks WHERE workload = 'capped' AND status = 'completed'`)).rows[0].n;
      let finished = false;
      const watcher = (async () => {
        await until(async () => (await completedCount()) === TOTAL, 120_000);
        finished = true;
      })();
      const completed = await claimers(bases, "capped", () => finished);
      await watcher;
      const seen = await s.stop();
      console.log(`cap race: ${TOTAL} tasks, ${seen.samples} samples, most leased at once ${seen.total}`);
      expect(completed).toBe(TOTAL);
      expect(seen.samples).toBeGreaterThan(50);
      // Never above the cap. That the cap is reached is shown exactly below (a claim of 8 gets 8),
      // not by the sampler, which on a loaded machine may miss the instants all slots are busy.
      expect(seen.total).toBeLessThanOrEqual(8);
      expect(seen.total).toBeGreaterThanOrEqual(4);
      const { rows: events } = await sampler.query(
        `SELECT count(*)::int AS n FROM task_events e JOIN tasks t ON t.id = e.task_id WHERE t.workload = 'capped' AND e.status = 'completed'`,
      );
      expect(events[0].n).toBe(TOTAL);

      // A worker holding all 8 slots is killed: nothing more is leased until its leases expire.
      expect((await call(bases[2], "POST", "/jobs", { workload: "capped", tasks: tasks(10, TOTAL) })).status).toBe(201);
      const doomed = holder(bases[0], "capped", 8, 3);
      expect(await doomed.held).toBe(8);
      doomed.child.kill("SIGKILL");
      const killedAt = Date.now();
      for (const base of bases) {
        const r = await call(base, "POST", "/tasks/claim", { worker_id: "survivor", workloads: ["capped"] });
        expect(r.status).toBe(204);
      }
      // A parked long poll gets a task once the dead worker's leases have expired.
      const parked = await call(bases[1], "POST", "/tasks/claim", { worker_id: "survivor", workloads: ["capped"], wait_seconds: 10 });
      expect(parked.status).toBe(200);
      expect(Date.now() - killedAt).toBeGreaterThanOrEqual(2000);
      expect(Date.now() - killedAt).toBeLessThan(8000);
      expect((await liveByKey(sampler, "capped")).get("")).toBe(1);
    } finally {
      await sampler.end();
    }
  }, 180_000);

  it("max_leased_per_key 2 with one key at 5 (PutKeyLimit): no key ever past its cap; a SIGKILLed worker's key slots come back at expiry", async () => {
    const { bases, sampler } = await setup();
    try {
      expect((await call(bases[0], "PUT", "/workloads/keyed", { max_leased_per_key: 2, lease_seconds: 30 })).status).toBe(200);
      expect((await call(bases[1], "PUT", "/workloads/keyed/keys/premium", { max_leased: 5 })).status).toBe(200);
      const keys = ["a", "b", "c", "premium"];
      const PER_KEY = 80;
      for (const key of keys) {
        const r = await call(bases[2], "POST", "/jobs", { workload: "keyed", concurrency_key: key, tasks: tasks(PER_KEY) });
        expect(r.status).toBe(201);
      }
      const TOTAL = keys.length * PER_KEY;
      const s = sample(sampler, "keyed");
      let finished = false;
      const watcher = (async () => {
        await until(
          async () =>
            (await sampler.query(`SELECT count(*)::int AS n FROM tasks WHERE workload = 'keyed' AND status = 'completed'`)).rows[0].n ===
            TOTAL,
          120_000,
        );
        finished = true;
      })();
      const completed = await claimers(bases, "keyed", () => finished);
      await watcher;
      const seen = await s.stop();
      console.log(`key cap race: ${seen.samples} samples, most leased per key ${JSON.stringify(Object.fromEntries(seen.byKey))}`);
      expect(completed).toBe(TOTAL);
      // Never past a key's cap (the sampler may miss the instants a cap is full; reaching it is shown exactly below).
      for (const key of ["a", "b", "c"]) expect(seen.byKey.get(key)).toBeLessThanOrEqual(2);
      expect(seen.byKey.get("premium")).toBeLessThanOrEqual(5);
      expect(Math.max(...seen.byKey.values())).toBeGreaterThanOrEqual(2);

      // The per-key override is a cap that is reached: with nothing leased, one claim of 10 gets
      // exactly 5 premium tasks and no more, and a second claim gets none of premium's.
      expect((await call(bases[1], "POST", "/jobs", { workload: "keyed", concurrency_key: "premium", tasks: tasks(8) })).status).toBe(201);
      const full = await call(bases[0], "POST", "/tasks/claim", { worker_id: "filler", workloads: ["keyed"], max_tasks: 10 });
      expect(full.status).toBe(200);
      expect(full.body.tasks.map((t: { concurrency_key: string }) => t.concurrency_key)).toEqual(Array(5).fill("premium"));
      expect((await call(bases[2], "POST", "/tasks/claim", { worker_id: "filler", workloads: ["keyed"], max_tasks: 10 })).status).toBe(204);
      expect((await liveByKey(sampler, "keyed")).get("premium")).toBe(5);
      for (const t of full.body.tasks) {
        const r = await call(bases[0], "POST", `/tasks/${t.id}/result`, {
          worker_id: "filler",
          attempt: t.attempt,
          result_uri: "s3://out/f",
          result_sha256: SHA,
        });
        expect(r.status).toBe(200);
      }
      const rest = await call(bases[0], "POST", "/tasks/claim", { worker_id: "filler", workloads: ["keyed"], max_tasks: 10 });
      expect(rest.status).toBe(200);
      expect(rest.body.tasks.length).toBe(3);
      for (const t of rest.body.tasks) {
        const r = await call(bases[0], "POST", `/tasks/${t.id}/result`, {
          worker_id: "filler",
          attempt: t.attempt,
          result_uri: "s3://out/f",
          result_sha256: SHA,
        });
        expect(r.status).toBe(200);
      }

      // A worker holding key a's two slots is killed: a's next task waits for their expiry, b's does not.
      expect((await call(bases[0], "POST", "/jobs", { workload: "keyed", concurrency_key: "a", tasks: tasks(3) })).status).toBe(201);
      const doomed = holder(bases[2], "keyed", 10, 3);
      expect(await doomed.held).toBe(2);
      doomed.child.kill("SIGKILL");
      const killedAt = Date.now();
      expect((await liveByKey(sampler, "keyed")).get("a")).toBe(2);
      expect((await call(bases[0], "POST", "/tasks/claim", { worker_id: "survivor", workloads: ["keyed"], max_tasks: 10 })).status).toBe(
        204,
      );
      expect((await call(bases[1], "POST", "/jobs", { workload: "keyed", concurrency_key: "b", tasks: tasks(1) })).status).toBe(201);
      const b = await call(bases[1], "POST", "/tasks/claim", { worker_id: "survivor", workloads: ["keyed"], max_tasks: 10 });
      expect(b.status).toBe(200);
      expect(b.body.tasks.map((t: { concurrency_key: string }) => t.concurrency_key)).toEqual(["b"]);
      expect((await liveByKey(sampler, "keyed")).get("a")).toBe(2);
      const parked = await call(bases[2], "POST", "/tasks/claim", { worker_id: "survivor", workloads: ["keyed"], wait_seconds: 10 });
      expect(parked.status).toBe(200);
      expect(parked.body.tasks[0].concurrency_key).toBe("a");
      expect(Date.now() - killedAt).toBeGreaterThanOrEqual(2000);
      expect(Date.now() - killedAt).toBeLessThan(8000);
    } finally {
      await sampler.end();
    }
  }, 180_000);

  it("batched reports that claim (CompleteTasks with claim_next, sharing statements): no cap passed, every task completed once", async () => {
    const { bases, sampler } = await setup();
    try {
      expect((await call(bases[0], "PUT", "/workloads/batched", { max_leased: 12, max_leased_per_key: 3, lease_seconds: 30 })).status).toBe(
        200,
      );
      const keys = ["a", "b", "c", "d", "e"];
      const PER_KEY = 60;
      for (const key of keys) {
        expect((await call(bases[1], "POST", "/jobs", { workload: "batched", concurrency_key: key, tasks: tasks(PER_KEY) })).status).toBe(
          201,
        );
      }
      const TOTAL = keys.length * PER_KEY;
      const s = sample(sampler, "batched");
      let completed = 0;
      // 24 workers, 8 a coordinator: claim up to 3, then report them all and claim the next 3 in one call.
      await Promise.all(
        Array.from({ length: 24 }, async (_, w) => {
          const base = bases[w % bases.length];
          const worker = `batch-${w}`;
          let held: Array<{ id: string; attempt: number }> = [];
          while (completed < TOTAL) {
            if (held.length === 0) {
              const r = await call(base, "POST", "/tasks/claim", {
                worker_id: worker,
                workloads: ["batched"],
                max_tasks: 3,
                wait_seconds: 1,
              });
              if (r.status === 204) continue;
              expect(r.status).toBe(200);
              held = r.body.tasks;
              continue;
            }
            await new Promise((resolve) => setTimeout(resolve, Math.random() * 10));
            const r = await call(base, "POST", "/tasks/results", {
              results: held.map((t) => ({
                task_id: t.id,
                worker_id: worker,
                attempt: t.attempt,
                result_uri: `s3://out/${t.id}`,
                result_sha256: SHA,
              })),
              claim_next: { worker_id: worker, workloads: ["batched"], max_tasks: 3 },
            });
            expect(r.status).toBe(200);
            for (const o of r.body.outcomes) expect(o.error).toBeUndefined();
            completed += held.length;
            held = r.body.next_tasks ?? [];
          }
        }),
      );
      const seen = await s.stop();
      console.log(
        `batched cap race: ${seen.samples} samples, most leased ${seen.total}, per key ${JSON.stringify(Object.fromEntries(seen.byKey))}`,
      );
      expect(completed).toBe(TOTAL);
      expect(seen.total).toBeLessThanOrEqual(12);
      for (const key of keys) expect(seen.byKey.get(key) ?? 0).toBeLessThanOrEqual(3);
      const { rows } = await sampler.query(
        `SELECT count(*) FILTER (WHERE t.status = 'completed')::int AS done, count(DISTINCT t.id)::int AS tasks,
           (SELECT count(*)::int FROM task_events e JOIN tasks u ON u.id = e.task_id WHERE u.workload = 'batched' AND e.status = 'completed') AS completed_events,
           (SELECT count(*)::int FROM task_events e JOIN tasks u ON u.id = e.task_id WHERE u.workload = 'batched' AND e.status = 'leased') AS leased_events,
           sum(t.attempt)::int AS attempts
         FROM tasks t WHERE t.workload = 'batched'`,
      );
      // Each task leased once (one attempt, one leased event) and completed once.
      expect(rows[0]).toEqual({ done: TOTAL, tasks: TOTAL, completed_events: TOTAL, leased_events: TOTAL, attempts: TOTAL });
    } finally {
      await sampler.end();
    }
  }, 180_000);
});
