// The overview's "Tasks by workload": the task counts and oldest pending age per workload, read
// from /metrics (cached by the coordinator, so a busy queue costs the page nothing more).
import type { MetricSample } from "../api.js";
import { duration, h } from "../dom.js";
import { metric } from "./throughput.js";

export function workloadCounts(ms: MetricSample[]): HTMLElement {
  const counts = new Map<string, Record<string, number>>();
  for (const m of metric(ms, "leasehold_tasks")) {
    const c = counts.get(m.labels.workload) ?? {};
    c[m.labels.status] = m.value;
    counts.set(m.labels.workload, c);
  }
  const oldest = new Map(metric(ms, "leasehold_oldest_pending_seconds").map((m) => [m.labels.workload, m.value]));
  const names = [...new Set([...counts.keys(), ...oldest.keys()])].sort();
  const statuses = ["pending", "leased", "completed", "failed", "cancelled"];
  return h(
    "section",
    { class: "card", "aria-labelledby": "workloads-h" },
    h("h2", { id: "workloads-h" }, "Tasks by workload"),
    names.length === 0
      ? h("p", {}, "No workload has tasks yet.")
      : h(
          "table",
          { id: "workload-counts" },
          h(
            "thead",
            {},
            h(
              "tr",
              {},
              h("th", { scope: "col" }, "Workload"),
              ...statuses.map((s) => h("th", { scope: "col", class: "num" }, s)),
              h("th", { scope: "col", class: "num" }, "Oldest pending"),
            ),
          ),
          h(
            "tbody",
            {},
            ...names.map((n) =>
              h(
                "tr",
                { "data-workload": n },
                h("th", { scope: "row" }, h("a", { href: `#/jobs?workload=${encodeURIComponent(n)}` }, n)),
                ...statuses.map((s) => h("td", { class: "num" }, counts.get(n)?.[s] ?? 0)),
                h("td", { class: "num" }, oldest.get(n) ? duration(oldest.get(n) ?? 0) : "—"),
              ),
            ),
          ),
        ),
    h("p", { class: "hint" }, "Pending and leased counts refresh every few seconds; finished counts every minute."),
  );
}
