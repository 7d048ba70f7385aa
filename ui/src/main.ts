// The Leasehold console: a hash-routed page (#/, #/jobs, #/jobs/<id>, #/workloads) over the
// Connect API. The overview reads /metrics every few seconds (the counts there are cached by the
// coordinator); a job page follows WatchJob, a server stream, and asks for anything else only when
// an event says something changed.
import "./style.css";
import type { JsonObject } from "@bufbuild/protobuf";
import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  AttemptOutcome,
  JobEventKind,
  JobStatus,
  TaskStatus,
  type GetJobResponse,
  type Job,
  type TaskAttempt,
  type Workload,
} from "../../gen/leasehold/queue/v1/queue_pb.js";
import { client, describeError, fetchMetrics, getToken, probeRole, setToken, type MetricSample, type Role } from "./api.js";
import { ago, append, clear, duration, h, when } from "./dom.js";
import { ChunkGrid, STATUS_COLORS } from "./grid.js";

const main = document.getElementById("main") as HTMLElement;
const outcome = document.getElementById("outcome") as HTMLElement;
let role: Role = "signed-out";
/** Stops the current view's timers and streams when the route changes. */
let cleanup: (() => void) | undefined;

const ts = (t: Timestamp | undefined) => (t ? timestampDate(t) : undefined);
const jobStatusName = (s: JobStatus) => (JobStatus[s] ?? "unknown").toLowerCase();
const taskStatusName = (s: TaskStatus) => (TaskStatus[s] ?? "unknown").toLowerCase();
const isAdmin = () => role === "admin" || role === "open";
const FINAL_JOB = new Set([JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED]);
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

function badge(kind: string, text = kind): HTMLElement {
  return h("span", { class: `badge s-${kind}` }, text);
}

// ---------- outcome and confirmation ----------

function showOk(text: string): void {
  outcome.className = "outcome ok";
  clear(
    outcome,
    h("span", {}, text),
    h("button", { type: "button", class: "link", "aria-label": "Dismiss message", onclick: () => clear(outcome) }, "×"),
  );
}

function showError(action: string, err: unknown): void {
  const e = describeError(err);
  outcome.className = "outcome error";
  clear(
    outcome,
    h("span", {}, `${action} failed: ${e.message}`),
    e.requestId ? h("span", { class: "rid" }, " Request id: ", h("code", { id: "outcome-request-id" }, e.requestId)) : null,
    h("button", { type: "button", class: "link", "aria-label": "Dismiss message", onclick: () => clear(outcome) }, "×"),
  );
}

function confirmAction(text: string, confirmLabel: string): Promise<boolean> {
  const dlg = document.getElementById("confirm") as HTMLDialogElement;
  (document.getElementById("confirm-text") as HTMLElement).textContent = text;
  (document.getElementById("confirm-yes") as HTMLElement).textContent = confirmLabel;
  dlg.returnValue = "";
  dlg.showModal();
  // The safe choice has the focus: Enter alone never confirms.
  (document.getElementById("confirm-no") as HTMLElement).focus();
  return new Promise((resolve) => dlg.addEventListener("close", () => resolve(dlg.returnValue === "ok"), { once: true }));
}

// ---------- sign in ----------

function renderSignIn(message?: string): void {
  const input = h("input", {
    id: "token",
    name: "token",
    type: "password",
    autocomplete: "off",
    required: true,
    "aria-describedby": "token-help",
  });
  const form = h(
    "form",
    { class: "card narrow", id: "sign-in" },
    h("h1", {}, "Sign in"),
    h(
      "p",
      { id: "token-help" },
      "This coordinator needs a bearer token. It is kept in this tab only (session storage) and sent with every request.",
    ),
    message ? h("p", { class: "error-text", role: "alert" }, message) : null,
    h("label", { for: "token" }, "Token"),
    input,
    h("button", { type: "submit", class: "primary" }, "Sign in"),
  );
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    setToken(input.value.trim());
    void start();
  });
  clear(main, form);
  input.focus();
}

// ---------- overview ----------

interface RateSample {
  t: number;
  claims: number;
  completions: number;
}
const samples: RateSample[] = [];
const SAMPLE_MS = 5000;
const KEEP_SAMPLES = 60; // five minutes

function metric(ms: MetricSample[], name: string): MetricSample[] {
  return ms.filter((m) => m.name === name);
}

function rates(): { claims: number[]; completions: number[] } {
  const claims: number[] = [];
  const completions: number[] = [];
  for (let i = 1; i < samples.length; i++) {
    const dt = (samples[i].t - samples[i - 1].t) / 1000;
    // A coordinator restart resets its counters: count that interval as unknown (0) rather than negative.
    claims.push(dt > 0 ? Math.max(0, samples[i].claims - samples[i - 1].claims) / dt : 0);
    completions.push(dt > 0 ? Math.max(0, samples[i].completions - samples[i - 1].completions) / dt : 0);
  }
  return { claims, completions };
}

