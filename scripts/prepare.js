// npm's `prepare` (run by `npm ci` and `npm install` in a checkout, and by `npm pack`): builds
// dist/ (`npm run build`: tsc and the console's vite build) when the dev dependencies are
// installed, so a fresh clone's `npm ci && npm start` works. A production install
// (`npm ci --omit=dev`) has neither tsc nor vite: it keeps the dist/ it was given (a container
// build's, or the one inside `npm pack`'s tarball) and never fails for want of a compiler.
/* global process */
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const require = createRequire(path.join(root, "package.json"));

function installed(name) {
  try {
    require.resolve(`${name}/package.json`);
    return true;
  } catch {
    return false;
  }
}

if (!installed("typescript") || !installed("vite")) {
  const built = existsSync(path.join(root, "dist", "src", "main.js"));
  process.stderr.write(
    built
      ? "leasehold: no dev dependencies (--omit=dev): using the dist/ already built\n"
      : "leasehold: no dev dependencies (--omit=dev) and no dist/: build it with `npm run build` where they are installed\n",
  );
  process.exit(0);
}

// npm sets npm_execpath to its own CLI script while it runs a lifecycle script.
const npm = process.env.npm_execpath;
const r = npm
  ? spawnSync(process.execPath, [npm, "run", "build"], { cwd: root, stdio: "inherit" })
  : spawnSync("npm", ["run", "build"], { cwd: root, stdio: "inherit", shell: process.platform === "win32" });
process.exit(r.status ?? 1);
