// `leasehold account usage` end to end: the CLI as a child process against a real coordinator
// process over a migrated database of its own, whose account_usage rows are written here (the
// rollup that writes them has its own tests).
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase, type TestDatabase } from "../support/db.js";
import { killAll, spawnCoordinator } from "../support/process.js";
import { runCli } from "../support/cli.js";

let db: TestDatabase;
let base: string;

beforeAll(async () => {
  db = await createTestDatabase();
  const c = new pg.Client({ connectionString: db.url });
  await c.connect();
  try {
    await c.query(`INSERT INTO accounts (name) VALUES ('acme')`);
    const insert = `INSERT INTO account_usage (account, hour, workload, jobs, tasks_completed, tasks_failed, lease_seconds, usage)
                    VALUES ('acme', $1, $2, $3::bigint, $3::bigint, 1, $4, $5)`;
    await c.query(insert, ["2026-01-01T10:00:00Z", "render", 2, 12.5, { gpu_ms: 100, tokens: 3 }]);
    await c.query(insert, ["2026-01-02T10:00:00Z", "render", 3, 1, { gpu_ms: 1 }]);
  } finally {
    await c.end();
  }
  base = await spawnCoordinator({ DATABASE_URL: db.url, PORT: "0" }).listening();
});

afterAll(async () => {
  await killAll();
  await db?.drop();
});

const cli = (args: string[]) => runCli(["--url", base, ...args]);

describe("leasehold account usage", () => {
  it("prints the account's usage per workload, over --from/--to, as a table or JSON", async () => {
    const all = await cli(["account", "usage", "acme"]);
    expect(all.stderr).toBe("");
    expect(all.code).toBe(0);
    expect(all.stdout).toMatch(/^WORKLOAD +JOBS +COMPLETED +FAILED +LEASE_SECONDS +USAGE$/m);
    expect(all.stdout).toMatch(/^render +5 +5 +2 +13\.5 +gpu_ms=101 tokens=3$/m);
    const day = await cli(["--json", "account", "usage", "acme", "--from", "2026-01-02", "--to", "2026-01-03"]);
    expect(day.code).toBe(0);
    expect(JSON.parse(day.stdout)).toMatchObject({
      account: "acme",
      workloads: [{ workload: "render", jobs: "3", usage: { gpu_ms: "1" } }],
    });
    const none = await cli(["account", "usage", "acme", "--from", "2027-01-01"]);
    expect(none.stdout.trim()).toBe("no usage recorded for account acme");
  });

  it("an unknown account is NOT_FOUND; a bad --from is bad usage", async () => {
    const missing = await cli(["account", "usage", "nobody"]);
    expect(missing.code).not.toBe(0);
    expect(missing.stderr).toMatch(/not found/i);
    const bad = await cli(["account", "usage", "acme", "--from", "yesterday"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/--from must be an RFC 3339 time/);
  });
});
