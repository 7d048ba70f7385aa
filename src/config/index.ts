// The only reader of process.env. Parsed and validated once at start; a bad
// value is a ConfigError naming the variable (main prints it and exits 2).
// Files named by variables (AUTH_TOKENS_FILE, TLS_CERT_FILE, TLS_KEY_FILE) are
// read and checked here too, so a bad file is a config error like a bad value.

import { createPrivateKey, X509Certificate } from "node:crypto";
import { readFileSync } from "node:fs";
import { ACCOUNT_NAME } from "../queue/account-validation.js";

export type LogLevel = "fatal" | "error" | "warn" | "info" | "debug" | "trace" | "silent";

export interface Config {
  /** Unset: run on the embedded PostgreSQL under .data/ and migrate it. */
  databaseUrl: string | undefined;
  /** Direct session connection for LISTEN when DATABASE_URL points at a transaction pooler. */
  listenDatabaseUrl: string | undefined;
  host: string;
  port: number;
  pgPoolMax: number;
  pgStatementTimeoutMs: number;
  /** How long a request may wait for a pooled connection before UNAVAILABLE. */
  pgConnectTimeoutMs: number;
  /** false: statements go unnamed, for a transaction pooler without prepared-statement support. */
  pgPreparedStatements: boolean;
  requestTimeoutMs: number;
  defaultLeaseSeconds: number;
  defaultMaxAttempts: number;
  maxTasksPerJob: number;
  /** How far ahead a CreateJob's run_at may lie, in days. */
  maxRunAtAheadDays: number;
  reaperIntervalMs: number;
  pollIntervalMs: number;
  /** Finished jobs older than this many days are deleted with their tasks and events; undefined: kept. */
  retentionDays?: number;
  /** Length of each new partition of the event log, in hours. */
  eventPartitionHours: number;
  /** Partitions of the event log kept created ahead of now. */
  eventPartitionsAhead: number;
  maxBodyBytes: number;
  shutdownTimeoutMs: number;
  logLevel: LogLevel;
  /** LOG_SLOW_MS: a request at least this long (beyond a long poll's wait) is logged at info. */
  logSlowMs: number;
  /** Embedded mode only: where the cluster lives and which port it listens on. */
  embeddedDataDir: string;
  embeddedPort: number;
  /** Hashed bearer tokens from AUTH_TOKENS_FILE; empty: the API is open (loopback only unless allowUnauthenticated). */
  authTokens: AuthTokenEntry[];
  /** ALLOW_UNAUTHENTICATED=true: without tokens, binding a non-loopback HOST is allowed. */
  allowUnauthenticated: boolean;
  /** TLS_CERT_FILE + TLS_KEY_FILE (PEM contents); unset: cleartext. */
  tls: { cert: Buffer; key: Buffer } | undefined;
  /**
   * OTEL_EXPORTER_OTLP_ENDPOINT: when set, spans are exported by OTLP/HTTP (the exporter reads
   * this and the other OTEL_EXPORTER_OTLP_* variables itself); unset: no tracing SDK at all.
   */
  otelExporterOtlpEndpoint?: string;
  /** DIRECT_UNARY: plain unary gRPC, Connect and REST calls on the direct paths (false: all through connect-es' router). */
  directUnary: boolean;
  /** CLAIM_HINTS: claims start their scan at a hint (src/store/postgres/state/claim-hints.ts); false: from the front. */
  claimHints: boolean;
  /**
   * FLOW_CLAIM_HINTS: flow-controlled claims read past a held MVCC horizon (leasehold_flow_claim_hinted: counts
   * from a floor, scans from where the lane last stopped) and CreateJob finds a priority's head of fair ranks
   * from the last it found; false: leasehold_flow_claim as before, and the head from the front.
   */
  flowClaimHints: boolean;
  /** COALESCE, COALESCE_MAX_BATCH, COALESCE_MIX, COALESCE_LINGER_MS: coalescing's batch size, whether results ride with claims, the linger; false: off. */
  coalescing: { maxBatch: number; mixResults: boolean; lingerMs: number } | false;
  /** HORIZON_WARN_AFTER_MS: how long the MVCC horizon may be held back before the warning and the /readyz note. */
  horizonWarnAfterMs: number;
}

/** `metrics` is a scrape token: GET /metrics and nothing else (no RPC). */
export const ROLES = ["submitter", "worker", "billing", "metrics", "admin"] as const;
export type Role = (typeof ROLES)[number];

