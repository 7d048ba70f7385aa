// @ts-check
import js from "@eslint/js";
import tseslint from "typescript-eslint";

/**
 * The store files whose SQL goes through defineQuery (src/store/postgres/query.ts): every row is
 * typed there, so an `any` (an untyped pg row, a JSON.parse) is a lint error. The list grows to
 * the whole store as the rest of it moves to defineQuery (claim.ts, complete.ts, lease.ts, …).
 * Type-aware linting reads the TypeScript program, so it is scoped to these files and to the
 * program of tsconfig.build.json (src and gen, not the tests): `npx eslint .` took ~27 s of CPU
 * against ~17 s without these rules (loaded 2-core machine; projectService on the whole
 * tsconfig.json cost more, ~13 s against ~11 s for the store alone).
 */
const TYPED_SQL = [
  "src/store/postgres/query.ts",
  "src/store/postgres/rows.ts",
  "src/store/postgres/inspection.ts",
  "src/store/postgres/jobs.ts",
  "src/store/postgres/workloads.ts",
  "src/store/postgres/workload-keys.ts",
  "src/store/postgres/task-stats.ts",
  "src/store/postgres/watch.ts",
  "src/store/postgres/watch-hub.ts",
  "src/store/postgres/schedules.ts",
  "src/store/postgres/scheduler.ts",
  "src/store/postgres/due-wakes.ts",
  "src/store/postgres/create-job.ts",
  "src/store/postgres/pending-expiry.ts",
  "src/store/postgres/lease-reaper.ts",
  "src/store/postgres/settle.ts",
  "src/store/postgres/late-result.ts",
  "src/store/postgres/readiness.ts",
];

export default tseslint.config(
  { ignores: ["gen/**", "node_modules/**", ".data/**", "examples/**", "dist/**"] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    rules: {
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_" }],
    },
  },
  {
    files: TYPED_SQL,
    languageOptions: { parserOptions: { project: "./tsconfig.build.json", tsconfigRootDir: import.meta.dirname } },
    rules: {
      "@typescript-eslint/no-unsafe-assignment": "error",
      "@typescript-eslint/no-unsafe-member-access": "error",
      "@typescript-eslint/no-unsafe-return": "error",
      "@typescript-eslint/no-unsafe-argument": "error",
      "@typescript-eslint/no-unsafe-call": "error",
    },
  },
);