function chart(): HTMLElement {
  const { claims, completions } = rates();
  const W = 320;
  const H = 90;
  const max = Math.max(1, ...claims, ...completions);
  const line = (xs: number[]) =>
    // The x axis spans the samples so far (at least a minute), so a fresh page's chart is not a sliver.
    xs.map((v, i) => `${(i / Math.max(11, xs.length - 1)) * W},${H - (v / max) * (H - 4) - 2}`).join(" ");
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("width", String(W));
  svg.setAttribute("height", String(H));
  svg.setAttribute("aria-hidden", "true");
  svg.setAttribute("class", "chart");
  for (const [xs, cls] of [
    [claims, "claims"],
    [completions, "completions"],
  ] as const) {
    const p = document.createElementNS(ns, "polyline");
    p.setAttribute("points", line(xs));
    p.setAttribute("class", cls);
    svg.append(p);
  }
  const last = (xs: number[]) => (xs.length ? xs[xs.length - 1].toFixed(1) : "—");
  const span = Math.round(((samples.length - 1) * SAMPLE_MS) / 1000);
  return h(
    "figure",
    { class: "card" },
    h("figcaption", {}, `Throughput, last ${duration(span)} (peak ${max.toFixed(1)}/s)`),
    svg,
    h(
      "ul",
      { class: "legend" },
      h(
        "li",
        {},
        h("span", { class: "key claims", "aria-hidden": "true" }),
        "Claims/s: ",
        h("strong", { id: "claims-rate" }, last(claims)),
      ),
      h(
        "li",
        {},
        h("span", { class: "key completions", "aria-hidden": "true" }),
        "Completions/s: ",
        h("strong", { id: "completions-rate" }, last(completions)),
      ),
    ),
  );
}

async function workersSection(): Promise<HTMLElement> {
  // Who holds what, from the leases of the newest running jobs (a worker is "seen" while it holds a lease).
  const running = await client.listJobs({ status: JobStatus.RUNNING, pageSize: 20 });
  const byWorker = new Map<string, { tasks: number; jobs: Set<string>; expires: number }>();
  await Promise.all(
    running.jobs.map(async (job) => {
      const page = await client.listTasks({ jobId: job.id, status: TaskStatus.LEASED, pageSize: 1000 });
      for (const { task } of page.tasks) {
        if (!task?.leaseOwner) continue;
        const w = byWorker.get(task.leaseOwner) ?? { tasks: 0, jobs: new Set<string>(), expires: Infinity };
        w.tasks++;
        w.jobs.add(job.id);
        w.expires = Math.min(w.expires, ts(task.leaseExpiresAt)?.getTime() ?? Infinity);
        byWorker.set(task.leaseOwner, w);
      }
    }),
  );
  const rows = [...byWorker.entries()].sort((a, b) => a[0].localeCompare(b[0]));
  return h(
    "section",
    { class: "card", "aria-labelledby": "workers-h" },
    h("h2", { id: "workers-h" }, "Workers holding leases"),
    rows.length === 0
      ? h("p", {}, "No worker holds a lease right now.")
      : h(
          "table",
          { id: "workers" },
          h(
            "thead",
            {},
            h(
              "tr",
              {},
              h("th", { scope: "col" }, "Worker"),
              h("th", { scope: "col" }, "Tasks held"),
              h("th", { scope: "col" }, "Jobs"),
              h("th", { scope: "col" }, "Next lease expiry"),
            ),
          ),
          h(
            "tbody",
            {},
            ...rows.map(([name, w]) =>
              h(
                "tr",
                {},
                h("th", { scope: "row" }, name),
                h("td", {}, w.tasks),
                h("td", {}, ...[...w.jobs].flatMap((id, i) => [i ? ", " : "", h("a", { href: `#/jobs/${id}` }, id.slice(0, 8))])),
                h("td", {}, Number.isFinite(w.expires) ? `in ${duration((w.expires - Date.now()) / 1000)}` : "—"),
              ),
            ),
          ),
        ),
  );
}

