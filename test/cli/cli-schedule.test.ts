// `leasehold schedule put|get|list|delete|pause|resume` end to end: each command runs as a real
// child process (node --import tsx src/cli/main.ts) against a real coordinator process over a
// migrated database of its own.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase, type TestDatabase } from "../support/db.js";
import { killAll, spawnCoordinator } from "../support/process.js";
import { sha } from "../support/queue.js";
import { restCall } from "../support/rest.js";
import { runCli } from "../support/cli.js";

let db: TestDatabase;
let base: string;
let tmp: string;

beforeAll(async () => {
  tmp = mkdtempSync(path.join(os.tmpdir(), "leasehold-cli-schedule-"));
  db = await createTestDatabase();
  base = await spawnCoordinator({ DATABASE_URL: db.url, PORT: "0" }).listening();
  expect((await restCall(base, "PUT", "/workloads/report", {})).status).toBe(200);
});

afterAll(async () => {
  await killAll();
  await db?.drop();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

const cli = (args: string[], stdin = "") => runCli(["--url", base, ...args], { stdin });

describe("leasehold schedule", () => {
  it("put (from a file and from stdin), get, list, pause, resume, delete", async () => {
    const jobFile = path.join(tmp, "job.json");
    writeFileSync(jobFile, JSON.stringify({ workload: "report", input_uri: "s3://in/daily", input_sha256: sha("daily") }));
    const put = await cli([
      "schedule",
      "put",
      "nightly",
      "--cron",
      "30 2 * * *",
      "--timezone",
      "Europe/Berlin",
      "--job",
      jobFile,
      "--overlap",
      "skip",
    ]);
    expect(put.code, put.stderr).toBe(0);
    expect(put.stdout).toMatch(/^created schedule nightly$/m);
    expect(put.stdout).toMatch(/30 2 \* \* \* in Europe\/Berlin, workload report/);
    expect(put.stdout).toMatch(/overlap skip, catch-up one/);
    expect(put.stdout).toMatch(/^next: \d{4}-/m);

    const viaStdin = await cli(
      ["--json", "schedule", "put", "nightly", "--cron", "0 0 4 * * *", "--job", "-", "--catch-up", "all", "--max-catch-up", "3"],
      JSON.stringify({ workload: "report", input_uri: "s3://in/daily", input_sha256: sha("daily") }),
    );
    expect(viaStdin.code, viaStdin.stderr).toBe(0);
    const replaced = JSON.parse(viaStdin.stdout);
    expect(replaced.created ?? false).toBe(false);
    expect(replaced.schedule).toMatchObject({ cron: "0 0 4 * * *", catch_up: "CATCH_UP_POLICY_ALL", max_catch_up: 3 });
    expect(replaced.schedule.next_fire_times).toHaveLength(5);

    const got = await cli(["--json", "schedule", "get", "nightly"]);
    expect(got.code, got.stderr).toBe(0);
    expect(JSON.parse(got.stdout).schedule.name).toBe("nightly");

    const list = await cli(["schedule", "list"]);
    expect(list.code, list.stderr).toBe(0);
    expect(list.stdout).toMatch(/^NAME +CRON +TIMEZONE +WORKLOAD +STATE +NEXT +LAST$/m);
    expect(list.stdout).toMatch(/^nightly +0 0 4 \* \* \* +UTC +report +active +\d{4}-/m);

    const paused = await cli(["schedule", "pause", "nightly"]);
    expect(paused.code, paused.stderr).toBe(0);
    expect((await cli(["schedule", "list"])).stdout).toMatch(/^nightly .* paused +- +- *$/m);
    expect((await cli(["schedule", "get", "nightly"])).stdout).toMatch(/^next: none$/m);
    const resumed = await cli(["schedule", "resume", "nightly"]);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(resumed.stdout).toMatch(/^next: \d{4}-/m);

    const deleted = await cli(["schedule", "delete", "nightly"]);
    expect(deleted.code, deleted.stderr).toBe(0);
    expect((await cli(["schedule", "list"])).stdout.trim()).toBe("no schedules");
  });

  it("an invalid cron is the coordinator's 400, exit 1, naming the field; a missing option is a usage error, exit 2; an unknown schedule exit 1", async () => {
    const jobFile = path.join(tmp, "job2.json");
    writeFileSync(jobFile, JSON.stringify({ workload: "report", input_uri: "s3://in/x", input_sha256: sha("x") }));
    const bad = await cli(["schedule", "put", "bad", "--cron", "61 * * * *", "--job", jobFile]);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/cron/);
    expect(bad.stderr).toMatch(/Invalid value for minute: 61/);
    const tz = await cli(["schedule", "put", "bad", "--cron", "* * * * *", "--timezone", "Nowhere/Land", "--job", jobFile]);
    expect(tz.code).toBe(1);
    expect(tz.stderr).toMatch(/timezone/);
    const noCron = await cli(["schedule", "put", "bad", "--job", jobFile]);
    expect(noCron.code).toBe(2);
    expect(noCron.stderr).toMatch(/--cron is required/);
    const badPolicy = await cli(["schedule", "put", "bad", "--cron", "* * * * *", "--job", jobFile, "--overlap", "never"]);
    expect(badPolicy.code).toBe(2);
    const missing = await cli(["schedule", "get", "nosuch"]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/not_found|not found/);
    expect((await cli(["schedule", "list"])).stdout.trim()).toBe("no schedules");
  });
});
