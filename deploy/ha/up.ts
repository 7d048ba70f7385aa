// npm run ha:up: installs what is missing, starts the rig, prints its URLs and writes them to
// deploy/ha/.state.json. Its ports are 27400 and up (below the kernel's ephemeral port range),
// or the next free block below that range when one of them is taken; HA_BASE_PORT fixes the base
// (refused when in use or inside the range) and HA_RUN_DIR the run directory.
import { existsSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { ensurePackages } from "./packages.js";
import { DEFAULT_BASE_PORT } from "./ports.js";
import { leftovers, readState, teardown, up, type RigState } from "./rig.js";

export const STATE_FILE = path.join(path.dirname(fileURLToPath(import.meta.url)), ".state.json");

export function describe(state: RigState): string {
  const lines = [
    "Leasehold HA rig (loopback only):",
    ...state.coordinators.map((c, i) => `  coordinator ${i + 1}: ${c.url}   (pid ${c.pid}, log ${c.log})`),
    `  HAProxy (leader, session/LISTEN): ${state.haproxy.url}`,
    `  HAProxy stats: ${state.haproxy.statsUrl}`,
    `  PgBouncer (transaction pool): ${state.pgbouncer.url}`,
    ...state.members.map((m) => `  Patroni ${m.name}: ${m.restUrl}   (PostgreSQL 127.0.0.1:${m.pgPort})`),
    `  etcd: ${state.etcd.url}`,
    `  state: ${STATE_FILE}; stop with: npm run ha:down`,
  ];
  return lines.join("\n");
}

async function main(): Promise<void> {
  const log = (m: string) => process.stderr.write(`ha: ${m}\n`);
  ensurePackages(log);
  if (existsSync(STATE_FILE)) {
    const running = leftovers(readState(STATE_FILE).runDir);
    if (running.length > 0) throw new Error(`a rig is running (${STATE_FILE}): npm run ha:down first`);
    // What an interrupted start left: its run directory and state file.
    await teardown(STATE_FILE, log);
  }
  const explicit = process.env.HA_BASE_PORT;
  const runDir = (basePort: number) => path.resolve(process.env.HA_RUN_DIR ?? path.join(os.tmpdir(), `leasehold-ha-${basePort}`));
  const started = Date.now();
  const state = await up({
    basePort: explicit === undefined ? undefined : Number(explicit),
    preferredBasePort: DEFAULT_BASE_PORT,
    runDir,
    stateFile: STATE_FILE,
    log,
  });
  log(`up in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  process.stdout.write(describe(state) + "\n");
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main().catch((err: unknown) => {
    process.stderr.write(`ha:up failed: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  });
}
