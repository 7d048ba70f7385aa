// The cost of defineQuery (src/store/postgres/query.ts) against a hand-written values array, on a
// client that answers at once: what the helper adds to each call, isolated from PostgreSQL (whose
// round trip is ~100 µs or more). Rounds alternate A and B so a loaded machine slows both alike;
// the medians are reported. `node --import tsx bench/define-query.ts [rounds]`.
import { CLAIM_TASKS } from "../src/store/postgres/claim.js";
import { defineQuery, type Queryable } from "../src/store/postgres/query.js";

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
}
const CLAIM = defineQuery<ClaimParams, { id: string }>("leasehold_claim_tasks", CLAIM_TASKS, (p) => [
  p.workloads,
  p.limit,
  p.workerId,
  p.leaseSeconds,
  p.labels,
]);

const claim = { workloads: ["render"], maxTasks: 8, workerId: "w-1", leaseSeconds: null, labels: "{}" };
const CALLS = 200_000;

async function direct(): Promise<void> {
  for (let i = 0; i < CALLS; i++) {
    const { rows } = await client.query({
      name: "leasehold_claim_tasks",
      text: CLAIM_TASKS,
      values: [claim.workloads, claim.maxTasks, claim.workerId, claim.leaseSeconds ?? null, claim.labels],
    });
    sink += rows.length;
  }
}

async function helper(): Promise<void> {
  for (let i = 0; i < CALLS; i++) {
    const rows = await CLAIM.run(client, {
      workloads: claim.workloads,
      limit: claim.maxTasks,
      workerId: claim.workerId,
      leaseSeconds: claim.leaseSeconds ?? null,
      labels: claim.labels,
    });
    sink += rows.length;
  }
}

async function time(fn: () => Promise<void>): Promise<number> {
  const t = process.hrtime.bigint();
  await fn();
  return Number(process.hrtime.bigint() - t) / CALLS;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const rounds = Number(process.argv[2] ?? 11);
const a: number[] = [];
const b: number[] = [];
await time(direct);
await time(helper);
for (let r = 0; r < rounds; r++) {
  a.push(await time(direct));
  b.push(await time(helper));
}
console.log(
  JSON.stringify({
    rounds,
    callsPerRound: CALLS,
    directNsPerCall: Math.round(median(a)),
    defineQueryNsPerCall: Math.round(median(b)),
    addedNsPerCall: Math.round(median(b.map((x, i) => x - a[i]))),
    sink: sink > 0,
  }),
);
