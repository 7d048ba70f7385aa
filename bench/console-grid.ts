// How long the console takes to show a 10,000-chunk job's grid, in headless Chromium against a
// real coordinator: from navigation start to the performance marks the page sets (ui/src/components/chunk-grid.ts,
// ui/src/components/chunk-loader.ts). "known" is when every cell has its real status: at once from the snapshot for a
// job whose tasks share one status, after the ListTasks pages of its minority statuses for a mixed one. Also writes the
// README's screenshots (docs/console-overview.png, docs/console-job.png).
//
//   npm run bench:console
import { createHash, randomUUID } from "node:crypto";
import path from "node:path";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import type { Page } from "puppeteer-core";
import { QueueService } from "../gen/leasehold/queue/v1/queue_pb.js";
import { ensureUiBuilt, launchBrowser } from "../test/support/browser.js";
import { ROOT } from "../test/support/process.js";
import { fmt, startCoordinator, startDatabase } from "./harness.js";

const CHUNKS = 10_000;
const RUNS = 5;
const sha = (s: string) => createHash("sha256").update(s).digest("hex");

interface Marks {
  known: number;
  firstDraw: number;
  complete: number;
}

async function measure(page: Page, url: string): Promise<Marks> {
  await page.goto("about:blank");
  await page.goto(url, { waitUntil: "domcontentloaded" });
  await page.waitForSelector(".grid-wrap[data-known]", { timeout: 120_000 });
  // A string, not a function: tsx would wrap a function's inner helpers in a __name() the page lacks.
  return page.evaluate(`(() => {
    const at = (name) => performance.getEntriesByName(name)[0]?.startTime ?? NaN;
    return { known: at("grid-known"), firstDraw: at("grid-drawn"), complete: performance.now() };
  })()`) as Promise<Marks>;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function main(): Promise<void> {
  ensureUiBuilt();
  const db = await startDatabase();
  const coordinator = await startCoordinator(db.url);
  const browser = await launchBrowser();
  try {
    const api = createClient(QueueService, createConnectTransport({ baseUrl: coordinator.url, httpVersion: "1.1" }));
    await api.putWorkload({ name: "render", maxAttempts: 3, leaseSeconds: 3600 });
    const tasks = (seed: string) =>
      Array.from({ length: CHUNKS }, (_, i) => ({
        chunkIndex: i,
        inputUri: `s3://frames/${seed}/${i}.exr`,
        inputSha256: sha(`${seed}${i}`),
      }));

    const uniform = (await api.createJob({ workload: "render", tasks: tasks(randomUUID()) })).job!.id;
    const mixed = (await api.createJob({ workload: "render", tasks: tasks(randomUUID()), priority: 1 })).job!.id;
    // Mixed: 3,000 claimed, 2,000 of them completed, 40 failed back to pending for a retry.
    const leased = [];
    for (let i = 0; i < 30; i++)
      leased.push(...(await api.claimTasks({ workerId: `render-${i % 4}`, workloads: ["render"], maxTasks: 100 })).tasks);
    for (let i = 0; i < 2000; i += 100) {
      await api.completeTasks({
        results: leased.slice(i, i + 100).map((t) => ({
          taskId: t.id,
          workerId: t.leaseOwner,
          attempt: t.attempt,
          resultUri: `s3://out/${t.id}.png`,
          resultSha256: sha(t.id),
        })),
      });
    }
    for (const t of leased.slice(2000, 2040)) {
      await api.failTask({
        taskId: t.id,
        workerId: t.leaseOwner,
        attempt: t.attempt,
        errorCode: "gpu_oom",
        errorMessage: "out of memory",
        retryAfterSeconds: 3600,
      });
    }

    const page = await (await browser.createBrowserContext()).newPage();
    await page.setViewport({ width: 1280, height: 900 });
    const results: Record<string, Marks[]> = { uniform: [], mixed: [] };
    for (let r = 0; r < RUNS; r++) {
      results.uniform.push(await measure(page, `${coordinator.url}/ui/#/jobs/${uniform}`));
      results.mixed.push(await measure(page, `${coordinator.url}/ui/#/jobs/${mixed}`));
    }
    console.log(`console grid, ${CHUNKS.toLocaleString("en-US")} chunks, median of ${RUNS} loads (ms from navigation start):`);
    for (const [name, ms] of Object.entries(results)) {
      console.log(
        `  ${name.padEnd(8)} first draw ${fmt(median(ms.map((m) => m.firstDraw)))}  every status known ${fmt(median(ms.map((m) => m.known)))}  (all runs: ${ms.map((m) => fmt(m.known)).join(", ")})`,
      );
    }

    // README screenshots: the mixed job's page, and the overview after a little live traffic.
    await page.goto(`${coordinator.url}/ui/#/jobs/${mixed}`, { waitUntil: "domcontentloaded" });
    await page.waitForSelector(".grid-wrap[data-complete]", { timeout: 120_000 });
    await page.screenshot({ path: path.join(ROOT, "docs", "console-job.png") });
    await page.goto(`${coordinator.url}/ui/#/`, { waitUntil: "domcontentloaded" });
    const work = (async () => {
      for (let i = 0; i < 40; i++) {
        const claimed = (await api.claimTasks({ workerId: `render-${i % 4}`, workloads: ["render"], maxTasks: 10 + (i % 7) * 5 })).tasks;
        await api.completeTasks({
          results: claimed.slice(0, Math.max(1, claimed.length - 4)).map((t) => ({
            taskId: t.id,
            workerId: t.leaseOwner,
            attempt: t.attempt,
            resultUri: `s3://out/${t.id}.png`,
            resultSha256: sha(t.id),
          })),
        });
        await new Promise((res) => setTimeout(res, 1000));
      }
    })();
    await work;
    await page.waitForSelector("#workers, #workload-counts", { timeout: 60_000 });
    await page.screenshot({ path: path.join(ROOT, "docs", "console-overview.png") });
  } finally {
    await browser.close();
    await coordinator.stop();
    await db.stop();
  }
}

await main();
