// Headless Chromium for the console's tests and benchmark: the binary ships inside the
// @sparticuz/chromium npm package (unpacked to the temp dir on first use), so `npm ci` is the only
// install step and nothing is downloaded at run time. puppeteer-core drives it.
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, rmdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";
import chromium from "@sparticuz/chromium";
import puppeteer, { type Browser, type BrowserContext, type Page } from "puppeteer-core";
import { ROOT } from "./process.js";

// As root Chromium needs --no-sandbox; the rest keep it off the (closed) network and quiet.
const FLAGS = [
  "--no-sandbox",
  "--disable-background-networking",
  "--disable-component-update",
  "--no-first-run",
  "--disable-gpu",
  "--disable-dev-shm-usage",
];

// The package's defaults are tuned for one page per process on AWS Lambda: --single-process makes
// a second browser context crash the browser, and the web-security switches would hide what the
// console's CSP and same-origin rules do in a real browser.
const DROPPED = new Set(["--single-process", "--disable-web-security", "--allow-running-insecure-content"]);

/**
 * The unpacked binary. @sparticuz/chromium unpacks to the temp dir on first use and from then on
 * trusts any file named chromium there: two test files starting at once (or two runs) could find
 * the other's half-written binary, which then crashes at launch. So the unpack runs once at a time
 * across processes, under a lock directory, and leaves a mark once complete; a binary without the
 * mark is unpacked anew. A lock older than two minutes is a dead process's.
 */
async function executablePath(): Promise<string> {
  const tmp = os.tmpdir();
  const mark = path.join(tmp, "chromium.complete");
  const lock = path.join(tmp, "chromium.unpacking");
  for (;;) {
    if (existsSync(mark)) return chromium.executablePath();
    try {
      mkdirSync(lock);
      break;
    } catch {
      if (existsSync(lock) && Date.now() - statSync(lock).mtimeMs > 120_000) rmSync(lock, { recursive: true, force: true });
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  try {
    if (!existsSync(mark)) {
      rmSync(path.join(tmp, "chromium"), { force: true });
      await chromium.executablePath();
      writeFileSync(mark, "");
    }
  } finally {
    rmdirSync(lock);
  }
  return chromium.executablePath();
}

export async function launchBrowser(): Promise<Browser> {
  return puppeteer.launch({
    executablePath: await executablePath(),
    args: [...new Set([...chromium.args.filter((a) => !DROPPED.has(a) && !a.startsWith("--headless")), ...FLAGS])],
    headless: "shell",
    defaultViewport: { width: 1280, height: 900 },
    protocolTimeout: 120_000,
  });
}

/** The built console (dist/ui), built now when `npm ci`'s prepare has not. */
export function ensureUiBuilt(): void {
  if (existsSync(path.join(ROOT, "dist", "ui", "index.html"))) return;
  execFileSync(process.execPath, [path.join(ROOT, "node_modules", "vite", "bin", "vite.js"), "build", "--config", "ui/vite.config.ts"], {
    cwd: ROOT,
    stdio: "inherit",
  });
}

export const ARTIFACTS = path.join(ROOT, "test-artifacts");

// The page functions below run in the browser. The DOM names they use are declared for this file
// alone: DOM types in the whole program would hide browser-only calls in the Node code.
declare const window: unknown;
declare const document: { body: { dataset: Record<string, string | undefined> }; getElementById(id: string): unknown };

/** How long a console test waits for a selector or condition. */
export const WAIT = { timeout: 60_000 };

/**
 * A fresh tab in its own browser context (its own sessionStorage), signed in to the console at
 * `base` with `token`, on `hash`. The context goes into `contexts` for the suite to close.
 * `bypassCsp`: for a page axe-core will inspect; axe is injected as an inline script, which the
 * console's CSP (rightly) forbids.
 */
export async function signInTab(
  browser: Browser,
  base: string,
  token: string,
  hash: string,
  options: { contexts?: BrowserContext[]; bypassCsp?: boolean } = {},
): Promise<Page> {
  const context = await browser.createBrowserContext();
  options.contexts?.push(context);
  const page = await context.newPage();
  page.setDefaultTimeout(60_000);
  if (options.bypassCsp) await page.setBypassCSP(true);
  await page.goto(`${base}/ui/${hash}`, { waitUntil: "domcontentloaded" });
  await page.waitForSelector("#token", WAIT);
  await page.type("#token", token);
  await page.click("#sign-in button[type=submit]");
  await page.waitForFunction(() => document.body.dataset.role !== undefined && document.getElementById("token") === null, WAIT);
  return page;
}

const AXE_SOURCE = readFileSync(createRequire(import.meta.url).resolve("axe-core/axe.min.js"), "utf8");

/** The serious and critical accessibility violations axe-core finds on the page, each with up to three of its targets. */
export async function axeSerious(page: Page): Promise<string[]> {
  await page.addScriptTag({ content: AXE_SOURCE });
  const violations = await page.evaluate(async () => {
    const axe = (
      window as unknown as {
        axe: {
          run(
            ctx: unknown,
            o: object,
          ): Promise<{ violations: { id: string; impact: string; help: string; nodes: { target: unknown }[] }[] }>;
        };
      }
    ).axe;
    const r = await axe.run(document, { resultTypes: ["violations"] });
    return r.violations.map((v) => ({
      id: v.id,
      impact: v.impact,
      help: v.help,
      targets: v.nodes.map((n) => JSON.stringify(n.target)).slice(0, 3),
    }));
  });
  return violations
    .filter((v) => v.impact === "serious" || v.impact === "critical")
    .map((v) => `${v.id} (${v.impact}): ${v.help} ${v.targets.join(" ")}`);
}
