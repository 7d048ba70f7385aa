// The high-availability rig on one machine, loopback only: etcd, PostgreSQL 15 members under
// Patroni with a synchronous standby, HAProxy on the leader, PgBouncer in transaction mode in
// front of HAProxy, and coordinators on PgBouncer (LISTEN directly through HAProxy).
//
// Every daemon runs detached in its own process group with its log in the run directory, and
// the state (PIDs, URLs) is written after each step, so `down` stops whatever `up` got to.
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chownSync, closeSync, existsSync, mkdirSync, openSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import pg from "pg";
import { projectRoot } from "../../src/project-root.js";
import { openClient } from "../../src/store/postgres/sql/db.js";
import {
  APP_ROLE,
  DATABASE,
  haproxyConfig,
  layout,
  patroniConfig,
  pgbouncerConfig,
  pgbouncerUsers,
  postgresUrl,
  type Layout,
} from "./config.js";
import { chooseBasePort } from "./ports.js";
import { setUpAppDatabase, stableLeader, type LeaderObservation } from "./setup.js";

const ROOT = projectRoot(import.meta.url);

export interface RigOptions {
  /** The operator's base port: used as it is, or refused (in use, or inside the ephemeral range). */
  basePort?: number;
  /** Tried first when no basePort is given; when busy, the next free block below the ephemeral range. */
  preferredBasePort: number;
  /** The run directory (data and logs) of a rig on the chosen base port. */
  runDir: (basePort: number) => string;
  /** Where the state is written after each step (and read by `down`). */
  stateFile: string;
  members?: number;
  coordinators?: number;
  /** Added to every coordinator's environment. */
  coordinatorEnv?: Record<string, string>;
  log?: (msg: string) => void;
}

export interface MemberState {
  name: string;
  pgPort: number;
  restUrl: string;
  dataDir: string;
  /** Patroni's PID (PostgreSQL's postmaster is its child; its PID is in dataDir/postmaster.pid). */
  pid?: number;
}

export interface RigState {
  runDir: string;
  etcd: { url: string; pid?: number };
  members: MemberState[];
  haproxy: { url: string; statsUrl: string; pid?: number };
  pgbouncer: { url: string; pid?: number };
  /** Superuser through HAProxy: always the leader. */
  superuserUrl: string;
  /** The coordinators' session URL for LISTEN (HAProxy, no pooler). */
  listenUrl: string;
  coordinators: Array<{ url: string; pid?: number; log: string }>;
}

const isRoot = process.getuid?.() === 0;

function postgresIds(): { uid: number; gid: number } | undefined {
  if (!isRoot) return undefined;
  const line = readFileSync("/etc/passwd", "utf8")
    .split("\n")
    .find((l) => l.startsWith("postgres:"));
  if (!line) throw new Error("no postgres OS user (install postgresql-15)");
  const [, , uid, gid] = line.split(":");
  return { uid: Number(uid), gid: Number(gid) };
}

/** Starts a detached daemon with stdout and stderr in runDir/NAME.log; returns its PID. */
function daemon(
  runDir: string,
  name: string,
  command: string,
  args: string[],
  opts: { asPostgres?: boolean; env?: NodeJS.ProcessEnv; cwd?: string } = {},
) {
  const logFile = path.join(runDir, `${name}.log`);
  const fd = openSync(logFile, "a");
  // As root, PostgreSQL and PgBouncer must run as the postgres user; setpriv execs, so the PID
  // is the daemon's own.
  const [file, argv] =
    opts.asPostgres && isRoot ? ["setpriv", ["--reuid=postgres", "--regid=postgres", "--init-groups", command, ...args]] : [command, args];
  const env = opts.asPostgres && isRoot ? { ...process.env, HOME: "/var/lib/postgresql", ...opts.env } : { ...process.env, ...opts.env };
  const child = spawn(file, argv, { detached: true, stdio: ["ignore", fd, fd], env, cwd: opts.cwd ?? runDir });
  closeSync(fd);
  child.unref();
  if (child.pid === undefined) throw new Error(`could not start ${name} (${command})`);
  return { pid: child.pid, logFile };
}

export async function until<T>(what: string, timeoutMs: number, probe: () => Promise<T | undefined>, everyMs = 250): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe().catch(() => undefined);
    if (value !== undefined) return value;
    if (Date.now() > end) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

async function getJson(url: string, timeoutMs = 3000): Promise<{ status: number; body: unknown }> {
  const res = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
  const text = await res.text();
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    // not JSON: keep the text
  }
  return { status: res.status, body };
}

export interface ClusterMember {
  name: string;
  role: string;
  state: string;
  timeline?: number;
  lag?: number | string;
}

