// The `leasehold` command (package.json "bin" → bin/leasehold.js → dist/src/cli/main.js; from
// source, node --import tsx src/cli/main.ts). It never starts the coordinator: that is `npm start`.
// The program itself is program.ts; each command lives in commands/.
import { cliEnvironment } from "../config/index.js";
import { main } from "./program.js";

// `leasehold … | head` closes stdout early: that ends the output, not with a stack trace.
process.stdout.on("error", (err: NodeJS.ErrnoException) => {
  if (err.code === "EPIPE") process.exit(process.exitCode ?? 0);
  throw err;
});

process.exitCode = await main(process.argv.slice(2), cliEnvironment());
