// CPU accounting from /proc (Linux) for the benchmarks: the coordinator process, the PostgreSQL
// server and the benchmark process itself.
//
// The server is counted whole, the same way for every system a benchmark runs on it: the
// postmaster, every backend and background process (checkpointer, WAL writer, autovacuum
// launcher and workers, parallel workers), and the processes that exited. Every server process is
// a child of the postmaster, which reaps it when it exits: its CPU then moves into the
// postmaster's cutime and cstime. So one sample is the postmaster's utime + stime + cutime +
// cstime plus each live child's utime + stime, and the difference of two samples is what the whole
// server spent between them (a backend that lived through the window counts its share of it; one
// that exited in it, its whole life less what it had spent at the first sample).
//
// Which postmaster: the embedded one (a child of this process), or the one whose backend
// answers `SELECT pg_backend_pid()` on a server of this machine (watchServer, for DATABASE_URL).
// A server elsewhere counts 0.

import { readdirSync, readFileSync } from "node:fs";
import pg from "pg";
import type { Coordinator } from "./harness.js";

const TICK_MS = 10; // USER_HZ is 100 on Linux

/** The fields of /proc/PID/stat after the command's closing parenthesis (field 3 on). */
function statFields(pid: number): string[] | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  } catch {
    return undefined;
  }
}

function procTicks(pid: number): number {
  const f = statFields(pid);
  return f ? Number(f[11]) + Number(f[12]) : 0; // utime + stime
}

function childrenOf(ppid: number): number[] {
  const out: number[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    const f = statFields(Number(name));
    if (f && Number(f[1]) === ppid) out.push(Number(name));
  }
  return out;
}

function safeRead(p: string): string {
  try {
    return readFileSync(p, "utf8");
  } catch {
    return "";
  }
}

/** Set by watchServer: the postmaster of a server this benchmark did not start. */
let watched: number | undefined;

/**
 * Counts the server behind `url` from now on, when it runs on this machine: its postmaster is the
 * parent of the backend that answers. Not needed for the embedded server (found as a child). A
 * server in a container (another PID namespace) or elsewhere is not counted: the process this
 * machine has under the backend's pid must have started when the backend did.
 */
export async function watchServer(url: string): Promise<void> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    const { pid, started } = (
      await c.query<{ pid: number; started: number }>(
        "SELECT pid, extract(epoch FROM backend_start)::float8 AS started FROM pg_stat_activity WHERE pid = pg_backend_pid()",
      )
    ).rows[0];
    const f = statFields(pid);
    const boot = Number(/^btime (\d+)$/m.exec(safeRead("/proc/stat"))?.[1]);
    const startedHere = f ? boot + Number(f[19]) / 100 : NaN; // starttime, in ticks since boot
    if (f && Math.abs(startedHere - started) < 2 && safeRead(`/proc/${f[1]}/comm`).trim() === "postgres") watched = Number(f[1]);
    else console.error("bench: the PostgreSQL server is not a process of this machine: its CPU is not counted");
  } finally {
    await c.end();
  }
}

function postmasters(): number[] {
  if (watched !== undefined) return [watched];
  return childrenOf(process.pid).filter((pid) => safeRead(`/proc/${pid}/comm`).trim() === "postgres");
}

/** A postmaster's own CPU (utime + stime) and its reaped children's (cutime + cstime), in ticks. */
function postmasterTicks(pm: number): { own: number; reaped: number } | undefined {
  const f = statFields(pm);
  return f ? { own: Number(f[11]) + Number(f[12]), reaped: Number(f[13]) + Number(f[14]) } : undefined;
}

/** The whole server's CPU so far, in ticks: the postmaster with its reaped children, and its live ones. */
function serverTicks(): number {
  let ticks = 0;
  for (const pm of postmasters()) {
    // A child reaped between the postmaster's read and its children's would be missed (or counted
    // twice, the other way round): read again until the postmaster's reaped total held still.
    for (let tries = 0; ; tries++) {
      const before = postmasterTicks(pm);
      if (before === undefined) break;
      let children = 0;
      for (const child of childrenOf(pm)) children += procTicks(child);
      const after = postmasterTicks(pm);
      if (after === undefined) break;
      if (after.reaped === before.reaped || tries >= 5) {
        ticks += after.own + after.reaped + children;
        break;
      }
    }
  }
  return ticks;
}

export interface CpuSample {
  coordinator: number;
  /** the whole PostgreSQL server (ms) */
  postgres: number;
  self: number;
}

export interface CpuPerItem {
  coordinator: number;
  postgres: number;
  self: number;
}

export function cpuNow(coordinator?: Coordinator): CpuSample {
  const u = process.cpuUsage();
  return {
    coordinator: coordinator?.child.pid ? procTicks(coordinator.child.pid) * TICK_MS : 0,
    postgres: serverTicks() * TICK_MS,
    self: (u.user + u.system) / 1000,
  };
}

/** CPU milliseconds per item of each process between two samples (the server: all of it, see above). */
export function cpuPer(a: CpuSample, b: CpuSample, items: number): CpuPerItem {
  return {
    coordinator: (b.coordinator - a.coordinator) / items,
    postgres: (b.postgres - a.postgres) / items,
    self: (b.self - a.self) / items,
  };
}
