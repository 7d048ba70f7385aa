import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    globalSetup: ["test/support/global-setup.ts"],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // Test files spawn real coordinators and Postgres work; two cores cannot run many at once.
    maxWorkers: 2,
  },
});
