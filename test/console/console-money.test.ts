// The console's money views in a real browser (headless Chromium from @sparticuz/chromium) against
// a real coordinator process: who sees the settlements view (billing and admin tokens, not a
// submitter), the jobs list filtered by account, a job page with its account, billing context,
// usage (in total and per attempt) and settlement, and the settlements view filtered by account.
import { randomUUID } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import type { Browser, BrowserContext, Page } from "puppeteer-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { QueueService } from "../../gen/leasehold/queue/v1/queue_pb.js";
import { axeSerious, ensureUiBuilt, launchBrowser, signInTab, WAIT } from "../support/browser.js";
import { createTestDatabase, type TestDatabase } from "../support/db.js";
import { killAll, spawnCoordinator } from "../support/process.js";
import { sha } from "../support/queue.js";

interface El {
  textContent: string | null;
  hidden: boolean;
  dataset: Record<string, string | undefined>;
  closest(selector: string): El | null;
  querySelectorAll(selector: string): { length: number };
}
declare const document: {
  getElementById(id: string): El | null;
  querySelector(selector: string): El | null;
  querySelectorAll(selector: string): { length: number };
  body: { dataset: Record<string, string | undefined> };
};

const TOKENS = {
  admin: `lh_admin_${randomUUID()}`,
  submitter: `lh_submitter_${randomUUID()}`,
  billing: `lh_billing_${randomUUID()}`,
  bound: `lh_bound_${randomUUID()}`,
};

let db: TestDatabase;
let tmp: string;
let base: string;
let browser: Browser;
let api: Client<typeof QueueService>;
const contexts: BrowserContext[] = [];
const signedIn = (token: string, hash: string) => signInTab(browser, base, token, hash, { contexts, bypassCsp: true });

beforeAll(async () => {
  ensureUiBuilt();
  tmp = mkdtempSync(path.join(os.tmpdir(), "leasehold-console-money-"));
  const tokens = path.join(tmp, "tokens");
  writeFileSync(
    tokens,
    `${sha(TOKENS.admin)} admin\n${sha(TOKENS.submitter)} submitter\n${sha(TOKENS.billing)} billing\n${sha(TOKENS.bound)} submitter umbrella\n`,
  );
  db = await createTestDatabase();
  const coordinator = spawnCoordinator({ DATABASE_URL: db.url, PORT: "0", AUTH_TOKENS_FILE: tokens });
  [base, browser] = await Promise.all([coordinator.listening(60_000), launchBrowser()]);
  const bearer: Interceptor = (next) => (req) => {
    req.header.set("authorization", `Bearer ${TOKENS.admin}`);
    return next(req);
  };
  api = createClient(QueueService, createConnectTransport({ baseUrl: base, httpVersion: "1.1", interceptors: [bearer] }));
  await api.putWorkload({ name: "render", maxAttempts: 2, leaseSeconds: 120 });
  await api.putWorkload({ name: "idle", maxAttempts: 1, leaseSeconds: 120 });
});

