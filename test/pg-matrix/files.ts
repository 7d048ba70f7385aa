// The test files the PostgreSQL version matrix (npm run test:pg) runs on each version: everything
// whose outcome depends on the server (the store and its SQL, claims, fencing, the event log and
// LISTEN/NOTIFY, migrations up and down, the API end to end without injected faults). Left out:
// fault injection and process-lifecycle files (faults, run, shutdown, cli), the Python and
// browser suites, and files that test no server behaviour (codecs, routes, logging, tracing, auth),
// which the embedded default of `npm test` covers once.
export const PG_MATRIX_FILES = [
  "test/migrations.test.ts",
  "test/queue.test.ts",
  "test/create-job.test.ts",
  "test/claim-next.test.ts",
  "test/long-poll.test.ts",
  "test/operate.test.ts",
  "test/watch-hub.test.ts",
  "test/deadline.test.ts",
  "test/pg-arrays.test.ts",
  "test/pg-copy.test.ts",
  "test/pg-types.test.ts",
  "test/api.test.ts",
  "test/inspect.test.ts",
  "test/schedules.test.ts",
  "test/idle-cost.test.ts",
  "test/job-probe-plans.test.ts",
];
