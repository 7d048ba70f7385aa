// The cost of defineQuery and namedQuery (src/store/postgres/sql/query.ts) against a hand-written values array, on a
// client that answers at once: what the helper adds to each call, isolated from PostgreSQL (whose
// round trip is ~100 µs or more). Rounds alternate A and B so a loaded machine slows both alike;
// the medians are reported. `node --import tsx bench/define-query.ts [rounds] [--pg]`: with --pg,
// also one named statement's round trip on a real PostgreSQL (DATABASE_URL, else embedded), by hand
// and through defineQuery, alternating.
import pg from "pg";
import { CLAIM_TASKS } from "../src/store/postgres/operations/claim.js";
import { defineQuery, namedQuery, type Queryable } from "../src/store/postgres/sql/query.js";
import { startDatabase } from "./harness.js";

const answer = Promise.resolve({ rows: [{ id: "x" }] });
let sink = 0;
const client: Queryable = {
  query(config) {
    sink += config.values?.length ?? 0;
    return answer;
  },
};

interface ClaimParams {
  workloads: string[];
  limit: number;
  workerId: string;
  leaseSeconds: number | null;
  labels: string;
  hints: string;
}
const CLAIM = defineQuery<ClaimParams, { id: string }>("leasehold_claim_tasks", CLAIM_TASKS, (p) => [
  p.workloads,
  p.limit,
  p.workerId,
  p.leaseSeconds,
  p.labels,
  p.hints,
]);
// The same six parameters by name: the client ignores the text, so a text that names them is enough.
const NAMED_CLAIM = namedQuery<ClaimParams, { id: string }>(
  "leasehold_claim_tasks",
  "SELECT @workloads, @limit, @workerId, @leaseSeconds, @labels, @hints",
  ["workloads", "limit", "workerId", "leaseSeconds", "labels", "hints"],
);

const claim = { workloads: ["render"], maxTasks: 8, workerId: "w-1", leaseSeconds: null, labels: "{}", hints: "{}" };
const CALLS = 200_000;

async function direct(): Promise<void> {
  for (let i = 0; i < CALLS; i++) {
    const { rows } = await client.query({
      name: "leasehold_claim_tasks",
      text: CLAIM_TASKS,
      values: [claim.workloads, claim.maxTasks, claim.workerId, claim.leaseSeconds ?? null, claim.labels, claim.hints],
    });
    sink += rows.length;
  }
}

const helperOf = (q: typeof CLAIM) => async (): Promise<void> => {
  for (let i = 0; i < CALLS; i++) {
    const rows = await q.run(client, {
      workloads: claim.workloads,
      limit: claim.maxTasks,
      workerId: claim.workerId,
      leaseSeconds: claim.leaseSeconds ?? null,
      labels: claim.labels,
      hints: claim.hints,
    });
    sink += rows.length;
  }
};
const helper = helperOf(CLAIM);
const named = helperOf(NAMED_CLAIM);

async function time(fn: () => Promise<void>): Promise<number> {
  const t = process.hrtime.bigint();
  await fn();
  return Number(process.hrtime.bigint() - t) / CALLS;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const rounds = Number(process.argv.find((a) => /^\d+$/.test(a)) ?? 11);
const a: number[] = [];
const b: number[] = [];
const n: number[] = [];
await time(direct);
await time(helper);
await time(named);
for (let r = 0; r < rounds; r++) {
  a.push(await time(direct));
  b.push(await time(helper));
  n.push(await time(named));
}
console.log(
  JSON.stringify({
    rounds,
    callsPerRound: CALLS,
    directNsPerCall: Math.round(median(a)),
    defineQueryNsPerCall: Math.round(median(b)),
    addedNsPerCall: Math.round(median(b.map((x, i) => x - a[i]))),
    namedQueryNsPerCall: Math.round(median(n)),
    namedAddedNsPerCall: Math.round(median(n.map((x, i) => x - a[i]))),
    sink: sink > 0,
  }),
);

if (process.argv.includes("--pg")) {
  const PROBE_TEXT = "SELECT $2::int AS x WHERE $1::text IS NOT NULL";
  const PROBE = defineQuery<{ key: string; n: number }, { x: number }>("leasehold_bench_probe", PROBE_TEXT, (p) => [p.key, p.n]);
  const db = await startDatabase();
  const c = new pg.Client({ connectionString: db.url });
  await c.connect();
  const TRIPS = 5000;
  const trip = async (viaHelper: boolean) => {
    const t = process.hrtime.bigint();
    for (let i = 0; i < TRIPS; i++) {
      const rows = viaHelper
        ? await PROBE.run(c, { key: "k", n: i })
        : (await c.query<{ x: number }>({ name: "leasehold_bench_probe", text: PROBE_TEXT, values: ["k", i] })).rows;
      sink += rows.length;
    }
    return Number(process.hrtime.bigint() - t) / TRIPS / 1000;
  };
  await trip(false);
  await trip(true);
  const da: number[] = [];
  const db2: number[] = [];
  for (let r = 0; r < rounds; r++) {
    da.push(await trip(false));
    db2.push(await trip(true));
  }
  console.log(
    JSON.stringify({
      pg: true,
      rounds,
      tripsPerRound: TRIPS,
      directUsPerCall: +median(da).toFixed(1),
      defineQueryUsPerCall: +median(db2).toFixed(1),
      ratio: +(median(db2) / median(da)).toFixed(3),
      /** each round's defineQuery time over the by-hand time just before it */
      pairedRatio: +median(db2.map((x, i) => x / da[i])).toFixed(3),
    }),
  );
  await c.end();
  await db.stop();
}
