// Workloads (#/workloads, admin only): the registered workloads with their caps, rate limits and
// whether each is paused, Pause / Resume buttons, and a form that registers one or edits an
// existing one after a confirmation.
import type { JsonObject } from "@bufbuild/protobuf";
import { FailurePolicy, type Workload } from "../../../gen/leasehold/queue/v1/queue_pb.js";
import { client } from "../api.js";
import { confirmAction, showError, showOk, showProblem } from "../components/outcome.js";
import { ts } from "../components/status.js";
import { clear, duration, h, when } from "../dom.js";
import { main } from "../layout.js";
import { isAdmin } from "../session.js";

/** "8", or "—" for no cap. */
const cap = (n: number) => (n > 0 ? String(n) : "—");

function rateText(w: Workload): string {
  return w.maxLeasesPerSecond > 0 ? `${w.maxLeasesPerSecond}/s (burst ${w.leasesBurst})` : "—";
}

export function renderWorkloads(): void {
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
    h(
      "p",
      { id: "wl-name-help", class: "hint" },
      "Lower case letters, digits, _ and -; an existing name is updated: every setting is replaced (an empty cap or rate removes it; pause is kept).",
    ),
    field("wl-max-attempts", "Max attempts (empty: server default)", { type: "number", min: 1, max: 100 }),
    field("wl-lease-seconds", "Lease seconds (empty: server default)", { type: "number", min: 1, max: 86400 }),
    field("wl-max-pending", "Max pending seconds (empty or 0: never expire)", { type: "number", min: 0 }),
    h(
      "div",
      {},
      h("label", { for: "wl-failure-policy" }, "Failure policy"),
      h(
        "select",
        { id: "wl-failure-policy", name: "wl-failure-policy" },
        h("option", { value: "fail_fast" }, "Fail fast (a failed task fails its job)"),
        h("option", { value: "continue" }, "Continue (the other tasks still run)"),
      ),
    ),
    field("wl-max-failed", "Failed tasks a job tolerates (empty: 0)", { type: "number", min: 0 }),
    field("wl-max-leased", "Max leased at once (empty: no cap)", { type: "number", min: 1 }),
    field("wl-max-per-key", "Max leased per concurrency key (empty: no cap)", { type: "number", min: 1 }),
    field("wl-rate", "Max leases per second (empty: no limit)", { type: "number", min: 0, step: "any" }),
    field("wl-burst", "Burst (with a rate: at least 1)", { type: "number", min: 1 }),
    h(
      "div",
      {},
      h("label", { for: "wl-schema" }, "Parameters JSON Schema (optional)"),
      h("textarea", { id: "wl-schema", name: "wl-schema", rows: 4 }),
    ),
    h("button", { type: "submit", class: "primary", id: "wl-submit" }, "Save workload"),
  );
  const input = (id: string) => form.querySelector(`#${id}`) as HTMLInputElement;
  const val = (id: string) => input(id).value.trim();
  const num = (id: string) => (val(id) === "" ? undefined : Number(val(id)));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    void (async () => {
      const name = val("wl-name");
      let schema: JsonObject | undefined;
      try {
        schema = val("wl-schema") ? (JSON.parse(val("wl-schema")) as JsonObject) : undefined;
      } catch {
        showProblem("The parameters schema is not valid JSON.");
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
          failurePolicy: val("wl-failure-policy") === "continue" ? FailurePolicy.CONTINUE : FailurePolicy.FAIL_FAST,
          maxFailedTasks: num("wl-max-failed"),
          maxLeased: num("wl-max-leased"),
          maxLeasedPerKey: num("wl-max-per-key"),
          maxLeasesPerSecond: num("wl-rate"),
          leasesBurst: num("wl-burst"),
        });
        showOk(`Workload ${r.workload?.name ?? name} saved.`);
        await loadList();
      } catch (err) {
        showError("Saving the workload", err);
      }
    })();
  });
  const edit = (w: Workload) => {
    const set = (id: string, v: number) => (input(id).value = v > 0 ? String(v) : "");
    input("wl-name").value = w.name;
    input("wl-max-attempts").value = String(w.maxAttempts);
    input("wl-lease-seconds").value = String(w.leaseSeconds);
    input("wl-max-pending").value = String(w.maxPendingSeconds);
    input("wl-failure-policy").value = w.failurePolicy === FailurePolicy.CONTINUE ? "continue" : "fail_fast";
    set("wl-max-failed", w.maxFailedTasks);
    set("wl-max-leased", w.maxLeased);
    set("wl-max-per-key", w.maxLeasedPerKey);
    set("wl-rate", w.maxLeasesPerSecond);
    set("wl-burst", w.leasesBurst);
    (form.querySelector("#wl-schema") as HTMLTextAreaElement).value = w.parametersSchema ? JSON.stringify(w.parametersSchema, null, 2) : "";
    input("wl-name").focus();
  };
  const pauseOrResume = async (w: Workload) => {
    const pause = !w.paused;
    const question = pause
      ? `Pause workload "${w.name}"? Claims lease none of its tasks until it is resumed; leases already held run on, and jobs are still accepted.`
      : `Resume workload "${w.name}"? Its pending tasks are leased again at once.`;
    if (!(await confirmAction(question, pause ? "Pause workload" : "Resume workload"))) return;
    try {
      if (pause) await client.pauseWorkload({ name: w.name });
      else await client.resumeWorkload({ name: w.name });
      showOk(`Workload ${w.name} ${pause ? "paused" : "resumed"}.`);
      await loadList();
    } catch (err) {
      showError(pause ? "Pausing the workload" : "Resuming the workload", err);
    }
  };
  const headers = ["Name", "Max attempts", "Lease", "Max pending", "Schema", "Max leased", "Per key", "Rate", "State", "Updated", ""];
  const loadList = async () => {
    try {
      const r = await client.listWorkloads({});
      clear(
        list,
        h(
          "table",
          { id: "workloads" },
          h("thead", {}, h("tr", {}, ...headers.map((t) => h("th", { scope: "col" }, t || h("span", { class: "sr-only" }, "Actions"))))),
          h(
            "tbody",
            {},
            ...r.workloads.map((w) =>
              h(
                "tr",
                { "data-workload": w.name, "data-paused": w.paused ? "true" : "false" },
                h("th", { scope: "row" }, w.name),
                h("td", { class: "num" }, w.maxAttempts),
                h("td", { class: "num" }, duration(w.leaseSeconds)),
                h("td", { class: "num" }, w.maxPendingSeconds ? duration(w.maxPendingSeconds) : "never"),
                h("td", {}, w.parametersSchema ? "yes" : "no"),
                h("td", { class: "num", "data-col": "max-leased" }, cap(w.maxLeased)),
                h("td", { class: "num", "data-col": "per-key" }, cap(w.maxLeasedPerKey)),
                h("td", { class: "num", "data-col": "rate" }, rateText(w)),
                h(
                  "td",
                  { "data-col": "state" },
                  h("span", { class: `badge ${w.paused ? "paused" : "active"}` }, w.paused ? "paused" : "active"),
                ),
                h("td", {}, when(ts(w.updatedAt))),
                h(
                  "td",
                  { class: "actions" },
                  h("button", { type: "button", "aria-label": `Edit workload ${w.name}`, onclick: () => edit(w) }, "Edit"),
                  " ",
                  h(
                    "button",
                    {
                      type: "button",
                      class: w.paused ? "resume" : "pause",
                      "aria-label": `${w.paused ? "Resume" : "Pause"} workload ${w.name}`,
                      onclick: () => void pauseOrResume(w),
                    },
                    w.paused ? "Resume" : "Pause",
                  ),
                ),
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
