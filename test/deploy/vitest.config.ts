// npm run test:deploy: the deployment artifacts of deploy/ tested for real, apart from `npm test`
// (they need Docker, Debian packages and a few minutes): the image, the compose stack, the alert
// rules under promtool and the dashboard's and rules' queries on a real Prometheus
// (test/deploy/live/), and the manifests' consistency check (also part of `npm test`). One file
// at a time: they share the machine's two cores with containers.
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/deploy/**/*.test.ts"],
    globalSetup: ["test/deploy/live/global-setup.ts"],
    testTimeout: 600_000,
    hookTimeout: 1_800_000,
    maxWorkers: 1,
  },
});
