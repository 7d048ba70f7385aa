#!/usr/bin/env node
// Launcher of the `leasehold` command: the compiled CLI (dist/src/cli.js, built by `npm run build`,
// which `npm ci` / `npm install` run on their own through `prepare`).
await import("../dist/src/cli.js");
