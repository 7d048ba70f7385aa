// The overview (#/): task counts per workload, the throughput chart, the workers holding leases
// and (admins) per-key counts of keyed workloads, refreshed every few seconds from /metrics, the
// newest running jobs and ListWorkloadKeys.
import { fetchMetrics } from "../api.js";
import { loadError } from "../components/outcome.js";
import { keyCountsSource } from "../components/key-counts.js";
import { chart, hasRate, recordSample, SAMPLE_MS } from "../components/throughput.js";
import { workersSection } from "../components/workers.js";
import { workloadCounts } from "../components/workload-counts.js";
import { clear, h } from "../dom.js";
import { main } from "../layout.js";
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
      const [metrics, workers, keys] = await Promise.all([
        fetchMetrics(),
        workersSection(),
        isAdmin() ? keyCounts() : Promise.resolve(null),
      ]);
      ms = metrics;
      if (stopped) return;
      if (ms) recordSample(ms);
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
