// The workflows list (#/workflows): newest first, filtered by account, 50 to a page, each with its
// status and its nodes counted by status (a listing carries no nodes: the workflow's page draws them).
import type { Workflow, WorkflowNodeCounts } from "../../../gen/leasehold/queue/v1/queue_pb.js";
import { client } from "../api.js";
import { loadError } from "../components/outcome.js";
import { pager } from "../components/pager.js";
import { badge, jobStatusName, ts } from "../components/status.js";
import { ago, clear, h, when } from "../dom.js";
import { main } from "../layout.js";

const pageTokens = new Map<string, string[]>(); // account → tokens of the pages before the current one

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** "2 completed, 1 running, 3 waiting" (the statuses with a node in them). */
export function nodeCountsText(c: WorkflowNodeCounts | undefined): string {
  if (!c) return "—";
  const parts = (["completed", "running", "pending", "scheduled", "waiting", "failed", "cancelled"] as const)
    .filter((s) => c[s] > 0)
    .map((s) => `${c[s]} ${s}`);
  return parts.join(", ") || "—";
}

export function renderWorkflows(params: URLSearchParams): void {
  const account = params.get("account") ?? "";
  const page = params.get("page") ?? "";
  const form = h(
    "form",
    { class: "filters", role: "search", "aria-label": "Filter workflows" },
    h(
      "div",
      {},
      h("label", { for: "w-account" }, "Account"),
      h("input", { id: "w-account", name: "account", value: account, autocomplete: "off" }),
    ),
    h("div", {}, h("label", { for: "w-id" }, "Workflow id"), h("input", { id: "w-id", name: "id", autocomplete: "off", type: "search" })),
    h("button", { type: "submit", class: "primary" }, "Filter"),
  );
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const fd = new FormData(form);
    const id = String(fd.get("id") ?? "").trim();
    if (UUID.test(id)) {
      location.hash = `#/workflows/${id}`;
      return;
    }
    const v = String(fd.get("account") ?? "").trim();
    location.hash = `#/workflows${v ? `?${new URLSearchParams({ account: v })}` : ""}`;
  });
  const results = h("div", { id: "workflows-results", "aria-live": "polite" }, h("p", {}, "Loading…"));
  clear(
    main,
    h("h1", {}, "Workflows"),
    h("p", { class: "hint" }, "Jobs created together with the edges between them (CreateWorkflow, `leasehold workflow create`)."),
    form,
    results,
  );

  const go = (token: string) => {
    const p = new URLSearchParams(params);
    if (token) p.set("page", token);
    else p.delete("page");
    location.hash = `#/workflows${p.size ? `?${p}` : ""}`;
  };

  void (async () => {
    try {
      const r = await client.listWorkflows({ account, pageSize: 50, pageToken: page });
      const before = pageTokens.get(account) ?? [];
      const table = h(
        "table",
        { id: "workflows" },
        h("caption", { class: "sr-only" }, "Workflows, newest first"),
        h("thead", {}, h("tr", {}, ...["Workflow", "Status", "Nodes", "Account", "Created"].map((t) => h("th", { scope: "col" }, t)))),
        h("tbody", {}, ...r.workflows.map(row)),
      );
      const pages = pager("Pages of workflows", page, r.nextPageToken, before, (tokens) => pageTokens.set(account, tokens), go);
      clear(results, r.workflows.length ? table : h("p", {}, "No workflows."), pages);
    } catch (err) {
      clear(results, loadError("Could not list workflows", err));
    }
  })();
}

function row(w: Workflow): HTMLElement {
  const created = ts(w.createdAt);
  return h(
    "tr",
    { "data-workflow": w.id },
    h("td", {}, h("a", { href: `#/workflows/${w.id}` }, w.name || h("span", { class: "mono" }, w.id))),
    h("td", {}, badge(jobStatusName(w.status))),
    h("td", { "data-nodes": w.id }, nodeCountsText(w.nodeCounts)),
    h("td", {}, w.account || "—"),
    h("td", {}, h("time", { datetime: created?.toISOString(), title: when(created) }, ago(created))),
  );
}
