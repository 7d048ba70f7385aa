// Each test file gets its own database cloned from the migrated template, so files run in parallel.
import { randomUUID } from "node:crypto";
import pg from "pg";
import { inject } from "vitest";

export function databaseUrl(database: string): string {
  const u = new URL(inject("adminDatabaseUrl"));
  u.pathname = `/${database}`;
  return u.toString();
}

async function admin<T>(fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client({ connectionString: inject("adminDatabaseUrl") });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

export interface TestDatabase {
  name: string;
  url: string;
  drop(): Promise<void>;
}

/** A fresh, migrated database of its own. */
export async function createTestDatabase(): Promise<TestDatabase> {
  const name = `t_${randomUUID().replace(/-/g, "").slice(0, 16)}`;
  const template = inject("templateDatabase");
  // CREATE DATABASE … TEMPLATE fails if another session is cloning the same template at that moment; retry.
  for (let i = 0; ; i++) {
    try {
      await admin((c) => c.query(`CREATE DATABASE ${name} TEMPLATE ${template}`));
      break;
    } catch (err) {
      if (i >= 20 || !/being accessed by other users/.test(String(err))) throw err;
      await new Promise((r) => setTimeout(r, 50 + Math.random() * 100));
    }
  }
  return {
    name,
    url: databaseUrl(name),
    drop: () => admin((c) => c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)).then(() => {}),
  };
}

/** An empty database (no migrations), for migration tests. */
export async function createEmptyDatabase(): Promise<TestDatabase> {
  const name = `e_${randomUUID().replace(/-/g, "").slice(0, 16)}`;
  await admin((c) => c.query(`CREATE DATABASE ${name}`));
  return {
    name,
    url: databaseUrl(name),
    drop: () => admin((c) => c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)).then(() => {}),
  };
}