/**
 * One line of AUTH_TOKENS_FILE: `<sha256-hex> <role> [third field]`. The third field is a worker's
 * worker_id prefix (required), or the account a submitter is bound to (optional: an unbound
 * submitter sees every job, single-tenant mode); admin, billing and metrics tokens take none.
 */
export interface AuthTokenEntry {
  /** sha256 of the token, 64 lowercase hex characters. */
  sha256: string;
  role: Role;
  /** Workers only: every worker_id the token uses must start with this. */
  workerPrefix?: string;
  /** Submitters only: the account the token is bound to; its calls see and create only that account's jobs. */
  account?: string;
}

export class ConfigError extends Error {
  constructor(
    readonly variable: string,
    message: string,
  ) {
    super(`${variable}: ${message}`);
    this.name = "ConfigError";
  }
}

type Env = Record<string, string | undefined>;

/** Variable, default and one-line meaning: the README table is written from this list. */
export const CONFIG_VARIABLES = [
  ["DATABASE_URL", "(unset: embedded PostgreSQL in .data/)", "PostgreSQL URL; when set, migrations are not applied at start"],
  ["LISTEN_DATABASE_URL", "DATABASE_URL", "direct session connection used for LISTEN (set when DATABASE_URL is a transaction pooler)"],
  ["HOST", "127.0.0.1", "address to bind"],
  ["PORT", "8080", "port for HTTP/1.1 and cleartext HTTP/2"],
  ["PG_POOL_MAX", "8", "connections in the pool"],
  ["PG_STATEMENT_TIMEOUT_MS", "5000", "server-side statement_timeout of every pooled connection"],
  ["PG_CONNECT_TIMEOUT_MS", "2000", "longest wait for a pooled connection before UNAVAILABLE/503"],
  [
    "PG_PREPARED_STATEMENTS",
    "true",
    "`false` sends every statement unnamed: for DATABASE_URL on PgBouncer before 1.21 (or without `max_prepared_statements`) in transaction mode",
  ],
  ["REQUEST_TIMEOUT_MS", "10000", "deadline of a request without its own (long polls add their wait)"],
  ["DEFAULT_LEASE_SECONDS", "60", "lease of a workload registered without one"],
  ["DEFAULT_MAX_ATTEMPTS", "3", "attempts of a workload registered without one"],
  ["MAX_TASKS_PER_JOB", "10000", "most tasks one CreateJob may carry"],
  ["MAX_RUN_AT_AHEAD_DAYS", "365", "how far ahead a CreateJob's run_at (a delayed job or task) may lie, in days"],
  ["REAPER_INTERVAL_MS", "1000", "how often expired leases are requeued or failed"],
  ["POLL_INTERVAL_MS", "1000", "how often a parked long-poll (or a WatchJob stream) re-checks without a notification"],
  [
    "RETENTION_DAYS",
    "(unset: keep everything)",
    "finished jobs older than this many days are deleted with their tasks, in small batches, by the maintenance loop; the event log's partitions wholly older than this are dropped",
  ],
  [
    "EVENT_PARTITION_HOURS",
    "24",
    "length of each new partition of the event log (task_events), in hours; a change applies from the next partition the maintenance loop creates",
  ],
  [
    "EVENT_PARTITIONS_AHEAD",
    "3",
    "partitions of the event log the maintenance loop keeps created ahead of now (an event with none lands in task_events_default and is moved when its partition is created)",
  ],
  ["MAX_BODY_BYTES", "8388608", "largest request body"],
  ["SHUTDOWN_TIMEOUT_MS", "10000", "how long in-flight requests may run after SIGTERM"],
  [
    "LOG_LEVEL",
    "info",
    "pino level: fatal, error, warn, info, debug, trace, silent; the request log writes the workers' successful claims, heartbeats, results and progress at debug, client errors and slow calls at info, server failures at warn or error",
  ],
  ["LOG_SLOW_MS", "500", "a request that takes at least this long (beyond a long poll's wait) is logged at info as a slow request"],
  ["EMBEDDED_PG_DIR", ".data/pg", "embedded mode: data directory"],
  ["EMBEDDED_PG_PORT", "54329", "embedded mode: port of the embedded PostgreSQL"],
  [
    "AUTH_TOKENS_FILE",
    "(unset: no authentication)",
    "file of hashed bearer tokens, one `<sha256-hex> <role> [worker_id prefix | account]` per line (see docs/authentication.md)",
  ],
  ["ALLOW_UNAUTHENTICATED", "false", "`true` lets a coordinator without tokens bind an address other than loopback"],
  ["TLS_CERT_FILE", "(unset: cleartext)", "PEM certificate chain; with TLS_KEY_FILE serves HTTPS (HTTP/2 and HTTP/1.1 by ALPN) on PORT"],
  ["TLS_KEY_FILE", "(unset: cleartext)", "PEM private key of TLS_CERT_FILE"],
  [
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "(unset: no tracing)",
    "OTLP/HTTP collector base URL (e.g. `http://otel-collector:4318`); set: a span of every RPC (the tracing interceptor's; queue and SQL calls have none of their own) is exported there (other `OTEL_EXPORTER_OTLP_*` variables apply too)",
  ],
  [
    "DIRECT_UNARY",
    "true",
    "`false` serves every call through connect-es' router instead of the direct paths for plain unary gRPC, Connect and REST calls (same answers, more CPU per call)",
  ],
  [
    "COALESCE",
    "true",
    "single-task claims, results, renewals, failures and small CreateJob calls that arrive together share one statement per kind; `false`: one statement per call",
  ],
  ["COALESCE_MAX_BATCH", "64", "most calls in one coalesced statement"],
  [
    "COALESCE_LINGER_MS",
    "4",
    "after a statement of results with `claim_next`, how long the lane waits for the workers it answered to come back so the next statement carries them too; `0`: the next statement starts at once",
  ],
  [
    "COALESCE_MIX",
    "true",
    "result reports without `claim_next` that arrive while a claim statement runs go with the next claim statement (one statement in flight for workers that claim, then report); `false`: results and claims each have their own statements",
  ],
  [
    "CLAIM_HINTS",
    "true",
    "claims start their index scan past the pending tasks already claimed (so a long transaction elsewhere does not make each claim walk what VACUUM cannot remove yet); `false`: every claim scans from the front",
  ],
  [
    "FLOW_CLAIM_HINTS",
    "true",
    "flow-controlled claims (caps, fair share, rate limits) count a workload's live leases from a floor no live lease lies below and scan pending tasks from a hint per priority, and CreateJob finds a priority's head of fair ranks from the last one it found (so a long transaction elsewhere does not make them walk what VACUUM cannot remove yet); per-key caps below 16 take a lock per key, not every gate; `false`: leasehold_flow_claim and the head from the front, as before",
  ],
  [
    "HORIZON_WARN_AFTER_MS",
    "300000",
    "how long a transaction may hold the database's MVCC horizon back (VACUUM cannot remove dead rows meanwhile) before a warning names its session and `/readyz` notes it (see docs/long-transactions.md)",
  ],
] as const;

