// The Python environment the tests need, provisioned by the test command itself:
// a git-ignored virtual environment (.venv) made from the pinned requirements-dev.txt
// plus the leasehold client (clients/python, installed editable) on first use, and
// reused while both requirements-dev.txt and the client's pyproject.toml are
// unchanged. The system Python only provides `venv`; nothing is installed into it.
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const REQUIREMENTS = path.join(ROOT, "requirements-dev.txt");
const CLIENT = path.join(ROOT, "clients", "python");
const CLIENT_PYPROJECT = path.join(CLIENT, "pyproject.toml");
const VENV = path.join(ROOT, ".venv");
/** Holds the hash of the requirements and client pyproject the venv was built from; a mismatch rebuilds it. */
const STAMP = path.join(VENV, ".leasehold-requirements.sha256");
const INSTALL_TIMEOUT_MS = 15 * 60_000;

function run(cmd: string, args: string[]): void {
  const r = spawnSync(cmd, args, { cwd: ROOT, encoding: "utf8", timeout: INSTALL_TIMEOUT_MS });
  if (r.status !== 0) {
    throw new Error(
      `${cmd} ${args.join(" ")} failed (exit ${r.status ?? r.signal}):\n${(r.stderr || r.stdout || String(r.error ?? "")).slice(-4000)}`,
    );
  }
}

/** Returns the venv's python, creating or refreshing the venv when requirements-dev.txt or the client's pyproject changed. */
export function ensurePythonEnv(basePython = "python3"): string {
  const python = path.join(VENV, "bin", "python");
  const wanted = createHash("sha256").update(readFileSync(REQUIREMENTS)).update("\0").update(readFileSync(CLIENT_PYPROJECT)).digest("hex");
  if (existsSync(python) && existsSync(STAMP) && readFileSync(STAMP, "utf8").trim() === wanted) return python;
  rmSync(VENV, { recursive: true, force: true });
  run(basePython, ["-m", "venv", VENV]);
  // --retries 0: where the public index is unreachable pip fails over to the configured local ones at once.
  run(python, ["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--retries", "0", "-r", REQUIREMENTS]);
  // Editable: the tests run the working tree's client. Its build backend (hatchling) is pinned in
  // requirements-dev.txt, so no isolated build environment is fetched; its dependencies are there too.
  run(python, ["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps", "--no-build-isolation", "-e", CLIENT]);
  writeFileSync(STAMP, `${wanted}\n`);
  return python;
}
