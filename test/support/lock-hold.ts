// Making coalesced batches on purpose: a test holds a table lock that the first call's statement
// waits on, so the calls sent after it queue up in their lane and go in the next statement. Used
// by the coalescing suites (coalesce.test.ts, coalesced-create.test.ts).
import pg from "pg";

/** Runs fn while a session of its own holds `LOCK TABLE <table> IN EXCLUSIVE MODE`; lets go after. */
export async function holdTable<T>(url: string, table: "tasks" | "jobs", fn: () => Promise<T>): Promise<T> {
  const locker = new pg.Client({ connectionString: url });
  locker.on("error", () => {});
  await locker.connect();
  await locker.query("BEGIN");
  await locker.query(`LOCK TABLE ${table} IN EXCLUSIVE MODE`);
  try {
    return await fn();
  } finally {
    await locker.query("ROLLBACK").catch(() => {});
    await locker.end();
  }
}

/** Sessions of this database waiting on a lock (the statements queued behind the held table). */
export async function waitingOnLock(pool: pg.Pool): Promise<number> {
  const { rows } = await pool.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`,
  );
  return rows[0].n;
}

/** Resolves once cond holds, polling every 25 ms for up to 10 s. */
export async function until(cond: () => boolean | Promise<boolean>, what: string): Promise<void> {
  for (let i = 0; i < 400; i++) {
    if (await cond()) return;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`timed out waiting for ${what}`);
}