function int(env: Env, name: string, fallback: number, min: number, max: number): number {
  const raw = env[name];
  if (raw === undefined || raw === "") return fallback;
  if (!/^-?\d+$/.test(raw.trim())) throw new ConfigError(name, `must be an integer, got ${JSON.stringify(raw)}`);
  const value = Number(raw.trim());
  if (value < min || value > max) throw new ConfigError(name, `must be between ${min} and ${max}, got ${value}`);
  return value;
}

function url(env: Env, name: string): string | undefined {
  const raw = env[name];
  if (raw === undefined || raw === "") return undefined;
  let parsed: URL;
  try {
    parsed = new URL(raw);
  } catch {
    throw new ConfigError(name, "must be a postgres:// URL");
  }
  if (parsed.protocol !== "postgres:" && parsed.protocol !== "postgresql:") {
    throw new ConfigError(name, `must be a postgres:// URL, got protocol ${parsed.protocol}`);
  }
  return raw;
}

/** An http(s) URL, or undefined when unset or empty. */
function httpUrl(env: Env, name: string): string | undefined {
  const raw = env[name]?.trim();
  if (raw === undefined || raw === "") return undefined;
  let parsed: URL;
  try {
    parsed = new URL(raw);
  } catch {
    throw new ConfigError(name, "must be an http:// or https:// URL");
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:") {
    throw new ConfigError(name, `must be an http:// or https:// URL, got protocol ${parsed.protocol}`);
  }
  return raw;
}

function bool(env: Env, name: string): boolean {
  const raw = (env[name] ?? "").trim().toLowerCase();
  if (raw === "" || raw === "false") return false;
  if (raw === "true") return true;
  throw new ConfigError(name, `must be true or false, got ${JSON.stringify(env[name])}`);
}

