// A TypeScript consumer of the client package, made as a user makes one: `npm pack` of
// clients/typescript, an empty project, `npm install <tarball>`, a strict tsconfig. npm answers
// from its cache when it can (the root's `npm ci` filled it with the same pinned versions).
import { spawn } from "node:child_process";
import { mkdtempSync, readdirSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { ROOT } from "./process.js";

export const CLIENT_DIR = path.join(ROOT, "clients", "typescript");
export const NPM = process.platform === "win32" ? "npm.cmd" : "npm";

export interface Ran {
  code: number | null;
  output: string;
}

/** Runs a command to its end, with its output (stdout and stderr together); a bound for a hung run. */
export function runCommand(
  cmd: string,
  args: string[],
  opts: { cwd: string; env?: Record<string, string | undefined>; timeoutMs?: number },
): Promise<Ran> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { cwd: opts.cwd, env: { ...process.env, ...opts.env }, stdio: ["ignore", "pipe", "pipe"] });
    let output = "";
    child.stdout.setEncoding("utf8").on("data", (d: string) => (output += d));
    child.stderr.setEncoding("utf8").on("data", (d: string) => (output += d));
    const timer = setTimeout(() => child.kill("SIGKILL"), opts.timeoutMs ?? 180_000);
    child.once("error", (err) => {
      clearTimeout(timer);
      reject(new Error(`cannot run ${cmd}: ${err.message}`));
    });
    child.once("close", (code) => {
      clearTimeout(timer);
      resolve({ code, output });
    });
  });
}

/** `npm pack` of the client (its prepack builds dist/, proto/ and leasehold.binpb): the tarball's path. */
export async function packClient(into: string): Promise<string> {
  const r = await runCommand(NPM, ["pack", "--pack-destination", into, "--silent"], {
    cwd: CLIENT_DIR,
    env: { npm_config_loglevel: "error" },
  });
  if (r.code !== 0) throw new Error(`npm pack failed:\n${r.output}`);
  const tgz = readdirSync(into).find((f) => f.endsWith(".tgz"));
  if (!tgz) throw new Error(`npm pack made no tarball:\n${r.output}`);
  return path.join(into, tgz);
}

/** An empty ESM project with a strict tsconfig, the tarball and `extra` packages installed. */
export async function consumerProject(tarball: string, extra: string[] = []): Promise<string> {
  const dir = mkdtempSync(path.join(os.tmpdir(), "leasehold-consumer-"));
  writeFileSync(path.join(dir, "package.json"), JSON.stringify({ name: "consumer", private: true, type: "module" }, null, 2));
  writeFileSync(
    path.join(dir, "tsconfig.json"),
    JSON.stringify(
      {
        compilerOptions: {
          target: "ES2022",
          module: "NodeNext",
          moduleResolution: "NodeNext",
          strict: true,
          outDir: "dist",
          rootDir: "src",
          types: ["node"],
        },
        include: ["src"],
      },
      null,
      2,
    ),
  );
  const r = await runCommand(NPM, ["install", "--prefer-offline", "--no-audit", "--no-fund", tarball, "@types/node@20.19.43", ...extra], {
    cwd: dir,
    env: { npm_config_loglevel: "error" },
    timeoutMs: 300_000,
  });
  if (r.code !== 0) throw new Error(`npm install in the consumer failed:\n${r.output}`);
  return dir;
}

/** The repository's pinned TypeScript compiler, run on a project. */
export function tsc(project: string): Promise<Ran> {
  return runCommand(process.execPath, [path.join(ROOT, "node_modules", "typescript", "bin", "tsc"), "-p", project], { cwd: project });
}
