// The updates of job rows named by id (the claim's `running`, FINISH_JOBS_IF_DONE) find them through
// the primary key, whatever the statistics say of job statuses. With the status tested as it is,
// statistics that had seen no pending job made the generic plans go through an index of job
// statuses and filter on id (here jobs_unfinished_idx; in bench:horizon's keyed shape
// jobs_status_created_idx): under a held snapshot such an index keeps a dead entry for every job
// pending since, and the claim's update read 850 buffers after five minutes. Real PostgreSQL; the
// plans are the generic ones a pooled session settles on. Both tests fail with the status tested
// as it is.
import type pg from "pg";
import { afterAll, beforeAll, expect, it } from "vitest";
import { CLAIM_TASKS } from "../../src/store/postgres/operations/claim.js";
import { FINISH_JOBS_IF_DONE } from "../../src/store/postgres/operations/job-end.js";
import { queueFixture, sha, type QueueFixture } from "../support/queue.js";

let f: QueueFixture;
const W = "plans";

beforeAll(async () => {
  f = await queueFixture();
  await f.queue.putWorkload({ name: W, leaseSeconds: 60 });
  for (let j = 0; j < 40; j++) {
    await f.queue.createJob({ workload: W, tasks: [{ chunkIndex: 0, inputUri: `s3://plans/${j}`, inputSha256: sha(j) }] });
  }
  for (;;) {
    const ts = await f.queue.claimTasks({ workerId: "pw", workloads: [W], maxTasks: 10 });
    if (ts.length === 0) break;
    for (const t of ts) {
      await f.queue.completeTask({ taskId: t.id, workerId: "pw", attempt: t.attempt, resultUri: "s3://r", resultSha256: sha(t.id) });
    }
  }
  // Statistics of a table of 4,040 jobs that have all ended (copies of these 40, so a scan of the
  // whole table costs more than an index): pending and running are values they never saw.
  expect(await f.count("jobs", "status = 'completed'")).toBe(40);
  await f.pool.query(
    `INSERT INTO jobs SELECT (jsonb_populate_record(NULL::jobs, to_jsonb(j) || jsonb_build_object('id', gen_random_uuid()))).*
     FROM jobs j, generate_series(1, 100)`,
  );
  await f.pool.query("ANALYZE jobs");
}, 60_000);
afterAll(async () => {
  await f?.close();
});

interface PlanNode {
  "Node Type": string;
  "Relation Name"?: string;
  "Index Name"?: string;
  Plans?: PlanNode[];
}

/** The indexes of jobs the generic plan of `text` (prepared with `types`, run with `args`) reads. */
async function jobIndexes(text: string, types: string, args: string): Promise<string[]> {
  const c: pg.PoolClient = await f.pool.connect();
  try {
    await c.query("SET plan_cache_mode = force_generic_plan");
    await c.query(`PREPARE plan_probe (${types}) AS ${text}`);
    const { rows } = await c.query<{ "QUERY PLAN": { Plan: PlanNode }[] }>(`EXPLAIN (FORMAT JSON) EXECUTE plan_probe (${args})`);
    await c.query("DEALLOCATE plan_probe");
    const found: string[] = [];
    const walk = (n: PlanNode) => {
      if (n["Index Name"]?.startsWith("jobs_")) found.push(n["Index Name"]);
      for (const p of n.Plans ?? []) walk(p);
    };
    walk(rows[0]["QUERY PLAN"][0].Plan);
    return found;
  } finally {
    await c.query("RESET plan_cache_mode");
    c.release();
  }
}

it("the claim marks its jobs running through jobs' primary key", async () => {
  const used = await jobIndexes(
    CLAIM_TASKS,
    "text[], int, text, int, jsonb, jsonb",
    `ARRAY['${W}'], 4, 'pw', NULL, '{}'::jsonb, '{}'::jsonb`,
  );
  expect(used.length).toBeGreaterThan(0);
  expect(used.every((i) => i === "jobs_pkey")).toBe(true);
});

it("FINISH_JOBS_IF_DONE reads its jobs through jobs' primary key", async () => {
  const used = await jobIndexes(FINISH_JOBS_IF_DONE, "uuid[]", `ARRAY['${"0".repeat(8)}-0000-7000-8000-${"0".repeat(12)}']::uuid[]`);
  expect(used.length).toBeGreaterThan(0);
  expect(used.every((i) => i === "jobs_pkey")).toBe(true);
});
