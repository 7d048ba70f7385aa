// npm's `prepack` and `postpack`: the tarball of `npm pack` carries the lockfile as
// npm-shrinkwrap.json (npm never packs package-lock.json; it always packs a shrinkwrap), so a
// production install from it (`npm ci --omit=dev`) needs nothing beside the tarball. The copy is
// made from package-lock.json at every pack, so it cannot go stale, and removed after
// (`--remove`), so the checkout keeps one lockfile.
/* global process */
import { copyFileSync, rmSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const shrinkwrap = path.join(root, "npm-shrinkwrap.json");

if (process.argv.includes("--remove")) rmSync(shrinkwrap, { force: true });
else copyFileSync(path.join(root, "package-lock.json"), shrinkwrap);
