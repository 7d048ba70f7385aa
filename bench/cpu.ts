// CPU accounting from /proc (Linux) for the benchmarks: the coordinator process, the PostgreSQL
// server (the embedded postmaster is a child of the benchmark process, its backends are its
// children) and the benchmark process itself. With DATABASE_URL pointing elsewhere the PostgreSQL
// figure is 0.

import { readdirSync, readFileSync } from "node:fs";
import type { Coordinator } from "./harness.js";

const TICK_MS = 10; // USER_HZ is 100 on Linux

function procTicks(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return Number(f[11]) + Number(f[12]); // utime + stime
  } catch {
    return 0;
  }
}

function childrenOf(ppid: number): number[] {
  const out: number[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, "utf8");
      const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      if (Number(f[1]) === ppid) out.push(Number(name));
    } catch {
      // gone
    }
  }
  return out;
}

/** The embedded postmaster is a child of this process; its backends are its children. Per pid, so a backend that exits is not subtracted. */
function postgresTicks(): Map<number, number> {
  const out = new Map<number, number>();
  for (const pm of childrenOf(process.pid)) {
    const comm = safeRead(`/proc/${pm}/comm`).trim();
    if (comm !== "postgres") continue;
    out.set(pm, procTicks(pm));
    for (const b of childrenOf(pm)) out.set(b, procTicks(b));
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

export interface CpuSample {
  coordinator: number;
  postgres: Map<number, number>;
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
    postgres: postgresTicks(),
    self: (u.user + u.system) / 1000,
  };
}

/** CPU milliseconds per item of each process between two samples (a backend that exits in between is not counted). */
export function cpuPer(a: CpuSample, b: CpuSample, items: number): CpuPerItem {
  return {
    coordinator: (b.coordinator - a.coordinator) / items,
    postgres: ([...b.postgres].reduce((sum, [pid, t]) => sum + t - (a.postgres.get(pid) ?? 0), 0) * TICK_MS) / items,
    self: (b.self - a.self) / items,
  };
}
