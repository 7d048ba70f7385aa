// A setup file of every test project: the suite fails when pg warns that a client was handed a
// query while another was still queued on it. pg 9 turns that into an error, so a caller that
// pipelines on one client (the coordinator's code or a test's) must be fixed, not heard and
// forgotten. Node emits each deprecation once per process, with the caller's stack. Coordinators
// spawned by a test are checked by killAll (process.ts), which reads their stderr.
import { afterAll } from "vitest";
import { PG_QUEUED_QUERY } from "./process.js";

const heard: string[] = [];

process.on("warning", (warning) => {
  if (warning.name === "DeprecationWarning" && warning.message.includes(PG_QUEUED_QUERY)) heard.push(warning.stack ?? warning.message);
});

afterAll(() => {
  if (heard.length > 0) throw new Error(`pg: a query was queued behind another on one client:\n${heard.join("\n")}`);
});
