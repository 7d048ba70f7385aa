// The project's root folder, for files that live in the checkout rather than in the build
// (migrations/, dist/ui): the nearest folder above a module with a package.json, which is the
// same whether the module runs from src/ or from the build in dist/src/.
import { existsSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

export function projectRoot(moduleUrl: string): string {
  const from = path.dirname(fileURLToPath(moduleUrl));
  for (let dir = from; ; dir = path.dirname(dir)) {
    if (existsSync(path.join(dir, "package.json"))) return dir;
    if (path.dirname(dir) === dir) throw new Error(`no package.json above ${from}`);
  }
}
