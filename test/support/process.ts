// Spawns real coordinator (and migrate CLI) processes for end-to-end tests and
// makes sure none outlives the test file (killAll in afterAll).
import { spawn, type ChildProcess } from "node:child_process";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { CONFIG_VARIABLES } from "../../src/config/index.js";
import { switchEnv } from "./switches.js";
import { nodeEntry } from "./entry.js";

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** ms since the process was spawned */
  at: number;
}

export interface Spawned {
  child: ChildProcess;
  stdout(): string;
  stderr(): string;
  /** non-empty stderr lines */
  stderrLines(): string[];
  exited: Promise<Exit>;
  /** Resolves with the base URL from the coordinator's start line; rejects if it exits first or timeoutMs passes. */
  listening(timeoutMs?: number): Promise<string>;
  signal(sig: NodeJS.Signals): void;
}

const live = new Set<Spawned>();

/** The environment a child sees: ours minus every coordinator variable, plus `env`. */
function childEnv(env: Record<string, string>): NodeJS.ProcessEnv {
  const base: NodeJS.ProcessEnv = { ...process.env };
  for (const [name] of CONFIG_VARIABLES) delete base[name];
  return { ...base, LOG_LEVEL: "warn", ...env };
}

function spawnNode(script: string, args: string[], env: Record<string, string>): Spawned {
  const started = Date.now();
  // --trace-deprecation: a pg warning names its caller (killAll fails the file on it).
  const child = spawn(process.execPath, ["--trace-deprecation", ...nodeEntry(script), ...args], {
    cwd: ROOT,
    env: childEnv(env),
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  let err = "";
  child.stdout?.setEncoding("utf8").on("data", (d: string) => (out += d));
  child.stderr?.setEncoding("utf8").on("data", (d: string) => (err += d));
  const exited = new Promise<Exit>((resolve) => {
    child.on("close", (code, signal) => resolve({ code, signal, at: Date.now() - started }));
  });
  const spawned: Spawned = {
    child,
    stdout: () => out,
    stderr: () => err,
    stderrLines: () => err.split("\n").filter((l) => l.trim() !== ""),
    exited,
    listening(timeoutMs = 30_000) {
      return new Promise<string>((resolve, reject) => {
        const check = () => {
          const m = /leasehold listening on (https?:\/\/\S+)/.exec(err);
          if (m) {
            cleanup();
            resolve(m[1]);
          }
        };
        const onExit = (e: Exit) => {
          cleanup();
          reject(new Error(`coordinator exited (code ${e.code}, signal ${e.signal}) before listening:\n${err}${out}`));
        };
        const timer = setTimeout(() => {
          cleanup();
          reject(new Error(`coordinator not listening after ${timeoutMs} ms:\n${err}${out}`));
        }, timeoutMs);
        const cleanup = () => {
          clearTimeout(timer);
          child.stderr?.off("data", check);
        };
        child.stderr?.on("data", check);
        void exited.then(onExit);
        check();
      });
    },
    signal(sig) {
      if (child.exitCode === null && child.signalCode === null) child.kill(sig);
    },
  };
  live.add(spawned);
  spawnedEver.push(spawned);
  void exited.then(() => live.delete(spawned));
  return spawned;
}

/**
 * A coordinator's environment on `databaseUrl`: a kernel-chosen port and the run's switches
 * (switches.ts; the suites run both ways, and a spawned coordinator sees no variable of ours unless
 * it is passed on), then `extra`.
 */
export function coordinatorEnv(databaseUrl: string, extra: Record<string, string> = {}): Record<string, string> {
  return { DATABASE_URL: databaseUrl, PORT: "0", ...switchEnv(), ...extra };
}

export function spawnCoordinator(env: Record<string, string>): Spawned {
  return spawnNode("src/main.ts", [], env);
}

export function spawnMigrate(args: string[], env: Record<string, string>): Spawned {
  return spawnNode("src/migrate-cli.ts", args, env);
}

/** Within timeoutMs, or rejects (the process keeps running; killAll handles it). */
export async function exitWithin(p: Spawned, timeoutMs: number): Promise<Exit> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`process still running after ${timeoutMs} ms:\n${p.stderr()}`)), timeoutMs);
  });
  try {
    return await Promise.race([p.exited, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** pg's warning of a query queued behind another on one client (an error from pg 9 on). */
export const PG_QUEUED_QUERY = "Calling client.query() when the client is already executing a query";

/** Every process spawned here, to look for PG_QUEUED_QUERY in its stderr at killAll. */
const spawnedEver: Spawned[] = [];

/**
 * SIGTERM everything still running (so embedded Postgres is stopped), SIGKILL what ignores it.
 * Then fails when a coordinator spawned since the last call wrote pg's queued-query warning.
 */
export async function killAll(graceMs = 15_000): Promise<void> {
  const all = [...live];
  for (const p of all) p.signal("SIGTERM");
  await Promise.all(
    all.map(async (p) => {
      try {
        await exitWithin(p, graceMs);
      } catch {
        p.signal("SIGKILL");
        await p.exited;
      }
    }),
  );
  const warned = spawnedEver.splice(0).filter((p) => p.stderr().includes(PG_QUEUED_QUERY));
  if (warned.length > 0) {
    const stderr = warned[0].stderr();
    const at = stderr.indexOf(PG_QUEUED_QUERY);
    throw new Error(`a coordinator warned: ${stderr.slice(Math.max(0, at - 40), at + 1500)}`);
  }
}
