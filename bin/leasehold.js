#!/usr/bin/env node
// Launcher of the `leasehold` command (package.json "bin", and `npm run leasehold -- …`): the
// compiled CLI (dist/src/cli/main.js). It never builds: see bin/built.js.
import { runBuilt } from "./built.js";

await runBuilt("src/cli/main.js", "leasehold");
