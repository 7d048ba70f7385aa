// The dependencies migration's down with data in it: the release before cannot run a job that
// waits for its parents, so its down cancels every waiting job with its waiting tasks, deletes the
// schedules of workflows, and makes task_status again without 'waiting' (the tasks table rewritten
// with every other row as it was); up again brings it all back.
import { afterAll, beforeAll, expect, it } from "vitest";
import { migrate, readShippedSchema } from "../../src/store/postgres/schema/migrate.js";
import { createPool, PostgresQueue } from "../../src/store/postgres/store.js";
import { createEmptyDatabase, type TestDatabase } from "../support/db.js";
import { sha, TEST_STORE_OPTIONS } from "../support/queue.js";

let db: TestDatabase;

beforeAll(async () => {
  db = await createEmptyDatabase();
  await migrate(db.url, "up");
});
afterAll(async () => {
  await db?.drop();
});

it("down cancels the waiting jobs, keeps every other row, and drops the task status 'waiting'; up again works", async () => {
  const pool = createPool({ connectionString: db.url, max: 3, statementTimeoutMs: 30_000, connectTimeoutMs: 10_000 });
  const q = new PostgresQueue(pool, TEST_STORE_OPTIONS);
  let parent: string;
  let waiting: string;
  try {
    await q.putWorkload({ name: "mig" });
    parent = (await q.createJob({ workload: "mig", inputUri: "s3://p", inputSha256: sha("p") })).job.id;
    waiting = (
      await q.createJob({
        workload: "mig",
        tasks: [0, 1].map((i) => ({ chunkIndex: i, inputUri: `s3://c/${i}`, inputSha256: sha(i) })),
        after: [{ jobId: parent }],
      })
    ).job.id;
    await q.putSchedule({
      name: "mig-wf",
      cron: "0 3 * * *",
      workflow: { nodes: [{ name: "a", job: { workload: "mig", inputUri: "s3://w", inputSha256: sha("w") } }] },
    });
    await q.putSchedule({ name: "mig-job", cron: "0 3 * * *", job: { workload: "mig", inputUri: "s3://j", inputSha256: sha("j") } });
  } finally {
    q.stopTimers();
    await pool.end();
  }
  const before = await rows(`SELECT id, status::text FROM tasks WHERE job_id = '${parent}'`);
  // Down to the release before the dependencies migration (through any migration after it).
  const shipped = readShippedSchema().migrations;
  await migrate(db.url, "down", shipped.length - shipped.indexOf("1764630000000_dependencies"));
  expect(await rows(`SELECT id, status::text FROM tasks WHERE job_id = '${parent}'`)).toEqual(before);
  expect(await rows(`SELECT status::text, cancel_reason FROM jobs WHERE id = '${waiting}'`)).toEqual([
    { status: "cancelled", cancel_reason: "its parents were dropped by a rollback of the dependencies migration" },
  ]);
  expect(await rows(`SELECT DISTINCT status::text FROM tasks WHERE job_id = '${waiting}'`)).toEqual([{ status: "cancelled" }]);
  expect(await rows(`SELECT enum_range(NULL::task_status)::text AS r`)).toEqual([{ r: "{pending,leased,completed,failed,cancelled}" }]);
  expect(await rows(`SELECT name FROM schedules ORDER BY name`)).toEqual([{ name: "mig-job" }]);
  await migrate(db.url, "up");
  expect(await rows(`SELECT enum_range(NULL::task_status)::text AS r`)).toEqual([
    { r: "{pending,leased,completed,failed,cancelled,waiting}" },
  ]);
});

async function rows(sql: string): Promise<unknown[]> {
  const pool = createPool({ connectionString: db.url, max: 1, statementTimeoutMs: 30_000, connectTimeoutMs: 10_000 });
  try {
    return (await pool.query(sql)).rows;
  } finally {
    await pool.end();
  }
}
