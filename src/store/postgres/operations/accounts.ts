// Accounts: PutAccount, GetAccount, ListAccounts, CreateJob's account gate (the account exists,
// its priority, its quota of pending tasks). GetAccountUsage is account-usage.ts.

import type pg from "pg";
import type { Account, PutAccountInput } from "../../../queue/types.js";
import { requireAccountName, validatePutAccount } from "../../../queue/account-validation.js";
import { NotFoundError, QuotaExceededError } from "../../../queue/errors.js";
import type { CallOptions } from "../../../queue/types.js";
import type { StoreContext } from "../state/context.js";
import { withClient } from "../sql/db.js";
import { defineQuery, type NoParams } from "../sql/query.js";

interface AccountRow {
  name: string;
  max_pending_tasks: number;
  priority: number;
  created_at: Date;
  updated_at: Date;
}
type AccountWithPending = AccountRow & { pending_tasks: number };

/*
 * The tasks an account's quota counts: the unfinished tasks (pending or leased) of its unfinished
 * jobs, the waiting tasks of its jobs that wait for their parents, and one for each of those jobs
 * whose finalizer is still to come. A waiting job's tasks count from its creation for the same
 * reason as a finalizer's: they become pending inside the transaction that ends their last parent
 * (a completion, a failure, a cancel), where refusing them would strand the job; held from the
 * start, promotion moves them from waiting to pending without changing the count. Leased tasks count, so
 * that nothing a worker does moves the count (a lease that expires, a failure retried: leased and
 * pending again are both unfinished), and only CreateJob, RetryJob and a finalizer add to it. A
 * finalizer's task is counted from its parent's creation (held for it), so that enqueueing it when
 * the parent ends, inside the transaction that ends the parent, never passes the quota and is never
 * refused: the parent leaves the count as the finalizer job enters it.
 * Its open jobs through jobs_account_open_idx (a job leaves it when it ends), then each one's
 * unfinished tasks through tasks_job_unfinished_idx: not a scan of the account's history nor of
 * every pending task. `a` is the accounts row in scope.
 */
const pendingOf = (a: string) => `((SELECT count(*) FROM jobs j JOIN tasks t ON t.job_id = j.id AND t.status IN ('pending', 'leased')
  WHERE j.account = ${a}.name AND j.status IN ('pending', 'running'))
  + (SELECT count(*) FROM jobs j JOIN tasks t ON t.job_id = j.id AND t.status = 'waiting'
     WHERE j.account = ${a}.name AND j.status IN ('pending', 'running') AND j.waiting_on > 0)
  + (SELECT count(*) FROM jobs j WHERE j.account = ${a}.name AND j.status IN ('pending', 'running')
     AND j.finalizer_workload IS NOT NULL AND j.finalizer_job_id IS NULL))::int AS pending_tasks`;

// One statement: the upsert and the account's pending tasks, counted from the rows as they were
// before it (a PUT changes no job).
export const UPSERT_ACCOUNT = defineQuery<Required<PutAccountInput>, AccountWithPending>(
  null,
  `
WITH a AS (
  INSERT INTO accounts (name, max_pending_tasks, priority) VALUES ($1, $2, $3)
  ON CONFLICT (name) DO UPDATE
    SET max_pending_tasks = EXCLUDED.max_pending_tasks, priority = EXCLUDED.priority, updated_at = now()
  RETURNING *
)
SELECT a.*, ${pendingOf("a")} FROM a`,
  (p) => [p.name, p.maxPendingTasks, p.priority],
);

export const SELECT_ACCOUNT = defineQuery<{ name: string }, AccountWithPending>(
  null,
  `SELECT a.*, ${pendingOf("a")} FROM accounts a WHERE a.name = $1`,
  (p) => [p.name],
);

// Every account with its pending tasks; one count per account, each through the open-jobs index.
export const SELECT_ACCOUNTS = defineQuery<NoParams, AccountWithPending>(
  null,
  `SELECT a.*, ${pendingOf("a")} FROM accounts a ORDER BY a.name`,
);

/*
 * CreateJob's gate, inside its transaction. The row lock orders the account's concurrent
 * CreateJobs on every coordinator: the next holder takes the lock only after this one's commit or
 * rollback, and its count (COUNT_PENDING, a later statement, so a fresh snapshot under READ
 * COMMITTED) sees every job committed before it. FOR NO KEY UPDATE, not FOR UPDATE: the jobs'
 * foreign key to accounts takes KEY SHARE, which this does not block.
 */
export const LOCK_ACCOUNT = defineQuery<{ name: string }, Pick<AccountRow, "max_pending_tasks" | "priority">>(
  null,
  `SELECT max_pending_tasks, priority FROM accounts WHERE name = $1 FOR NO KEY UPDATE`,
  (p) => [p.name],
);

export const COUNT_PENDING = defineQuery<{ name: string }, { pending_tasks: number }>(
  null,
  `SELECT ${pendingOf("a")} FROM (SELECT $1::text AS name) a`,
  (p) => [p.name],
);