/** Patroni's view of the cluster, from any member that answers. */
export async function clusterView(state: RigState): Promise<ClusterMember[]> {
  for (const m of state.members) {
    try {
      const { status, body } = await getJson(`${m.restUrl}/cluster`);
      if (status === 200) return (body as { members: ClusterMember[] }).members;
    } catch {
      // try the next member
    }
  }
  throw new Error("no Patroni member answers /cluster");
}

/** A leader and a streaming synchronous standby, every member running: the rig is whole. */
export async function clusterHealthy(state: RigState): Promise<ClusterMember[] | undefined> {
  const members = await clusterView(state);
  const leader = members.filter((m) => m.role === "leader" && m.state === "running");
  const sync = members.filter((m) => m.role === "sync_standby" && (m.state === "streaming" || m.state === "running"));
  const running = members.filter((m) => m.state === "running" || m.state === "streaming");
  return leader.length === 1 && sync.length === 1 && running.length === state.members.length ? members : undefined;
}

export function writeState(file: string, state: RigState): void {
  writeFileSync(file, JSON.stringify(state, null, 2) + "\n", { mode: 0o600 });
}

export function readState(file: string): RigState {
  return JSON.parse(readFileSync(file, "utf8")) as RigState;
}

function emptyState(l: Layout): RigState {
  return {
    runDir: l.runDir,
    etcd: { url: `http://127.0.0.1:${l.etcdPort}` },
    members: l.members.map((m) => ({ name: m.name, pgPort: m.pgPort, restUrl: `http://127.0.0.1:${m.restPort}`, dataDir: m.dataDir })),
    haproxy: { url: postgresUrl(l.haproxyPort, APP_ROLE, l.passwords.app), statsUrl: `http://127.0.0.1:${l.statsPort}/` },
    pgbouncer: { url: postgresUrl(l.pgbouncerPort, APP_ROLE, l.passwords.app) },
    superuserUrl: postgresUrl(l.haproxyPort, "postgres", l.passwords.superuser, "postgres"),
    listenUrl: postgresUrl(l.haproxyPort, APP_ROLE, l.passwords.app),
    coordinators: [],
  };
}

/**
 * Whether a leader leads through HAProxy with a synchronous standby streaming: Patroni's view
 * (one leader, one sync standby, every member running) and the server's own (HAProxy reaches the
 * leader's port, out of recovery, with a `sync` walsender streaming). Undefined when not.
 */
async function observeLeader(state: RigState): Promise<LeaderObservation | undefined> {
  const members = await clusterHealthy(state);
  const leader = members?.find((m) => m.role === "leader");
  const member = state.members.find((m) => m.name === leader?.name);
  if (!leader || !member) return undefined;
  const c = await openClient({ connectionString: state.superuserUrl, connectionTimeoutMillis: 5000 });
  try {
    const { rows } = await c.query<{ recovery: boolean; port: number; sync: number }>(
      `SELECT pg_is_in_recovery() AS recovery, inet_server_port() AS port,
              (SELECT count(*)::int FROM pg_stat_replication WHERE sync_state = 'sync' AND state = 'streaming') AS sync`,
    );
    const r = rows[0];
    if (r.recovery || r.port !== member.pgPort || r.sync < 1) return undefined;
  } finally {
    await c.end().catch(() => {});
  }
  return { leader: leader.name, timeline: leader.timeline ?? 0 };
}

/** Starts the whole rig; on any failure stops what it started and rethrows. */
export async function up(opts: RigOptions): Promise<RigState> {
  const log = opts.log ?? (() => {});
  const secret = () => randomBytes(12).toString("hex");
  const basePort = await chooseBasePort({ explicit: opts.basePort, preferred: opts.preferredBasePort });
  const l = layout(basePort, opts.runDir(basePort), opts.members ?? 3, opts.coordinators ?? 3, {
    superuser: secret(),
    replication: secret(),
    app: secret(),
  });
  if (existsSync(l.runDir)) {
    // What a failed start left behind is wiped; a running rig is not.
    if (leftovers(l.runDir).length > 0) throw new Error(`a rig is running in ${l.runDir}: npm run ha:down first`);
    rmSync(l.runDir, { recursive: true, force: true });
  }
  mkdirSync(l.runDir, { recursive: true, mode: 0o755 });
  const ids = postgresIds();
  // PostgreSQL refuses a data directory others can read; Patroni creates it under runDir.
  if (ids) chownSync(l.runDir, ids.uid, ids.gid);
  const state = emptyState(l);
  const save = () => writeState(opts.stateFile, state);
  save();
  try {
    await startDatabase(l, state, save, log);
    await startCoordinators(l, state, save, log, opts.coordinatorEnv ?? {});
    return state;
  } catch (err) {
    log(`rig failed to start (${(err as Error).message}); stopping what started`);
    await down(state, log).catch(() => {});
    throw err;
  }
}

