// A setup file of every test project: the suite fails when pg warns that a client was handed a
// query while another was still queued on it. pg 9 turns that into an error, so a caller that
// pipelines on one client (the coordinator's code or a test's) must be fixed, not heard and
// forgotten. Node emits each deprecation once per process, with the caller's stack. Coordinators
// spawned by a test are checked by killAll (process.ts), which reads their stderr.
//
// Test files share a worker process (vitest.config.ts, isolate: false), and this file runs before
// each of them: the listener is added once per process, and each file takes what was heard
// during it.
import { afterAll } from "vitest";
import { PG_QUEUED_QUERY } from "./process.js";

const shared = globalThis as { leaseholdPgWarnings?: string[] };
if (shared.leaseholdPgWarnings === undefined) {
  const heard: string[] = [];
  shared.leaseholdPgWarnings = heard;
  process.on("warning", (warning) => {
    if (warning.name === "DeprecationWarning" && warning.message.includes(PG_QUEUED_QUERY)) heard.push(warning.stack ?? warning.message);
  });
}
const heard = shared.leaseholdPgWarnings;
heard.length = 0;

afterAll(() => {
  const queued = heard.splice(0);
  if (queued.length > 0) throw new Error(`pg: a query was queued behind another on one client:\n${queued.join("\n")}`);
});
