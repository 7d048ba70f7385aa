#!/usr/bin/env node
// `npm run migrate -- up|down|status|create …`: the compiled migration command (dist/src/migrate-cli.js).
import { runBuilt } from "./built.js";

await runBuilt("src/migrate-cli.js", "migrate");
