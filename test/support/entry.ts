// Which build a test's child process runs (a coordinator, the CLI, a migration): the compiled
// dist/ when it was built after the last change to the sources, else the TypeScript sources through
// tsx. A process started from dist/ costs ~0.4 s of CPU against ~1 s through tsx (its loader
// thread and transforms), and the suites start a few hundred of them (the CLI's tests most of
// all); a fresh `npm ci` builds dist/ (scripts/prepare.js), `npm run build` after an edit. An edit
// not yet built is run as written, through tsx: slower, never stale.
import { existsSync, readdirSync, statSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");

/** The newest modification time of the .ts files below dir (0 when there are none). */
function newestTs(dir: string): number {
  let newest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) newest = Math.max(newest, newestTs(full));
    else if (entry.name.endsWith(".ts")) newest = Math.max(newest, statSync(full).mtimeMs);
  }
  return newest;
}

let fresh: boolean | undefined;

/** Whether dist/ was built after every change to src/ and gen/ (tsc writes its build info last). */
export function distIsFresh(): boolean {
  if (fresh === undefined) {
    const info = path.join(ROOT, "dist", ".tsbuildinfo");
    fresh =
      process.env.LEASEHOLD_TEST_FROM_SOURCES !== "1" &&
      existsSync(info) &&
      statSync(info).mtimeMs >= Math.max(newestTs(path.join(ROOT, "src")), newestTs(path.join(ROOT, "gen")));
  }
  return fresh;
}

/**
 * The node arguments that run `source` (a path under src/, such as "src/main.ts"): the built
 * module when dist/ is fresh, else the source through tsx.
 */
export function nodeEntry(source: string): string[] {
  if (!source.startsWith("src/") || !source.endsWith(".ts")) throw new Error(`nodeEntry: ${source} is not a source under src/`);
  return distIsFresh() ? [path.join("dist", source.replace(/\.ts$/, ".js"))] : ["--import", "tsx", source];
}
