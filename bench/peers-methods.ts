// Which difference of method moves bench:peers' single-task and one-task-job ratios: each of the
// acceptance check's choices (a node:http keep-alive generator, no warm-up, DRAIN tasks timed from
// start to the last, how one-task jobs are sent, a coordinator run from the sources under tsx or
// freshly started) applied alone to bench:peers' way (undici, 1 s warm-up, a timed window, the
// compiled coordinator warm), against graphile-worker timed both ways in the same round.
// Rounds interleave every variant; medians. Not a test:
//
//   node --import tsx bench/peers-methods.ts [--runs 3]   (PEERS_SECONDS 5, PEERS_WORKERS 16, PEERS_DRAIN 20000)

import os from "node:os";
import { performance } from "node:perf_hooks";
import { parseCoalescing } from "../src/config/index.js";
import { createPool, PostgresQueue } from "../src/store/postgres/store.js";
import type { CpuPerItem } from "./cpu.js";
import { fmt, httpClient, restClient, startCoordinator, startDatabase, type Coordinator } from "./harness.js";
import { loadPeers, type GraphileWorkerUtils } from "./peers/load.js";
import {
  drain,
  fillLeasehold,
  leaseholdClaimComplete,
  leaseholdSubmitters,
  loops,
  med,
  quiet,
  SHA,
  window,
  withClient,
  type Load,
  type Measure,
  type Rest,
} from "./peers-loads.js";

const argRuns = process.argv.indexOf("--runs");
const RUNS = Number(argRuns >= 0 ? process.argv[argRuns + 1] : (process.env.PEERS_RUNS ?? 3));
const SECONDS = Number(process.env.PEERS_SECONDS ?? 5);
const WORKERS = Number(process.env.PEERS_WORKERS ?? 16);
const DRAIN = Number(process.env.PEERS_DRAIN ?? 20_000);

const peers = await loadPeers();
const db = await startDatabase();
const gwUrl = await (async () => {
  const name = `methods_graphile_${process.pid}`;
  await withClient(db.url, (c) => c.query(`CREATE DATABASE ${name}`));
  const u = new URL(db.url);
  u.pathname = `/${name}`;
  return u.toString();
})();
const compiled = await startCoordinator(db.url, { PG_POOL_MAX: "8" });
// As the test suites spawn one (test/support/process.ts): the sources under tsx, no start options.
const sources = await startCoordinator(db.url, { PG_POOL_MAX: "8" }, "src/main.ts");
const pool = createPool({ connectionString: db.url, max: 4, statementTimeoutMs: 600_000, connectTimeoutMs: 10_000 });
const store = new PostgresQueue(pool, {
  coalescing: parseCoalescing(process.env),
  defaultLeaseSeconds: 300,
  defaultMaxAttempts: 3,
  maxTasksPerJob: 10_000,
});
const timing = (coordinator: Coordinator) => ({ seconds: SECONDS, warmupMs: 1000, coordinator });

type Result = Measure & { round: number };
const results = new Map<string, Result[]>();
const record = (name: string, round: number, m: Measure) => {
  results.set(name, [...(results.get(name) ?? []), { ...m, round }]);
  console.error(
    `[round ${round}] ${name}: ${fmt(m.rate)}/s, server ${fmt(m.cpu.postgres, 3)} ms, coordinator ${fmt(m.cpu.coordinator, 3)} ms`,
  );
};

let seq = 0;
async function singleVariant(
  round: number,
  name: string,
  opts: { coordinator: Coordinator; rest: () => Rest & { close?: () => void }; drained: boolean; fresh?: boolean },
) {
  const workload = `single_${seq++}`;
  await fillLeasehold(store, workload, opts.drained ? DRAIN : Math.max(20_000, Math.ceil(SECONDS + 2) * 3000));
  await withClient(db.url, (c) => c.query("ANALYZE"));
  let coordinator = opts.coordinator;
  if (opts.fresh) coordinator = await startCoordinator(db.url, { PG_POOL_MAX: "8" });
  await quiet(db.url);
  const rest = opts.fresh ? httpClient(coordinator.url, WORKERS) : opts.rest();
  const load = leaseholdClaimComplete(rest, workload, { workers: WORKERS, maxTasks: 1, untilEmpty: opts.drained });
  try {
    record(name, round, opts.drained ? await drain(load, DRAIN, coordinator) : await window(load, timing(coordinator)));
  } finally {
    rest.close?.();
    if (opts.fresh) await coordinator.stop();
  }
}

