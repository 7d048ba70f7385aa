// The README's roles table is the one ACCESS (src/api/auth.ts) generates: a changed rule without
// `npm run docs:roles` fails here.
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { README, rolesTable, withRolesTable } from "../scripts/roles-table.js";

describe("README roles table", () => {
  it("matches ACCESS (npm run docs:roles regenerates it)", () => {
    const readme = readFileSync(README, "utf8");
    expect(withRolesTable(readme)).toBe(readme);
  });

  it("lists every submitter RPC, ReportProgress among the worker's, and admin's own calls", () => {
    const table = rolesTable();
    const submitter = table.split("\n").find((l) => l.startsWith("| `submitter`")) ?? "";
    for (const rpc of [
      "CreateJob",
      "GetJob",
      "ListCompletedResults",
      "CancelJob",
      "WatchJob",
      "RetryJob",
      "ListJobs",
      "ListTasks",
      "GetTask",
    ])
      expect(submitter).toContain(`\`${rpc}\``);
    expect(submitter.match(/`[A-Z]\w+`/g)).toHaveLength(9);
    expect(table.split("\n").find((l) => l.startsWith("| `worker`"))).toContain("`ReportProgress`");
    expect(table.split("\n").find((l) => l.startsWith("| `admin`"))).toContain("`PutWorkload` and `ListWorkloads`");
  });
});
