// @ts-check
import js from "@eslint/js";
import tseslint from "typescript-eslint";

/**
 * The store, whose SQL goes through defineQuery (src/store/postgres/sql/query.ts): every row is typed,
 * so an `any` (an untyped pg row, a JSON.parse) is a lint error; and the API and queue layers,
 * which take untyped input (request bodies, JSON, headers) and must narrow it before use.
 * Type-aware linting reads the TypeScript program, so it is scoped to these files and to the
 * program of tsconfig.build.json (src and gen, not the tests): `npx eslint .` took ~27 s of CPU
 * against ~17 s without these rules (loaded 2-core machine; projectService on the whole
 * tsconfig.json cost more, ~13 s against ~11 s for the store alone).
 */
const TYPED = ["src/store/postgres/**/*.ts", "src/api/**/*.ts", "src/queue/*.ts"];

export default tseslint.config(
  {
    ignores: [
      "gen/**",
      "node_modules/**",
      ".data/**",
      "examples/**",
      "dist/**",
      "clients/typescript/src/gen/**",
      "clients/typescript/dist/**",
    ],
  },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    rules: {
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_" }],
    },
  },
  {
    files: TYPED,
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