function addJobLoad(utils: GraphileWorkerUtils, limit = Infinity): Load {
  let done = 0;
  let sent = 0;
  return {
    start: async () =>
      loops(WORKERS, async (id, running) => {
        let i = 0;
        while (running() && sent < limit) {
          sent++;
          await utils.addJob("one", { id, i: i++ });
          done++;
        }
      }),
    count: () => done,
  };
}

/** One-task jobs sent three ways: a one-element tasks list (bench:peers), the job's own input (no list), or each with an idempotency key. */
function submitters(rest: Rest, workload: string, how: "tasks" | "input" | "keyed", limit?: number): Load {
  if (how === "tasks") return leaseholdSubmitters(rest, workload, { workers: WORKERS, limit });
  let done = 0;
  let sent = 0;
  const max = limit ?? Infinity;
  return {
    start: async () =>
      loops(WORKERS, async (id, running) => {
        let i = 0;
        while (running() && sent < max) {
          sent++;
          const n = i++;
          const r = await rest("POST", "/jobs", {
            workload,
            input_uri: `s3://one/${id}/${n}`,
            input_sha256: SHA,
            ...(how === "keyed" ? { idempotency_key: `${workload}-${id}-${n}` } : {}),
          });
          if (r.status !== 201) throw new Error(`POST /jobs answered ${r.status}`);
          done++;
        }
      }),
    count: () => done,
  };
}

async function jobsVariant(
  round: number,
  name: string,
  opts: {
    coordinator: Coordinator;
    rest: () => Rest & { close?: () => void };
    drained: boolean;
    how: "tasks" | "input" | "keyed";
    fresh?: boolean;
  },
) {
  const workload = `jobs_${seq++}`;
  await store.putWorkload({ name: workload, leaseSeconds: 300, maxAttempts: 3 });
  const coordinator = opts.fresh ? await startCoordinator(db.url, { PG_POOL_MAX: "8" }) : opts.coordinator;
  await quiet(db.url);
  const rest = opts.fresh ? httpClient(coordinator.url, WORKERS) : opts.rest();
  try {
    const load = submitters(rest, workload, opts.how, opts.drained ? DRAIN : undefined);
    record(name, round, opts.drained ? await drain(load, DRAIN, coordinator) : await window(load, timing(coordinator)));
  } finally {
    rest.close?.();
    if (opts.fresh) await coordinator.stop();
  }
}

/**
 * A coordinator's first tasks: one started for it drains 2 × DRAIN chained single tasks over
 * node:http; the tasks done in each second, so the warm-up shows as a curve.
 */
async function warmupCurve(round: number) {
  const workload = `curve_${seq++}`;
  await fillLeasehold(store, workload, 2 * DRAIN);
  await withClient(db.url, (c) => c.query("ANALYZE"));
  const coordinator = await startCoordinator(db.url, { PG_POOL_MAX: "8" });
  await quiet(db.url);
  const rest = httpClient(coordinator.url, WORKERS);
  const load = leaseholdClaimComplete(rest, workload, { workers: WORKERS, maxTasks: 1, untilEmpty: true });
  const perSecond: number[] = [];
  try {
    const stop = await load.start();
    let last = 0;
    while (load.count() < 2 * DRAIN && perSecond.length < 120) {
      await new Promise((r) => setTimeout(r, 1000));
      perSecond.push(load.count() - last);
      last = load.count();
    }
    await stop();
  } finally {
    rest.close();
    await coordinator.stop();
  }
  curves.push(perSecond);
  console.error(`[round ${round}] warm-up curve (tasks a second from the start): ${perSecond.join(", ")}`);
}
const curves: number[][] = [];
const VARIANTS = (() => {
  const i = process.argv.indexOf("--variants");
  return i >= 0 ? new Set(process.argv[i + 1].split(",")) : undefined;
})();
/** Whether a variant (its name's first word, S3 or J4) runs: all without --variants. */
const runs = (name: string) => VARIANTS === undefined || VARIANTS.has(name.split(" ")[0]);

