// The web console (/ui/) in a real browser: headless Chromium (from the @sparticuz/chromium npm
// package) driven by puppeteer-core, against a real coordinator process on a real PostgreSQL with
// tokens configured. Every wait is on a condition in the page, never a fixed sleep.
import { randomUUID } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import type { Browser, BrowserContext, Page } from "puppeteer-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { JobStatus, QueueService, TaskStatus } from "../../gen/leasehold/queue/v1/queue_pb.js";
import { HttpError } from "../../src/api/errors.js";
import type { NodeRequest, NodeResponse } from "../../src/api/node-http.js";
import { createUiRoutes } from "../../src/api/ui-routes.js";
import { ARTIFACTS, axeSerious, ensureUiBuilt, launchBrowser, signInTab, WAIT } from "../support/browser.js";
import { createTestDatabase, type TestDatabase } from "../support/db.js";
import { killAll, spawnCoordinator, type Spawned } from "../support/process.js";
import { sha } from "../support/queue.js";

// The page functions below run in the browser. The few DOM names they use are declared for this
// file alone: DOM types in the whole program would hide browser-only calls in the Node code.
interface El {
  textContent: string | null;
  dataset: Record<string, string | undefined>;
  hidden: boolean;
  value: unknown;
  open: boolean;
  closest(selector: string): El | null;
}
declare const document: {
  getElementById(id: string): El | null;
  querySelector(selector: string): El | null;
  querySelectorAll(selector: string): { length: number };
  body: El;
};
declare const window: unknown;
declare const location: { hash: string };

const TOKENS = { admin: `lh_admin_${randomUUID()}`, submitter: `lh_submitter_${randomUUID()}` };

let db: TestDatabase;
let tmp: string;
let base: string;
let coordinator: Spawned;
let browser: Browser;
let api: Client<typeof QueueService>;
const contexts: BrowserContext[] = [];
/** A fresh tab in its own context (its own sessionStorage), signed in with `token`, ready for axe. */
const signedIn = (token: string, hash = "#/") => signInTab(browser, base, token, hash, { contexts, bypassCsp: true });

beforeAll(async () => {
  ensureUiBuilt();
  mkdirSync(ARTIFACTS, { recursive: true });
  tmp = mkdtempSync(path.join(os.tmpdir(), "leasehold-console-"));
  const tokens = path.join(tmp, "tokens");
  writeFileSync(tokens, `${sha(TOKENS.admin)} admin\n${sha(TOKENS.submitter)} submitter\n`);
  db = await createTestDatabase();
  coordinator = spawnCoordinator({ DATABASE_URL: db.url, PORT: "0", AUTH_TOKENS_FILE: tokens });
  const [url, b] = await Promise.all([coordinator.listening(60_000), launchBrowser()]);
  base = url;
  browser = b;
  const bearer: Interceptor = (next) => (req) => {
    req.header.set("authorization", `Bearer ${TOKENS.admin}`);
    return next(req);
  };
  api = createClient(QueueService, createConnectTransport({ baseUrl: base, httpVersion: "1.1", interceptors: [bearer] }));
  await api.putWorkload({ name: "render", maxAttempts: 3, leaseSeconds: 120 });
  await api.putWorkload({ name: "fragile", maxAttempts: 1, leaseSeconds: 120 });
});

