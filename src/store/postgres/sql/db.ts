// Pool creation, deadlines and pg error translation: the plumbing every query goes through.

import pg from "pg";
import { pgTypes } from "./pg-types.js";
import { DeadlineExceededError, QueueError, UnavailableError, ValidationError } from "../../../queue/errors.js";

export interface PoolOptions {
  connectionString: string;
  max: number;
  /** server-side statement_timeout on every connection: the floor under every deadline */
  statementTimeoutMs: number;
  /** longest wait for a connection (new or from the pool's queue) before UNAVAILABLE */
  connectTimeoutMs: number;
  applicationName?: string;
  /** Told of a connection that failed while checked out (logging only; the caller's query fails too). */
  onClientError?: (err: Error) => void;
  /**
   * false: every statement goes unnamed (parsed and planned on each call), for a transaction
   * pooler that cannot keep a named prepared statement across transactions (PgBouncer before
   * 1.21, or without max_prepared_statements). Default true.
   */
  preparedStatements?: boolean;
}

/**
 * A pg client that drops the name of every statement, so it is never prepared on the server:
 * behind a transaction pooler the next call may land on another server connection, which has
 * never seen it ("prepared statement … does not exist"). The store names its hot statements;
 * this is the one seam that turns that off.
 */
export class UnnamedStatementClient extends pg.Client {
  // @ts-expect-error one override for pg's query overloads: the arguments go on as they came
  override query(config: unknown, values?: unknown, callback?: unknown) {
    const c = config as { name?: unknown; submit?: unknown } | null;
    if (c !== null && typeof c === "object" && typeof c.submit !== "function" && c.name !== undefined) {
      const { name: _name, ...unnamed } = c;
      config = unnamed;
    }
    return (super.query as (...args: unknown[]) => unknown)(config, values, callback);
  }
}

/**
 * The settings of every pooled session (startup options; a deployment behind a pooler that drops
 * them sets them for the role instead, as deploy/ha does).
 * - plan_cache_mode: the hot statements are prepared (named) and their plans do not depend on
 *   the parameters; re-planning the claim's CTEs on every call cost more than running them.
 * - jit=off: the coordinator's statements are short index probes and single-row writes, and JIT
 *   compiles a plan again at every execution. When a plan's estimated cost crosses jit_above_cost
 *   (a generic plan's guess, a disabled node's penalty on PostgreSQL 15 and 17) the statement pays
 *   for compiling on each call: the idle maintenance probe took 66-79 ms (JIT inlining 40 ms,
 *   optimization 35 ms, emission 26 ms) against 0.09 ms without it on PostgreSQL 15, once a second
 *   per coordinator. Nothing the coordinator runs scans enough rows for compiled expressions to
 *   win that back.
 * Sequential scans are not turned off for the session: on PostgreSQL 15 and 17 that adds 1e10 to
 * the cost of every plan with one, on tables that have no better path (workloads, job_watchers).
 * A statement whose plan must not be a sequential scan gets its shape from its own text (an
 * ORDER BY ... LIMIT 1 on the index's order) and a plan test (test/store/idle-cost.test.ts and the
 * EXPLAIN tests of the store's suites).
 */
export const SESSION_SETTINGS: Readonly<Record<string, string>> = { plan_cache_mode: "force_generic_plan", jit: "off" };

export function createPool(opts: PoolOptions): pg.Pool {
  const pool = new pg.Pool({
    connectionString: opts.connectionString,
    max: opts.max,
    statement_timeout: opts.statementTimeoutMs,
    connectionTimeoutMillis: opts.connectTimeoutMs,
    // A statement the server has not answered once its own statement_timeout (plus the connect
    // timeout, for a queue in a pooler) has passed never will: the server is gone without closing
    // the connection (a leader cut off by the network). The client gives up on it ("Query read
    // timeout", a connection failure below) and the connection is dropped.
    query_timeout: opts.statementTimeoutMs + opts.connectTimeoutMs,
    idleTimeoutMillis: 30_000,
    keepAlive: true,
    ...(opts.preparedStatements === false ? { Client: UnnamedStatementClient as unknown as new () => pg.ClientBase } : {}),
    application_name: opts.applicationName ?? "leasehold",
    types: pgTypes,
    options: Object.entries(SESSION_SETTINGS)
      .map(([name, value]) => `-c ${name}=${value}`)
      .join(" "),
  });
  // An idle client whose server went away (restart, failover) emits here; without a listener
  // the process would crash. The pool drops that client and the next checkout connects anew.
  pool.on("error", () => {});
  // A checked-out client has no pool listener: pg-pool removes its idle listener on checkout.
  // When the server ends the session under it (57P01 at a fast shutdown, a crash, a network cut)
  // pg emits `error` on the client itself, and an `error` with no listener ends the process.
  // The query that was running rejects with the same error (the request answers 503) and
  // withClient releases the client as broken, so the listener only has to exist.
  pool.on("connect", (client) => {
    client.on("error", (err) => opts.onClientError?.(err));
  });
  return pool;
}

