// `leasehold job create --run-at ... --finalizer-workload ...` as a real child process against a
// real coordinator: the job is scheduled with its finalizer, `job get` says so, `jobs list
// --status scheduled` finds it, and a bad --run-at is a usage error (exit 2) that sends nothing.
import { afterAll, beforeAll, expect, it } from "vitest";
import { parseRunAt } from "../../src/cli/commands/job.js";
import { UsageError } from "../../src/cli/errors.js";
import { createTestDatabase, type TestDatabase } from "../support/db.js";
import { killAll, spawnCoordinator } from "../support/process.js";
import { sha } from "../support/queue.js";
import { runCli } from "../support/cli.js";

let db: TestDatabase;
let base: string;

beforeAll(async () => {
  db = await createTestDatabase();
  base = await spawnCoordinator({ DATABASE_URL: db.url, PORT: "0" }).listening();
  for (const name of ["cl_chunks", "cl_stitch"]) {
    const res = await fetch(`${base}/workloads/${name}`, { method: "PUT", headers: { "content-type": "application/json" }, body: "{}" });
    expect(res.status).toBe(200);
  }
});

afterAll(async () => {
  await killAll();
  await db?.drop();
});

const cli = (args: string[]) => runCli(["--url", base, ...args]);

it("parses --run-at as RFC 3339 or +DURATION, and refuses anything else", () => {
  expect(parseRunAt("2030-01-02T03:04:05Z")?.toISOString()).toBe("2030-01-02T03:04:05.000Z");
  expect(parseRunAt("2030-01-02T03:04:05+01:00")?.toISOString()).toBe("2030-01-02T02:04:05.000Z");
  const before = Date.now();
  const at = parseRunAt("+1h30m")!.getTime();
  expect(at - before).toBeGreaterThanOrEqual(90 * 60_000);
  expect(at - before).toBeLessThan(90 * 60_000 + 5000);
  for (const bad of ["tomorrow", "+", "+5x", "+5m3", "2030-01-02", true]) expect(() => parseRunAt(bad)).toThrow(UsageError);
});

it("job create --run-at --finalizer-workload makes a scheduled job with its finalizer; job get and jobs list show it", async () => {
  const made = await cli([
    "--json",
    "job",
    "create",
    "cl_chunks",
    "--input-uri",
    "s3://in/0",
    "--input-sha256",
    sha("0"),
    "--run-at",
    "+2h",
    "--finalizer-workload",
    "cl_stitch",
    "--finalizer-parameters",
    '{"out":"s3://manifest"}',
    "--finalizer-on-failure",
  ]);
  expect(made.code, made.stderr).toBe(0);
  const job = JSON.parse(made.stdout).job;
  expect(job.status).toBe("JOB_STATUS_SCHEDULED");
  expect(job.finalizer).toMatchObject({ workload: "cl_stitch", parameters: { out: "s3://manifest" } });
  expect(job.finalizer.run_on_failure ?? job.finalizer.runOnFailure).toBe(true);

  const got = await cli(["job", "get", job.id]);
  expect(got.code, got.stderr).toBe(0);
  expect(got.stdout).toContain("status:   scheduled");
  expect(got.stdout).toMatch(/run at: +\d{4}-/);
  expect(got.stdout).toContain("finalizer: cl_stitch");

  const listed = await cli(["--json", "jobs", "list", "--status", "scheduled"]);
  expect(listed.code, listed.stderr).toBe(0);
  expect(JSON.parse(listed.stdout).jobs.map((j: { id: string }) => j.id)).toEqual([job.id]);
});

it("a bad --run-at (or a finalizer flag without its workload) is a usage error, and no job is made", async () => {
  const bad = await cli(["job", "create", "cl_chunks", "--input-uri", "s3://in/1", "--input-sha256", sha("1"), "--run-at", "soon"]);
  expect(bad.code).toBe(2);
  expect(bad.stderr).toContain("--run-at must be");
  const orphan = await cli([
    "job",
    "create",
    "cl_chunks",
    "--input-uri",
    "s3://in/1",
    "--input-sha256",
    sha("1"),
    "--finalizer-on-failure",
  ]);
  expect(orphan.code).toBe(2);
  const far = await cli(["job", "create", "cl_chunks", "--input-uri", "s3://in/1", "--input-sha256", sha("1"), "--run-at", "+400d"]);
  expect(far.code).not.toBe(0);
  expect(far.stderr).toContain("run_at");
  const listed = await cli(["--json", "jobs", "list"]);
  expect(JSON.parse(listed.stdout).jobs).toHaveLength(1);
});
