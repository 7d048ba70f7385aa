#!/usr/bin/env node
// Launcher of the `leasehold` command (src/cli.ts, run through tsx like the rest of the project).
import { register } from "tsx/esm/api";

register();
await import("../src/cli.ts");
