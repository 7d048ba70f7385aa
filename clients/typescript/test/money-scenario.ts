// The money path through the TypeScript client (its built dist/), printed as one JSON line that
// test/clients/ts-client-money.test.ts compares: usage a handler reports with its results and
// failures, accounts and a job's billing context, and a settlement recorded once. Each section
// records the error code it met instead of its answer, so one section's refusal does not hide the
// others. Env: LEASEHOLD_URL, LEASEHOLD_TRANSPORT, PREFIX.
import { createHash } from "node:crypto";
import {
  Client,
  FailurePolicy,
  JobStatus,
  LeaseholdError,
  RetryableError,
  usageNumbers,
  Worker,
  type Result,
  type TaskDetail,
  type TransportName,
} from "../dist/index.js";

const url = process.env.LEASEHOLD_URL!;
const transport = process.env.LEASEHOLD_TRANSPORT as TransportName;
const prefix = process.env.PREFIX!;
const sha = (s: string): string => createHash("sha256").update(s).digest("hex");
const status = (s: JobStatus): string => JobStatus[s].toLowerCase();
const WORK = `${prefix}-work`;
const IDLE = `${prefix}-idle`;
const ACCOUNT = `${prefix}-acct`;

const client = new Client(url, { transport });
await client.putWorkload(WORK, { maxAttempts: 3, leaseSeconds: 30 });
await client.putWorkload(IDLE, { maxAttempts: 1, leaseSeconds: 30 });
const out: Record<string, unknown> = {};

async function section(name: string, body: () => Promise<unknown>): Promise<void> {
  try {
    out[name] = await body();
  } catch (e) {
    if (!(e instanceof LeaseholdError)) throw e;
    out[name] = { error: e.code, message: e.message };
  }
}

// Usage with a result, with a retryable failure (counted too), and a counter the coordinator would refuse.
const silent = { debug() {}, info() {}, warn() {}, error() {} };
const worker = new Worker(url, { transport, workloads: [WORK], concurrency: 3, handleSignals: false, logger: silent });
worker.handle(WORK, (task): Result => {
  const result = { uri: `mem://${task.chunkIndex}`, sha256: sha(task.inputUri) };
  if (task.chunkIndex === 0) return { ...result, usage: { gpu_ms: 100, tokens: 7n } };
  if (task.chunkIndex === 1 && task.attempt === 1) throw new RetryableError("again", { retryAfterSeconds: 0, usage: { gpu_ms: 20 } });
  if (task.chunkIndex === 1) return { ...result, usage: { gpu_ms: 30 } };
  return { ...result, usage: { GPU: 1 } };
});
const running = worker.run();
await section("usage", async () => {
  const uris = ["s3://in/0", "s3://in/1", "s3://in/bad"];
  const job = await client.createJob(
    WORK,
    uris.map((u, i) => ({ chunkIndex: i, inputUri: u, inputSha256: sha(u) })),
    { failurePolicy: FailurePolicy.CONTINUE, maxFailedTasks: 1 },
  );
  const done = await client.wait(job.id, { timeoutMs: 60_000 });
  const tasks: TaskDetail[] = [];
  for await (const t of client.listTasks(job.id)) tasks.push(t);
  return {
    status: status(done.status),
    job: usageNumbers(done.usage),
    tasks: tasks.map((t) => usageNumbers(t.task?.usage)),
    attempts: tasks[1].attempts.map((a) => usageNumbers(a.usage)),
    refused: { code: tasks[2].task?.errorCode, names: tasks[2].task?.errorMessage.includes('"GPU"') },
  };
});
worker.stop();
await running;

// Accounts, a billing context, its key's replay, the account filter, a quota and an unknown account.
let billedJob = "";
await section("accounts", async () => {
  const put = await client.putAccount(ACCOUNT, { maxPendingTasks: 2, priority: 3 });
  const listed = (await client.listAccounts()).some((a) => a.name === ACCOUNT);
  const billing = { reservedUnits: 500n, billingKey: `${prefix}-order` };
  const one = { chunkIndex: 0, inputUri: "s3://idle", inputSha256: sha("idle") };
  const job = await client.createJob(IDLE, [one], { account: ACCOUNT, billing });
  billedJob = job.id;
  const again = await client.createJob(IDLE, [one], { account: ACCOUNT, billing });
  const read = await client.getJob(job.id);
  const ids: string[] = [];
  for await (const j of client.listJobs({ account: ACCOUNT })) ids.push(j.id);
  const codes: Record<string, string> = {};
  const two = [0, 1].map((i) => ({ chunkIndex: i, inputUri: `s3://q/${i}`, inputSha256: sha(String(i)) }));
  await client.createJob(IDLE, two, { account: ACCOUNT }).catch((e: LeaseholdError) => (codes.quota = `${e.code}:${e.constructor.name}`));
  await client.createJob(IDLE, [one], { account: `${prefix}-nobody` }).catch((e: LeaseholdError) => (codes.unknown = e.code));
  return {
    put: { name: put.name === ACCOUNT, maxPendingTasks: put.maxPendingTasks, priority: put.priority },
    listed,
    pending: (await client.getAccount(ACCOUNT)).pendingTasks,
    job: { account: read.account === ACCOUNT, reserved: Number(read.billing?.reservedUnits), priority: read.priority },
    replay: again.id === job.id,
    filter: ids.length === 1 && ids[0] === job.id,
    codes,
  };
});

// A settlement, once: refused before the job is final, recorded, replayed, refused with another amount.
await section("settlement", async () => {
  const codes: Record<string, string> = {};
  const key = `${prefix}-inv`;
  await client.settleJob(billedJob, key, 0).catch((e: LeaseholdError) => (codes.early = e.code));
  await client.cancel(billedJob, "not needed");
  let unsettled = false;
  for await (const j of client.listSettlements({ account: ACCOUNT })) unsettled ||= j.id === billedJob;
  const settled = await client.settleJob(billedJob, key, 0);
  const again = await client.settleJob(billedJob, key, 0);
  await client.settleJob(billedJob, key, 5).catch((e: LeaseholdError) => (codes.conflict = e.code));
  let still = false;
  for await (const j of client.listSettlements({ account: ACCOUNT })) still ||= j.id === billedJob;
  const usage = await client.getAccountUsage(ACCOUNT);
  return {
    unsettled,
    settlement: { key: settled.settlement?.settlementKey === key, units: Number(settled.settlement?.settledUnits) },
    replay: again.settlement?.settlementKey === key,
    still,
    usageAccount: usage.account === ACCOUNT,
    codes,
  };
});

client.close();
console.log(JSON.stringify(out));
