// The deploy tests' machinery: the Debian packages they need (installed with apt-get as root when
// missing, through the rig's helper), a Docker engine (started here when none answers, as
// .ci/run does for the version matrix), Compose (the v2 plugin where there is one, else Debian's
// docker-compose 1.29), and `docker` calls with their output.
import { execFile, spawn, spawnSync, type ChildProcess } from "node:child_process";
import { openSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { ensureDebianPackages, type DebianPackage } from "../../../deploy/ha/packages.js";

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");
/** On every container, network and volume the tests create outside compose: the runner's pid (a later run removes what a killed one left). */
export const LABEL = "dev.leasehold.deploy-test.pid";

export interface Run {
  status: number | null;
  stdout: string;
  stderr: string;
}

/** Runs a command to its end (no shell), with its output. */
export function run(command: string, args: string[], opts: { timeoutMs?: number; env?: NodeJS.ProcessEnv; cwd?: string } = {}): Run {
  const r = spawnSync(command, args, {
    encoding: "utf8",
    timeout: opts.timeoutMs ?? 120_000,
    env: opts.env ?? process.env,
    cwd: opts.cwd ?? ROOT,
    maxBuffer: 256 * 1024 * 1024,
  });
  if (r.error) throw new Error(`${command} ${args.join(" ")}: ${r.error.message}`);
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** Runs a command that must succeed; its stdout, trimmed. */
export function must(command: string, args: string[], opts: Parameters<typeof run>[2] = {}): string {
  const r = run(command, args, opts);
  if (r.status !== 0) throw new Error(`${command} ${args.join(" ")} exited ${r.status}:\n${r.stderr}${r.stdout}`.slice(0, 8000));
  return r.stdout.trim();
}

export const docker = (...args: string[]) => must("docker", args);

/**
 * `docker …` without blocking the event loop: for a `docker stop` while this process holds
 * connections to the container, which must answer the coordinator's GOAWAY for it to drain
 * before SHUTDOWN_TIMEOUT_MS (a blocked loop never does).
 */
export function dockerAsync(...args: string[]): Promise<string> {
  return mustAsync("docker", args);
}

/** A command that must succeed, without blocking the event loop (see dockerAsync); its stdout, trimmed. */
export function mustAsync(command: string, args: string[], opts: { env?: NodeJS.ProcessEnv; timeoutMs?: number } = {}): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(
      command,
      args,
      { encoding: "utf8", maxBuffer: 64 * 1024 * 1024, cwd: ROOT, env: opts.env ?? process.env, timeout: opts.timeoutMs ?? 300_000 },
      (err, stdout, stderr) => {
        if (err) reject(new Error(`${command} ${args.join(" ")}: ${err.message}\n${stderr}`));
        else resolve(stdout.trim());
      },
    );
  });
}

const onPath = (name: string) => spawnSync("sh", ["-c", `command -v ${name}`], { encoding: "utf8" }).status === 0;

function engineAnswers(): boolean {
  return spawnSync("docker", ["version", "--format", "{{.Server.Version}}"], { encoding: "utf8", timeout: 30_000 }).status === 0;
}

/** `docker compose` (v2) where the plugin is there, else `docker-compose`; null when neither. */
export function composeCommand(): string[] | null {
  if (spawnSync("docker", ["compose", "version"], { encoding: "utf8" }).status === 0) return ["docker", "compose"];
  if (onPath("docker-compose")) return ["docker-compose"];
  return null;
}

/**
 * Installs what is missing: a Docker engine and CLI (Debian's docker.io, unless a dockerd of
 * another origin is there), debootstrap (for the images built where no registry answers),
 * Compose, and Prometheus with promtool.
 */
export function ensureTools(log: (m: string) => void): void {
  const needed: DebianPackage[] = [
    { pkg: "debootstrap", file: "/usr/sbin/debootstrap" },
    { pkg: "prometheus", file: "/usr/bin/promtool" },
  ];
  if (!engineAnswers() && !onPath("dockerd")) needed.push({ pkg: "docker.io", file: "/usr/sbin/dockerd" });
  else if (!onPath("docker")) needed.push({ pkg: "docker.io", file: "/usr/bin/docker" });
  if (!onPath("docker-compose") && spawnSync("docker", ["compose", "version"]).status !== 0)
    needed.push({ pkg: "docker-compose", file: "/usr/bin/docker-compose" });
  ensureDebianPackages(needed, log);
}

/** A Docker engine that answers: the running one, or a dockerd started here (stop() ends it). */
export async function ensureEngine(log: (m: string) => void): Promise<{ started: boolean; stop(): Promise<void> }> {
  if (engineAnswers()) return { started: false, stop: async () => {} };
  if (process.getuid?.() !== 0) throw new Error("no Docker engine answers, and starting one needs root");
  const logFile = path.join(os.tmpdir(), `leasehold-deploy-dockerd-${process.pid}.log`);
  log(`starting dockerd (log: ${logFile})`);
  const fd = openSync(logFile, "a");
  const dockerd: ChildProcess = spawn("dockerd", [], { stdio: ["ignore", fd, fd] });
  const exited = new Promise<void>((resolve) => dockerd.once("exit", () => resolve()));
  for (let i = 0; i < 240 && !engineAnswers(); i++) {
    if (dockerd.exitCode !== null) throw new Error(`dockerd exited ${dockerd.exitCode}; see ${logFile}`);
    await new Promise((r) => setTimeout(r, 250));
  }
  if (!engineAnswers()) throw new Error(`dockerd did not answer within a minute; see ${logFile}`);
  return {
    started: true,
    async stop() {
      dockerd.kill("SIGTERM");
      await Promise.race([exited, new Promise((r) => setTimeout(r, 30_000))]);
    },
  };
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Removes containers, networks and volumes an earlier run left (its runner is gone). */
export function sweepLeftovers(log: (m: string) => void): void {
  for (const kind of ["container", "network", "volume"] as const) {
    const listed = run("docker", [
      kind,
      "ls",
      ...(kind === "container" ? ["-a"] : []),
      "--filter",
      `label=${LABEL}`,
      "--format",
      `{{.${kind === "container" ? "ID" : "Name"}}} {{.Label "${LABEL}"}}`,
    ]);
    for (const line of listed.stdout.split("\n")) {
      const [id, pid] = line.trim().split(" ");
      if (!id || (pid && alive(Number(pid)))) continue;
      run("docker", kind === "container" ? ["rm", "-f", "-v", id] : [kind, "rm", id]);
      log(`removed ${kind} ${id} left by an earlier run (pid ${pid} is gone)`);
    }
  }
}

/** What docker lists under a label (containers, networks, volumes): the test's "nothing left behind". */
export function leftovers(filter: string): string[] {
  const found: string[] = [];
  for (const [kind, flag, name] of [
    ["container", "-a", "{{.Names}}"],
    ["network", "", "{{.Name}}"],
    ["volume", "", "{{.Name}}"],
  ] as const) {
    const r = must("docker", [kind, "ls", ...(flag ? [flag] : []), "--filter", filter, "--format", name]);
    for (const name of r.split("\n").filter(Boolean)) found.push(`${kind} ${name}`);
  }
  return found;
}