afterAll(async () => {
  for (const c of contexts) await c.close().catch(() => {});
  await browser?.close();
  await killAll();
  await db?.drop();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

function settlementsNavShown(page: Page): Promise<boolean> {
  return page.evaluate(() => document.querySelector("[data-nav=settlements]")?.closest("li")?.hidden === false);
}

/** A one-task job of `account` with a billing context; its task leased by worker-m, one attempt failed with usage, the next completed with usage. */
async function billedJob(account: string, billingKey: string): Promise<string> {
  const input = randomUUID();
  const created = await api.createJob({
    workload: "render",
    account,
    billing: { reservedUnits: 500n, billingKey },
    tasks: [{ chunkIndex: 0, inputUri: `s3://in/${input}`, inputSha256: sha(input) }],
  });
  const jobId = created.job!.id;
  // A long poll each: the retried attempt is due at once, yet a claim may arrive just before it is.
  const claim = { workerId: "worker-m", workloads: ["render"], maxTasks: 1, waitSeconds: 10 };
  let t = (await api.claimTasks(claim)).tasks[0];
  await api.failTask({
    taskId: t.id,
    workerId: "worker-m",
    attempt: t.attempt,
    errorCode: "oom",
    retryable: true,
    retryAfterSeconds: 0,
    usage: { gpu_ms: 200n },
  });
  t = (await api.claimTasks(claim)).tasks[0];
  await api.completeTask({
    taskId: t.id,
    workerId: "worker-m",
    attempt: t.attempt,
    resultUri: "mem://0",
    resultSha256: sha("0"),
    usage: { gpu_ms: 1000n, tokens: 5n },
  });
  return jobId;
}

describe("console: the money path", () => {
  it("shows the settlements view to billing and admin tokens, and tells a submitter it is theirs", async () => {
    const billing = await signedIn(TOKENS.billing, "#/settlements");
    expect(await billing.evaluate(() => document.body.dataset.role)).toBe("billing");
    expect(await settlementsNavShown(billing)).toBe(true);
    expect(await billing.evaluate(() => document.querySelector("[data-nav=workloads]")?.closest("li")?.hidden)).toBe(true);
    await billing.waitForSelector("#settlements-results", WAIT);
    expect(await axeSerious(billing)).toEqual([]);

    const admin = await signedIn(TOKENS.admin, "#/");
    expect(await settlementsNavShown(admin)).toBe(true);

    const submitter = await signedIn(TOKENS.submitter, "#/settlements");
    expect(await submitter.evaluate(() => document.body.dataset.role)).toBe("submitter");
    expect(await settlementsNavShown(submitter)).toBe(false);
    await submitter.waitForFunction(
      () => document.getElementById("main")?.textContent?.includes("shown to billing and admin tokens") === true,
      WAIT,
    );
  });

  it("filters jobs by account; the job page shows account, billing, usage in total and per attempt, and the settlement", async () => {
    await api.putAccount({ name: "acme" });
    await api.putAccount({ name: "globex" });
    const acme = await billedJob("acme", `order-${randomUUID()}`);
    const other = await api.createJob({ workload: "idle", account: "globex", inputUri: "s3://in/g", inputSha256: sha("g") });

    const page = await signedIn(TOKENS.admin, "#/jobs?account=acme");
    await page.waitForSelector(`#jobs tr[data-job="${acme}"]`, WAIT);
    expect(await page.evaluate((id) => document.querySelector(`#jobs tr[data-job="${id}"]`) === null, other.job!.id)).toBe(true);
    expect(await page.evaluate(() => document.querySelectorAll('#jobs td[data-account="acme"]').length)).toBeGreaterThan(0);

    await page.goto(`${base}/ui/#/jobs/${acme}`, { waitUntil: "domcontentloaded" });
    await page.waitForFunction(() => document.getElementById("job-usage")?.textContent === "gpu_ms 1,200 · tokens 5", WAIT);
    expect(await page.evaluate(() => document.getElementById("job-account")?.textContent)).toBe("acme");
    expect(await page.evaluate(() => document.getElementById("job-billing")?.textContent)).toMatch(/^Reserved 500 units, key order-/);
    expect(await page.evaluate(() => document.getElementById("job-settlement")?.dataset.settled)).toBe("no");
    await page.waitForFunction(() => document.getElementById("tasks")?.textContent?.includes("[used gpu_ms 200]") === true, WAIT);
    expect(await page.evaluate(() => document.getElementById("tasks")?.textContent)).toContain("[used gpu_ms 1000, tokens 5]");

    await api.settleJob({ jobId: acme, settlementKey: "inv-1", settledUnits: 400n });
    await page.reload({ waitUntil: "domcontentloaded" });
    await page.waitForFunction(() => document.getElementById("job-settlement")?.dataset.settled === "yes", WAIT);
    expect(await page.evaluate(() => document.getElementById("job-settlement")?.textContent)).toMatch(/^400 units settled as inv-1/);
  });

  it("lists unsettled final jobs for a billing token, filtered by account; a settled job leaves the list", async () => {
    await api.putAccount({ name: "initech" });
    const first = await billedJob("initech", `order-${randomUUID()}`);
    const second = await billedJob("initech", `order-${randomUUID()}`);
    const page = await signedIn(TOKENS.billing, "#/settlements?account=initech");
    await page.waitForSelector(`#settlements tr[data-job="${second}"]`, WAIT);
    expect(await page.evaluate(() => document.querySelectorAll("#settlements tbody tr").length)).toBe(2);
    expect(await axeSerious(page)).toEqual([]);
    expect(await page.evaluate((id) => document.querySelector(`td[data-usage="${id}"]`)?.textContent, first)).toBe(
      "gpu_ms 1,200 · tokens 5",
    );

    await api.settleJob({ jobId: first, settlementKey: "inv-2", settledUnits: 500n });
    await page.reload({ waitUntil: "domcontentloaded" });
    await page.waitForSelector(`#settlements tr[data-job="${second}"]`, WAIT);
    expect(await page.evaluate(() => document.querySelectorAll("#settlements tbody tr").length)).toBe(1);
  });

  it("shows a bound submitter's overview its own account's jobs, and never asks for /metrics (every account's counts)", async () => {
    await api.putAccount({ name: "umbrella" });
    await api.putAccount({ name: "wayne" });
    const job = (account: string) =>
      api.createJob({ workload: "idle", account, inputUri: `s3://in/${randomUUID()}`, inputSha256: sha(randomUUID()) });
    const cancelled = await job("umbrella");
    await api.cancelJob({ jobId: cancelled.job!.id });
    await job("umbrella");
    for (let i = 0; i < 3; i++) await job("wayne");
    const page = await signedIn(TOKENS.bound, "#/jobs");
    const scraped: string[] = [];
    page.on("request", (r) => {
      if (new URL(r.url()).pathname === "/metrics") scraped.push(r.url());
    });
    await page.evaluate(() => ((globalThis as unknown as { location: { hash: string } }).location.hash = "#/"));
    await page.waitForFunction(() => document.getElementById("own-jobs") !== null, WAIT);
    const text = await page.evaluate(() => document.getElementById("own-jobs")?.textContent ?? "");
    // Its two jobs (one pending, one cancelled); none of wayne's three pending ones.
    expect(text).toBe("StatusJobspending1cancelled1");
    expect(await page.evaluate(() => document.getElementById("workload-counts"))).toBeNull();
    expect(await axeSerious(page)).toEqual([]);
    expect(scraped).toEqual([]);
  });
});
