// The console's schedules page in a real browser (headless Chromium from @sparticuz/chromium)
// against a real coordinator process: the schedule's row with its next fire times, pause and
// resume after a confirmation, as an admin; a submitter is told it needs an admin token.
import { randomUUID } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import type { Browser, Page } from "puppeteer-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { QueueService } from "../../gen/leasehold/queue/v1/queue_pb.js";
import { ensureUiBuilt, launchBrowser, signInTab, WAIT } from "../support/browser.js";
import { createTestDatabase, type TestDatabase } from "../support/db.js";
import { killAll, spawnCoordinator } from "../support/process.js";
import { sha } from "../support/queue.js";

interface El {
  textContent: string | null;
  open: boolean;
  querySelectorAll(selector: string): { length: number };
}
declare const document: {
  getElementById(id: string): El | null;
  querySelector(selector: string): El | null;
  body: { dataset: Record<string, string | undefined> };
};

const TOKENS = { admin: `lh_admin_${randomUUID()}`, submitter: `lh_submitter_${randomUUID()}` };

let db: TestDatabase;
let tmp: string;
let base: string;
let browser: Browser;
const signedIn = (token: string, hash: string) => signInTab(browser, base, token, hash);
let api: Client<typeof QueueService>;

beforeAll(async () => {
  ensureUiBuilt();
  tmp = mkdtempSync(path.join(os.tmpdir(), "leasehold-console-schedules-"));
  const tokens = path.join(tmp, "tokens");
  writeFileSync(tokens, `${sha(TOKENS.admin)} admin\n${sha(TOKENS.submitter)} submitter\n`);
  db = await createTestDatabase();
  const coordinator = spawnCoordinator({ DATABASE_URL: db.url, PORT: "0", AUTH_TOKENS_FILE: tokens });
  [base, browser] = await Promise.all([coordinator.listening(60_000), launchBrowser()]);
  const bearer: Interceptor = (next) => (req) => {
    req.header.set("authorization", `Bearer ${TOKENS.admin}`);
    return next(req);
  };
  api = createClient(QueueService, createConnectTransport({ baseUrl: base, httpVersion: "1.1", interceptors: [bearer] }));
  await api.putWorkload({ name: "report" });
  await api.putSchedule({
    name: "nightly",
    cron: "30 2 * * *",
    timezone: "Europe/Berlin",
    job: { workload: "report", inputUri: "s3://in/daily", inputSha256: sha("daily") },
  });
});

afterAll(async () => {
  await browser?.close();
  await killAll();
  await db?.drop();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

async function confirmDialog(page: Page): Promise<void> {
  await page.waitForSelector("#confirm[open]", WAIT);
  await page.click("#confirm-yes");
  await page.waitForFunction(() => !document.getElementById("confirm")?.open, WAIT);
}

describe("console: schedules", () => {
  it("lists a schedule with its next fire times; pause and resume after a confirmation", async () => {
    const page = await signedIn(TOKENS.admin, "#/schedules");
    await page.waitForSelector('tr[data-schedule="nightly"]', WAIT);
    const row = await page.$eval('tr[data-schedule="nightly"]', (tr) => (tr as unknown as El).textContent ?? "");
    expect(row).toContain("30 2 * * *");
    expect(row).toContain("Europe/Berlin");
    expect(row).toContain("report");
    expect(row).toContain("active");
    const times = await page.$$eval('tr[data-schedule="nightly"] .next-fire-times li', (lis) =>
      lis.map((li) => (li as unknown as El).textContent ?? ""),
    );
    const expected = (await api.getSchedule({ name: "nightly" })).schedule!.nextFireTimes.map((t) =>
      new Date(Number(t.seconds) * 1000)
        .toISOString()
        .replace("T", " ")
        .replace(/\.\d+Z$/, "Z"),
    );
    expect(times).toEqual(expected);
    expect(times).toHaveLength(5);

    await page.click('button[aria-label="Pause schedule nightly"]');
    await confirmDialog(page);
    await page.waitForSelector('button[aria-label="Resume schedule nightly"]', WAIT);
    expect((await api.getSchedule({ name: "nightly" })).schedule?.paused).toBe(true);
    expect(await page.$$('tr[data-schedule="nightly"] .next-fire-times li')).toHaveLength(0);

    await page.click('button[aria-label="Resume schedule nightly"]');
    await confirmDialog(page);
    await page.waitForSelector('button[aria-label="Pause schedule nightly"]', WAIT);
    expect((await api.getSchedule({ name: "nightly" })).schedule?.paused).toBe(false);
    expect(await page.$('[data-nav="schedules"]')).not.toBeNull();
  });

  it("a submitter is told schedules need an admin token", async () => {
    const page = await signedIn(TOKENS.submitter, "#/schedules");
    await page.waitForFunction(() => (document.querySelector("main")?.textContent ?? "").includes("admin token"), WAIT);
  });
});
