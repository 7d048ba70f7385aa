// Which build a test's child process runs (a coordinator, the CLI, a migration): the compiled
// dist/ when the run's setup built it after the last change to the sources, else the TypeScript
// sources through tsx. A process started from dist/ costs ~0.4 s of CPU against ~1 s through tsx
// (its loader thread and transforms), and the suites start a few hundred of them (the CLI's tests
// most of all). The setup (global-setup.ts) runs tsc's incremental build, a few seconds when
// nothing changed, and marks dist/ built once it succeeds; an edit that does not compile, or
// one made during the run, is run as written, through tsx: slower, never stale.
import { existsSync, readdirSync, statSync, writeFileSync } from "node:fs";
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

/** Touched by the run's setup once tsc has built dist/ from the sources as they are. */
const MARK = path.join(ROOT, "dist", ".built-for-tests");
const newestSource = () => Math.max(newestTs(path.join(ROOT, "src")), newestTs(path.join(ROOT, "gen")));

/** After a successful `tsc -p tsconfig.build.json`: dist/ is the sources' as of now. */
export function markDistBuilt(): void {
  writeFileSync(MARK, "");
}

let fresh: boolean | undefined;

/** Whether dist/ was built after every change to src/ and gen/. */
export function distIsFresh(): boolean {
  fresh ??= process.env.LEASEHOLD_TEST_FROM_SOURCES !== "1" && existsSync(MARK) && statSync(MARK).mtimeMs >= newestSource();
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