function workloadTable(ms: MetricSample[]): HTMLElement {
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

function renderOverview(): () => void {
  const body = h("div", { class: "stack" }, h("p", {}, "Loading…"));
  clear(main, h("h1", {}, "Overview"), body);
  let stopped = false;
  let timer: number | undefined;
  const tick = async () => {
    try {
      const [ms, workers] = await Promise.all([fetchMetrics(), workersSection()]);
      if (stopped) return;
      if (ms) {
        const sum = (n: string) => metric(ms, n).reduce((a, m) => a + m.value, 0);
        samples.push({ t: Date.now(), claims: sum("leasehold_claims_total"), completions: sum("leasehold_completions_total") });
        while (samples.length > KEEP_SAMPLES) samples.shift();
      }
      clear(
        body,
        ms ? workloadTable(ms) : h("p", { class: "card" }, "This coordinator serves no /metrics: counts and rates are unavailable."),
        ms ? chart() : null,
        workers,
      );
      body.setAttribute("data-loaded", "true");
    } catch (err) {
      if (stopped) return;
      const e = describeError(err);
      clear(
        body,
        h(
          "p",
          { class: "error-text", role: "alert" },
          `Could not load the overview: ${e.message}`,
          e.requestId ? ` (request id ${e.requestId})` : "",
        ),
      );
    }
    if (!stopped) timer = window.setTimeout(() => void tick(), SAMPLE_MS);
  };
  void tick();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

// ---------- jobs list ----------

const pageTokens = new Map<string, string[]>(); // filter → tokens of the pages before the current one

function renderJobs(params: URLSearchParams): void {
  const status = params.get("status") ?? "";
  const workload = params.get("workload") ?? "";
  const q = (params.get("q") ?? "").trim();
  const age = params.get("age") ?? "";
  const page = params.get("page") ?? "";
  const filterKey = `${status}|${workload}|${age}`;
  const AGES: Record<string, [string, number]> = {
    "1h": ["last hour", 3600],
    "24h": ["last 24 hours", 86400],
    "7d": ["last 7 days", 7 * 86400],
  };
  const ageSelect = h("select", { id: "f-age", name: "age" }, h("option", { value: "" }, "any time"));
  for (const [k, [label]] of Object.entries(AGES)) ageSelect.append(h("option", { value: k, selected: k === age }, label));

  const statusSelect = h("select", { id: "f-status", name: "status" }, h("option", { value: "" }, "any"));
  for (const s of ["pending", "running", "completed", "failed", "cancelled"]) {
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
    for (const k of ["status", "workload", "age", "q"]) {
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
        const r = await client.listJobs({ status: statusValue, workload, pageSize: 50, pageToken: page });
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
          h("tr", {}, ...["Job", "Workload", "Status", "Priority", "Created", "Idempotency key"].map((t) => h("th", { scope: "col" }, t))),
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
              h("td", { class: "num" }, j.priority),
              h("td", {}, h("time", { datetime: ts(j.createdAt)?.toISOString(), title: when(ts(j.createdAt)) }, ago(ts(j.createdAt)))),
              h("td", { class: "mono" }, j.idempotencyKey || "—"),
            ),
          ),
        ),
      );
      const pager = h(
        "nav",
        { class: "pager", "aria-label": "Pages of jobs" },
        h(
          "button",
          {
            type: "button",
            disabled: !page,
            onclick: () => {
              const prev = before.pop() ?? "";
              pageTokens.set(filterKey, before);
              go(prev);
            },
          },
          "Previous page",
        ),
        h(
          "button",
          {
            type: "button",
            disabled: !next,
            onclick: () => {
              pageTokens.set(filterKey, [...before, page]);
              go(next);
            },
          },
          "Next page",
        ),
      );
      clear(
        results,
        jobs.length ? table : h("p", {}, "No job matches."),
        q && !UUID.test(q) ? h("p", { class: "hint" }, "The key filter applies to this page of jobs.") : null,
        pager,
      );
    } catch (err) {
      const e = describeError(err);
      clear(
        results,
        h(
          "p",
          { class: "error-text", role: "alert" },
          `Could not list jobs: ${e.message}`,
          e.requestId ? ` (request id ${e.requestId})` : "",
        ),
      );
    }
  })();
}

// ---------- job page ----------

function attemptText(a: TaskAttempt): string {
  const how = (AttemptOutcome[a.outcome] ?? "unknown").toLowerCase().replace("_", " ");
  const err = a.errorCode ? ` ${a.errorCode}${a.errorMessage ? `: ${a.errorMessage}` : ""}` : "";
  return `#${a.attempt} ${a.workerId || "?"} ${how}${err}${a.retried ? " (retried)" : ""}`;
}