/**
 * DIRECT_UNARY: true unless set to false. Exported for the test support, which builds servers in
 * process and reads the same switch with the same rule (test/support/switches.ts).
 */
export function parseDirectUnary(env: Env): boolean {
  const raw = (env.DIRECT_UNARY ?? "").trim().toLowerCase();
  if (raw === "" || raw === "true") return true;
  if (raw === "false") return false;
  throw new ConfigError("DIRECT_UNARY", `must be true or false, got ${JSON.stringify(env.DIRECT_UNARY)}`);
}

/**
 * CLAIM_HINTS: true unless set to false. Exported for the test support, which builds stores in
 * process and reads the same switch with the same rule (test/support/switches.ts).
 */
export function parseClaimHints(env: Env): boolean {
  const raw = (env.CLAIM_HINTS ?? "").trim().toLowerCase();
  if (raw === "" || raw === "true") return true;
  if (raw === "false") return false;
  throw new ConfigError("CLAIM_HINTS", `must be true or false, got ${JSON.stringify(env.CLAIM_HINTS)}`);
}

/**
 * FLOW_CLAIM_HINTS: true unless set to false. Exported for the test support (test/support/switches.ts),
 * as CLAIM_HINTS is.
 */
export function parseFlowClaimHints(env: Env): boolean {
  const raw = (env.FLOW_CLAIM_HINTS ?? "").trim().toLowerCase();
  if (raw === "" || raw === "true") return true;
  if (raw === "false") return false;
  throw new ConfigError("FLOW_CLAIM_HINTS", `must be true or false, got ${JSON.stringify(env.FLOW_CLAIM_HINTS)}`);
}

/**
 * COALESCE (true unless set to false), COALESCE_MAX_BATCH (calls per statement, default 64),
 * COALESCE_MIX (true unless set to false) and COALESCE_LINGER_MS (default 4; group-commit.ts).
 * Exported for the test support, which builds stores in process and reads the same switch with the
 * same rule (test/support/switches.ts).
 */
export function parseCoalescing(env: Env): { maxBatch: number; mixResults: boolean; lingerMs: number } | false {
  const raw = (env.COALESCE ?? "").trim().toLowerCase();
  if (raw === "false") return false;
  if (raw !== "" && raw !== "true") throw new ConfigError("COALESCE", `must be true or false, got ${JSON.stringify(env.COALESCE)}`);
  const mix = (env.COALESCE_MIX ?? "").trim().toLowerCase();
  if (mix !== "" && mix !== "true" && mix !== "false")
    throw new ConfigError("COALESCE_MIX", `must be true or false, got ${JSON.stringify(env.COALESCE_MIX)}`);
  return {
    maxBatch: int(env, "COALESCE_MAX_BATCH", 64, 1, 1000),
    mixResults: mix !== "false",
    lingerMs: int(env, "COALESCE_LINGER_MS", 4, 0, 100),
  };
}

/** The same rule as a request's worker_id: printable ASCII, no spaces here (the line is space separated). */
const WORKER_PREFIX = /^[\x21-\x7e]{1,128}$/;
const SHA256_HEX = /^[0-9a-fA-F]{64}$/;

/**
 * Checks one token entry; returns what is wrong with it, or undefined. Shared by
 * AUTH_TOKENS_FILE parsing and the `leasehold token new` command.
 */
export function tokenEntryProblem(fields: string[]): string | undefined {
  const [hash, role, prefix, ...rest] = fields;
  if (!SHA256_HEX.test(hash ?? "")) return "the first field must be the sha256 of the token as 64 hex characters (the hash, not the token)";
  if (!ROLES.includes(role as Role)) return `the role must be one of ${ROLES.join(", ")}`;
  if (rest.length > 0) return "too many fields (expected: <sha256-hex> <role> [worker_id prefix | account])";
  if (role === "worker") {
    if (prefix === undefined) return "a worker token needs the worker_id prefix it may use as third field";
    if (!WORKER_PREFIX.test(prefix) || prefix.startsWith("#")) {
      return "the worker_id prefix must be 1-128 printable ASCII characters, not starting with #";
    }
  } else if (role === "submitter") {
    if (prefix !== undefined && !ACCOUNT_NAME.test(prefix)) {
      return `a submitter's third field is the account it is bound to, matching ${ACCOUNT_NAME.source}`;
    }
  } else if (prefix !== undefined) {
    return `only worker tokens (a worker_id prefix) and submitter tokens (an account) take a third field, not ${role}`;
  }
  return undefined;
}

