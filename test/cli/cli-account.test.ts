// `leasehold account put|get|list` end to end: each command runs as a real child process
// (node --import tsx src/cli/main.ts) against a real coordinator process over a migrated database
// of its own; and `job create --account` takes the account's priority and quota.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase, type TestDatabase } from "../support/db.js";
import { killAll, spawnCoordinator } from "../support/process.js";
import { sha } from "../support/queue.js";
import { restCall } from "../support/rest.js";
import { runCli } from "../support/cli.js";

let db: TestDatabase;
let base: string;

beforeAll(async () => {
  db = await createTestDatabase();
  base = await spawnCoordinator({ DATABASE_URL: db.url, PORT: "0" }).listening();
  expect((await restCall(base, "PUT", "/workloads/render", {})).status).toBe(200);
});

afterAll(async () => {
  await killAll();
  await db?.drop();
});

const cli = (args: string[]) => runCli(["--url", base, ...args]);

describe("leasehold account", () => {
  it("put, get, list, and job create --account", async () => {
    const put = await cli(["account", "put", "acme", "--max-pending-tasks", "1", "--priority", "-4"]);
    expect(put.code, put.stderr).toBe(0);
    expect(put.stdout.trim()).toBe("account acme: max_pending_tasks 1, priority -4, pending_tasks 0");

    const job = await cli([
      "--json",
      "job",
      "create",
      "render",
      "--input-uri",
      "s3://in/a",
      "--input-sha256",
      sha("a"),
      "--account",
      "acme",
    ]);
    expect(job.code, job.stderr).toBe(0);
    expect(JSON.parse(job.stdout).job).toMatchObject({ account: "acme", priority: -4, concurrency_key: "acme" });

    // The quota is full: the second job is refused (exit 1, resource_exhausted naming the numbers).
    const refused = await cli(["job", "create", "render", "--input-uri", "s3://in/b", "--input-sha256", sha("b"), "--account", "acme"]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain("resource_exhausted");
    expect(refused.stderr).toContain("max_pending_tasks of 1");

    const got = await cli(["account", "get", "acme"]);
    expect(got.code, got.stderr).toBe(0);
    expect(got.stdout.trim()).toBe("account acme: max_pending_tasks 1, priority -4, pending_tasks 1");
    const gotJson = await cli(["--json", "account", "get", "acme"]);
    expect(JSON.parse(gotJson.stdout).account).toMatchObject({ name: "acme", max_pending_tasks: 1, priority: -4, pending_tasks: 1 });

    expect((await cli(["account", "put", "beta"])).code).toBe(0);
    const list = await cli(["account", "list"]);
    expect(list.code, list.stderr).toBe(0);
    const lines = list.stdout.trim().split("\n");
    expect(lines[0]).toMatch(/^NAME\s+MAX_PENDING_TASKS\s+PRIORITY\s+PENDING\s+UPDATED$/);
    expect(lines.slice(1).map((l) => l.split(/\s+/).slice(0, 4))).toEqual([
      ["acme", "1", "-4", "1"],
      ["beta", "-", "0", "0"],
    ]);

    const missing = await cli(["account", "get", "nobody"]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain("not_found");
    const bad = await cli(["account", "put", "acme", "--priority", "high"]);
    expect(bad.code).toBe(2);
  });
});