/*
 * Whether a CreateJob's key was used before in its account: such a request is a replay (or a
 * conflict), answered by the job the key made, so the quota does not refuse it. Both keys are
 * scoped to the account (jobs_idempotency_key_idx, jobs_billing_key_idx). $1 idempotency key,
 * $2 account ('' for none), $3 billing key (null for none).
 */
export const KEY_USED = defineQuery<{ idempotencyKey: string | null; account: string; billingKey: string | null }, { used: boolean }>(
  null,
  `SELECT EXISTS (SELECT 1 FROM jobs WHERE coalesce(account, '') = $2 AND idempotency_key = $1)
    OR EXISTS (SELECT 1 FROM jobs WHERE coalesce(account, '') = $2 AND billing_key = $3) AS used`,
  (p) => [p.idempotencyKey, p.account, p.billingKey],
);

export const ACCOUNT_EXISTS = defineQuery<{ name: string }, { found: boolean }>(
  null,
  `SELECT EXISTS (SELECT 1 FROM accounts WHERE name = $1) AS found`,
  (p) => [p.name],
);

/** NOT_FOUND naming `field` unless the account is registered (a schedule's template, checked at PutSchedule as each tick will be). */
export async function requireAccount(c: pg.PoolClient, name: string, field: string): Promise<void> {
  if (!(await ACCOUNT_EXISTS.one(c, { name })).found) throw new NotFoundError("account", name, field);
}

function toAccount(r: AccountWithPending): Account {
  return {
    name: r.name,
    maxPendingTasks: r.max_pending_tasks,
    priority: r.priority,
    pendingTasks: r.pending_tasks,
    createdAt: r.created_at,
    updatedAt: r.updated_at,
  };
}

export async function putAccount(ctx: StoreContext, input: PutAccountInput, opts: CallOptions): Promise<Account> {
  const a = validatePutAccount(input);
  return withClient(ctx.pool, opts.signal, async (c) => toAccount(await UPSERT_ACCOUNT.one(c, a)));
}

export async function getAccount(ctx: StoreContext, name: string, opts: CallOptions): Promise<Account> {
  const n = requireAccountName("name", name);
  const row = await withClient(ctx.pool, opts.signal, (c) => SELECT_ACCOUNT.maybe(c, { name: n }));
  if (!row) throw new NotFoundError("account", n, "name");
  return toAccount(row);
}

export async function listAccounts(ctx: StoreContext, opts: CallOptions): Promise<Account[]> {
  const rows = await withClient(ctx.pool, opts.signal, (c) => SELECT_ACCOUNTS.run(c));
  return rows.map(toAccount);
}

/** What a CreateJob of an account needs to know of it. */
export interface AccountGate {
  /** the job's account */
  account: string;
  tasks: number;
  idempotencyKey: string | null;
  billingKey: string | null;
}

/**
 * CreateJob's account rules, on `c` inside the CreateJob's transaction: the account exists
 * (NOT_FOUND naming the field), and the job's tasks (and its finalizer's, held for it) fit its
 * quota (RESOURCE_EXHAUSTED naming the numbers) unless the request's key was used before (a replay
 * is answered, not refused). The account's row stays locked until the transaction ends. Answers
 * the account's priority.
 */
export async function accountGate(c: pg.PoolClient, g: AccountGate, field = "account"): Promise<{ priority: number }> {
  const a = await LOCK_ACCOUNT.maybe(c, { name: g.account });
  if (!a) throw new NotFoundError("account", g.account, field);
  const over = await overQuota(c, g.account, a.max_pending_tasks, g.tasks, field);
  if (over) {
    const keyed = g.idempotencyKey !== null || g.billingKey !== null;
    if (!keyed || !(await KEY_USED.one(c, { idempotencyKey: g.idempotencyKey, account: g.account, billingKey: g.billingKey })).used)
      throw over;
  }
  return { priority: a.priority };
}

/**
 * The same gate for work that an existing job of the account makes unfinished again (RetryJob):
 * the account's row locked until the transaction ends, then its count, in a later statement (a
 * snapshot that sees every CreateJob and RetryJob of the account committed before the lock), and
 * RESOURCE_EXHAUSTED when `tasks` more would pass the quota. An account deleted since is no gate.
 */
export async function quotaGate(c: pg.PoolClient, account: string, tasks: number, field: string): Promise<void> {
  const a = await LOCK_ACCOUNT.maybe(c, { name: account });
  if (!a) return;
  const over = await overQuota(c, account, a.max_pending_tasks, tasks, field);
  if (over) throw over;
}

/** The quota's refusal when `tasks` more would pass `max` (0: no limit), naming the numbers; undefined when they fit. */
async function overQuota(
  c: pg.PoolClient,
  account: string,
  max: number,
  tasks: number,
  field: string,
): Promise<QuotaExceededError | undefined> {
  if (max <= 0 || tasks <= 0) return undefined;
  const { pending_tasks: pending } = await COUNT_PENDING.one(c, { name: account });
  if (pending + tasks <= max) return undefined;
  return new QuotaExceededError(
    `${field}: account ${JSON.stringify(account)} has ${pending} pending tasks; ${tasks} more would pass its max_pending_tasks of ${max}`,
  );
}
