// The overview (#/): task counts per workload, the throughput chart, the workers holding leases
// and (admins) per-key counts of keyed workloads, refreshed every few seconds from /metrics, the
// newest running jobs and ListWorkloadKeys. /metrics is every account's, read with admin and
// metrics tokens only: another token's overview shows its own jobs instead (own-jobs.ts) and the
// workers holding its jobs' leases, both through RPCs the coordinator scopes to a bound account.
import { fetchMetrics } from "../api.js";
import { loadError } from "../components/outcome.js";
import { keyCountsSource } from "../components/key-counts.js";
import { chart, hasRate, recordSample, SAMPLE_MS } from "../components/throughput.js";
import { workersSection } from "../components/workers.js";
import { workloadCounts } from "../components/workload-counts.js";
import { clear, h } from "../dom.js";
import { main } from "../layout.js";
import { ownJobsSection } from "../components/own-jobs.js";
import { isAdmin } from "../session.js";

/** How soon the second reading follows the first, so a fresh page shows a rate within a second. */
const FIRST_RATE_MS = 1000;

export function renderOverview(): () => void {
  const body = h("div", { class: "stack" }, h("p", {}, "Loading…"));
  clear(main, h("h1", {}, "Overview"), body);
  let stopped = false;
  let timer: number | undefined;
  const keyCounts = keyCountsSource();
  const tick = async () => {
    let ms;
    try {
      const admin = isAdmin();
      const [metrics, workers, keys, own] = await Promise.all([
        admin ? fetchMetrics() : Promise.resolve(undefined),
        workersSection(),
        admin ? keyCounts() : Promise.resolve(null),
        admin ? Promise.resolve(null) : ownJobsSection(),
      ]);
      ms = metrics;
      if (stopped) return;
      if (ms) recordSample(ms);
      if (own) clear(body, own, workers);
      else
        clear(
          body,
          ms ? workloadCounts(ms) : h("p", { class: "card" }, "This coordinator serves no /metrics: counts and rates are unavailable."),
          keys,
          ms ? chart() : null,
          workers,
        );
      body.setAttribute("data-loaded", "true");
    } catch (err) {
      if (stopped) return;
      clear(body, loadError("Could not load the overview", err));
    }
    if (!stopped) timer = window.setTimeout(() => void tick(), ms && !hasRate() ? FIRST_RATE_MS : SAMPLE_MS);
  };
  void tick();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}
