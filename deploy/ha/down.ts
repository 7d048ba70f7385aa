// npm run ha:down: stops every process of the rig in deploy/ha/.state.json, checks that none is
// left, and removes the run directory and the state file.
import { existsSync, rmSync } from "node:fs";
import { down, readState } from "./rig.js";
import { STATE_FILE } from "./up.js";

async function main(): Promise<void> {
  const log = (m: string) => process.stderr.write(`ha: ${m}\n`);
  if (!existsSync(STATE_FILE)) {
    log(`no ${STATE_FILE}: nothing to stop`);
    return;
  }
  const state = readState(STATE_FILE);
  await down(state, log);
  rmSync(state.runDir, { recursive: true, force: true });
  rmSync(STATE_FILE, { force: true });
  log(`stopped; removed ${state.runDir}`);
}

main().catch((err: unknown) => {
  process.stderr.write(`ha:down failed: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
