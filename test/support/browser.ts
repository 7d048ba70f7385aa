// Headless Chromium for the console's tests and benchmark: the binary ships inside the
// @sparticuz/chromium npm package (unpacked to the temp dir on first use), so `npm ci` is the only
// install step and nothing is downloaded at run time. puppeteer-core drives it.
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import path from "node:path";
import chromium from "@sparticuz/chromium";
import puppeteer, { type Browser } from "puppeteer-core";
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

export async function launchBrowser(): Promise<Browser> {
  return puppeteer.launch({
    executablePath: await chromium.executablePath(),
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
