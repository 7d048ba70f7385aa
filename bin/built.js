// Shared by the launchers in bin/: they run the compiled code in dist/ (built by `npm run build`;
// `npm ci` builds it through `prepare` where the dev tools are installed). Nothing here compiles, so
// a production install (`npm ci --omit=dev`) runs without tsc, vite or tsx. A missing build is one
// line naming the command that makes it, not a module-resolution stack trace.
/* global process */
import { existsSync } from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");

/** Imports dist/<rel> of this package, or exits 1 with a one-line message when it is not built. */
export async function runBuilt(rel, name) {
  const file = path.join(ROOT, "dist", rel);
  if (!existsSync(file)) {
    process.stderr.write(
      `${name}: ${path.relative(process.cwd(), file) || file} is missing: run \`npm run build\` first (it needs the dev dependencies)\n`,
    );
    process.exit(1);
  }
  await import(pathToFileURL(file).href);
}
