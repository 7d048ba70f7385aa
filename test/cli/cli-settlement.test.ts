// `leasehold settlements list` and `leasehold job settle` end to end: each command runs as a real
// child process (node --import tsx src/cli/main.ts) against a real coordinator process over a
// migrated database of its own. Jobs are made billable by SQL (an account, reserved_units), as
// CreateJob's billing context is another part of the money path.
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase, type TestDatabase } from "../support/db.js";
import { killAll, spawnCoordinator } from "../support/process.js";
import { sha } from "../support/queue.js";
import { restCall } from "../support/rest.js";
import { runCli } from "../support/cli.js";

let db: TestDatabase;
let base: string;
let sql: pg.Client;

beforeAll(async () => {
  db = await createTestDatabase();
  base = await spawnCoordinator({ DATABASE_URL: db.url, PORT: "0" }).listening();
  sql = new pg.Client({ connectionString: db.url });
  sql.on("error", () => {});
  await sql.connect();
  await sql.query(`INSERT INTO accounts (name) VALUES ('acme'), ('globex')`);
  expect((await restCall(base, "PUT", "/workloads/billed", {})).status).toBe(200);
});

afterAll(async () => {
  await sql?.end();
  await killAll();
  await db?.drop();
});

const cli = (args: string[]) => runCli(["--url", base, ...args]);

async function finalJob(account: string): Promise<string> {
  const created = await restCall(base, "POST", "/jobs", {
    workload: "billed",
    tasks: [{ chunk_index: 0, input_uri: "s3://in/0", input_sha256: sha(0) }],
  });
  const id = (created.body as { job: { id: string } }).job.id;
  await sql.query(`UPDATE jobs SET account = $2, reserved_units = 50 WHERE id = $1`, [id, account]);
  expect((await restCall(base, "POST", `/jobs/${id}/cancel`, {})).status).toBe(200);
  return id;
}

describe("leasehold settlements and job settle", () => {
  it("lists unsettled jobs (by account, as JSON), settles one once, and refuses another key and bad options", async () => {
    const a = await finalJob("acme");
    const g = await finalJob("globex");

    const list = await cli(["settlements", "list"]);
    expect(list.code, list.stderr).toBe(0);
    expect(list.stdout).toMatch(/^ID\s+STATUS\s+ACCOUNT\s+RESERVED\s+BILLING KEY\s+USAGE\s+FINAL/);
    expect(list.stdout).toContain(a);
    expect(list.stdout).toContain(g);

    const acme = await cli(["settlements", "list", "--account", "acme", "--json"]);
    expect(acme.code, acme.stderr).toBe(0);
    expect((JSON.parse(acme.stdout) as { jobs: { id: string }[] }).jobs.map((j) => j.id)).toEqual([a]);

    const settled = await cli(["job", "settle", a, "--key", "inv-1", "--units", "42"]);
    expect(settled.code, settled.stderr).toBe(0);
    expect(settled.stdout).toContain(`job ${a} settled: key inv-1, 42 units`);
    const again = await cli(["job", "settle", a, "--key", "inv-1", "--units", "42", "--json"]);
    expect(again.code, again.stderr).toBe(0);
    expect(JSON.parse(again.stdout)).toMatchObject({ job: { id: a, settlement: { settlement_key: "inv-1", settled_units: "42" } } });

    const conflict = await cli(["job", "settle", a, "--key", "inv-2", "--units", "42"]);
    expect(conflict.code).toBe(1);
    expect(conflict.stderr).toContain('settlement_key "inv-1"');
    const { rows } = await sql.query(`SELECT count(*)::int AS n FROM task_events WHERE job_id = $1 AND kind = 'job_settled'`, [a]);
    expect(rows[0].n).toBe(1);

    const left = await cli(["settlements", "list"]);
    expect(left.stdout).not.toContain(a);
    expect(left.stdout).toContain(g);

    for (const bad of [
      ["job", "settle", g, "--units", "1"],
      ["job", "settle", g, "--key", "k", "--units", "-1"],
      ["job", "settle", g, "--key", "k"],
    ]) {
      const r = await cli(bad);
      expect(r.code, bad.join(" ")).toBe(2);
    }
    expect((await cli(["settlements", "list", "--account", "acme"])).stdout).toBe("no unsettled jobs\n");
  }, 60_000);

  it("lists a late result's usage after its job was settled as an adjustment, and settles it once", async () => {
    const created = await restCall(base, "POST", "/jobs", { workload: "billed", input_uri: "s3://in/late", input_sha256: sha("late") });
    const id = (created.body as { job: { id: string } }).job.id;
    await sql.query(`UPDATE jobs SET account = 'globex' WHERE id = $1`, [id]);
    const claimed = await restCall(base, "POST", "/tasks/claim", { worker_id: "cli-w", workloads: ["billed"], max_tasks: 1 });
    const task = (claimed.body as { tasks: { id: string; job_id: string; attempt: number }[] }).tasks[0];
    expect(task.job_id).toBe(id);
    expect((await restCall(base, "POST", `/jobs/${id}/cancel`, {})).status).toBe(200);
    expect((await cli(["job", "settle", id, "--key", "late-1", "--units", "0"])).code).toBe(0);
    const late = await restCall(base, "POST", `/tasks/${task.id}/result`, {
      worker_id: "cli-w",
      attempt: task.attempt,
      result_uri: "s3://out/late",
      result_sha256: sha("out"),
      usage: { gpu_ms: "1200" },
    });
    expect(late.status).toBe(200);

    const list = await cli(["adjustments", "list", "--account", "globex"]);
    expect(list.code, list.stderr).toBe(0);
    expect(list.stdout).toMatch(/^ID\s+JOB\s+ACCOUNT\s+WORKLOAD\s+USAGE\s+ACCEPTED/);
    expect(list.stdout).toContain(id);
    expect(list.stdout).toContain("gpu_ms=1200");
    const listed = await cli(["adjustments", "list", "--json"]);
    const [adjustment] = (JSON.parse(listed.stdout) as { adjustments: { id: string; job_id: string }[] }).adjustments;
    expect(adjustment.job_id).toBe(id);

    const settled = await cli(["adjustment", "settle", adjustment.id, "--key", "adj-1", "--units", "12"]);
    expect(settled.code, settled.stderr).toBe(0);
    expect(settled.stdout).toContain(`adjustment ${adjustment.id} settled: key adj-1, 12 units`);
    expect((await cli(["adjustment", "settle", adjustment.id, "--key", "adj-2", "--units", "12"])).code).toBe(1);
    expect((await cli(["adjustments", "list"])).stdout).toBe("no unsettled adjustments\n");
  }, 60_000);
});
