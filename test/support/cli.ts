// The CLI as a user runs it: a child process (the built CLI, or node --import tsx src/cli/main.ts
// when the sources changed since the build: entry.ts) from the repository's root, its output
// collected until it exits.
import { spawn } from "node:child_process";
import { ROOT } from "./process.js";
import { nodeEntry } from "./entry.js";

export interface CliRun {
  code: number | null;
  stdout: string;
  stderr: string;
}

/**
 * Runs the CLI with `args`; `stdin` is written and closed (empty by default), `env` replaces the
 * environment, `onStderr` sees stderr as it comes (a test that acts once a watch has started).
 */
export function runCli(
  args: string[],
  opts: { stdin?: string; env?: NodeJS.ProcessEnv; onStderr?: (all: string) => void } = {},
): Promise<CliRun> {
  const child = spawn(process.execPath, [...nodeEntry("src/cli/main.ts"), ...args], {
    cwd: ROOT,
    env: opts.env ?? process.env,
    stdio: ["pipe", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.setEncoding("utf8").on("data", (d: string) => (stdout += d));
  child.stderr.setEncoding("utf8").on("data", (d: string) => {
    stderr += d;
    opts.onStderr?.(stderr);
  });
  child.stdin.end(opts.stdin ?? "");
  return new Promise((resolve) => child.on("close", (code) => resolve({ code, stdout, stderr })));
}