function renderJob(jobId: string): () => void {
  let stopped = false;
  const abort = new AbortController();
  let snapshot: GetJobResponse | undefined;
  let grid: ChunkGrid | undefined;
  const chunkTask: string[] = [];
  let attempts = new Int32Array(0);
  let touched = new Uint8Array(0);
  let lastEventId = 0n;
  let live = "connecting";

  const header = h("div", { id: "job-header" });
  const progress = h("div", { class: "card", id: "job-progress-card" });
  const cancelButton = h(
    "button",
    { type: "button", id: "cancel-job", class: "danger", hidden: true, onclick: () => snapshot?.job && void cancelJob(snapshot.job) },
    "Cancel job",
  );
  const retryButton = h(
    "button",
    { type: "button", id: "retry-job", class: "primary", hidden: true, onclick: () => snapshot?.job && void retryJob(snapshot.job) },
    "Retry job",
  );
  const actions = h("div", { class: "actions", id: "job-actions" }, cancelButton, retryButton);
  const gridCard = h("section", { class: "card", "aria-labelledby": "grid-h" }, h("h2", { id: "grid-h" }, "Chunks"));
  const detail = h("section", { class: "card", id: "task-detail", "aria-labelledby": "detail-h", hidden: true });
  const tasksCard = h("section", { class: "card", "aria-labelledby": "tasks-h" }, h("h2", { id: "tasks-h" }, "Tasks, attempts and errors"));
  const resultsCard = h("section", { class: "card", "aria-labelledby": "results-h" }, h("h2", { id: "results-h" }, "Result manifest"));
  clear(main, header, actions, progress, gridCard, detail, tasksCard, resultsCard);

  const renderHeader = () => {
    const job = snapshot?.job;
    if (!job) return;
    clear(
      header,
      h("h1", {}, "Job ", h("span", { class: "mono" }, job.id)),
      h(
        "dl",
        { class: "facts" },
        h("dt", {}, "Status"),
        h(
          "dd",
          {},
          badge(jobStatusName(job.status)),
          h("span", { id: "job-status", "data-status": jobStatusName(job.status), class: "sr-only" }, jobStatusName(job.status)),
        ),
        h("dt", {}, "Workload"),
        h("dd", {}, job.workload),
        h("dt", {}, "Created"),
        h("dd", {}, when(ts(job.createdAt))),
        h("dt", {}, "Finished"),
        h("dd", {}, when(ts(job.completedAt))),
        job.idempotencyKey ? h("dt", {}, "Idempotency key") : null,
        job.idempotencyKey ? h("dd", { class: "mono" }, job.idempotencyKey) : null,
        job.cancelReason ? h("dt", {}, "Cancel reason") : null,
        job.cancelReason ? h("dd", {}, job.cancelReason) : null,
        h("dt", {}, "Updates"),
        h("dd", { id: "live-state" }, live),
      ),
      snapshot?.failure
        ? h(
            "p",
            { class: "error-text", id: "job-failure" },
            `Failed at chunk ${snapshot.failure.chunkIndex} (attempt ${snapshot.failure.attempt}, ${snapshot.failure.workerId || "no worker"}): ${snapshot.failure.errorCode}${snapshot.failure.errorMessage ? ` — ${snapshot.failure.errorMessage}` : ""}`,
          )
        : null,
    );
    // The buttons persist across re-renders (only shown or hidden), so a click never lands on a replaced node.
    cancelButton.hidden = !(job.status === JobStatus.PENDING || job.status === JobStatus.RUNNING);
    retryButton.hidden = !(job.status === JobStatus.FAILED || job.status === JobStatus.CANCELLED);
  };

  const renderProgress = () => {
    if (!snapshot) return;
    const c = snapshot.taskCounts;
    const total = snapshot.totalTasks;
    const done = c?.completed ?? 0;
    const pct = total ? Math.floor((done / total) * 100) : 0;
    clear(
      progress,
      h("h2", { id: "progress-h" }, "Progress"),
      h("progress", { id: "job-progress", max: total || 1, value: done, "aria-labelledby": "progress-h", "data-percent": pct }),
      h("p", { id: "progress-text" }, `${pct}% — ${done} of ${total} tasks completed`),
      h(
        "ul",
        { class: "legend" },
        ...(["pending", "leased", "completed", "failed", "cancelled"] as const).map((s, i) =>
          h(
            "li",
            {},
            h("span", { class: "key", style: null, "data-color": STATUS_COLORS[i + 1], "aria-hidden": "true" }),
            `${s}: `,
            h("strong", { "data-count": s }, c?.[s] ?? 0),
          ),
        ),
      ),
    );
    for (const k of progress.querySelectorAll<HTMLElement>("[data-color]")) k.style.background = k.dataset.color ?? "";
  };

  let progressQueued = false;
  const scheduleProgress = () => {
    if (progressQueued) return;
    progressQueued = true;
    requestAnimationFrame(() => {
      progressQueued = false;
      renderProgress();
    });
  };

  const openChunk = async (chunk: number) => {
    detail.hidden = false;
    const taskId = chunkTask[chunk];
    if (!taskId) {
      clear(detail, h("h2", { id: "detail-h" }, `Chunk ${chunk}`), h("p", {}, "Still loading this chunk's task…"));
      return;
    }
    try {
      const r = await client.getTask({ taskId });
      const t = r.task;
      clear(
        detail,
        h("h2", { id: "detail-h" }, `Chunk ${chunk}`),
        h(
          "dl",
          { class: "facts" },
          h("dt", {}, "Task"),
          h("dd", { class: "mono" }, taskId),
          h("dt", {}, "Status"),
          h("dd", {}, badge(taskStatusName(t?.status ?? 0))),
          h("dt", {}, "Attempt"),
          h("dd", {}, `${t?.attempt ?? 0} of ${t?.maxAttempts ?? 0}`),
          h("dt", {}, "Input"),
          h("dd", { class: "mono" }, t?.inputUri ?? ""),
          t?.resultUri ? h("dt", {}, "Result") : null,
          t?.resultUri ? h("dd", { class: "mono" }, t.resultUri) : null,
        ),
        r.attempts.length
          ? h("ol", { class: "attempts" }, ...r.attempts.map((a) => h("li", {}, attemptText(a), " — ", when(ts(a.leasedAt)))))
          : h("p", {}, "Never leased."),
      );
    } catch (err) {
      showError("Loading the task", err);
    }
  };

  // ---- tasks table (paged; refreshed when events say tasks changed) ----
  let taskFilter = TaskStatus.UNSPECIFIED;
  let taskTokens: string[] = [];
  let taskPage = "";
  const tasksBody = h("div", { id: "tasks-body" });
  const taskSelect = h("select", { id: "task-status" }, h("option", { value: "0" }, "any"));
  for (const s of [TaskStatus.PENDING, TaskStatus.LEASED, TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED])
    taskSelect.append(h("option", { value: s }, taskStatusName(s)));
  taskSelect.addEventListener("change", () => {
    taskFilter = Number(taskSelect.value) as TaskStatus;
    taskTokens = [];
    taskPage = "";
    void loadTasks();
  });
  append(tasksCard, h("div", { class: "filters" }, h("div", {}, h("label", { for: "task-status" }, "Task status"), taskSelect)), tasksBody);

  const loadTasks = async () => {
    try {
      const r = await client.listTasks({ jobId, status: taskFilter, pageSize: 50, pageToken: taskPage }, { signal: abort.signal });
      clear(
        tasksBody,
        r.tasks.length === 0
          ? h("p", {}, "No task matches.")
          : h(
              "table",
              { id: "tasks" },
              h(
                "thead",
                {},
                h("tr", {}, ...["Chunk", "Status", "Attempt", "Worker", "Attempts and errors"].map((t) => h("th", { scope: "col" }, t))),
              ),
              h(
                "tbody",
                {},
                ...r.tasks.map(({ task, attempts: at }) =>
                  h(
                    "tr",
                    {},
                    h(
                      "td",
                      { class: "num" },
                      h(
                        "button",
                        { type: "button", class: "link", onclick: () => void openChunk(task?.chunkIndex ?? 0) },
                        task?.chunkIndex ?? 0,
                      ),
                    ),
                    h("td", {}, badge(taskStatusName(task?.status ?? 0))),
                    h("td", { class: "num" }, `${task?.attempt ?? 0}/${task?.maxAttempts ?? 0}`),
                    h("td", { class: "mono" }, task?.leaseOwner || "—"),
                    h("td", {}, at.length ? h("ul", { class: "plain" }, ...at.map((a) => h("li", {}, attemptText(a)))) : "—"),
                  ),
                ),
              ),
            ),
        h(
          "nav",
          { class: "pager", "aria-label": "Pages of tasks" },
          h(
            "button",
            {
              type: "button",
              disabled: !taskPage,
              onclick: () => {
                taskPage = taskTokens.pop() ?? "";
                void loadTasks();
              },
            },
            "Previous tasks",
          ),
          h(
            "button",
            {
              type: "button",
              disabled: !r.nextPageToken,
              onclick: () => {
                taskTokens.push(taskPage);
                taskPage = r.nextPageToken;
                void loadTasks();
              },
            },
            "Next tasks",
          ),
        ),
      );
    } catch (err) {
      if (!stopped) showError("Listing tasks", err);
    }
  };

  // ---- result manifest ----
  const resultsBody = h("div", { id: "results-body" });
  resultsCard.append(resultsBody);
  const loadResults = async () => {
    try {
      const rows: HTMLElement[] = [];
      let token = "";
      let shown = 0;
      do {
        const r = await client.listCompletedResults({ jobId, pageSize: 200, pageToken: token }, { signal: abort.signal });
        for (const m of r.results) {
          rows.push(
            h(
              "tr",
              {},
              h("td", { class: "num" }, m.chunkIndex),
              h("td", { class: "mono" }, m.resultUri),
              h("td", { class: "mono", title: m.resultSha256 }, `${m.resultSha256.slice(0, 12)}…`),
              h("td", {}, when(ts(m.completedAt))),
            ),
          );
        }
        shown += r.results.length;
        token = r.nextPageToken;
      } while (token && shown < 200);
      clear(
        resultsBody,
        rows.length
          ? h(
              "table",
              { id: "results" },
              h("thead", {}, h("tr", {}, ...["Chunk", "Result URI", "SHA-256", "Completed"].map((t) => h("th", { scope: "col" }, t)))),
              h("tbody", {}, ...rows),
            )
          : h("p", {}, "No task has completed yet."),
        token
          ? h("p", { class: "hint" }, `The first ${shown} results, in chunk order; GET /jobs/${jobId}/results pages through all of them.`)
          : null,
      );
    } catch (err) {
      if (!stopped) showError("Listing results", err);
    }
  };

  // Tables follow events at most every two seconds: the stream says when, never a timer on its own.
  let tablesTimer: number | undefined;
  const tablesChanged = () => {
    if (tablesTimer !== undefined) return;
    tablesTimer = window.setTimeout(() => {
      tablesTimer = undefined;
      if (!stopped) void Promise.all([loadTasks(), loadResults()]);
    }, 2000);
  };

  // ---- chunk statuses ----
  // The snapshot's counts say which status most chunks have: the grid starts filled with it, and
  // only the other statuses are paged in (in parallel, one stream per status), so the grid is right
  // after reading the minority of tasks. The majority's pages follow, only to learn their task ids.
  const loadChunks = async () => {
    if (!grid || !snapshot) return;
    const g = grid;
    const c = snapshot.taskCounts;
    const order = ["pending", "leased", "completed", "failed", "cancelled"] as const;
    const counts = order.map((s) => c?.[s] ?? 0);
    const majority = counts.indexOf(Math.max(...counts));
    g.fill(majority + 1);
    const pageAll = async (status: TaskStatus) => {
      let token = "";
      if (status === TaskStatus.COMPLETED) {
        // The result manifests carry chunk and task id, and cost the server far less than tasks with their attempts.
        do {
          const r = await client.listCompletedResults({ jobId, pageSize: 1000, pageToken: token }, { signal: abort.signal });
          for (const m of r.results) {
            chunkTask[m.chunkIndex] = m.taskId;
            if (!touched[m.chunkIndex]) g.set(m.chunkIndex, TaskStatus.COMPLETED);
          }
          token = r.nextPageToken;
        } while (token && !stopped);
        return;
      }
      do {
        const r = await client.listTasks({ jobId, status, pageSize: 1000, pageToken: token }, { signal: abort.signal });
        for (const { task } of r.tasks) {
          if (!task) continue;
          chunkTask[task.chunkIndex] = task.id;
          // A chunk an event has already reported is as new as the stream; a page may be older.
          if (!touched[task.chunkIndex]) g.set(task.chunkIndex, task.status);
        }
        token = r.nextPageToken;
      } while (token && !stopped);
    };
    await Promise.all(
      order
        .map((_, i) => i)
        .filter((i) => i !== majority && counts[i] > 0)
        .map((i) => pageAll((i + 1) as TaskStatus)),
    );
    performance.mark("grid-known");
    g.element.setAttribute("data-known", "true");
    if (counts[majority] > 0) await pageAll((majority + 1) as TaskStatus);
    g.element.setAttribute("data-complete", "true");
  };

  const cancelJob = async (job: Job) => {
    if (!(await confirmAction(`Cancel job ${job.id}? Its pending and leased tasks become cancelled.`, "Cancel job"))) return;
    try {
      const r = await client.cancelJob({ jobId: job.id, reason: "cancelled from the console" });
      showOk(`Job ${job.id} is ${jobStatusName(r.job?.status ?? 0)}.`);
    } catch (err) {
      showError("Cancelling the job", err);
    }
  };

  const retryJob = async (job: Job) => {
    if (!(await confirmAction(`Retry job ${job.id}? Its failed and cancelled tasks go back to pending with fresh attempts.`, "Retry job")))
      return;
    try {
      const r = await client.retryJob({ jobId: job.id });
      showOk(`Job ${job.id} is ${jobStatusName(r.job?.status ?? 0)} again: ${r.retriedTasks} tasks retried.`);
      // The old stream ended with the job; follow the new run.
      if (!stopped && streamEnded) void watch();
    } catch (err) {
      showError("Retrying the job", err);
    }
  };

  let streamEnded = false;
  const watch = async (): Promise<void> => {
    streamEnded = false;
    let backoff = 500;
    for (;;) {
      try {
        live = "live";
        renderHeader();
        for await (const msg of client.watchJob({ jobId, afterEventId: lastEventId }, { signal: abort.signal })) {
          if (msg.update.case === "snapshot") {
            snapshot = msg.update.value;
            if (!grid || grid.total !== snapshot.totalTasks) {
              grid = new ChunkGrid(snapshot.totalTasks, (chunk) => void openChunk(chunk));
              attempts = new Int32Array(snapshot.totalTasks);
              touched = new Uint8Array(snapshot.totalTasks);
              gridCard.replaceChildren(gridCard.firstChild as Node, grid.element);
              grid.layout();
              void loadChunks().catch((err: unknown) => !stopped && showError("Loading chunks", err));
            } else {
              // A new snapshot of a job already drawn (a retry's fresh stream): what changed before it has no event here.
              touched.fill(0);
              void loadChunks().catch((err: unknown) => !stopped && showError("Loading chunks", err));
            }
            renderHeader();
            renderProgress();
            void loadTasks();
            void loadResults();
          } else if (msg.update.case === "event" && snapshot) {
            const ev = msg.update.value;
            lastEventId = ev.id;
            const c = snapshot.taskCounts;
            if (ev.kind === JobEventKind.TASK_STATUS && c) {
              const prev = taskStatusName(ev.previousTaskStatus) as keyof typeof c;
              const next = taskStatusName(ev.taskStatus) as keyof typeof c;
              if (typeof c[prev] === "number") (c[prev] as number)--;
              if (typeof c[next] === "number") (c[next] as number)++;
              if (ev.taskId) chunkTask[ev.chunkIndex] = ev.taskId;
              if (ev.attempt >= attempts[ev.chunkIndex]) {
                attempts[ev.chunkIndex] = ev.attempt;
                touched[ev.chunkIndex] = 1;
                grid?.set(ev.chunkIndex, ev.taskStatus);
              }
              scheduleProgress();
              tablesChanged();
            } else if (ev.kind === JobEventKind.JOB_STATUS && snapshot.job) {
              snapshot.job.status = ev.jobStatus;
              if (!FINAL_JOB.has(ev.jobStatus)) snapshot.failure = undefined;
              renderHeader();
              tablesChanged();
            }
          }
        }
        // The stream ends with the job's final event: one GetJob for the failure and the final times.
        streamEnded = true;
        live = "finished (the job is final)";
        const final = await client.getJob({ jobId }, { signal: abort.signal });
        snapshot = final;
        renderHeader();
        renderProgress();
        tablesChanged();
        return;
      } catch (err) {
        if (stopped) return;
        const e = ConnectError.from(err);
        if (
          e.code === Code.NotFound ||
          e.code === Code.PermissionDenied ||
          e.code === Code.Unauthenticated ||
          e.code === Code.InvalidArgument
        ) {
          clear(
            main,
            h("h1", {}, "Job"),
            h(
              "p",
              { class: "error-text", role: "alert" },
              `${describeError(err).message}${describeError(err).requestId ? ` (request id ${describeError(err).requestId})` : ""}`,
            ),
          );
          return;
        }
        // A dropped stream resumes after the last event it delivered.
        live = `reconnecting (${e.rawMessage})`;
        renderHeader();
        await new Promise((r) => setTimeout(r, backoff));
        backoff = Math.min(backoff * 2, 10_000);
        if (stopped) return;
      }
    }
  };
  void watch();

  const onResize = () => grid?.layout();
  window.addEventListener("resize", onResize);
  return () => {
    stopped = true;
    abort.abort();
    clearTimeout(tablesTimer);
    window.removeEventListener("resize", onResize);
  };
}