/**
 * A standalone connection (setup, migrations, checks) that cannot take the process down: pg
 * emits `error` on a client whose server goes away, even between queries, and the process ends
 * on an `error` with no listener. A query in flight rejects with the same error, so the caller
 * still sees the failure.
 */
export async function openClient(config: pg.ClientConfig): Promise<pg.Client> {
  const client = new pg.Client(config);
  client.on("error", () => {});
  try {
    await client.connect();
  } catch (err) {
    await client.end().catch(() => {});
    throw err;
  }
  return client;
}

const UNAVAILABLE_CODES = new Set([
  // read_only_sql_transaction: the connection reached a replica (a demoted leader during a
  // switchover, or a URL that points at a standby); the primary is elsewhere.
  "25006",
  "57P01",
  "57P02",
  "57P03",
  "53300",
  "53400",
  "ECONNREFUSED",
  "ECONNRESET",
  "ENOTFOUND",
  "EPIPE",
  "ETIMEDOUT",
]);

/** An error of the connection to PostgreSQL (a lost session, a server going down), as pg reports it. */
export function isConnectionFailure(err: unknown): boolean {
  const e = err as { code?: string; message?: string };
  if (e?.code && (UNAVAILABLE_CODES.has(e.code) || e.code.startsWith("08"))) return true;
  return /timeout exceeded when trying to connect|Connection terminated|connection terminated|Client has encountered a connection error|Client was closed|Cannot use a pool after calling end|Query read timeout|the database system is (starting up|shutting down|in recovery mode|not yet accepting connections)/.test(
    e?.message ?? "",
  );
}

/**
 * Translates a pg failure into a typed queue error. Database text never leaves
 * here inside a typed error; an unrecognised error is rethrown as is and the
 * transport answers INTERNAL with a generic message.
 */
export function toQueueError(err: unknown, signal?: AbortSignal): unknown {
  if (err instanceof QueueError) return err;
  if (signal?.aborted) return new DeadlineExceededError("the request's deadline passed before the database answered", { cause: err });
  const code = (err as { code?: string })?.code ?? "";
  if (code === "57014") return new DeadlineExceededError("the database statement timed out", { cause: err });
  if (isConnectionFailure(err)) return new UnavailableError("the database is unavailable; retry later", { cause: err });
  // A deadlock or serialization failure rolled the whole transaction back: nothing was written,
  // and the same call sent again is expected to succeed. Neither is the client's mistake nor a
  // fault of the server, so the caller is told to retry, as for a database that is away.
  if (code === "40P01" || code === "40001") {
    return new UnavailableError("the database aborted the call in a conflict with another; retry", { cause: err });
  }
  // Data errors (class 22) and check violations are client values validation should have caught;
  // they are still the client's mistake, never a 5xx.
  if (code.startsWith("22") || code === "23514") {
    const e = new ValidationError("request", "contains a value the database cannot store");
    (e as { cause?: unknown }).cause = err;
    return e;
  }
  return err;
}

export function isConnectionBroken(err: unknown): boolean {
  return isConnectionFailure(err);
}

/** Resolves like `promise`, or rejects when signal aborts first; a late result is handed to `discard` (once). */
export function abortable<T>(promise: Promise<T>, signal: AbortSignal | undefined, discard: (value: T) => void): Promise<T> {
  if (!signal) return promise;
  const deadline = () => new DeadlineExceededError("the request's deadline passed before a connection was free");
  if (signal.aborted) {
    promise.then(discard, () => {});
    return Promise.reject(deadline());
  }
  return new Promise<T>((resolve, reject) => {
    let abandoned = false;
    const onAbort = () => {
      abandoned = true;
      reject(deadline());
    };
    signal.addEventListener("abort", onAbort, { once: true });
    promise.then(
      (v) => {
        signal.removeEventListener("abort", onAbort);
        if (abandoned) discard(v);
        else resolve(v);
      },
      (e) => {
        signal.removeEventListener("abort", onAbort);
        if (!abandoned) reject(e);
      },
    );
  });
}

