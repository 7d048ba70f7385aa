// Every account condition is pinned by a test: each statement's account scope (written through
// accountScope, sql/scope.ts, so it can be found) is removed in turn, and a bound caller's calls on
// another account's jobs in every state (tenancy-states.ts) must then find something they should
// not (a job, a task, a result, a listing, a settlement, a quota's numbers). A scope whose removal
// nothing notices would be one a regression could drop unseen. Unmutated, the same calls find
// nothing. Over a real PostgreSQL; the mutation rewrites the statement's text on the way to the
// server (a pool of its own per mutation), the store's code is untouched.
import { readdirSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { NotFoundError, QueueError } from "../../src/queue/errors.js";
import type { CallOptions } from "../../src/queue/types.js";
import { ACCOUNT_SCOPE_MARK } from "../../src/store/postgres/sql/scope.js";
import { createPool, PostgresQueue } from "../../src/store/postgres/store.js";
import { queueFixture, TEST_STORE_OPTIONS, type QueueFixture } from "../support/queue.js";
import { accountStates, type AccountStates } from "../support/tenancy-states.js";

const OWN = "mut-own";
const SHA = "0".repeat(64);
const FOREIGN = "mut-foreign";
const OPERATIONS = path.join(path.dirname(fileURLToPath(import.meta.url)), "../../src/store/postgres/operations");

let fx: QueueFixture;
let runs = 0;

beforeAll(async () => {
  fx = await queueFixture();
  await fx.queue.putAccount({ name: OWN });
  await fx.queue.putAccount({ name: FOREIGN });
});
afterAll(async () => {
  await fx?.close();
});

interface Scoped {
  /** the statement's export, e.g. "jobs.ts SELECT_JOB" */
  name: string;
  text: string;
}

/** Every statement of operations/ with an account scope. */
async function scopedStatements(): Promise<Scoped[]> {
  const out: Scoped[] = [];
  for (const file of readdirSync(OPERATIONS)
    .filter((f) => f.endsWith(".ts"))
    .sort()) {
    const mod = (await import(path.join(OPERATIONS, file))) as Record<string, unknown>;
    for (const [name, value] of Object.entries(mod)) {
      const text = (value as { text?: unknown } | null)?.text;
      if (typeof text === "string" && typeof (value as { run?: unknown }).run === "function" && text.includes(ACCOUNT_SCOPE_MARK))
        out.push({ name: `${file} ${name}`, text });
    }
  }
  return out;
}

/**
 * `text` with its `i`th account scope made always true. The parameters only the scope named stay
 * named (as text, the type every scope gives them), so the statement still prepares.
 */
function unscoped(text: string, i: number): string {
  let at = -1;
  for (let k = 0; k <= i; k++) at = text.indexOf(ACCOUNT_SCOPE_MARK, at + 1);
  const open = at + ACCOUNT_SCOPE_MARK.length;
  let depth = 0;
  let close = open;
  for (; close < text.length; close++) {
    if (text[close] === "(") depth++;
    else if (text[close] === ")" && --depth === 0) break;
  }
  const scope = text.slice(at, close + 1);
  const rest = text.slice(0, at) + text.slice(close + 1);
  const own = [...new Set(scope.match(/\$\d+/g) ?? [])].filter((p) => !new RegExp(`\\${p}(?!\\d)`).test(rest));
  return text.slice(0, at) + `(true${own.map((p) => ` OR ${p}::text IS NULL`).join("")})` + text.slice(close + 1);
}

/** A store on a pool of its own whose connections send `to` in place of `from`. */
function mutatedQueue(from: string | undefined, to: string | undefined): { queue: PostgresQueue; pool: pg.Pool } {
  const pool = createPool({ connectionString: fx.db.url, max: 4, statementTimeoutMs: 30_000, connectTimeoutMs: 10_000 });
  pool.on("connect", (client) => {
    const query = client.query.bind(client) as (...args: unknown[]) => unknown;
    (client as unknown as { query: (...args: unknown[]) => unknown }).query = (...args: unknown[]) => {
      const first = args[0] as { text?: string } | string | undefined;
      if (from !== undefined && typeof first === "object" && first?.text === from) args[0] = { ...first, text: to };
      return query(...args);
    };
  });
  return { queue: new PostgresQueue(pool, TEST_STORE_OPTIONS), pool };
}

/**
 * A bound caller of OWN on FOREIGN's jobs in every state: what it found that it should not have (a
 * call that did not answer NOT_FOUND, or a listing holding a foreign id), and the calls that failed
 * otherwise (a mutation that broke its statement rather than its scope).
 */
async function battery(q: PostgresQueue, s: AccountStates): Promise<{ leaks: string[]; errors: string[] }> {
  const bound: CallOptions = { account: OWN };
  const leaks: string[] = [];
  const errors: string[] = [];
  const notFound = async (what: string, call: () => Promise<unknown>) => {
    try {
      await call();
      leaks.push(`${what}: answered`);
    } catch (err) {
      if (err instanceof NotFoundError) return;
      if (err instanceof QueueError) leaks.push(`${what}: ${err.constructor.name} ${err.message}`);
      else errors.push(`${what}: ${(err as Error).message}`);
    }
  };
  const foreignIds = new Set(s.states.map((x) => x.jobId));
  const listed = async (what: string, call: () => Promise<string[]>) => {
    try {
      const ids = await call();
      if (ids.some((id) => foreignIds.has(id) || id === s.adjustmentId || id === s.workflowId))
        leaks.push(`${what}: lists another account's`);
    } catch (err) {
      errors.push(`${what}: ${(err as Error).message}`);
    }
  };
  for (const { state, jobId, taskId } of s.states) {
    await notFound(`GetJob of a ${state} job`, () => q.getJobStatus(jobId, bound));
    await notFound(`ListCompletedResults of a ${state} job`, () => q.listCompletedResults({ jobId }, bound));
    for (const status of [undefined, "completed", "failed", "pending"] as const)
      await notFound(`ListTasks (${status ?? "any"}) of a ${state} job`, () => q.listTasks({ jobId, status }, bound));
    await notFound(`GetTask of a ${state} job's task`, () => q.getTask(taskId, bound));
    await notFound(`RetryJob of a ${state} job`, () => q.retryJob({ jobId }, bound));
    await notFound(`SettleJob of a ${state} job`, () => q.settleJob({ jobId, settlementKey: "mut", settledUnits: 1 }, bound));
    // A stream that sends anything (its snapshot first) found the job: it is not waited on further.
    await notFound(`WatchJob of a ${state} job`, async () => {
      for await (const _ of q.watchJob(jobId, bound)) return _;
    });
    await notFound(`CancelJob of a ${state} job`, () => q.cancelJob({ jobId }, bound));
  }
  const first = s.states.find((x) => x.state === "pending")!.jobId;
  await notFound("GetWorkflow of another account's", () => q.getWorkflow(s.workflowId, bound));
  await notFound("WatchWorkflow of another account's", async () => {
    for await (const _ of q.watchWorkflow(s.workflowId, bound)) return _;
  });
  await notFound("RetryWorkflow of another account's", () => q.retryWorkflow({ workflowId: s.workflowId }, bound));
  await notFound("CancelWorkflow of another account's", () => q.cancelWorkflow({ workflowId: s.workflowId }, bound));
  await notFound("CreateJob after another account's job", () =>
    q.createJob({ workload: s.workloads[0], inputUri: "s3://mut/after", inputSha256: SHA, after: [{ jobId: first }] }, bound),
  );
  await notFound("CreateWorkflow after another account's job", () =>
    q.createWorkflow(
      { nodes: [{ name: "x", job: { workload: s.workloads[0], inputUri: "s3://mut/wf", inputSha256: SHA, after: [{ jobId: first }] } }] },
      bound,
    ),
  );
  await listed("ListWorkflows", async () => (await q.listWorkflows({ pageSize: 1000 }, bound)).workflows.map((w) => w.id));
  await notFound("SettleAdjustment of another account's", () =>
    q.settleAdjustment({ adjustmentId: s.adjustmentId, settlementKey: "mut", settledUnits: 1 }, bound),
  );
  await listed("ListJobs", async () => (await q.listJobs({ pageSize: 1000 }, bound)).jobs.map((j) => j.id));
  await listed("ListJobs of a schedule", async () => (await q.listJobs({ scheduleName: s.scheduleName }, bound)).jobs.map((j) => j.id));
  await listed("ListSettlements", async () => (await q.listSettlements({ pageSize: 1000 }, bound)).jobs.map((j) => j.id));
  await listed("ListAdjustments", async () => (await q.listAdjustments({ pageSize: 1000 }, bound)).adjustments.map((a) => a.id));
  return { leaks, errors };
}

/** FOREIGN's jobs in every state, on workloads of their own; FOREIGN's quota then set below its count, so a retry counted against it is refused with its numbers. */
async function foreign(): Promise<AccountStates> {
  await fx.queue.putAccount({ name: FOREIGN, maxPendingTasks: 0 });
  const s = await accountStates(fx.queue, fx.pool, FOREIGN, `mut${++runs}`);
  await fx.queue.putAccount({ name: FOREIGN, maxPendingTasks: 1 });
  return s;
}

describe("account scopes", () => {
  it("the statements with one are the ones expected, and each RPC on another account's job finds nothing", async () => {
    const names = (await scopedStatements()).map((s) => s.name);
    // A new scoped statement is found here by itself; these must stay among them.
    expect(names).toEqual(
      expect.arrayContaining([
        "jobs.ts SELECT_JOB",
        "jobs.ts LIST_COMPLETED_RESULTS",
        "jobs.ts JOB_EXISTS",
        "jobs.ts RETRY_JOB",
        "jobs.ts RETRY_QUOTA",
        "jobs.ts LIST_JOBS_BY_ACCOUNT",
        "jobs.ts LIST_JOBS_BY_SCHEDULE",
        "inspection.ts SELECT_ACCOUNT_TASK",
        "inspection.ts LIST_TASKS",
        "inspection.ts LIST_TASKS_BY_STATUS",
        "inspection.ts LIST_FAILED_TASKS",
        "settlements.ts LIST_SETTLEMENTS",
        "settlements.ts SETTLE_JOB",
        "adjustments.ts LIST_ADJUSTMENTS",
        "adjustments.ts SETTLE_ADJUSTMENT",
        "dependencies.ts LOCK_PARENTS",
        "workflows.ts SELECT_WORKFLOW",
        "workflows.ts LOCK_WORKFLOW",
        "workflows.ts LIST_WORKFLOWS",
      ]),
    );
    const { queue, pool } = mutatedQueue(undefined, undefined);
    try {
      expect(await battery(queue, await foreign())).toEqual({ leaks: [], errors: [] });
    } finally {
      queue.stopTimers();
      await pool.end();
    }
  });

  it(
    "removing any one of them is caught: a bound caller then finds another account's job, task or listing",
    { timeout: 300_000 },
    async () => {
      const caught: string[] = [];
      const missed: string[] = [];
      for (const s of await scopedStatements()) {
        const count = s.text.split(ACCOUNT_SCOPE_MARK).length - 1;
        for (let i = 0; i < count; i++) {
          const states = await foreign();
          const { queue, pool } = mutatedQueue(s.text, unscoped(s.text, i));
          try {
            const { leaks, errors } = await battery(queue, states);
            expect(errors, `${s.name} #${i}: the mutation broke the statement`).toEqual([]);
            (leaks.length > 0 ? caught : missed).push(`${s.name} #${i}${leaks.length ? ` (${leaks[0]})` : ""}`);
          } finally {
            queue.stopTimers();
            await pool.end();
          }
        }
      }
      expect(missed, `caught: ${caught.join("; ")}`).toEqual([]);
      expect(caught.length).toBeGreaterThanOrEqual(15);
    },
  );
});
