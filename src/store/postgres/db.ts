// Pool creation, deadlines and pg error translation: the plumbing every query goes through.

import pg from "pg";
import { pgTypes } from "./pg-types.js";
import { DeadlineExceededError, QueueError, UnavailableError, ValidationError } from "../../queue/errors.js";

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
}

export function createPool(opts: PoolOptions): pg.Pool {
  const pool = new pg.Pool({
    connectionString: opts.connectionString,
    max: opts.max,
    statement_timeout: opts.statementTimeoutMs,
    connectionTimeoutMillis: opts.connectTimeoutMs,
    idleTimeoutMillis: 30_000,
    application_name: opts.applicationName ?? "leasehold",
    types: pgTypes,
    // Every statement of the store is meant to be index-driven:
    // - plan_cache_mode: the hot statements are prepared (named) and their plans do not depend on
    //   the parameters; re-planning the claim's CTEs on every call cost more than running them.
    // - enable_seqscan=off: "does this job have unfinished tasks" is an EXISTS, and with most of
    //   the table pending the planner bets on a sequential scan finding a match at once; at the
    //   end of a job there is none and that scan reads the whole table. Indexes cover every query.
    options: "-c plan_cache_mode=force_generic_plan -c enable_seqscan=off",
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

function isConnectionFailure(err: unknown): boolean {
  const e = err as { code?: string; message?: string };
  if (e?.code && (UNAVAILABLE_CODES.has(e.code) || e.code.startsWith("08"))) return true;
  return /timeout exceeded when trying to connect|Connection terminated|connection terminated|Client has encountered a connection error|Client was closed|Cannot use a pool after calling end|the database system is (starting up|shutting down)/.test(
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
    client.release(broken);
  }
}

/** withClient inside BEGIN … COMMIT (or another BEGIN statement, e.g. a read-only snapshot); any failure rolls back. */
export async function inTransaction<T>(
  pool: pg.Pool,
  signal: AbortSignal | undefined,
  fn: (client: pg.PoolClient) => Promise<T>,
  begin = "BEGIN",
): Promise<T> {
  return withClient(pool, signal, async (client) => {
    await client.query(begin);
    try {
      const result = await fn(client);
      await client.query("COMMIT");
      return result;
    } catch (err) {
      await client.query("ROLLBACK").catch(() => {});
      throw err;
    }
  });
}
