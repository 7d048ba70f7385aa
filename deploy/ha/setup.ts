// The rig's start, once the members run: wait for a leader that stays, with a synchronous standby
// streaming, then the application role, its database and the migrations, retried when the session
// is cut. A busy machine is the normal case here (CI, other work beside it): a Patroni member that
// answers late, an etcd write that is slow, a replica still cloning. Each can end the setup's
// session once (HAProxy cuts the sessions of a member it marks down; a demoted leader ends them),
// and every step below is safe to run again.
import pg from "pg";
import { isConnectionBroken, openClient, SESSION_SETTINGS } from "../../src/store/postgres/sql/db.js";
import { migrate } from "../../src/store/postgres/schema/migrate.js";

const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** What one look at the cluster saw; undefined: not whole (no leader, no streaming sync standby). */
export interface LeaderObservation {
  leader: string;
  timeline: number;
}

/**
 * Waits until `observe` sees the same leader on the same timeline `times` looks in a row,
 * `everyMs` apart: a leader seen once may be demoted a moment later (its lock in etcd not renewed
 * in time), and a setup started on it would be cut. A look that sees no whole cluster, or another
 * leader, starts the count again.
 */
export async function stableLeader(
  observe: () => Promise<LeaderObservation | undefined>,
  opts: { times: number; everyMs: number; timeoutMs: number },
): Promise<LeaderObservation> {
  const end = Date.now() + opts.timeoutMs;
  let last: LeaderObservation | undefined;
  let seen = 0;
  let lastProblem = "no look yet";
  for (;;) {
    let now: LeaderObservation | undefined;
    try {
      now = await observe();
      if (!now) lastProblem = "no leader with a streaming synchronous standby";
    } catch (err) {
      lastProblem = (err as Error).message;
    }
    if (now && last && now.leader === last.leader && now.timeline === last.timeline) seen++;
    else seen = now ? 1 : 0;
    last = now;
    if (seen >= opts.times) return now!;
    if (Date.now() > end) throw new Error(`timed out after ${opts.timeoutMs} ms waiting for a stable leader (last: ${lastProblem})`);
    await pause(opts.everyMs);
  }
}

/**
 * Runs `fn` again (after `before`, e.g. waiting for a stable leader) when it failed because the
 * connection was cut or reached a standby, up to `attempts` times in all. Any other error is final.
 */
export async function retryOnCut<T>(
  what: string,
  fn: (attempt: number) => Promise<T>,
  opts: { attempts: number; before?: () => Promise<unknown>; log?: (m: string) => void },
): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    if (opts.before) await opts.before();
    try {
      return await fn(attempt);
    } catch (err) {
      const retryable = isConnectionBroken(err) || (err as { code?: string }).code === "25006";
      if (!retryable || attempt >= opts.attempts) throw err;
      opts.log?.(`${what}: ${(err as Error).message}; again (attempt ${attempt + 1} of ${opts.attempts})`);
    }
  }
}

export interface AppDatabase {
  role: string;
  password: string;
  database: string;
  /** A statement_timeout for the role, in ms. */
  statementTimeoutMs: number;
}

export type SetupStep = "role" | "settings" | "database";

/**
 * The application role and its database, as the superuser: each step checks or is idempotent, so
 * a cut session is simply run again. PgBouncer 1.18 drops the coordinator's statement_timeout
 * and options startup parameters (pgbouncer.ini.in), so the role carries them: the same session
 * settings the coordinator's pool asks for.
 */
export async function createAppDatabase(
  superuserUrl: string,
  app: AppDatabase,
  afterStep: (step: SetupStep, client: pg.Client) => Promise<void> = async () => {},
): Promise<void> {
  const c = await openClient({ connectionString: superuserUrl, connectionTimeoutMillis: 10_000 });
  try {
    const { rows } = await c.query<{ r: boolean }>("SELECT pg_is_in_recovery() AS r");
    if (rows[0].r) throw Object.assign(new Error("the superuser URL reached a standby"), { code: "25006" });
    const role = c.escapeIdentifier(app.role);
    const exists = await c.query("SELECT 1 FROM pg_roles WHERE rolname = $1", [app.role]);
    if (!exists.rowCount) await c.query(`CREATE ROLE ${role} LOGIN PASSWORD ${c.escapeLiteral(app.password)}`);
    else await c.query(`ALTER ROLE ${role} LOGIN PASSWORD ${c.escapeLiteral(app.password)}`);
    await afterStep("role", c);
    for (const [name, value] of Object.entries(SESSION_SETTINGS))
      await c.query(`ALTER ROLE ${role} SET ${name} = ${c.escapeLiteral(value)}`);
    await c.query(`ALTER ROLE ${role} SET statement_timeout = ${Number(app.statementTimeoutMs)}`);
    await afterStep("settings", c);
    const db = await c.query("SELECT 1 FROM pg_database WHERE datname = $1", [app.database]);
    if (!db.rowCount) await c.query(`CREATE DATABASE ${c.escapeIdentifier(app.database)} OWNER ${role}`);
    await afterStep("database", c);
  } finally {
    await c.end().catch(() => {});
  }
}

/** The role, the database and the migrations (one transaction: a cut one is rolled back whole). */
export async function setUpAppDatabase(
  superuserUrl: string,
  appUrl: string,
  app: AppDatabase,
  opts: {
    attempts: number;
    before?: () => Promise<unknown>;
    log?: (m: string) => void;
    afterStep?: (step: SetupStep, client: pg.Client, attempt: number) => Promise<void>;
  },
): Promise<number> {
  let attempts = 0;
  await retryOnCut(
    "setting up the database",
    async (attempt) => {
      attempts = attempt;
      await createAppDatabase(superuserUrl, app, (step, c) => opts.afterStep?.(step, c, attempt) ?? Promise.resolve());
      opts.log?.("migrating");
      await migrate(appUrl, "up");
    },
    opts,
  );
  return attempts;
}
