// The settlements view (#/settlements, billing and admin tokens): final billable jobs not settled
// yet, oldest final first, a page of 50 at a time, filtered by account. Each row has what a settler
// charges or refunds from: the account, the billing context, the usage totals and the final status.
import type { Job } from "../../../gen/leasehold/queue/v1/queue_pb.js";
import { client } from "../api.js";
import { usageText } from "../components/money.js";
import { loadError } from "../components/outcome.js";
import { pager } from "../components/pager.js";
import { badge, jobStatusName, ts } from "../components/status.js";
import { ago, clear, h, when } from "../dom.js";
import { main } from "../layout.js";
import { canSettle } from "../session.js";

const pageTokens = new Map<string, string[]>(); // account → tokens of the pages before the current one

export function renderSettlements(params: URLSearchParams): void {
  if (!canSettle()) {
    clear(main, h("h1", {}, "Settlements"), h("p", {}, "Settlements are shown to billing and admin tokens."));
    return;
  }
  const account = params.get("account") ?? "";
  const page = params.get("page") ?? "";
  const form = h(
    "form",
    { class: "filters", role: "search", "aria-label": "Filter settlements" },
    h(
      "div",
      {},
      h("label", { for: "s-account" }, "Account"),
      h("input", { id: "s-account", name: "account", value: account, autocomplete: "off" }),
    ),
    h("button", { type: "submit", class: "primary" }, "Filter"),
  );
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const v = String(new FormData(form).get("account") ?? "").trim();
    location.hash = `#/settlements${v ? `?${new URLSearchParams({ account: v })}` : ""}`;
  });
  const results = h("div", { id: "settlements-results", "aria-live": "polite" }, h("p", {}, "Loading…"));
  clear(
    main,
    h("h1", {}, "Settlements"),
    h("p", { class: "hint" }, "Final jobs with an account or a billing context that are not settled yet, oldest final first."),
    form,
    results,
  );

  const go = (token: string) => {
    const p = new URLSearchParams(params);
    if (token) p.set("page", token);
    else p.delete("page");
    location.hash = `#/settlements${p.size ? `?${p}` : ""}`;
  };

  void (async () => {
    try {
      const r = await client.listSettlements({ account, pageSize: 50, pageToken: page });
      const before = pageTokens.get(account) ?? [];
      const table = h(
        "table",
        { id: "settlements" },
        h("caption", { class: "sr-only" }, "Unsettled final jobs, oldest final first"),
        h(
          "thead",
          {},
          h(
            "tr",
            {},
            ...["Job", "Account", "Workload", "Status", "Final", "Reserved", "Billing key", "Usage"].map((t) =>
              h("th", { scope: "col" }, t),
            ),
          ),
        ),
        h("tbody", {}, ...r.jobs.map(row)),
      );
      const pages = pager("Pages of settlements", page, r.nextPageToken, before, (tokens) => pageTokens.set(account, tokens), go);
      clear(results, r.jobs.length ? table : h("p", {}, "Nothing to settle."), pages);
    } catch (err) {
      clear(results, loadError("Could not list settlements", err));
    }
  })();
}

function row(j: Job): HTMLElement {
  const final = ts(j.completedAt);
  return h(
    "tr",
    { "data-job": j.id },
    h("td", {}, h("a", { href: `#/jobs/${j.id}`, class: "mono" }, j.id)),
    h("td", {}, j.account || "—"),
    h("td", {}, j.workload),
    h("td", {}, badge(jobStatusName(j.status))),
    h("td", {}, h("time", { datetime: final?.toISOString(), title: when(final) }, ago(final))),
    h("td", { class: "num" }, j.billing ? j.billing.reservedUnits.toLocaleString("en") : "—"),
    h("td", { class: "mono" }, j.billing?.billingKey || "—"),
    h("td", { class: "mono", "data-usage": j.id }, usageText(j.usage) || "—"),
  );
}
