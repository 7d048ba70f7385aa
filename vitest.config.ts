import { defineConfig } from "vitest/config";

/**
 * The API and transport suites: run a second time with DIRECT_UNARY=false, so every answer they
 * check is also checked when connect-es' router serves every call (the direct unary paths of
 * src/api/direct/ switched off).
 */
const API_SUITES = [
  "test/api.test.ts",
  "test/auth.test.ts",
  "test/bad-input.test.ts",
  "test/claim-next.test.ts",
  "test/create-job-rest.test.ts",
  "test/workload-not-found.test.ts",
  "test/delayed-finalizer-api.test.ts",
  "test/inspect.test.ts",
  "test/metrics.test.ts",
  "test/operate.test.ts",
  "test/python-workers.test.ts",
  "test/shutdown.test.ts",
  "test/tracing.test.ts",
  "test/grpcio-load.test.ts",
  "test/fences.test.ts",
  "test/fences-race.test.ts",
  "test/switches.test.ts",
];

/**
 * The suites of claims, results, fencing and faults: run a second time with COALESCE=false, so
 * every outcome they check holds both when concurrent single-task calls share one statement (the
 * default) and when each call runs its own.
 */
const COALESCE_SUITES = [
  "test/queue.test.ts",
  "test/api.test.ts",
  "test/claim-next.test.ts",
  "test/faults.test.ts",
  "test/failure-policy.test.ts",
  "test/grpcio-load.test.ts",
  "test/fences.test.ts",
  "test/fences-race.test.ts",
  "test/switches.test.ts",
];

export default defineConfig({
  test: {
    globalSetup: ["test/support/global-setup.ts"],
    // Fails a test file whose process heard pg warn of a query queued behind another on one client.
    setupFiles: ["test/support/pg-warnings.ts"],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // Test files spawn real coordinators and Postgres work; two cores cannot run many at once.
    maxWorkers: 2,
    projects: [
      {
        extends: true,
        // test/ha runs apart, on the HA rig (npm run test:ha), with its own config.
        test: { name: "direct", include: ["test/**/*.test.ts"], exclude: ["test/ha/**", "**/node_modules/**"] },
      },
      { extends: true, test: { name: "router", include: API_SUITES, env: { DIRECT_UNARY: "false" } } },
      { extends: true, test: { name: "one-statement-per-call", include: COALESCE_SUITES, env: { COALESCE: "false" } } },
    ],
  },
});