afterAll(async () => {
  for (const c of contexts) await c.close().catch(() => {});
  await browser?.close();
  await killAll();
  await db?.drop();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

function chunks(n: number, seed: string) {
  return Array.from({ length: n }, (_, i) => ({ chunkIndex: i, inputUri: `s3://in/${seed}/${i}`, inputSha256: sha(`${seed}-${i}`) }));
}

async function createJob(workload: string, n: number) {
  const r = await api.createJob({ workload, tasks: chunks(n, randomUUID()) });
  return r.job!.id;
}

async function statusIs(page: Page, status: string): Promise<void> {
  await page.waitForFunction((s) => document.getElementById("job-status")?.dataset.status === s, WAIT, status);
}

async function confirmDialog(page: Page): Promise<void> {
  await page.waitForSelector("#confirm[open]", WAIT);
  await page.click("#confirm-yes");
  await page.waitForFunction(() => !document.getElementById("confirm")?.open, WAIT);
}

describe("serving", () => {
  it("answers 503 in the REST error shape, without crashing, when the console is not built", async () => {
    const serve = createUiRoutes({ dir: path.join(tmp, "no-ui-here") });
    const req = { method: "GET", headers: {} } as unknown as NodeRequest;
    const res = {} as NodeResponse;
    const info = { requestId: "r1" };
    const err = await serve(req, res, "/ui/", info).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(HttpError);
    expect((err as HttpError).httpStatus).toBe(503);
    expect(await serve(req, res, "/jobs", info)).toBe(false);
  });

  it("sends a browser opening the site root to the console, whose address the start line names", async () => {
    const root = await fetch(`${base}/`, { redirect: "manual" });
    expect(root.status).toBe(302);
    expect(root.headers.get("location")).toBe("/ui/");
    expect((await fetch(`${base}/`)).url).toBe(`${base}/ui/`);
    const line = coordinator.stderrLines().find((l) => l.includes("listening on")) ?? "";
    expect(line).toContain(`console at ${base}/ui/`);
  });

  it("serves index.html uncached and hashed assets immutable, with their content types", async () => {
    const redirect = await fetch(`${base}/ui`, { redirect: "manual" });
    expect(redirect.status).toBe(308);
    expect(redirect.headers.get("location")).toBe("/ui/");
    const index = await fetch(`${base}/ui/`);
    expect(index.status).toBe(200);
    expect(index.headers.get("content-type")).toBe("text/html; charset=utf-8");
    expect(index.headers.get("cache-control")).toBe("no-cache");
    const html = await index.text();
    const js = /src="(\/ui\/assets\/[^"]+\.js)"/.exec(html)?.[1];
    const css = /href="(\/ui\/assets\/[^"]+\.css)"/.exec(html)?.[1];
    expect(js).toMatch(/-[A-Za-z0-9_-]{8}\.js$/);
    const [jsRes, cssRes] = await Promise.all([fetch(`${base}${js}`), fetch(`${base}${css}`)]);
    expect(jsRes.headers.get("content-type")).toBe("text/javascript; charset=utf-8");
    expect(jsRes.headers.get("cache-control")).toBe("public, max-age=31536000, immutable");
    expect(cssRes.headers.get("content-type")).toBe("text/css; charset=utf-8");
    // No URL of another origin anywhere in what the page loads.
    expect(html + (await jsRes.text()) + (await cssRes.text())).not.toMatch(/(src|href)=["']?https?:\/\//);
    const missing = await fetch(`${base}/ui/assets/nope.js`);
    expect(missing.status).toBe(404);
    expect(((await missing.json()) as { error: { code: string } }).error.code).toBe("not_found");
    const escape = await fetch(`${base}/ui/..%2f..%2fpackage.json`);
    expect(escape.status).toBe(404);
  });
});

