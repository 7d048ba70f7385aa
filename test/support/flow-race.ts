// The setup of the flow-control races: three coordinator processes on one fresh database, and a
// client of the test's own that samples the live leases while they run.
import pg from "pg";
import { createTestDatabase, type TestDatabase } from "./db.js";
import { freePort } from "./global-setup.js";
import { spawnCoordinator } from "./process.js";

/** A database (pushed onto `dbs`, for the file's afterAll to drop), three coordinators on it, and a sampling client. */
export async function raceRig(
  dbs: TestDatabase[],
  env: Record<string, string> = {},
): Promise<{ db: TestDatabase; bases: string[]; sampler: pg.Client }> {
  const db = await createTestDatabase();
  dbs.push(db);
  const bases = await Promise.all(
    Array.from({ length: 3 }, async () => {
      const port = await freePort();
      const proc = spawnCoordinator({
        DATABASE_URL: db.url,
        PORT: String(port),
        // A loaded machine (two cores shared by many processes): no 503 for want of a connection.
        PG_POOL_MAX: "16",
        PG_CONNECT_TIMEOUT_MS: "20000",
        PG_STATEMENT_TIMEOUT_MS: "20000",
        POLL_INTERVAL_MS: "200",
        ...env,
      });
      return proc.listening(120_000);
    }),
  );
  const sampler = new pg.Client({ connectionString: db.url });
  sampler.on("error", () => {});
  await sampler.connect();
  return { db, bases, sampler };
}
