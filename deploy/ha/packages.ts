// Debian packages installed with apt-get when missing (as root only): the rig's, and the deploy
// tests' (test/deploy/live/), through ensureDebianPackages.
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { PG_BIN_DIR } from "./config.js";

/** A package, and a file it installs that tells whether it is there. */
export interface DebianPackage {
  pkg: string;
  file: string;
}

const NEEDED: DebianPackage[] = [
  { pkg: "postgresql-15", file: `${PG_BIN_DIR}/postgres` },
  { pkg: "patroni", file: "/usr/bin/patroni" },
  { pkg: "etcd-server", file: "/usr/bin/etcd" },
  { pkg: "etcd-client", file: "/usr/bin/etcdctl" },
  { pkg: "haproxy", file: "/usr/sbin/haproxy" },
  { pkg: "pgbouncer", file: "/usr/sbin/pgbouncer" },
];

export function ensurePackages(log: (m: string) => void): void {
  ensureDebianPackages(NEEDED, log);
}

export function ensureDebianPackages(needed: readonly DebianPackage[], log: (m: string) => void): void {
  const missing = needed.filter((n) => !existsSync(n.file)).map((n) => n.pkg);
  if (missing.length === 0) return;
  const command = `apt-get install -y --no-install-recommends ${missing.join(" ")}`;
  if (process.getuid?.() !== 0) throw new Error(`missing Debian packages: ${missing.join(", ")}; as root: ${command}`);
  log(`installing ${missing.join(", ")} with apt-get`);
  // No daemon of a package may start on its own: PID 1 is not an init here, and the rig (or the
  // test) runs each one itself on its own ports.
  const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive", RUNLEVEL: "1" };
  // Another apt-get (a CI step, unattended upgrades) may hold the dpkg lock for a while: wait.
  const lock = ["-o", "DPkg::Lock::Timeout=600"];
  const install = () =>
    spawnSync("apt-get", ["install", "-y", "-q", ...lock, "--no-install-recommends", ...missing], { stdio: "inherit", env });
  if (install().status !== 0) {
    execFileSync("apt-get", ["update", "-q", ...lock], { stdio: "inherit", env });
    if (install().status !== 0) throw new Error(`${command} failed`);
  }
}