async function startDatabase(l: Layout, state: RigState, save: () => void, log: (m: string) => void): Promise<void> {
  const ids = postgresIds();
  const file = (name: string, text: string, owner = true) => {
    const p = path.join(l.runDir, name);
    writeFileSync(p, text, { mode: 0o600 });
    if (ids && owner) chownSync(p, ids.uid, ids.gid);
    return p;
  };

  log(`etcd on ${state.etcd.url}`);
  const etcd = daemon(l.runDir, "etcd", "etcd", [
    "--name=leasehold-ha",
    `--data-dir=${path.join(l.runDir, "etcd")}`,
    `--listen-client-urls=${state.etcd.url}`,
    `--advertise-client-urls=${state.etcd.url}`,
    `--listen-peer-urls=http://127.0.0.1:${l.etcdPeerPort}`,
    `--initial-advertise-peer-urls=http://127.0.0.1:${l.etcdPeerPort}`,
    `--initial-cluster=leasehold-ha=http://127.0.0.1:${l.etcdPeerPort}`,
    "--initial-cluster-state=new",
  ]);
  state.etcd.pid = etcd.pid;
  save();
  await until("etcd /health", 60_000, async () => ((await getJson(`${state.etcd.url}/health`)).status === 200 ? true : undefined));

  for (const [i, m] of l.members.entries()) {
    mkdirSync(m.socketDir, { recursive: true, mode: 0o700 });
    if (ids) chownSync(m.socketDir, ids.uid, ids.gid);
    const config = file(`${m.name}.yml`, patroniConfig(l, m));
    state.members[i].pid = daemon(l.runDir, m.name, "patroni", [config], { asPostgres: true }).pid;
    save();
    log(`patroni ${m.name}: PostgreSQL on 127.0.0.1:${m.pgPort}, REST ${state.members[i].restUrl}`);
    // The first member bootstraps alone, so it is the leader; the others clone from it.
    if (i === 0) {
      await until(`${m.name} to lead`, 180_000, async () =>
        (await getJson(`${state.members[0].restUrl}/primary`)).status === 200 ? true : undefined,
      );
    }
  }

  const haproxyCfg = file("haproxy.cfg", haproxyConfig(l), false);
  state.haproxy.pid = daemon(l.runDir, "haproxy", "haproxy", ["-f", haproxyCfg]).pid;
  save();
  log(`haproxy: write port ${l.haproxyPort} (stats ${state.haproxy.statsUrl})`);

  // The setup statements wait for the whole cluster: a leader that stays, reached through HAProxy,
  // with its synchronous standby streaming. Started earlier, while the replicas clone from the
  // leader, they ran exactly when the machine was busiest, and a slow health answer or a lost
  // leader lock then cut their session.
  const stable = () =>
    stableLeader(() => observeLeader(state), { times: 4, everyMs: 1000, timeoutMs: 240_000 }).then((o) => {
      log(`leader ${o.leader} (timeline ${o.timeline}) with a streaming synchronous standby`);
      return o;
    });
  await setUpAppDatabase(
    state.superuserUrl,
    state.haproxy.url,
    { role: APP_ROLE, password: l.passwords.app, database: DATABASE, statementTimeoutMs: 5000 },
    { attempts: 5, before: stable, log },
  );

  file("userlist.txt", pgbouncerUsers(l));
  const bouncerIni = file("pgbouncer.ini", pgbouncerConfig(l));
  state.pgbouncer.pid = daemon(l.runDir, "pgbouncer", "pgbouncer", [bouncerIni], { asPostgres: true }).pid;
  save();
  log(`pgbouncer: port ${l.pgbouncerPort}`);

  await until("every member running, with a synchronous standby", 180_000, () => clusterHealthy(state), 500);
  await until("a query through PgBouncer", 60_000, async () => {
    const c = new pg.Client({ connectionString: state.pgbouncer.url, connectionTimeoutMillis: 5000 });
    c.on("error", () => {});
    try {
      await c.connect();
      await c.query("SELECT 1");
      return true;
    } finally {
      await c.end().catch(() => {});
    }
  });
}

