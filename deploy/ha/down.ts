// npm run ha:down: stops every process of the rig in deploy/ha/.state.json, checks that none is
// left, and removes the run directory and the state file.
import { existsSync } from "node:fs";
import { readState, teardown } from "./rig.js";
import { STATE_FILE } from "./up.js";

async function main(): Promise<void> {
  const log = (m: string) => process.stderr.write(`ha: ${m}\n`);
  if (!existsSync(STATE_FILE)) {
    log(`no ${STATE_FILE}: nothing to stop`);
    return;
  }
  const { runDir } = readState(STATE_FILE);
  await teardown(STATE_FILE, log);
  log(`stopped; removed ${runDir}`);
}

main().catch((err: unknown) => {
  process.stderr.write(`ha:down failed: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
