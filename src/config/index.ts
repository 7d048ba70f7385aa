// The only reader of process.env. Parsed and validated once at start; a bad
// value is a ConfigError naming the variable (main prints it and exits 2).

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
  requestTimeoutMs: number;
  defaultLeaseSeconds: number;
  defaultMaxAttempts: number;
  maxTasksPerJob: number;
  reaperIntervalMs: number;
  pollIntervalMs: number;
  maxBodyBytes: number;
  shutdownTimeoutMs: number;
  logLevel: LogLevel;
  /** Embedded mode only: where the cluster lives and which port it listens on. */
  embeddedDataDir: string;
  embeddedPort: number;
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
  ["REQUEST_TIMEOUT_MS", "10000", "deadline of a request without its own (long polls add their wait)"],
  ["DEFAULT_LEASE_SECONDS", "60", "lease of a workload registered without one"],
  ["DEFAULT_MAX_ATTEMPTS", "3", "attempts of a workload registered without one"],
  ["MAX_TASKS_PER_JOB", "10000", "most tasks one CreateJob may carry"],
  ["REAPER_INTERVAL_MS", "1000", "how often expired leases are requeued or failed"],
  ["POLL_INTERVAL_MS", "1000", "how often a parked long-poll re-checks without a notification"],
  ["MAX_BODY_BYTES", "8388608", "largest request body"],
  ["SHUTDOWN_TIMEOUT_MS", "10000", "how long in-flight requests may run after SIGTERM"],
  ["LOG_LEVEL", "info", "pino level: fatal, error, warn, info, debug, trace, silent"],
  ["EMBEDDED_PG_DIR", ".data/pg", "embedded mode: data directory"],
  ["EMBEDDED_PG_PORT", "54329", "embedded mode: port of the embedded PostgreSQL"],
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

const LOG_LEVELS: readonly LogLevel[] = ["fatal", "error", "warn", "info", "debug", "trace", "silent"];

export function loadConfig(env: Env = process.env): Config {
  const logLevel = (env.LOG_LEVEL || "info") as LogLevel;
  if (!LOG_LEVELS.includes(logLevel)) throw new ConfigError("LOG_LEVEL", `must be one of ${LOG_LEVELS.join(", ")}`);
  const host = env.HOST || "127.0.0.1";
  if (/\s/.test(host)) throw new ConfigError("HOST", "must be a host name or address");
  return {
    databaseUrl: url(env, "DATABASE_URL"),
    listenDatabaseUrl: url(env, "LISTEN_DATABASE_URL"),
    host,
    port: int(env, "PORT", 8080, 0, 65535),
    pgPoolMax: int(env, "PG_POOL_MAX", 8, 1, 1000),
    pgStatementTimeoutMs: int(env, "PG_STATEMENT_TIMEOUT_MS", 5000, 1, 3_600_000),
    pgConnectTimeoutMs: int(env, "PG_CONNECT_TIMEOUT_MS", 2000, 1, 600_000),
    requestTimeoutMs: int(env, "REQUEST_TIMEOUT_MS", 10_000, 1, 3_600_000),
    defaultLeaseSeconds: int(env, "DEFAULT_LEASE_SECONDS", 60, 1, 86_400),
    defaultMaxAttempts: int(env, "DEFAULT_MAX_ATTEMPTS", 3, 1, 100),
    maxTasksPerJob: int(env, "MAX_TASKS_PER_JOB", 10_000, 1, 1_000_000),
    reaperIntervalMs: int(env, "REAPER_INTERVAL_MS", 1000, 10, 3_600_000),
    pollIntervalMs: int(env, "POLL_INTERVAL_MS", 1000, 10, 600_000),
    maxBodyBytes: int(env, "MAX_BODY_BYTES", 8 * 1024 * 1024, 1024, 1024 * 1024 * 1024),
    shutdownTimeoutMs: int(env, "SHUTDOWN_TIMEOUT_MS", 10_000, 0, 600_000),
    logLevel,
    embeddedDataDir: env.EMBEDDED_PG_DIR || ".data/pg",
    embeddedPort: int(env, "EMBEDDED_PG_PORT", 54329, 1, 65535),
  };
}
