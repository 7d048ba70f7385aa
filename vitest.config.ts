import { defineConfig } from "vitest/config";
import { LongestFirstSequencer } from "./test/support/sequencer.js";

/**
 * The API and transport suites: run a second time with DIRECT_UNARY=false, so every answer they
 * check is also checked when connect-es' router serves every call (the direct unary paths of
 * src/api/direct/ switched off).
 */
const API_SUITES = [
  "test/api/api.test.ts",
  "test/api/auth.test.ts",
  "test/api/tenancy.test.ts",
  "test/api/bad-input.test.ts",
  "test/api/claim-next.test.ts",
  "test/api/create-job-rest.test.ts",
  "test/api/accounts-api.test.ts",
  "test/api/workload-not-found.test.ts",
  "test/api/delayed-finalizer-api.test.ts",
  "test/api/inspect.test.ts",
  "test/api/metrics.test.ts",
  "test/store/operate.test.ts",
  "test/clients/python-workers.test.ts",
  "test/process/shutdown.test.ts",
  "test/api/tracing.test.ts",
  "test/clients/grpcio-load.test.ts",
  "test/store/fences.test.ts",
  "test/store/fences-race.test.ts",
  "test/store/switches.test.ts",
  "test/api/settlements-api.test.ts",
  "test/api/undecodable.test.ts",
  "test/api/careless-clients.test.ts",
  "test/api/pipelines-api.test.ts",
  "test/api/create-job-view.test.ts",
];

/**
 * The suites of claims, results, CreateJob, fencing and faults: run a second time with COALESCE=false and
 * CLAIM_HINTS=false, so every outcome they check holds both when concurrent single-task calls
 * share one statement (the default) and when each call runs its own, and both when claims start
 * at a hint (the default) and when they scan from the front.
 */
const COALESCE_SUITES = [
  "test/store/queue.test.ts",
  "test/api/api.test.ts",
  "test/api/claim-next.test.ts",
  "test/process/faults.test.ts",
  "test/store/failure-policy.test.ts",
  "test/clients/grpcio-load.test.ts",
  "test/store/fences.test.ts",
  "test/store/fences-race.test.ts",
  "test/store/switches.test.ts",
  "test/api/settlements-api.test.ts",
  "test/store/claim-hints.test.ts",
  "test/store/create-job.test.ts",
  "test/store/dependencies-race.test.ts",
  "test/api/create-job-view.test.ts",
];

/**
 * The flow-control suites: run a second time with FLOW_CLAIM_HINTS=false, so every cap, rate, pause,
 * label and fair-share outcome they check holds both for leasehold_flow_claim_hinted (the default) and
 * for the claim as it was before it (leasehold_flow_claim).
 */
const FLOW_SUITES = ["test/store/flow-*.test.ts"];

/**
 * The slow and rarely touched suites: processes killed and PostgreSQL restarted under load, the
 * packed tarball installed with npm ci, a coordinator upgraded in place, the schedule race with a
 * coordinator SIGKILLed, the TypeScript client's package built in a consumer's project, the Python
 * client's worker processes (a minute alone; the rest of its pytest suite stays in `npm test`).
 * Together ~260 of `npm test`'s ~830 test-seconds on two cores: `npm run test:slow` runs them, and
 * CI runs it beside `npm test`, which leaves them out (the one-statement project still runs faults).
 */
const SLOW_SUITES = [
  "test/process/faults.test.ts",
  "test/process/production.test.ts",
  "test/process/schedules-race.test.ts",
  "test/process/upgrade-in-place.test.ts",
  "test/clients/ts-client-package.test.ts",
  "test/clients/python-client-workers.test.ts",
];

export default defineConfig({
  test: {
    globalSetup: ["test/support/global-setup.ts"],
    // Fails a test file whose process heard pg warn of a query queued behind another on one client.
    setupFiles: ["test/support/pg-warnings.ts"],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // Two files at once on two cores. More run faster when the machine is quiet (measured, the whole
    // run: 440 s with 2 workers, 415 s with 3, 369 s with 4), but with 4 a fresh clone's CI run, right
    // after the container suites, timed out the promotion race of the one-statement project (a call
    // that failed under load left a parent leased): the suite's timing guarantees come first.
    maxWorkers: 2,
    // The longest files first, so no long one starts near the end and runs on alone.
    sequence: { sequencer: LongestFirstSequencer },
    // A worker process runs one file after another with the modules it has loaded (each project
    // has workers of its own, so its switches hold): re-importing the coordinator's modules for every
    // file was ~140 s of a run's CPU. Every file still gets its own database, server and pools, and
    // test/support/pg-warnings.ts listens once per process.
    isolate: false,
    // `npm test` runs `direct`, every suite with the switches at their defaults but the slow ones;
    // `npm run test:slow` runs those (`slow`), `npm run test:switches` the three switch projects,
    // and CI runs all three commands.
    projects: [
      {
        extends: true,
        // test/ha runs apart, on the HA rig (npm run test:ha), and test/deploy/live with Docker
        // (npm run test:deploy), each with its own config.
        test: {
          name: "direct",
          include: ["test/**/*.test.ts"],
          exclude: ["test/ha/**", "test/deploy/live/**", "**/node_modules/**", ...SLOW_SUITES],
        },
      },
      { extends: true, test: { name: "slow", include: SLOW_SUITES } },
      // The router project also keeps results and claims in statements of their own (COALESCE_MIX=false).
      { extends: true, test: { name: "router", include: API_SUITES, env: { DIRECT_UNARY: "false", COALESCE_MIX: "false" } } },
      {
        extends: true,
        test: { name: "one-statement-per-call", include: COALESCE_SUITES, env: { COALESCE: "false", CLAIM_HINTS: "false" } },
      },
      { extends: true, test: { name: "flow-claim-as-before", include: FLOW_SUITES, env: { FLOW_CLAIM_HINTS: "false" } } },
    ],
  },
});