// ---------- workloads (admin) ----------

function renderWorkloads(): void {
  if (!isAdmin()) {
    clear(main, h("h1", {}, "Workloads"), h("p", {}, "Registering workloads needs an admin token."));
    return;
  }
  const list = h("div", { id: "workload-list" }, h("p", {}, "Loading…"));
  const field = (id: string, label: string, attrs: Record<string, string | number | boolean> = {}) =>
    h("div", {}, h("label", { for: id }, label), h("input", { id, name: id, ...attrs }));
  const form = h(
    "form",
    { class: "card", id: "workload-form", "aria-labelledby": "wf-h" },
    h("h2", { id: "wf-h" }, "Register or edit a workload"),
    field("wl-name", "Name", {
      required: true,
      pattern: "[a-z][a-z0-9_\\-]{0,62}",
      autocomplete: "off",
      "aria-describedby": "wl-name-help",
    }),
    h("p", { id: "wl-name-help", class: "hint" }, "Lower case letters, digits, _ and -; an existing name is updated."),
    field("wl-max-attempts", "Max attempts (empty: server default)", { type: "number", min: 1, max: 100 }),
    field("wl-lease-seconds", "Lease seconds (empty: server default)", { type: "number", min: 1, max: 86400 }),
    field("wl-max-pending", "Max pending seconds (empty or 0: never expire)", { type: "number", min: 0 }),
    h(
      "div",
      {},
      h("label", { for: "wl-schema" }, "Parameters JSON Schema (optional)"),
      h("textarea", { id: "wl-schema", name: "wl-schema", rows: 4 }),
    ),
    h("button", { type: "submit", class: "primary", id: "wl-submit" }, "Save workload"),
  );
  const val = (id: string) => (form.querySelector(`#${id}`) as HTMLInputElement).value.trim();
  const num = (id: string) => (val(id) === "" ? undefined : Number(val(id)));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    void (async () => {
      const name = val("wl-name");
      let schema: JsonObject | undefined;
      try {
        schema = val("wl-schema") ? (JSON.parse(val("wl-schema")) as JsonObject) : undefined;
      } catch {
        outcome.className = "outcome error";
        clear(outcome, "The parameters schema is not valid JSON.");
        return;
      }
      if (
        !(await confirmAction(
          `Save workload "${name}"? Its settings apply to jobs created and tasks claimed from now on.`,
          "Save workload",
        ))
      )
        return;
      try {
        const r = await client.putWorkload({
          name,
          maxAttempts: num("wl-max-attempts"),
          leaseSeconds: num("wl-lease-seconds"),
          maxPendingSeconds: num("wl-max-pending"),
          parametersSchema: schema,
        });
        showOk(`Workload ${r.workload?.name ?? name} saved.`);
        await loadList();
      } catch (err) {
        showError("Saving the workload", err);
      }
    })();
  });
  const edit = (w: Workload) => {
    (form.querySelector("#wl-name") as HTMLInputElement).value = w.name;
    (form.querySelector("#wl-max-attempts") as HTMLInputElement).value = String(w.maxAttempts);
    (form.querySelector("#wl-lease-seconds") as HTMLInputElement).value = String(w.leaseSeconds);
    (form.querySelector("#wl-max-pending") as HTMLInputElement).value = String(w.maxPendingSeconds);
    (form.querySelector("#wl-schema") as HTMLTextAreaElement).value = w.parametersSchema ? JSON.stringify(w.parametersSchema, null, 2) : "";
    (form.querySelector("#wl-name") as HTMLInputElement).focus();
  };
  const loadList = async () => {
    try {
      const r = await client.listWorkloads({});
      clear(
        list,
        h(
          "table",
          { id: "workloads" },
          h(
            "thead",
            {},
            h(
              "tr",
              {},
              ...["Name", "Max attempts", "Lease", "Max pending", "Schema", "Updated", ""].map((t) =>
                h("th", { scope: "col" }, t || h("span", { class: "sr-only" }, "Actions")),
              ),
            ),
          ),
          h(
            "tbody",
            {},
            ...r.workloads.map((w) =>
              h(
                "tr",
                {},
                h("th", { scope: "row" }, w.name),
                h("td", { class: "num" }, w.maxAttempts),
                h("td", { class: "num" }, duration(w.leaseSeconds)),
                h("td", { class: "num" }, w.maxPendingSeconds ? duration(w.maxPendingSeconds) : "never"),
                h("td", {}, w.parametersSchema ? "yes" : "no"),
                h("td", {}, when(ts(w.updatedAt))),
                h("td", {}, h("button", { type: "button", "aria-label": `Edit workload ${w.name}`, onclick: () => edit(w) }, "Edit")),
              ),
            ),
          ),
        ),
      );
    } catch (err) {
      showError("Listing workloads", err);
    }
  };
  clear(main, h("h1", {}, "Workloads"), h("section", { class: "card", "aria-label": "Registered workloads" }, list), form);
  void loadList();
}

