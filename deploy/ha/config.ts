// The rig's layout (ports, paths, passwords) and its configuration files, rendered from the
// templates beside this file (patroni.yml.in, haproxy.cfg.in, pgbouncer.ini.in).
import { readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

export const TEMPLATE_DIR = path.dirname(fileURLToPath(import.meta.url));
export const PG_BIN_DIR = "/usr/lib/postgresql/15/bin";
export const DATABASE = "leasehold";
export const APP_ROLE = "leasehold";

export interface Layout {
  runDir: string;
  etcdPort: number;
  etcdPeerPort: number;
  haproxyPort: number;
  statsPort: number;
  pgbouncerPort: number;
  members: Array<{ name: string; pgPort: number; restPort: number; dataDir: string; socketDir: string }>;
  coordinatorPorts: number[];
  passwords: { superuser: string; replication: string; app: string };
}

/** How many ports from basePort up a rig may use (the offsets below stay under it). */
export const RIG_PORT_SPAN = 40;

/** Every port is basePort plus a fixed offset, so one number says where a rig lives. */
export function layout(basePort: number, runDir: string, members: number, coordinators: number, passwords: Layout["passwords"]): Layout {
  return {
    runDir,
    etcdPort: basePort,
    etcdPeerPort: basePort + 1,
    haproxyPort: basePort + 2,
    statsPort: basePort + 3,
    pgbouncerPort: basePort + 4,
    members: Array.from({ length: members }, (_, i) => ({
      name: `pg${i + 1}`,
      pgPort: basePort + 10 + i,
      restPort: basePort + 20 + i,
      dataDir: path.join(runDir, `pg${i + 1}`),
      socketDir: path.join(runDir, `sock-pg${i + 1}`),
    })),
    coordinatorPorts: Array.from({ length: coordinators }, (_, i) => basePort + 30 + i),
    passwords,
  };
}

/** Every port the rig listens on. */
export function rigPorts(l: Layout): number[] {
  return [
    l.etcdPort,
    l.etcdPeerPort,
    l.haproxyPort,
    l.statsPort,
    l.pgbouncerPort,
    ...l.members.flatMap((m) => [m.pgPort, m.restPort]),
    ...l.coordinatorPorts,
  ];
}

function render(template: string, values: Record<string, string | number>): string {
  const text = readFileSync(path.join(TEMPLATE_DIR, template), "utf8");
  return text.replace(/\{\{([A-Z_]+)\}\}/g, (_, key: string) => {
    if (!(key in values)) throw new Error(`${template}: no value for {{${key}}}`);
    return String(values[key]);
  });
}

export function patroniConfig(l: Layout, member: Layout["members"][number]): string {
  return render("patroni.yml.in", {
    NAME: member.name,
    REST_PORT: member.restPort,
    ETCD_PORT: l.etcdPort,
    PG_PORT: member.pgPort,
    DATA_DIR: member.dataDir,
    SOCKET_DIR: member.socketDir,
    BIN_DIR: PG_BIN_DIR,
    RUN_DIR: l.runDir,
    SUPERUSER_PASSWORD: l.passwords.superuser,
    REPLICATION_PASSWORD: l.passwords.replication,
  });
}

export function haproxyConfig(l: Layout): string {
  const servers = l.members.map((m) => `    server ${m.name} 127.0.0.1:${m.pgPort} check port ${m.restPort}`).join("\n");
  return render("haproxy.cfg.in", { HAPROXY_PORT: l.haproxyPort, STATS_PORT: l.statsPort, SERVERS: servers });
}

export function pgbouncerConfig(l: Layout): string {
  return render("pgbouncer.ini.in", { HAPROXY_PORT: l.haproxyPort, PGBOUNCER_PORT: l.pgbouncerPort, RUN_DIR: l.runDir });
}

/** PgBouncer's auth_file: with a plain password it authenticates clients and the server by SCRAM. */
export function pgbouncerUsers(l: Layout): string {
  return `"${APP_ROLE}" "${l.passwords.app}"\n`;
}

export function postgresUrl(port: number, user: string, password: string, database = DATABASE): string {
  return `postgres://${encodeURIComponent(user)}:${encodeURIComponent(password)}@127.0.0.1:${port}/${database}`;
}