/**
 * Asks the server to cancel whatever the backend behind `client` is running.
 * Uses a separate short-lived connection, not the pool: under overload the pool has none to give.
 */
export async function cancelBackend(pool: pg.Pool, client: pg.PoolClient): Promise<void> {
  const pid = (client as unknown as { processID?: number }).processID;
  if (!pid) return;
  let canceller: pg.Client | undefined;
  try {
    canceller = await openClient((pool as unknown as { options: pg.ClientConfig }).options);
    await canceller.query("SELECT pg_cancel_backend($1)", [pid]);
  } catch {
    // Best effort: statement_timeout still bounds the query.
  } finally {
    await canceller?.end().catch(() => {});
  }
}

/**
 * Runs fn on one pooled connection under the caller's deadline: waiting for the
 * connection honours the signal, and an abort mid-query cancels it on the server.
 */
export async function withClient<T>(pool: pg.Pool, signal: AbortSignal | undefined, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  let client: pg.PoolClient;
  try {
    client = await abortable(pool.connect(), signal, (late) => late.release());
  } catch (err) {
    throw toQueueError(err, signal);
  }
  try {
    await checkIdleClient(pool, client);
  } catch (err) {
    client.release(err as Error);
    throw toQueueError(err, signal);
  }
  let cancelling: Promise<void> | undefined;
  const onAbort = () => {
    cancelling = cancelBackend(pool, client);
  };
  signal?.addEventListener("abort", onAbort, { once: true });
  let broken: Error | undefined;
  try {
    return await fn(client);
  } catch (err) {
    if (isConnectionBroken(err)) broken = err as Error;
    throw toQueueError(err, signal);
  } finally {
    signal?.removeEventListener("abort", onAbort);
    // The cancel travels on its own connection and lands whenever it lands: released at once, this
    // connection could already be running the next caller's statement (a watch stream's cleanup,
    // another request) when it arrives, and that statement would be the one cancelled. Once the
    // cancel has been delivered, the backend is either still in the aborted statement or idle,
    // where PostgreSQL drops it.
    if (cancelling) await cancelling;
    if (!broken) releasedAt.set(client, Date.now());
    client.release(broken);
  }
}

/** When each pooled connection went back to the pool. */
const releasedAt = new WeakMap<pg.PoolClient, number>();
/** A connection idle for longer than this is checked before a call uses it (a busy pool never pays). */
const CHECK_AFTER_IDLE_MS = 1000;

/**
 * A leader that vanished without closing its connections (a network cut, a frozen host) leaves
 * idle pooled connections that look healthy: a call on one would wait for an answer that never
 * comes. One round trip, bounded by the connect timeout, tells: a connection that cannot answer
 * `SELECT 1` within the time allowed to open one is treated like one that could not be opened,
 * and the call gets UNAVAILABLE within PG_CONNECT_TIMEOUT_MS.
 */
async function checkIdleClient(pool: pg.Pool, client: pg.PoolClient): Promise<void> {
  const since = releasedAt.get(client);
  if (since === undefined || Date.now() - since < CHECK_AFTER_IDLE_MS) return;
  const timeoutMs = (pool as unknown as { options: { connectionTimeoutMillis?: number } }).options.connectionTimeoutMillis || 2000;
  const ping = client.query("SELECT 1");
  ping.catch(() => {}); // after a timeout the connection is dropped and the ping fails unobserved
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(Object.assign(new Error(`the database did not answer within ${timeoutMs} ms`), { code: "ETIMEDOUT" })),
      timeoutMs,
    );
  });
  try {
    await Promise.race([ping, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** withClient inside BEGIN … COMMIT (or another BEGIN statement, e.g. a read-only snapshot); any failure rolls back. */
export async function inTransaction<T>(
  pool: pg.Pool,
  signal: AbortSignal | undefined,
  fn: (client: pg.PoolClient) => Promise<T>,
  begin = "BEGIN",
): Promise<T> {
  return withClient(pool, signal, (client) => transaction(client, fn, begin));
}

/** `fn` in one transaction on a client already taken (which must not be in one): COMMIT, or ROLLBACK and the error. */
export async function transaction<C extends pg.ClientBase, T>(client: C, fn: (client: C) => Promise<T>, begin = "BEGIN"): Promise<T> {
  await client.query(begin);
  try {
    const result = await fn(client);
    await client.query("COMMIT");
    return result;
  } catch (err) {
    await client.query("ROLLBACK").catch(() => {});
    throw err;
  }
}
