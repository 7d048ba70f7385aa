// The console's workflow pages in a real browser (headless Chromium from @sparticuz/chromium)
// against a real coordinator process: a workflow's graph follows its nodes live while a worker
// completes their tasks through the API (no reload), each box a link to its job; a job page links
// its workflow and lists its parents; cancel and retry after a confirmation; the workflows list;
// axe-core finds nothing serious on either page; a billing token reads a workflow it may not watch.
import { randomUUID } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import type { Browser, BrowserContext, Page } from "puppeteer-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { JobStatus, QueueService } from "../../gen/leasehold/queue/v1/queue_pb.js";
import { ARTIFACTS, axeSerious, ensureUiBuilt, launchBrowser, signInTab, WAIT } from "../support/browser.js";
import { createTestDatabase, type TestDatabase } from "../support/db.js";
import { killAll, spawnCoordinator } from "../support/process.js";
import { sha } from "../support/queue.js";

interface El {
  textContent: string | null;
  dataset: Record<string, string | undefined>;
  open: boolean;
  getAttribute(name: string): string | null;
}
declare const document: {
  getElementById(id: string): El | null;
  querySelector(selector: string): El | null;
  querySelectorAll(selector: string): { length: number };
  body: El;
};

const TOKENS = { admin: `lh_admin_${randomUUID()}`, billing: `lh_billing_${randomUUID()}` };

let db: TestDatabase;
let tmp: string;
let base: string;
let browser: Browser;
let api: Client<typeof QueueService>;
const contexts: BrowserContext[] = [];
const signedIn = (token: string, hash: string) => signInTab(browser, base, token, hash, { contexts, bypassCsp: true });

beforeAll(async () => {
  ensureUiBuilt();
  mkdirSync(ARTIFACTS, { recursive: true });
  tmp = mkdtempSync(path.join(os.tmpdir(), "leasehold-console-workflows-"));
  const tokens = path.join(tmp, "tokens");
  writeFileSync(tokens, `${sha(TOKENS.admin)} admin\n${sha(TOKENS.billing)} billing\n`);
  db = await createTestDatabase();
  const coordinator = spawnCoordinator({ DATABASE_URL: db.url, PORT: "0", AUTH_TOKENS_FILE: tokens });
  [base, browser] = await Promise.all([coordinator.listening(60_000), launchBrowser()]);
  const bearer: Interceptor = (next) => (req) => {
    req.header.set("authorization", `Bearer ${TOKENS.admin}`);
    return next(req);
  };
  api = createClient(QueueService, createConnectTransport({ baseUrl: base, httpVersion: "1.1", interceptors: [bearer] }));
  for (const name of ["chunks", "stitch", "report", "lint"]) await api.putWorkload({ name, maxAttempts: 1, leaseSeconds: 120 });
});

