// The full text of the hot statements, one readable file each under test/sql/. They are composed
// from fragments (claimCtes, statusEvents, watchedJobs, …) and their text is nowhere else in one
// piece: a change to a fragment changes every statement built from it, and this test fails until
// the snapshots are written anew and the change is read in the diff:
//
//   npx vitest run test/store/sql-snapshots.test.ts -u
//
// CI runs with CI=true, where vitest refuses to write a missing snapshot: commit the files.
import { describe, expect, it } from "vitest";
import { CLAIM_TASK, CLAIM_TASKS } from "../../src/store/postgres/operations/claim.js";
import {
  COMPLETE_TASK,
  COMPLETE_TASK_AND_CLAIM,
  COMPLETE_TASK_AND_CLAIM_ONE,
  COMPLETE_TASKS,
  COMPLETE_TASKS_AND_CLAIM,
} from "../../src/store/postgres/operations/complete.js";
import { FAIL_TASK, RENEW_LEASE, REPORT_PROGRESS } from "../../src/store/postgres/operations/lease.js";
import {
  COALESCED_CLAIM,
  COALESCED_COMPLETE_AND_CLAIM,
  COALESCED_COMPLETE_AND_CLAIM_LEAN,
  COALESCED_COMPLETE_THEN_CLAIM,
  COALESCED_FAIL,
  COALESCED_RENEW,
  GIVE_BACK,
} from "../../src/store/postgres/coalescing/coalesced-statements.js";
import { WATCHED_JOBS_WITH_EVENTS } from "../../src/store/postgres/state/watch-hub.js";
import { JOB_EVENTS_SINCE } from "../../src/store/postgres/operations/watch.js";

/** A statement as its module exports it: its text, or a defineQuery definition of it. */
type Statement = string | { text: string };

const HOT: Record<string, Statement> = {
  CLAIM_TASK,
  CLAIM_TASKS,
  COMPLETE_TASK,
  COMPLETE_TASK_AND_CLAIM,
  COMPLETE_TASK_AND_CLAIM_ONE,
  COMPLETE_TASKS,
  COMPLETE_TASKS_AND_CLAIM,
  RENEW_LEASE,
  FAIL_TASK,
  REPORT_PROGRESS,
  COALESCED_CLAIM,
  COALESCED_COMPLETE_AND_CLAIM,
  COALESCED_COMPLETE_AND_CLAIM_LEAN,
  COALESCED_COMPLETE_THEN_CLAIM,
  COALESCED_FAIL,
  COALESCED_RENEW,
  GIVE_BACK,
  JOB_EVENTS_SINCE,
  WATCHED_JOBS_WITH_EVENTS,
};

describe("the hot statements' composed text", () => {
  it.each(Object.entries(HOT))("%s matches test/sql/", async (name, statement) => {
    const text = typeof statement === "string" ? statement : statement.text;
    const file = `-- ${name}, as the store sends it (written by test/store/sql-snapshots.test.ts: do not edit by hand).\n${text.trim()}\n`;
    await expect(file).toMatchFileSnapshot(`../sql/${name.toLowerCase()}.sql`);
  });
});