const undici = (c: Coordinator) => () => restClient(c.url, WORKERS * 2);
const nodeHttp = (c: Coordinator) => () => httpClient(c.url, WORKERS);

try {
  for (let round = 1; round <= RUNS; round++) {
    const schema = `gw_${round}`;
    const utils = await peers.graphile.makeWorkerUtils({ connectionString: gwUrl, schema, logger: peers.graphile.quietLogger });
    await utils.migrate();
    try {
      const clear = () => withClient(gwUrl, (c) => c.query(`DELETE FROM ${schema}._private_jobs`));
      const fillGw = async (n: number) => {
        for (let d = 0; d < n; d += 10_000)
          await utils.addJobs(Array.from({ length: Math.min(10_000, n - d) }, (_, i) => ({ identifier: "peers", payload: { i } })));
        await withClient(gwUrl, (c) => c.query("ANALYZE"));
      };
      const gwLoad = (): Load => {
        let done = 0;
        return {
          start: async () => {
            const runner = await peers.graphile.run({
              connectionString: gwUrl,
              schema,
              concurrency: WORKERS,
              noHandleSignals: true,
              logger: peers.graphile.quietLogger,
              taskList: { peers: async () => void done++ },
            });
            return () => runner.stop();
          },
          count: () => done,
        };
      };
      // Single task: graphile-worker both ways, then each Leasehold variant.
      await fillGw(Math.max(40_000, Math.ceil(SECONDS + 2) * 8000));
      await quiet(db.url);
      record("graphile-worker, window", round, await window(gwLoad(), timing(compiled)));
      await clear();
      await fillGw(DRAIN);
      await quiet(db.url);
      record("graphile-worker, drain", round, await drain(gwLoad(), DRAIN, compiled));
      await clear();
      if (runs("S0 undici, window (bench:peers)"))
        await singleVariant(round, "S0 undici, window (bench:peers)", { coordinator: compiled, rest: undici(compiled), drained: false });
      if (runs("S1 node:http, window"))
        await singleVariant(round, "S1 node:http, window", { coordinator: compiled, rest: nodeHttp(compiled), drained: false });
      if (runs("S2 undici, drain"))
        await singleVariant(round, "S2 undici, drain", { coordinator: compiled, rest: undici(compiled), drained: true });
      if (runs("S3 node:http, drain (acceptance)"))
        await singleVariant(round, "S3 node:http, drain (acceptance)", { coordinator: compiled, rest: nodeHttp(compiled), drained: true });
      if (runs("S4 node:http, drain, coordinator just started"))
        await singleVariant(round, "S4 node:http, drain, coordinator just started", {
          coordinator: compiled,
          rest: nodeHttp(compiled),
          drained: true,
          fresh: true,
        });
      if (runs("S5 node:http, drain, coordinator under tsx"))
        await singleVariant(round, "S5 node:http, drain, coordinator under tsx", {
          coordinator: sources,
          rest: nodeHttp(sources),
          drained: true,
        });
      if (runs("S6 undici, window, coordinator under tsx"))
        await singleVariant(round, "S6 undici, window, coordinator under tsx", {
          coordinator: sources,
          rest: undici(sources),
          drained: false,
        });

      if (runs("S7"))
        await singleVariant(round, "S7 undici, window, coordinator just started", {
          coordinator: compiled,
          rest: undici(compiled),
          drained: false,
          fresh: true,
        });
      if (runs("curve")) await warmupCurve(round);

      // One-task jobs.
      await quiet(db.url);
      record("addJob ×16, window", round, await window(addJobLoad(utils), timing(compiled)));
      await clear();
      await quiet(db.url);
      record("addJob ×16, drain", round, await drain(addJobLoad(utils, DRAIN), DRAIN, compiled));
      await clear();
      if (runs("J0 undici, window, tasks [one] (bench:peers)"))
        await jobsVariant(round, "J0 undici, window, tasks [one] (bench:peers)", {
          coordinator: compiled,
          rest: undici(compiled),
          drained: false,
          how: "tasks",
        });
      if (runs("J1 node:http, window"))
        await jobsVariant(round, "J1 node:http, window", { coordinator: compiled, rest: nodeHttp(compiled), drained: false, how: "tasks" });
      if (runs("J2 node:http, drain"))
        await jobsVariant(round, "J2 node:http, drain", { coordinator: compiled, rest: nodeHttp(compiled), drained: true, how: "tasks" });
      if (runs("J3 node:http, drain, the job's own input (no tasks list)"))
        await jobsVariant(round, "J3 node:http, drain, the job's own input (no tasks list)", {
          coordinator: compiled,
          rest: nodeHttp(compiled),
          drained: true,
          how: "input",
        });
      if (runs("J4 node:http, drain, an idempotency key each"))
        await jobsVariant(round, "J4 node:http, drain, an idempotency key each", {
          coordinator: compiled,
          rest: nodeHttp(compiled),
          drained: true,
          how: "keyed",
        });
      if (runs("J5 node:http, drain, coordinator under tsx"))
        await jobsVariant(round, "J5 node:http, drain, coordinator under tsx", {
          coordinator: sources,
          rest: nodeHttp(sources),
          drained: true,
          how: "tasks",
        });
      if (runs("J7 node:http, drain, coordinator just started"))
        await jobsVariant(round, "J7 node:http, drain, coordinator just started", {
          coordinator: compiled,
          rest: nodeHttp(compiled),
          drained: true,
          how: "tasks",
          fresh: true,
        });
      if (runs("J6 undici, window, coordinator under tsx"))
        await jobsVariant(round, "J6 undici, window, coordinator under tsx", {
          coordinator: sources,
          rest: undici(sources),
          drained: false,
          how: "tasks",
        });
    } finally {
      await utils.release();
    }
  }
} finally {
  await compiled.stop();
  await sources.stop();
  await pool.end();
  await db.stop();
}