describe("console as admin", () => {
  let page: Page;
  beforeAll(async () => {
    page = await signedIn(TOKENS.admin);
  });

  it("shows the overview: counts per workload, the throughput chart, workers holding leases", async () => {
    const running = await createJob("render", 6);
    await api.claimTasks({ workerId: "worker-a", workloads: ["render"], maxTasks: 2 });
    // Every caption the chart shows, from the first render on.
    await page.evaluateOnNewDocument(() => {
      const seen: string[] = [];
      (window as unknown as { captions: string[] }).captions = seen;
      type Observer = new (callback: () => void) => { observe(target: unknown, options: object): void };
      const Observer = (globalThis as unknown as { MutationObserver: Observer }).MutationObserver;
      new Observer(() => {
        const text = document.getElementById("throughput-caption")?.textContent;
        if (text && seen[seen.length - 1] !== text) seen.push(text);
      }).observe(document, { childList: true, subtree: true });
    });
    await page.reload({ waitUntil: "domcontentloaded" });
    await page.waitForSelector("#workers", WAIT);
    // The first reading has no rate yet: the chart says it is measuring; the second, a second on, draws the first point.
    await page.waitForFunction(
      () =>
        document.querySelector('#workload-counts [data-workload="render"]') !== null &&
        document.getElementById("claims-rate")?.textContent !== "—",
      WAIT,
    );
    const captions = await page.evaluate(() => (window as unknown as { captions: string[] }).captions);
    expect(captions[0]).toMatch(/^Throughput: measuring/);
    expect(captions.at(-1)).toMatch(/^Throughput, last [1-9]\d* s \(peak /);
    expect(captions.filter((c) => /last 0 s/.test(c))).toEqual([]);
    expect(await page.$eval("#workers", (t) => t.textContent)).toContain("worker-a");
    expect(await page.$eval("#workloads-h", (e) => e.textContent)).toBe("Tasks by workload");
    expect(await page.$('[data-nav="workloads"]')).not.toBeNull();
    expect(await axeSerious(page)).toEqual([]);
    await page.screenshot({ path: path.join(ARTIFACTS, "overview.png"), fullPage: true });
    await api.cancelJob({ jobId: running });
  });

  it("follows a job live: the progress bar reaches 100% as a worker completes its tasks", async () => {
    const jobId = await createJob("render", 40);
    await page.goto(`${base}/ui/#/jobs/${jobId}`, { waitUntil: "domcontentloaded" });
    await page.waitForFunction(
      () => document.getElementById("live-state")?.textContent === "live" && document.getElementById("job-progress") !== null,
      WAIT,
    );
    expect(await page.$eval("#progress-text", (e) => e.textContent)).toContain("0%");
    // A worker drains the job in batches while the page watches; the page does not reload.
    for (;;) {
      const claimed = await api.claimTasks({ workerId: "worker-live", workloads: ["render"], maxTasks: 10 });
      if (claimed.tasks.length === 0) break;
      await api.completeTasks({
        results: claimed.tasks.map((t) => ({
          taskId: t.id,
          workerId: "worker-live",
          attempt: t.attempt,
          resultUri: `s3://out/${t.id}`,
          resultSha256: sha(t.id),
        })),
      });
    }
    await page.waitForFunction(() => document.getElementById("progress-text")?.textContent?.startsWith("100%") === true, WAIT);
    await statusIs(page, "completed");
    expect(await page.$eval("#job-progress", (e) => (e as unknown as El).value)).toBe(40);
    // The manifest, in chunk order, follows the final event.
    await page.waitForFunction(() => document.querySelectorAll("#results tbody tr").length === 40, WAIT);
    const first = await page.$$eval("#results tbody tr td:first-child", (tds) => tds.slice(0, 3).map((td) => td.textContent));
    expect(first).toEqual(["0", "1", "2"]);
    // The grid from the keyboard: focus it, move one chunk right, open it with Enter.
    await page.waitForSelector(".grid-wrap[data-complete]", WAIT);
    await page.focus("#chunk-grid");
    await page.keyboard.press("ArrowRight");
    await page.waitForFunction(() => document.getElementById("grid-readout")?.textContent?.startsWith("Chunk 1: completed") === true, WAIT);
    await page.keyboard.press("Enter");
    await page.waitForFunction(
      () => document.getElementById("task-detail")?.textContent?.includes("#1 worker-live completed") === true,
      WAIT,
    );
    expect(await axeSerious(page)).toEqual([]);
    await page.screenshot({ path: path.join(ARTIFACTS, "job-live-complete.png"), fullPage: true });
  });

  it("cancels a job after confirmation", async () => {
    const jobId = await createJob("render", 5);
    await page.goto(`${base}/ui/#/jobs/${jobId}`, { waitUntil: "domcontentloaded" });
    await page.waitForSelector("#cancel-job:not([hidden])", WAIT);
    await page.click("#cancel-job");
    await confirmDialog(page);
    await statusIs(page, "cancelled");
    await page.waitForFunction(() => document.getElementById("outcome")?.textContent?.includes("cancelled") === true, WAIT);
    expect((await api.getJob({ jobId })).job?.status).toBe(JobStatus.CANCELLED);
    await page.waitForSelector("#retry-job:not([hidden])", WAIT);
  });

  it("retries a failed job and shows the failure and the task's attempts", async () => {
    const jobId = await createJob("fragile", 3);
    const claimed = await api.claimTasks({ workerId: "worker-f", workloads: ["fragile"], maxTasks: 1 });
    const t = claimed.tasks[0];
    await api.failTask({
      taskId: t.id,
      workerId: "worker-f",
      attempt: t.attempt,
      errorCode: "decode_error",
      errorMessage: "bad frame 7",
      retryable: false,
    });
    await page.goto(`${base}/ui/#/jobs/${jobId}`, { waitUntil: "domcontentloaded" });
    await statusIs(page, "failed");
    await page.waitForFunction(() => document.getElementById("job-failure")?.textContent?.includes("decode_error") === true, WAIT);
    await page.waitForFunction(() => document.getElementById("tasks")?.textContent?.includes("bad frame 7") === true, WAIT);
    await page.waitForSelector("#retry-job:not([hidden])", WAIT);
    await page.click("#retry-job");
    await confirmDialog(page);
    await page.waitForFunction(() => /again: \d+ tasks retried/.test(document.getElementById("outcome")?.textContent ?? ""), WAIT);
    await page.waitForFunction(() => ["pending", "running"].includes(document.getElementById("job-status")?.dataset.status ?? ""), WAIT);
    const job = (await api.getJob({ jobId })).job;
    expect([JobStatus.PENDING, JobStatus.RUNNING]).toContain(job?.status);
    expect((await api.listTasks({ jobId, status: TaskStatus.PENDING })).tasks.length).toBe(3);
  });

  it("shows a cancelled chunk's earlier error as that attempt's, and the cancellation as why it stopped", async () => {
    const jobId = await createJob("render", 1);
    const [t] = (await api.claimTasks({ workerId: "worker-c", workloads: ["render"], maxTasks: 1 })).tasks;
    await api.failTask({
      taskId: t.id,
      workerId: "worker-c",
      attempt: t.attempt,
      errorCode: "nan",
      errorMessage: "NaN at step 7",
      retryable: true,
      retryAfterSeconds: 600,
    });
    await api.cancelJob({ jobId, reason: "enough" });
    await page.goto(`${base}/ui/#/jobs/${jobId}`, { waitUntil: "domcontentloaded" });
    await statusIs(page, "cancelled");
    await page.waitForSelector('#tasks [data-cause="cancelled"]', WAIT);
    const cell = await page.$eval("#tasks tbody tr td:last-child", (td) => td.textContent);
    expect(cell).toContain("#1 worker-c failed nan: NaN at step 7 (retried) (an earlier attempt's error)");
    expect(cell).toContain("Cancelled with the job");
  });

  it("registers and edits a workload, and shows the request id of a refused one", async () => {
    await page.goto(`${base}/ui/#/workloads`, { waitUntil: "domcontentloaded" });
    await page.waitForSelector("#workloads", WAIT);
    await page.type("#wl-name", "thumbnails");
    await page.type("#wl-max-attempts", "4");
    await page.click("#wl-submit");
    await confirmDialog(page);
    await page.waitForFunction(() => document.getElementById("workloads")?.textContent?.includes("thumbnails") === true, WAIT);
    expect((await api.listWorkloads({})).workloads.find((w) => w.name === "thumbnails")?.maxAttempts).toBe(4);
    // A schema the server refuses: the error names the request id to quote.
    await page.$eval("#wl-schema", (e) => ((e as unknown as El).value = '{"type": 12}'));
    await page.click("#wl-submit");
    await confirmDialog(page);
    await page.waitForSelector("#outcome-request-id", WAIT);
    expect(await page.$eval("#outcome", (e) => e.textContent)).toMatch(/Saving the workload failed: InvalidArgument/);
    expect(await axeSerious(page)).toEqual([]);
  });

  it("shows caps and pause state, pauses and resumes a workload, a pending task's waiting reason, per-key counts", async () => {
    await api.putWorkload({ name: "keyed", maxLeased: 8, maxLeasedPerKey: 1, maxLeasesPerSecond: 50, leasesBurst: 10 });
    const created = await api.createJob({ workload: "keyed", concurrencyKey: "acme", tasks: chunks(2, randomUUID()) });
    const jobId = created.job!.id;
    const claimed = await api.claimTasks({ workerId: "worker-k", workloads: ["keyed"], maxTasks: 2 });
    expect(claimed.tasks.map((t) => t.chunkIndex)).toEqual([0]);

    // Workloads: the caps, the rate and the state; Pause asks first, then the row says paused. (The
    // tab may be on #/workloads already, where going to the same address loads nothing anew.)
    await page.goto(`${base}/ui/#/workloads`, { waitUntil: "domcontentloaded" });
    await page.reload({ waitUntil: "domcontentloaded" });
    await page.waitForSelector('#workloads tr[data-workload="keyed"]', WAIT);
    const cells = await page.$$eval('#workloads tr[data-workload="keyed"] td[data-col]', (tds) =>
      tds.map((td) => [(td as unknown as El).dataset.col, td.textContent]),
    );
    expect(cells).toEqual([
      ["max-leased", "8"],
      ["per-key", "1"],
      ["rate", "50/s (burst 10)"],
      ["state", "active"],
    ]);
    await page.click('button[aria-label="Pause workload keyed"]');
    await confirmDialog(page);
    await page.waitForSelector('#workloads tr[data-workload="keyed"][data-paused="true"]', WAIT);
    expect(await page.$eval('#workloads tr[data-workload="keyed"] td[data-col="state"]', (td) => td.textContent)).toBe("paused");
    expect(await page.$eval("#outcome", (e) => e.textContent)).toContain("Workload keyed paused.");
    expect((await api.listWorkloads({})).workloads.find((w) => w.name === "keyed")?.paused).toBe(true);
    expect(await axeSerious(page)).toEqual([]);
    await page.screenshot({ path: path.join(ARTIFACTS, "workloads-paused.png"), fullPage: true });

    // The pending chunk says why it waits: the workload is paused.
    await page.goto(`${base}/ui/#/jobs/${jobId}`, { waitUntil: "domcontentloaded" });
    await page.waitForSelector(".grid-wrap[data-complete]", WAIT);
    await page.focus("#chunk-grid");
    await page.keyboard.press("ArrowRight");
    await page.waitForFunction(() => document.getElementById("grid-readout")?.textContent?.startsWith("Chunk 1: pending") === true, WAIT);
    await page.keyboard.press("Enter");
    await page.waitForSelector('#task-waiting[data-reason="workload_paused"]', WAIT);
    expect(await page.$eval("#task-waiting", (e) => e.textContent)).toBe(
      "Workload paused: the workload is paused (ResumeWorkload resumes it)",
    );

    // Resume: the row is active again, and the same chunk now waits for its key's cap.
    await page.goto(`${base}/ui/#/workloads`, { waitUntil: "domcontentloaded" });
    await page.waitForSelector('button[aria-label="Resume workload keyed"]', WAIT);
    await page.click('button[aria-label="Resume workload keyed"]');
    await confirmDialog(page);
    await page.waitForSelector('#workloads tr[data-workload="keyed"][data-paused="false"]', WAIT);
    expect((await api.listWorkloads({})).workloads.find((w) => w.name === "keyed")?.paused).toBe(false);
    await page.goto(`${base}/ui/#/jobs/${jobId}`, { waitUntil: "domcontentloaded" });
    await page.waitForSelector(".grid-wrap[data-complete]", WAIT);
    await page.focus("#chunk-grid");
    await page.keyboard.press("ArrowRight");
    await page.keyboard.press("Enter");
    await page.waitForSelector('#task-waiting[data-reason="key_cap"]', WAIT);
    expect(await page.$eval("#task-waiting", (e) => e.textContent)).toBe(
      'Key cap: key cap reached: 1 of 1 leased for concurrency key "acme"',
    );
    expect(await axeSerious(page)).toEqual([]);

    // The overview: the keyed workload's keys, leased against the cap, and pending.
    await page.goto(`${base}/ui/#/`, { waitUntil: "domcontentloaded" });
    await page.waitForSelector('#keys-keyed tr[data-key="acme"]', WAIT);
    const row = await page.$$eval('#keys-keyed tr[data-key="acme"] > *', (cells) => cells.map((c) => c.textContent));
    expect(row).toEqual(["acme", "1", "1", "1"]);
    expect(await axeSerious(page)).toEqual([]);
    await page.screenshot({ path: path.join(ARTIFACTS, "overview-keys.png"), fullPage: true });
    await api.cancelJob({ jobId });
  }, 240_000);

  it("lists jobs filtered by status, and finds one by id", async () => {
    const jobId = await createJob("render", 1);
    await page.goto(`${base}/ui/#/jobs?status=pending`, { waitUntil: "domcontentloaded" });
    await page.waitForSelector(`#jobs tr[data-job="${jobId}"]`, WAIT);
    const statuses = await page.$$eval("#jobs tbody tr td:nth-child(3)", (tds) => [...new Set(tds.map((td) => td.textContent))]);
    expect(statuses).toEqual(["pending"]);
    await page.goto(`${base}/ui/#/jobs?status=pending&age=1h`, { waitUntil: "domcontentloaded" });
    await page.waitForSelector(`#jobs tr[data-job="${jobId}"]`, WAIT);
    await page.goto(`${base}/ui/#/jobs?q=${jobId}`, { waitUntil: "domcontentloaded" });
    await page.waitForFunction(
      (id) => document.querySelectorAll("#jobs tbody tr").length === 1 && document.querySelector(`#jobs tr[data-job="${id}"]`) !== null,
      WAIT,
      jobId,
    );
    // The progress column: GetJob's completed / total, filled in after the list (its one task pending).
    await page.waitForFunction((id) => document.querySelector(`#jobs td[data-progress="${id}"]`)?.textContent === "0%", WAIT, jobId);
    expect(await page.$$eval("#jobs thead th", (ths) => ths.map((th) => th.textContent))).toContain("Progress");
    // Keyboard: the filter form is reachable and submits with Enter.
    await page.select("#f-status", "completed");
    await page.$eval("#f-q", (e) => ((e as unknown as El).value = ""));
    await page.focus("#f-q");
    await page.keyboard.press("Enter");
    await page.waitForFunction(() => location.hash.includes("status=completed"), WAIT);
    expect(await axeSerious(page)).toEqual([]);
  });

  it("pages a long list: Next shows the older jobs, Previous the page before, each disabled at its end", async () => {
    await api.putWorkload({ name: "paged", maxAttempts: 1, leaseSeconds: 60 });
    const ids: string[] = [];
    for (let i = 0; i < 51; i++) ids.push(await createJob("paged", 1));
    const rows = () => page.$$eval("#jobs tbody tr", (trs) => trs.map((tr) => (tr as unknown as El).dataset.job));
    const buttons = () =>
      page.$$eval("nav.pager button", (bs) => bs.map((b) => [b.textContent, (b as unknown as { disabled: boolean }).disabled]));
    await page.goto(`${base}/ui/#/jobs?workload=paged`, { waitUntil: "domcontentloaded" });
    await page.waitForFunction(() => document.querySelectorAll("#jobs tbody tr").length === 50, WAIT);
    // Newest first: the first page is the last 50 created, the second the first one.
    expect(await rows()).toEqual(ids.slice(1).reverse());
    expect(await buttons()).toEqual([
      ["Previous page", true],
      ["Next page", false],
    ]);
    await page.click("nav.pager button:last-child");
    await page.waitForFunction(() => document.querySelectorAll("#jobs tbody tr").length === 1, WAIT);
    expect(await rows()).toEqual([ids[0]]);
    expect(await buttons()).toEqual([
      ["Previous page", false],
      ["Next page", true],
    ]);
    await page.click("nav.pager button:first-child");
    await page.waitForFunction(() => document.querySelectorAll("#jobs tbody tr").length === 50, WAIT);
    expect(await rows()).toEqual(ids.slice(1).reverse());
  });
});

describe("console as submitter", () => {
  it("shows no admin actions, yet lets the submitter cancel and retry", async () => {
    const page = await signedIn(TOKENS.submitter);
    await page.waitForFunction(() => document.getElementById("who")?.textContent === "Signed in: submitter", WAIT);
    expect(await page.$eval('[data-nav="workloads"]', (a) => (a as unknown as El).closest("li")?.hidden)).toBe(true);
    await page.goto(`${base}/ui/#/workloads`, { waitUntil: "domcontentloaded" });
    await page.waitForFunction(() => document.querySelector("main")?.textContent?.includes("needs an admin token") === true, WAIT);
    expect(await page.$("#workload-form")).toBeNull();
    const jobId = await createJob("render", 2);
    await page.goto(`${base}/ui/#/jobs/${jobId}`, { waitUntil: "domcontentloaded" });
    await page.waitForSelector("#cancel-job:not([hidden])", WAIT);
    expect(await axeSerious(page)).toEqual([]);
    await page.click("#cancel-job");
    await confirmDialog(page);
    await statusIs(page, "cancelled");
    await page.waitForSelector("#retry-job:not([hidden])", WAIT);
    await page.screenshot({ path: path.join(ARTIFACTS, "submitter-job.png"), fullPage: true });
  });

  it("refuses a wrong token and asks again", async () => {
    const context = await browser.createBrowserContext();
    contexts.push(context);
    const page = await context.newPage();
    await page.goto(`${base}/ui/`, { waitUntil: "domcontentloaded" });
    await page.waitForSelector("#token", WAIT);
    await page.type("#token", "lh_not_a_token");
    await page.click("#sign-in button[type=submit]");
    await page.waitForFunction(() => document.querySelector("#sign-in [role=alert]")?.textContent === "That token was not accepted.", WAIT);
  });
});
