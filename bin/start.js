#!/usr/bin/env node
// `npm start`: the compiled coordinator (dist/src/main.js). It never builds: see bin/built.js.
import { runBuilt } from "./built.js";

await runBuilt("src/main.js", "leasehold");