/** A checked line's entry: the third field is a worker's prefix or a submitter's account. */
function tokenEntry(sha256: string, role: Role, third: string | undefined): AuthTokenEntry {
  if (third === undefined) return { sha256, role };
  return role === "worker" ? { sha256, role, workerPrefix: third } : { sha256, role, account: third };
}

/** AUTH_TOKENS_FILE contents → entries; a bad line is a ConfigError naming the variable and the line number. */
export function parseAuthTokens(text: string, source = "AUTH_TOKENS_FILE"): AuthTokenEntry[] {
  const entries: AuthTokenEntry[] = [];
  const seen = new Map<string, number>();
  text.split(/\r?\n/).forEach((raw, i) => {
    const lineNo = i + 1;
    // A comment starts at a '#' that begins the line or follows whitespace ('#' may appear inside a prefix).
    const line = raw.replace(/(^|\s)#.*$/, "").trim();
    if (line === "") return;
    const fields = line.split(/\s+/);
    // Never echo the line: if someone pasted a token instead of its hash, it must not reach a log.
    const problem = tokenEntryProblem(fields);
    if (problem) throw new ConfigError("AUTH_TOKENS_FILE", `${source} line ${lineNo}: ${problem}`);
    const sha256 = fields[0].toLowerCase();
    const dup = seen.get(sha256);
    if (dup !== undefined)
      throw new ConfigError("AUTH_TOKENS_FILE", `${source} line ${lineNo}: the same token hash is already on line ${dup}`);
    seen.set(sha256, lineNo);
    entries.push(tokenEntry(sha256, fields[1] as Role, fields[2]));
  });
  return entries;
}

function readVariableFile(env: Env, name: string): { path: string; data: Buffer } | undefined {
  const file = env[name];
  if (file === undefined || file === "") return undefined;
  try {
    return { path: file, data: readFileSync(file) };
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
    throw new ConfigError(name, `cannot read ${file} (${code})`);
  }
}

function authTokens(env: Env): AuthTokenEntry[] {
  const file = readVariableFile(env, "AUTH_TOKENS_FILE");
  if (!file) return [];
  const entries = parseAuthTokens(file.data.toString("utf8"), file.path);
  if (entries.length === 0)
    throw new ConfigError("AUTH_TOKENS_FILE", `${file.path} holds no token (unset the variable to run without authentication)`);
  return entries;
}

function tls(env: Env): Config["tls"] {
  const certFile = readVariableFile(env, "TLS_CERT_FILE");
  const keyFile = readVariableFile(env, "TLS_KEY_FILE");
  if (!certFile && !keyFile) return undefined;
  if (!certFile) throw new ConfigError("TLS_CERT_FILE", "must be set together with TLS_KEY_FILE");
  if (!keyFile) throw new ConfigError("TLS_KEY_FILE", "must be set together with TLS_CERT_FILE");
  let cert: X509Certificate;
  try {
    cert = new X509Certificate(certFile.data);
  } catch {
    throw new ConfigError("TLS_CERT_FILE", `${certFile.path} is not a PEM certificate`);
  }
  try {
    if (!cert.checkPrivateKey(createPrivateKey(keyFile.data))) {
      throw new ConfigError("TLS_KEY_FILE", `${keyFile.path} is not the private key of ${certFile.path}`);
    }
  } catch (err) {
    if (err instanceof ConfigError) throw err;
    throw new ConfigError("TLS_KEY_FILE", `${keyFile.path} is not a PEM private key (an encrypted key is not supported)`);
  }
  return { cert: certFile.data, key: keyFile.data };
}

/** Addresses that only this machine can reach; without tokens the coordinator binds nothing else by default. */
export function isLoopback(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, "").toLowerCase();
  return h === "localhost" || h === "::1" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h);
}

/**
 * The `leasehold` CLI's variables: read here like the coordinator's (this module is the only
 * reader of process.env), apart from CONFIG_VARIABLES because the coordinator ignores them.
 */
export const CLI_VARIABLES = [
  ["LEASEHOLD_TOKEN", "(unset: no token)", "bearer token of the CLI when neither --token nor --token-file is given"],
  ["LEASEHOLD_CA_FILE", "(unset: the system's CAs)", "PEM certificate(s) the CLI trusts besides the system's, when --ca-file is not given"],
] as const;

export interface CliEnvironment {
  token?: string;
  caFile?: string;
}

