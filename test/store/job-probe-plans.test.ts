// "Has this job anything unfinished?" is asked after completions and failures, by the settle and
// by the reaper's pass over stalled jobs. The coordinator's sessions leave sequential scans on, so
// the probe's own shape must keep it on tasks_job_unfinished_idx: as a NOT EXISTS, statistics that
// see most of the table as one job's pending tasks made a sequential scan look like it finds a
// match at once, and for a job with nothing left that scan reads the whole table. Checked as the
// coordinator plans it (a generic plan, on its pool's session settings), with empty statistics and
// with one big pending job analyzed, on every version of the matrix.
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { COMPLETE_TASK } from "../../src/store/postgres/operations/complete.js";
import { END_JOB, FINISH_JOBS_IF_DONE, STALLED_JOBS } from "../../src/store/postgres/operations/job-end.js";
import { queueFixture, sha, type QueueFixture } from "../support/queue.js";

let fx: QueueFixture;
let bigJob: string;
let doneJob: string;

beforeAll(async () => {
  fx = await queueFixture();
  await fx.queue.putWorkload({ name: "probe" });
  bigJob = (await fx.queue.createJob({ workload: "probe", inputUri: "s3://probe/big", inputSha256: sha("big") })).job.id;
  doneJob = (await fx.queue.createJob({ workload: "probe", inputUri: "s3://probe/done", inputSha256: sha("done") })).job.id;
  await fx.pool.query(
    "UPDATE tasks SET status = 'completed', completed_at = now(), result_uri = 's3://probe/out', result_sha256 = $2 WHERE job_id = $1",
    [doneJob, sha("out")],
  );
  await fx.pool.query("UPDATE jobs SET status = 'running' WHERE id = ANY($1::uuid[])", [[bigJob, doneJob]]);
});

afterAll(async () => {
  await fx?.close();
});

/** The generic plan of `text` (as the coordinator's prepared statements get), not executed. */
async function genericPlan(c: pg.PoolClient, name: string, text: string, values: string[]): Promise<string> {
  await c.query(`PREPARE ${name} AS ${text}`);
  try {
    const args = values.join(", ");
    const { rows } = await c.query(`EXPLAIN EXECUTE ${name}${args ? `(${args})` : ""}`);
    return rows.map((r) => r["QUERY PLAN"] as string).join("\n");
  } finally {
    await c.query(`DEALLOCATE ${name}`);
  }
}

async function plans(): Promise<Record<string, string>> {
  const c = await fx.pool.connect();
  try {
    const job = c.escapeLiteral(doneJob);
    const task = c.escapeLiteral((await c.query("SELECT id FROM tasks WHERE job_id = $1", [doneJob])).rows[0].id as string);
    return {
      finishJobs: await genericPlan(c, "p_finish", FINISH_JOBS_IF_DONE, [`ARRAY[${job}]::uuid[]`]),
      endJob: await genericPlan(c, "p_end", END_JOB.text, [job]),
      stalledJobs: await genericPlan(c, "p_stalled", STALLED_JOBS.text, ["10"]),
      completeTask: await genericPlan(c, "p_complete", COMPLETE_TASK, [
        task,
        "'w'",
        "1",
        "'s3://x'",
        c.escapeLiteral(sha("x")),
        "'{}'",
        "NULL",
      ]),
    };
  } finally {
    c.release();
  }
}

function expectIndexProbes(all: Record<string, string>): void {
  for (const [name, plan] of Object.entries(all)) {
    expect(plan, name).not.toMatch(/Seq Scan on tasks/);
    expect(plan, name).toMatch(/tasks_job_unfinished_idx/);
  }
}

describe("the job's 'nothing unfinished' probes", () => {
  it("read tasks_job_unfinished_idx with empty statistics", async () => {
    expectIndexProbes(await plans());
  });

  it("read tasks_job_unfinished_idx when the statistics see one job's pending tasks as most of the table", async () => {
    await fx.pool.query(
      `INSERT INTO tasks (job_id, chunk_index, workload, input_uri, input_sha256, max_attempts, status)
       SELECT $1, g, 'probe', 's3://probe/big/' || g, $2, 3, 'pending' FROM generate_series(1, 20000) g`,
      [bigJob, sha("big")],
    );
    await fx.pool.query("ANALYZE tasks");
    expectIndexProbes(await plans());
  });
});
