// The test files the PostgreSQL version matrix (npm run test:pg) runs on each version: everything
// whose outcome depends on the server (the store and its SQL, claims, fencing, the event log and
// LISTEN/NOTIFY, migrations up and down, the API end to end without injected faults). Left out:
// fault injection and process-lifecycle files (faults, run, shutdown, cli), the Python and
// browser suites, and files that test no server behaviour (codecs, routes, logging, tracing, auth),
// which the embedded default of `npm test` covers once.
export const PG_MATRIX_FILES = [
  "test/store/migrations.test.ts",
  "test/store/queue.test.ts",
  "test/store/create-job.test.ts",
  "test/api/claim-next.test.ts",
  "test/store/long-poll.test.ts",
  "test/store/operate.test.ts",
  "test/store/watch-hub.test.ts",
  "test/store/deadline.test.ts",
  "test/store/pg-arrays.test.ts",
  "test/store/pg-copy.test.ts",
  "test/store/pg-types.test.ts",
  "test/api/api.test.ts",
  "test/api/inspect.test.ts",
  "test/store/schedules.test.ts",
  "test/store/idle-cost.test.ts",
  "test/store/job-probe-plans.test.ts",
];