/** LEASEHOLD_TOKEN and LEASEHOLD_CA_FILE; an empty value counts as unset. */
export function cliEnvironment(env: Env = process.env): CliEnvironment {
  return {
    ...(env.LEASEHOLD_TOKEN ? { token: env.LEASEHOLD_TOKEN } : {}),
    ...(env.LEASEHOLD_CA_FILE ? { caFile: env.LEASEHOLD_CA_FILE } : {}),
  };
}

const LOG_LEVELS: readonly LogLevel[] = ["fatal", "error", "warn", "info", "debug", "trace", "silent"];

export function loadConfig(env: Env = process.env): Config {
  const logLevel = (env.LOG_LEVEL || "info") as LogLevel;
  if (!LOG_LEVELS.includes(logLevel)) throw new ConfigError("LOG_LEVEL", `must be one of ${LOG_LEVELS.join(", ")}`);
  const host = env.HOST || "127.0.0.1";
  if (/\s/.test(host)) throw new ConfigError("HOST", "must be a host name or address");
  const tokens = authTokens(env);
  const allowUnauthenticated = bool(env, "ALLOW_UNAUTHENTICATED");
  if (tokens.length === 0 && !allowUnauthenticated && !isLoopback(host)) {
    throw new ConfigError(
      "HOST",
      `${host} is not a loopback address and no AUTH_TOKENS_FILE is set: anyone who reaches the port could use the API ` +
        "(configure tokens, or set ALLOW_UNAUTHENTICATED=true)",
    );
  }
  return {
    databaseUrl: url(env, "DATABASE_URL"),
    listenDatabaseUrl: url(env, "LISTEN_DATABASE_URL"),
    host,
    port: int(env, "PORT", 8080, 0, 65535),
    pgPoolMax: int(env, "PG_POOL_MAX", 8, 1, 1000),
    pgStatementTimeoutMs: int(env, "PG_STATEMENT_TIMEOUT_MS", 5000, 1, 3_600_000),
    pgConnectTimeoutMs: int(env, "PG_CONNECT_TIMEOUT_MS", 2000, 1, 600_000),
    pgPreparedStatements: (env.PG_PREPARED_STATEMENTS ?? "") === "" || bool(env, "PG_PREPARED_STATEMENTS"),
    requestTimeoutMs: int(env, "REQUEST_TIMEOUT_MS", 10_000, 1, 3_600_000),
    defaultLeaseSeconds: int(env, "DEFAULT_LEASE_SECONDS", 60, 1, 86_400),
    defaultMaxAttempts: int(env, "DEFAULT_MAX_ATTEMPTS", 3, 1, 100),
    maxTasksPerJob: int(env, "MAX_TASKS_PER_JOB", 10_000, 1, 1_000_000),
    maxRunAtAheadDays: int(env, "MAX_RUN_AT_AHEAD_DAYS", 365, 1, 36_500),
    reaperIntervalMs: int(env, "REAPER_INTERVAL_MS", 1000, 10, 3_600_000),
    pollIntervalMs: int(env, "POLL_INTERVAL_MS", 1000, 10, 600_000),
    retentionDays: env.RETENTION_DAYS ? int(env, "RETENTION_DAYS", 0, 1, 36_500) : undefined,
    eventPartitionHours: int(env, "EVENT_PARTITION_HOURS", 24, 1, 24 * 366),
    eventPartitionsAhead: int(env, "EVENT_PARTITIONS_AHEAD", 3, 1, 1000),
    maxBodyBytes: int(env, "MAX_BODY_BYTES", 8 * 1024 * 1024, 1024, 1024 * 1024 * 1024),
    shutdownTimeoutMs: int(env, "SHUTDOWN_TIMEOUT_MS", 10_000, 0, 600_000),
    logLevel,
    logSlowMs: int(env, "LOG_SLOW_MS", 500, 1, 3_600_000),
    embeddedDataDir: env.EMBEDDED_PG_DIR || ".data/pg",
    embeddedPort: int(env, "EMBEDDED_PG_PORT", 54329, 1, 65535),
    authTokens: tokens,
    allowUnauthenticated,
    tls: tls(env),
    otelExporterOtlpEndpoint: httpUrl(env, "OTEL_EXPORTER_OTLP_ENDPOINT"),
    directUnary: parseDirectUnary(env),
    coalescing: parseCoalescing(env),
    claimHints: parseClaimHints(env),
    flowClaimHints: parseFlowClaimHints(env),
    horizonWarnAfterMs: int(env, "HORIZON_WARN_AFTER_MS", 300_000, 100, 86_400_000),
  };
}