// ---------- routing ----------

function route(): void {
  cleanup?.();
  cleanup = undefined;
  const hash = location.hash.replace(/^#/, "") || "/";
  const [path, query] = hash.split("?");
  const params = new URLSearchParams(query ?? "");
  for (const a of document.querySelectorAll<HTMLAnchorElement>("[data-nav]")) {
    const active = (a.dataset.nav === "overview" && path === "/") || (a.dataset.nav !== "overview" && path.startsWith(`/${a.dataset.nav}`));
    if (active) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  if (role === "signed-out") return renderSignIn();
  if (role === "worker") {
    clear(
      main,
      h("h1", {}, "Console"),
      h("p", {}, "This is a worker token: it cannot read jobs. Sign in with a submitter or admin token."),
    );
    return;
  }
  const job = /^\/jobs\/([^/]+)$/.exec(path);
  if (job) cleanup = renderJob(decodeURIComponent(job[1]));
  else if (path === "/jobs") renderJobs(params);
  else if (path === "/workloads") renderWorkloads();
  else cleanup = renderOverview();
}

async function start(): Promise<void> {
  try {
    role = await probeRole();
  } catch (err) {
    const e = describeError(err);
    clear(main, h("p", { class: "error-text", role: "alert" }, `The coordinator did not answer: ${e.message}`));
    return;
  }
  if (role === "signed-out" && getToken()) {
    setToken("");
    renderSignIn("That token was not accepted.");
    return;
  }
  document.body.dataset.role = role;
  const who = document.getElementById("who") as HTMLElement;
  who.textContent = role === "open" ? "Open coordinator (no tokens)" : role === "signed-out" ? "" : `Signed in: ${role}`;
  (document.getElementById("sign-out") as HTMLButtonElement).hidden = !getToken();
  for (const el of document.querySelectorAll<HTMLElement>("[data-role=admin]")) el.hidden = !isAdmin();
  route();
}

document.getElementById("sign-out")?.addEventListener("click", () => {
  setToken("");
  void start();
});
window.addEventListener("hashchange", route);
void start();
