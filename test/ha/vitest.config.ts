// npm run test:ha: the failover test on the HA rig (deploy/ha), apart from `npm test` (it needs
// the Debian packages and a few minutes) and without its global setup (no embedded PostgreSQL).
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/ha/**/*.test.ts"],
    testTimeout: 600_000,
    hookTimeout: 240_000,
    maxWorkers: 1,
  },
});
