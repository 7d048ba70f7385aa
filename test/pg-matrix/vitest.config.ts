// The version matrix's vitest run (test/pg-matrix/run.ts starts it with TEST_DATABASE_URL set to a
// container's server): the shared global setup migrates one template database on that server and
// each file clones its own, as on the embedded default. The default config with its file list
// replaced (mergeConfig would append the list to the default's glob instead), and without the
// default's projects (each project's include would otherwise win over the list).
import { fileURLToPath } from "node:url";
import { defineConfig } from "vitest/config";
import base from "../../vitest.config.js";
import { PG_MATRIX_FILES } from "./files.js";

export default defineConfig({
  ...base,
  root: fileURLToPath(new URL("../..", import.meta.url)),
  test: { ...base.test, projects: undefined, include: PG_MATRIX_FILES },
});
