// A bound token's call on another account's job or task does the same work as on one that does
// not exist: the same statements, in the same order, and the same NotFoundError (but for the
// id). Statements are recorded off the store's own pool connections (the text each query sends),
// over a real PostgreSQL; nothing is mocked.
import { randomUUID } from "node:crypto";
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { NotFoundError } from "../../src/queue/errors.js";
import type { CallOptions } from "../../src/queue/types.js";
import { PostgresQueue } from "../../src/store/postgres/store.js";
import { queueFixture, sha, TEST_STORE_OPTIONS, type QueueFixture } from "../support/queue.js";

const OWN = "acme";
const FOREIGN = "globex";
const W = "scope";

let fx: QueueFixture;
let recorded: pg.Pool;
let queue: PostgresQueue;
let statements: string[] = [];

beforeAll(async () => {
  fx = await queueFixture();
  await fx.pool.query("INSERT INTO accounts (name) VALUES ($1), ($2)", [OWN, FOREIGN]);
  await fx.queue.putWorkload({ name: W });
  // A queue of its own whose every connection records the statements it sends.
  recorded = fx.newPool();
  recorded.on("connect", (client) => {
    const query = client.query.bind(client) as (...args: unknown[]) => unknown;
    (client as unknown as { query: (...args: unknown[]) => unknown }).query = (...args: unknown[]) => {
      const first = args[0] as string | { text?: string } | undefined;
      statements.push(typeof first === "string" ? first : (first?.text ?? ""));
      return query(...args);
    };
  });
  queue = new PostgresQueue(recorded, TEST_STORE_OPTIONS);
});

afterAll(async () => {
  queue?.stopTimers();
  await fx?.close();
});

/** A cancelled one-task job of `account` (cancelled: a retry, unscoped, would change it). */
async function foreignJob(): Promise<{ jobId: string; taskId: string }> {
  const r = await fx.queue.createJob({ workload: W, inputUri: "s3://in/scope", inputSha256: sha(randomUUID()) });
  await fx.pool.query("UPDATE jobs SET account = $2 WHERE id = $1", [r.job.id, FOREIGN]);
  await fx.queue.cancelJob({ jobId: r.job.id });
  return { jobId: r.job.id, taskId: r.tasks[0].id };
}

/** The statements a call sends and the error it ends with. */
async function run(call: () => Promise<unknown>): Promise<{ statements: string[]; error: unknown }> {
  statements = [];
  let error: unknown;
  try {
    await call();
  } catch (err) {
    error = err;
  }
  return { statements, error };
}

const scoped: CallOptions = { account: OWN };
type Op = (ids: { jobId: string; taskId: string }, opts?: CallOptions) => Promise<unknown>;
const OPS: [string, Op][] = [
  ["GetJob", (ids, opts = scoped) => queue.getJobStatus(ids.jobId, opts)],
  ["ListCompletedResults", (ids, opts = scoped) => queue.listCompletedResults({ jobId: ids.jobId }, opts)],
  ["CancelJob", (ids, opts = scoped) => queue.cancelJob({ jobId: ids.jobId }, opts)],
  ["RetryJob", (ids, opts = scoped) => queue.retryJob({ jobId: ids.jobId }, opts)],
  ["ListTasks", (ids, opts = scoped) => queue.listTasks({ jobId: ids.jobId }, opts)],
  ["GetTask", (ids, opts = scoped) => queue.getTask(ids.taskId, opts)],
  [
    "WatchJob",
    async (ids, opts = scoped) => {
      for await (const _ of queue.watchJob(ids.jobId, opts)) void _;
    },
  ],
];

describe("another account's job or task, against a missing one", () => {
  it.each(OPS)("%s: the same statements and the same NotFoundError", async (_name, op) => {
    const theirs = await foreignJob();
    const before = await fx.pool.query("SELECT to_jsonb(j) AS j FROM jobs j WHERE id = $1", [theirs.jobId]);
    const missing = { jobId: randomUUID(), taskId: randomUUID() };
    const foreign = await run(() => op(theirs));
    const gone = await run(() => op(missing));
    expect(foreign.error).toBeInstanceOf(NotFoundError);
    expect(gone.error).toBeInstanceOf(NotFoundError);
    const f = foreign.error as NotFoundError;
    const g = gone.error as NotFoundError;
    expect([f.entity, f.field]).toEqual([g.entity, g.field]);
    expect(f.message.replace(f.id, "<id>")).toBe(g.message.replace(g.id, "<id>"));
    expect(foreign.statements.length).toBeGreaterThan(0);
    expect(foreign.statements).toEqual(gone.statements);
    // And the foreign job is as it was.
    expect((await fx.pool.query("SELECT to_jsonb(j) AS j FROM jobs j WHERE id = $1", [theirs.jobId])).rows).toEqual(before.rows);
    // Unscoped (an unbound token), the same job is found: the NotFoundError above was the scope's.
    const unbound = await run(() => op(theirs, {}));
    expect(unbound.error).not.toBeInstanceOf(NotFoundError);
  });
});
