// The jobs list (#/jobs): filters by status, workload, account, age and id or idempotency key,
// newest first, a page of 50 at a time.
import { JobStatus, type Job } from "../../../gen/leasehold/queue/v1/queue_pb.js";
import { client } from "../api.js";
import { loadError } from "../components/outcome.js";
import { pager } from "../components/pager.js";
import { ago, clear, h, when } from "../dom.js";
import { main } from "../layout.js";
import { badge, jobStatusName, ts } from "../components/status.js";

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

const pageTokens = new Map<string, string[]>(); // filter → tokens of the pages before the current one

export function renderJobs(params: URLSearchParams): void {
  const status = params.get("status") ?? "";
  const workload = params.get("workload") ?? "";
  const account = params.get("account") ?? "";
  const q = (params.get("q") ?? "").trim();
  const age = params.get("age") ?? "";
  const page = params.get("page") ?? "";
  const filterKey = `${status}|${workload}|${account}|${age}`;
  const AGES: Record<string, [string, number]> = {
    "1h": ["last hour", 3600],
    "24h": ["last 24 hours", 86400],
    "7d": ["last 7 days", 7 * 86400],
  };
  const ageSelect = h("select", { id: "f-age", name: "age" }, h("option", { value: "" }, "any time"));
  for (const [k, [label]] of Object.entries(AGES)) ageSelect.append(h("option", { value: k, selected: k === age }, label));

  const statusSelect = h("select", { id: "f-status", name: "status" }, h("option", { value: "" }, "any"));
  for (const s of ["waiting", "scheduled", "pending", "running", "completed", "failed", "cancelled"]) {
    statusSelect.append(h("option", { value: s, selected: s === status }, s));
  }
  const form = h(
    "form",
    { class: "filters", role: "search", "aria-label": "Filter jobs" },
    h("div", {}, h("label", { for: "f-status" }, "Status"), statusSelect),
    h(
      "div",
      {},
      h("label", { for: "f-workload" }, "Workload"),
      h("input", { id: "f-workload", name: "workload", value: workload, autocomplete: "off" }),
    ),
    h(
      "div",
      {},
      h("label", { for: "f-account" }, "Account"),
      h("input", { id: "f-account", name: "account", value: account, autocomplete: "off" }),
    ),
    h("div", {}, h("label", { for: "f-age" }, "Created"), ageSelect),
    h(
      "div",
      {},
      h("label", { for: "f-q" }, "Job id or idempotency key"),
      h("input", { id: "f-q", name: "q", value: q, autocomplete: "off", type: "search" }),
    ),
    h("button", { type: "submit", class: "primary" }, "Filter"),
  );
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const fd = new FormData(form);
    const p = new URLSearchParams();
    for (const k of ["status", "workload", "account", "age", "q"]) {
      const v = String(fd.get(k) ?? "").trim();
      if (v) p.set(k, v);
    }
    location.hash = `#/jobs${p.size ? `?${p}` : ""}`;
  });
  const results = h("div", { id: "jobs-results", "aria-live": "polite" }, h("p", {}, "Loading…"));
  clear(main, h("h1", {}, "Jobs"), form, results);

  const go = (token: string) => {
    const p = new URLSearchParams(params);
    if (token) p.set("page", token);
    else p.delete("page");
    location.hash = `#/jobs?${p}`;
  };

  void (async () => {
    try {
      let jobs: Job[];
      let next = "";
      if (UUID.test(q)) {
        jobs = [(await client.getJob({ jobId: q })).job].filter((j): j is Job => j !== undefined);
      } else {
        const statusValue = status ? (JobStatus[status.toUpperCase() as keyof typeof JobStatus] as JobStatus) : JobStatus.UNSPECIFIED;
        const r = await client.listJobs({ status: statusValue, workload, account, pageSize: 50, pageToken: page });
        jobs = q ? r.jobs.filter((j) => j.idempotencyKey.includes(q) || j.id.startsWith(q)) : r.jobs;
        next = r.nextPageToken;
        // Jobs come newest first, so the first one older than the cutoff ends the list.
        const cutoff = AGES[age] ? Date.now() - AGES[age][1] * 1000 : undefined;
        if (cutoff !== undefined) {
          const young = (j: Job) => (ts(j.createdAt)?.getTime() ?? 0) >= cutoff;
          if (r.jobs.length && !young(r.jobs[r.jobs.length - 1])) next = "";
          jobs = jobs.filter(young);
        }
      }
      const before = pageTokens.get(filterKey) ?? [];
      const table = h(
        "table",
        { id: "jobs" },
        h("caption", { class: "sr-only" }, "Jobs, newest first"),
        h(
          "thead",
          {},
          h(
            "tr",
            {},
            ...["Job", "Workload", "Status", "Account", "Progress", "Priority", "Created", "Idempotency key"].map((t) =>
              h("th", { scope: "col" }, t),
            ),
          ),
        ),
        h(
          "tbody",
          {},
          ...jobs.map((j) =>
            h(
              "tr",
              { "data-job": j.id },
              h("td", {}, h("a", { href: `#/jobs/${j.id}`, class: "mono" }, j.id)),
              h("td", {}, j.workload),
              h("td", {}, badge(jobStatusName(j.status))),
              h("td", { "data-account": j.account }, j.account || "—"),
              h("td", { class: "num", "data-progress": j.id }, "…"),
              h("td", { class: "num" }, j.priority),
              h("td", {}, h("time", { datetime: ts(j.createdAt)?.toISOString(), title: when(ts(j.createdAt)) }, ago(ts(j.createdAt)))),
              h("td", { class: "mono" }, j.idempotencyKey || "—"),
            ),
          ),
        ),
      );
      const pages = pager("Pages of jobs", page, next, before, (tokens) => pageTokens.set(filterKey, tokens), go);
      clear(
        results,
        jobs.length ? table : h("p", {}, "No job matches."),
        q && !UUID.test(q) ? h("p", { class: "hint" }, "The key filter applies to this page of jobs.") : null,
        pages,
      );
      void fillProgress(table, jobs);
    } catch (err) {
      clear(results, loadError("Could not list jobs", err));
    }
  })();
}

/** GetJob calls in flight at once while a page's progress cells fill in. */
const PROGRESS_CALLS = 6;

/**
 * Each listed job's progress (completed tasks / total, as GetJob counts them), filled into its
 * cell as the answers come: a job list carries no task counts, and the table is shown at once.
 */
async function fillProgress(table: HTMLElement, jobs: Job[]): Promise<void> {
  const queue = [...jobs];
  const worker = async () => {
    for (let j = queue.shift(); j !== undefined; j = queue.shift()) {
      const cell = table.querySelector<HTMLElement>(`td[data-progress="${j.id}"]`);
      if (!cell || !cell.isConnected) return; // the page moved on
      try {
        const r = await client.getJob({ jobId: j.id });
        cell.textContent = `${Math.floor(Math.min(1, Math.max(0, r.progress)) * 100)}%`;
      } catch {
        cell.textContent = "—";
      }
    }
  };
  await Promise.all(Array.from({ length: PROGRESS_CALLS }, worker));
}
