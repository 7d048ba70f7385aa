// Workloads (#/workloads, admin only): the registered workloads, and a form that registers one or
// edits an existing one after a confirmation.
import type { JsonObject } from "@bufbuild/protobuf";
import type { Workload } from "../../../gen/leasehold/queue/v1/queue_pb.js";
import { client } from "../api.js";
import { confirmAction, showError, showOk, showProblem } from "../components/outcome.js";
import { ts } from "../components/status.js";
import { clear, duration, h, when } from "../dom.js";
import { main } from "../layout.js";
import { isAdmin } from "../session.js";

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
