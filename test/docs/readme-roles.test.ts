// The roles table of docs/authentication.md is the one ACCESS (src/api/auth.ts) generates: a changed
// rule without `npm run docs:roles` fails here.
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { ROLES_PAGE, rolesTable, withRolesTable } from "../../scripts/roles-table.js";

describe("the roles table of docs/authentication.md", () => {
  it("matches ACCESS (npm run docs:roles regenerates it)", () => {
    const page = readFileSync(ROLES_PAGE, "utf8");
    expect(withRolesTable(page)).toBe(page);
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
      "CreateWorkflow",
      "GetWorkflow",
      "ListWorkflows",
      "WatchWorkflow",
      "CancelWorkflow",
      "RetryWorkflow",
    ])
      expect(submitter).toContain(`\`${rpc}\``);
    expect(submitter.match(/`[A-Z]\w+`/g)).toHaveLength(15);
    expect(table.split("\n").find((l) => l.startsWith("| `worker`"))).toContain("`ReportProgress`");
    expect(table.split("\n").find((l) => l.startsWith("| `admin`"))).toContain("`PutWorkload` and `ListWorkloads`");
  });
});