const cpuCell = (xs: CpuPerItem[]) =>
  `${fmt(med(xs.map((x) => x.coordinator)), 3)} | ${fmt(med(xs.map((x) => x.postgres)), 3)} | ${fmt(med(xs.map((x) => x.self)), 3)}`;
console.log(
  `\nbench/peers-methods.ts — ${RUNS} round(s), ${WORKERS} workers, ${SECONDS}s windows, drains of ${fmt(DRAIN)}, ${os.cpus().length} cores, node ${process.version}; load average at the end ${os
    .loadavg()
    .map((l) => l.toFixed(2))
    .join(" ")}`,
);
console.log("ratio = Leasehold / graphile-worker of the same round, timed the same way (window or drain); medians (rounds)");
console.log("CPU per task, ms: coordinator | PostgreSQL server | this process\n");
for (const [name, rs] of results) {
  const peerName = name.startsWith("S")
    ? name.includes("drain")
      ? "graphile-worker, drain"
      : "graphile-worker, window"
    : name.startsWith("J")
      ? name.includes("drain")
        ? "addJob ×16, drain"
        : "addJob ×16, window"
      : undefined;
  const peer = peerName ? results.get(peerName) : undefined;
  const ratios = peer ? rs.map((r) => r.rate / (peer.find((p) => p.round === r.round)?.rate ?? NaN)) : [];
  console.log(
    `${name.padEnd(60)} ${fmt(med(rs.map((r) => r.rate))).padStart(7)}/s  ${
      peer ? `${fmt(med(ratios), 2)}× (${ratios.map((x) => fmt(x, 2)).join(", ")})` : ""
    }`.padEnd(100) + `  ${cpuCell(rs.map((r) => r.cpu))}`,
  );
}
for (const [i, c] of curves.entries())
  console.log(`warm-up curve, round ${i + 1} (tasks a second from a coordinator's start): ${c.join(", ")}`);
console.log(`(total ${fmt(performance.now() / 1000)} s)`);
process.exit(0);
