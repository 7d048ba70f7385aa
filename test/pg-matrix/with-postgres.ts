// node --import tsx test/pg-matrix/with-postgres.ts 15|17 -- COMMAND [ARGS…]
//
// Runs COMMAND with DATABASE_URL set to the admin URL of a fresh PostgreSQL 15 or 17 container
// (the matrix's image and server flags, data on the container's disk as on a real server), and
// stops the container when COMMAND exits or this is interrupted. For benchmarks on a version:
//   node --import tsx test/pg-matrix/with-postgres.ts 17 -- npm run bench:peers -- --runs 3
import { spawn } from "node:child_process";
import { ROOT, VERSIONS, engineProblem, ensureImage, startPostgres, sweepLeftovers, type Version } from "./container.js";

const [version, dashes, command, ...rest] = process.argv.slice(2);
if (!(VERSIONS as readonly string[]).includes(version) || dashes !== "--" || !command) {
  console.error(`usage: with-postgres.ts ${VERSIONS.join("|")} -- COMMAND [ARGS…]`);
  process.exit(2);
}
const problem = engineProblem();
if (problem) {
  console.error(`with-postgres: no Docker engine answers (${problem})`);
  process.exit(1);
}
sweepLeftovers();
const container = await startPostgres(ensureImage(version as Version), { tmpfs: false });
let stopping: Promise<void> | undefined;
const stop = () => (stopping ??= container.stop({ remove: true, removeVolumes: true }).then(() => {}));
const child = spawn(command, rest, { cwd: ROOT, stdio: "inherit", env: { ...process.env, DATABASE_URL: container.getConnectionUri() } });
for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) process.on(signal, () => child.kill(signal));
const code = await new Promise<number>((resolve) => child.on("exit", (c, s) => resolve(c ?? (s ? 128 : 1))));
await stop();
process.exit(code);
