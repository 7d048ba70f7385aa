// What bench:peers (bench/peers.ts) prints: first what each system's work costs the PostgreSQL
// server per task (the whole server, bench/cpu.ts), then the end-to-end rates and their ratios,
// then the CPU split per process, gRPC's coordinator CPU per call beside REST's at one rate, and
// pickup latency. Medians over the rounds, with each round's figure.

import os from "node:os";
import type { CpuPerItem } from "./cpu.js";
import { fmt, type summary } from "./harness.js";
import { med } from "./peers-loads.js";

export interface Row {
  leasehold: number;
  peer: number;
  peerName: string;
  unit: string;
  /** CPU per task of each side, when the measure has it (the server's is the table's lead). */
  cpu?: { leasehold: CpuPerItem; peer: CpuPerItem };
}

export interface Round {
  rows: Record<string, Row>;
  /** CPU per task of each Leasehold load and each peer's (coordinator | server | this process). */
  cpu: Record<string, CpuPerItem>;
  pickup: { leasehold: ReturnType<typeof summary>; peer: ReturnType<typeof summary> };
  /** The same chained single-task loop over REST and over gRPC at one rate: the coordinator's CPU per call of each. */
  paced: { perSecond: number; rest: CpuPerItem & { rate: number }; grpc: CpuPerItem & { rate: number } };
}

export interface RunInfo {
  workers: number;
  seconds: number;
  postgres: string;
  grpcClient: string;
  drainTasks: number;
  rssMb: number;
  label?: string;
}

const perRound = (xs: number[], digits: number) => xs.map((x) => fmt(x, digits)).join(", ");

export function print(rounds: Round[], run: RunInfo): void {
  const cpuModel = os.cpus()[0]?.model ?? "?";
  console.log(
    `\nLeasehold${run.label ? ` (${run.label})` : ""} vs peers — ${run.workers} workers, ${run.seconds}s windows, ${rounds.length} round(s), ${os.cpus().length} cores (${cpuModel}), node ${process.version}, ${run.postgres}`,
  );
  console.log(
    `load average at the end: ${os
      .loadavg()
      .map((l) => l.toFixed(2))
      .join(" ")}`,
  );
  const names = Object.keys(rounds[0].rows);

  console.log(`\nPostgreSQL server CPU per task (ms; the whole server: postmaster, every backend and background process, exited ones`);
  console.log(`included, from /proc), medians over rounds (rounds); tasks per server core-second = 1,000 / ms; ratio = Leasehold / peer`);
  const width = Math.max(...names.map((n) => n.length), 40);
  console.log(`${"measure".padEnd(width)}  ${"Leasehold".padEnd(26)}  ${"peer".padEnd(26)}  ratio   per core-second`);
  for (const name of names) {
    const per = rounds.map((r) => r.rows[name]);
    if (!per[0].cpu) continue;
    const l = per.map((p) => p.cpu!.leasehold.postgres);
    const p = per.map((q) => q.cpu!.peer.postgres);
    console.log(
      `${name.padEnd(width)}  ${`${fmt(med(l), 3)} (${perRound(l, 3)})`.padEnd(26)}  ${`${fmt(med(p), 3)} (${perRound(p, 3)})`.padEnd(26)}  ${fmt(
        med(per.map((q) => q.cpu!.leasehold.postgres / q.cpu!.peer.postgres)),
        2,
      ).padStart(5)}×  ${fmt(1000 / med(l))} | ${fmt(1000 / med(p))}`,
    );
  }

  console.log("\nThroughput: ratio = Leasehold / peer, per round; the last columns are medians over rounds");
  console.log(`${"measure".padEnd(width)}  ${"per round: leasehold / peer (ratio)".padEnd(48)}  median leasehold | peer | ratio`);
  for (const name of names) {
    const per = rounds.map((r) => r.rows[name]);
    const cells = per.map((p) => `${fmt(p.leasehold)}/${fmt(p.peer)} (${fmt(p.leasehold / p.peer, 2)})`).join("  ");
    const u = per[0].unit;
    console.log(
      `${name.padEnd(width)}  ${cells.padEnd(48)}  ${fmt(med(per.map((p) => p.leasehold)))} | ${fmt(med(per.map((p) => p.peer)))} ${u} (${per[0].peerName}) | ${fmt(med(per.map((p) => p.leasehold / p.peer)), 2)}×`,
    );
  }
  const pl = rounds.map((r) => r.pickup.leasehold);
  const pp = rounds.map((r) => r.pickup.peer);
  console.log(
    `${"pickup p50 / p95, REST long poll vs graphile-worker LISTEN".padEnd(width)}  ${rounds
      .map(
        (r) =>
          `${fmt(r.pickup.leasehold.p50, 1)}/${fmt(r.pickup.leasehold.p95, 1)} vs ${fmt(r.pickup.peer.p50, 1)}/${fmt(r.pickup.peer.p95, 1)}`,
      )
      .join("  ")
      .padEnd(
        48,
      )}  ${fmt(med(pl.map((s) => s.p50)), 2)} / ${fmt(med(pl.map((s) => s.p95)), 2)} ms | ${fmt(med(pp.map((s) => s.p50)), 2)} / ${fmt(med(pp.map((s) => s.p95)), 2)} ms`,
  );

  console.log(`\nCPU per task (ms, medians over rounds): coordinator | PostgreSQL server | this process (generator or in-process peer)`);
  for (const key of Object.keys(rounds[0].cpu)) {
    const xs = rounds.map((r) => r.cpu[key]);
    console.log(
      `  ${key.padEnd(50)} ${fmt(med(xs.map((x) => x.coordinator)), 3)} | ${fmt(med(xs.map((x) => x.postgres)), 3)} | ${fmt(med(xs.map((x) => x.self)), 3)}`,
    );
  }

  const paced = rounds.map((r) => r.paced);
  const ratios = paced.map((p) => p.grpc.coordinator / p.rest.coordinator);
  console.log(
    `\ngRPC against REST at one rate (chained single task, ${run.grpcClient} / undici generators, both paced to ~60% of the slower one's rate):`,
  );
  console.log(
    `  rates ${paced.map((p) => `${fmt(p.rest.rate)}/${fmt(p.grpc.rate)}`).join(", ")} tasks/s (REST/gRPC); coordinator CPU per call: REST ${fmt(
      med(paced.map((p) => p.rest.coordinator)),
      3,
    )} ms (${perRound(
      paced.map((p) => p.rest.coordinator),
      3,
    )}), gRPC ${fmt(med(paced.map((p) => p.grpc.coordinator)), 3)} ms (${perRound(
      paced.map((p) => p.grpc.coordinator),
      3,
    )}): gRPC / REST ${fmt(med(ratios), 2)}× (${perRound(ratios, 2)})`,
  );
  console.log(`coordinator peak RSS: ${fmt(run.rssMb)} MB`);
}