async function startCoordinators(l: Layout, state: RigState, save: () => void, log: (m: string) => void, extra: Record<string, string>) {
  for (const [i, port] of l.coordinatorPorts.entries()) {
    const name = `coordinator${i + 1}`;
    const { pid, logFile } = daemon(l.runDir, name, process.execPath, ["--import", "tsx", path.join(ROOT, "src/main.ts")], {
      cwd: ROOT,
      env: {
        DATABASE_URL: state.pgbouncer.url,
        LISTEN_DATABASE_URL: state.listenUrl,
        // PgBouncer before 1.21 cannot keep a named prepared statement across transactions.
        PG_PREPARED_STATEMENTS: "false",
        HOST: "127.0.0.1",
        PORT: String(port),
        LOG_LEVEL: "info",
        ...extra,
      },
    });
    state.coordinators.push({ url: `http://127.0.0.1:${port}`, pid, log: logFile });
    save();
  }
  for (const c of state.coordinators) {
    await until(`${c.url}/readyz`, 120_000, async () => {
      if (!alive(c.pid)) throw new Error(`coordinator ${c.url} exited; see ${c.log}`);
      return (await getJson(`${c.url}/readyz`)).status === 200 ? true : undefined;
    }).catch((err: Error) => {
      throw new Error(`${err.message}\n${readFileSync(c.log, "utf8").slice(-2000)}`);
    });
    log(`coordinator ${c.url} ready (pid ${c.pid})`);
  }
}

export function alive(pid: number | undefined): boolean {
  if (!pid) return false;
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  // A child that exited but was not reaped yet (a zombie) still answers kill(pid, 0).
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return false;
  }
}

/** The PID of a member's postmaster, from its data directory (undefined when not running). */
export function postmasterPid(member: MemberState): number | undefined {
  try {
    const pid = Number(readFileSync(path.join(member.dataDir, "postmaster.pid"), "utf8").split("\n")[0]);
    return alive(pid) ? pid : undefined;
  } catch {
    return undefined;
  }
}

async function stop(pids: Array<number | undefined>, signal: NodeJS.Signals, graceMs: number): Promise<void> {
  const live = pids.filter((p): p is number => alive(p));
  for (const p of live) process.kill(p, signal);
  const end = Date.now() + graceMs;
  while (live.some(alive) && Date.now() < end) await new Promise((r) => setTimeout(r, 100));
  for (const p of live.filter(alive)) process.kill(p, "SIGKILL");
  const killEnd = Date.now() + 5000;
  while (live.some(alive) && Date.now() < killEnd) await new Promise((r) => setTimeout(r, 50));
}

/**
 * Processes still running from this rig's run directory: PostgreSQL backends of a postmaster
 * that was killed, a member Patroni restarted. Found by their command line naming the run
 * directory (PostgreSQL's `-D`, Patroni's config), never by program name.
 */
export function leftovers(runDir: string): number[] {
  const found: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      const cmd = readFileSync(`/proc/${entry}/cmdline`, "utf8");
      if (cmd.includes(runDir + "/") || cmd.includes(runDir + "\0")) found.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return found;
}

/**
 * Stops the rig a state file describes, then removes its run directory and the file; nothing to
 * do without the file. The state is written before the first daemon starts and after each one,
 * so this also stops what an interrupted `up` or a killed test run left behind.
 */
export async function teardown(stateFile: string, log: (m: string) => void = () => {}): Promise<boolean> {
  if (!existsSync(stateFile)) return false;
  const state = readState(stateFile);
  await down(state, log);
  rmSync(state.runDir, { recursive: true, force: true });
  rmSync(stateFile, { force: true });
  return true;
}

/** Stops everything in the state, newest first, and waits until none of it runs. */
export async function down(state: RigState, log: (m: string) => void = () => {}): Promise<void> {
  await stop(
    state.coordinators.map((c) => c.pid),
    "SIGTERM",
    15_000,
  );
  log("coordinators stopped");
  await stop([state.pgbouncer.pid, state.haproxy.pid], "SIGTERM", 5000);
  // Patroni stops its PostgreSQL (fast shutdown) on SIGTERM, then exits.
  const postmasters = state.members.map(postmasterPid);
  await stop(
    state.members.map((m) => m.pid),
    "SIGTERM",
    30_000,
  );
  await stop([...postmasters, ...state.members.map(postmasterPid)], "SIGTERM", 10_000);
  log("patroni and PostgreSQL stopped");
  await stop([state.etcd.pid], "SIGTERM", 5000);
  const rest = leftovers(state.runDir);
  if (rest.length > 0) {
    log(`stopping ${rest.length} leftover process(es) of ${state.runDir}: ${rest.join(" ")}`);
    await stop(rest, "SIGKILL", 0);
  }
  const still = leftovers(state.runDir);
  if (still.length > 0) throw new Error(`processes of ${state.runDir} still running: ${still.join(" ")}`);
}