afterAll(async () => {
  for (const c of contexts) await c.close().catch(() => {});
  await browser?.close();
  await killAll();
  await db?.drop();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

/** The spec's pipeline: chunks, stitched, then a report; a lint beside the stitch that the report may do without. */
async function createPipeline(name: string): Promise<{ id: string; jobs: Record<string, string> }> {
  const r = await api.createWorkflow({
    name,
    nodes: [
      {
        name: "chunks",
        job: {
          workload: "chunks",
          tasks: [0, 1, 2, 3].map((i) => ({ chunkIndex: i, inputUri: `s3://in/${i}`, inputSha256: sha(`${i}`) })),
        },
      },
      { name: "stitch", job: { workload: "stitch", inputUri: "s3://out/", inputSha256: sha("s") }, after: [{ node: "chunks" }] },
      { name: "lint", job: { workload: "lint", inputUri: "s3://out/", inputSha256: sha("l") }, after: [{ node: "chunks" }] },
      {
        name: "report",
        job: { workload: "report", inputUri: "s3://out/", inputSha256: sha("r") },
        after: [{ node: "stitch" }, { node: "lint", optional: true }],
      },
    ],
  });
  const w = r.workflow!;
  return { id: w.id, jobs: Object.fromEntries(w.nodes.map((n) => [n.name, n.jobId])) };
}

/** Completes every task of `workload` there is now (one claim of up to 10). */
async function complete(workload: string): Promise<number> {
  const claimed = await api.claimTasks({ workerId: "worker-wf", workloads: [workload], maxTasks: 10 });
  if (claimed.tasks.length === 0) return 0;
  await api.completeTasks({
    results: claimed.tasks.map((t) => ({
      taskId: t.id,
      workerId: "worker-wf",
      attempt: t.attempt,
      resultUri: `s3://out/${t.id}`,
      resultSha256: sha(t.id),
    })),
  });
  return claimed.tasks.length;
}

const nodeStatus = (page: Page, node: string, status: string) =>
  page.waitForFunction((n, s) => document.querySelector(`#workflow-graph [data-node="${n}"]`)?.dataset.status === s, WAIT, node, status);

async function confirmDialog(page: Page): Promise<void> {
  await page.waitForSelector("#confirm[open]", WAIT);
  await page.click("#confirm-yes");
  await page.waitForFunction(() => !document.getElementById("confirm")?.open, WAIT);
}

describe("console: workflows", () => {
  it("draws a workflow's graph and follows its nodes live as their tasks complete", async () => {
    const wf = await createPipeline("mesh-live");
    const page = await signedIn(TOKENS.admin, `#/workflows/${wf.id}`);
    await page.waitForFunction(() => document.getElementById("live-state")?.textContent === "live", WAIT);
    await nodeStatus(page, "chunks", "pending");
    await nodeStatus(page, "stitch", "waiting");
    // Four boxes, four edges (the optional one dashed), each box a link to its job that says its state.
    expect(await page.$$eval("#workflow-graph a.wf-node", (as) => as.length)).toBe(4);
    expect(
      await page.$$eval("#workflow-graph .wf-edge", (ps) => ps.map((p) => (p as unknown as El).getAttribute("data-edge")).sort()),
    ).toEqual(["chunks>lint", "chunks>stitch", "lint>report", "stitch>report"]);
    expect(await page.$$eval("#workflow-graph .wf-optional", (ps) => ps.length)).toBe(1);
    const link = await page.$eval('#workflow-graph [data-node="stitch"]', (a) => [
      (a as unknown as El).getAttribute("href"),
      (a as unknown as El).getAttribute("aria-label"),
    ]);
    expect(link).toEqual([`#/jobs/${wf.jobs.stitch}`, "stitch waiting for chunks · 0/1 tasks (workload stitch); opens its job"]);
    expect(await axeSerious(page)).toEqual([]);

    // A worker completes the stages one after another; the page moves with them, never reloaded.
    expect(await complete("chunks")).toBe(4);
    await nodeStatus(page, "chunks", "completed");
    await page.waitForFunction(() => document.querySelector('#workflow-nodes [data-tasks="chunks"]')?.textContent === "4/4", WAIT);
    await nodeStatus(page, "stitch", "pending");
    await complete("stitch");
    await complete("lint");
    await nodeStatus(page, "report", "pending");
    await complete("report");
    await page.waitForFunction(() => document.getElementById("workflow-status")?.dataset.status === "completed", WAIT);
    await page.waitForFunction(() => document.getElementById("live-state")?.textContent?.startsWith("finished") === true, WAIT);
    expect(await page.$eval("#workflow-progress", (e) => e.textContent)).toBe("4 of 4 completed");
    await page.screenshot({ path: path.join(ARTIFACTS, "workflow-live-complete.png"), fullPage: true });

    // A box opens its node's job, whose page links back to the workflow and names its parents.
    await page.click('#workflow-graph [data-node="report"]');
    await page.waitForSelector("#job-workflow a", WAIT);
    expect(await page.$eval("#job-workflow", (e) => e.textContent)).toBe(`node report of workflow ${wf.id}`);
    expect(await page.$eval("#job-parents", (e) => e.textContent)).toMatch(/^2 jobs, all completed/);
    expect(await page.$$eval("#job-parents li", (lis) => lis.map((li) => li.textContent))).toEqual([
      "stitch completed 1/1 tasks",
      "lint completed 1/1 tasks, optional",
    ]);
    // Its task names the same parents, the stitch's one result with it.
    await page.waitForSelector(".grid-wrap[data-complete]", WAIT);
    await page.focus("#chunk-grid");
    await page.keyboard.press("Enter");
    await page.waitForSelector("#task-parents li", WAIT);
    const taskParents = await page.$$eval("#task-parents li", (lis) => lis.map((li) => li.textContent ?? ""));
    expect(taskParents[0]).toMatch(/^stitch completed s3:\/\/out\/[0-9a-f-]{36}$/);
    expect(await axeSerious(page)).toEqual([]);
    await page.click("#job-workflow a");
    await page.waitForSelector(`#workflow-graph`, WAIT);
  });

  it("cancels a workflow and retries it after confirmations; the list shows it", async () => {
    const wf = await createPipeline("mesh-cancel");
    const page = await signedIn(TOKENS.admin, `#/workflows/${wf.id}`);
    await page.waitForSelector("#cancel-workflow:not([hidden])", WAIT);
    await page.click("#cancel-workflow");
    await confirmDialog(page);
    await page.waitForFunction(() => document.getElementById("workflow-status")?.dataset.status === "cancelled", WAIT);
    await nodeStatus(page, "report", "cancelled");
    expect((await api.getWorkflow({ workflowId: wf.id })).workflow?.status).toBe(JobStatus.CANCELLED);
    expect(await page.$eval('#workflow-nodes [data-node="report"]', (tr) => tr.textContent)).toContain("cancelled from the console");

    await page.waitForSelector("#retry-workflow:not([hidden])", WAIT);
    await page.click("#retry-workflow");
    await confirmDialog(page);
    await page.waitForFunction(() => /again: 4 nodes, 7 tasks retried/.test(document.getElementById("outcome")?.textContent ?? ""), WAIT);
    await nodeStatus(page, "chunks", "pending");
    await nodeStatus(page, "report", "waiting");
    await page.waitForFunction(() => document.getElementById("live-state")?.textContent === "live", WAIT);
    // Live again after the retry: a completed chunk stage moves the graph.
    await complete("chunks");
    await nodeStatus(page, "chunks", "completed");

    await page.goto(`${base}/ui/#/workflows`, { waitUntil: "domcontentloaded" });
    await page.waitForSelector(`#workflows tr[data-workflow="${wf.id}"]`, WAIT);
    expect(await page.$eval(`#workflows tr[data-workflow="${wf.id}"]`, (tr) => tr.textContent)).toContain("mesh-cancel");
    expect(await page.$eval(`[data-nodes="${wf.id}"]`, (td) => td.textContent)).toMatch(/1 completed/);
    expect(await page.$('[data-nav="workflows"][aria-current="page"]')).not.toBeNull();
    expect(await axeSerious(page)).toEqual([]);
    await api.cancelWorkflow({ workflowId: wf.id });
  });

  it("a billing token reads a workflow it may not watch: the graph without live updates", async () => {
    const wf = await createPipeline("mesh-billing");
    const page = await signedIn(TOKENS.billing, `#/workflows/${wf.id}`);
    await page.waitForFunction(() => document.getElementById("live-state")?.textContent?.startsWith("not live") === true, WAIT);
    await nodeStatus(page, "stitch", "waiting");
    expect(await page.$("#cancel-workflow:not([hidden])")).toBeNull();
    await api.cancelWorkflow({ workflowId: wf.id });
  });
});
