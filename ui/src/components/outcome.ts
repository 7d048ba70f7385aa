// What an action did, said in the outcome line (with the request id to quote when it failed), and
// the confirmation every change asks for first.
import { describeError } from "../api.js";
import { clear, h } from "../dom.js";
import { outcome } from "../layout.js";

const dismiss = () => h("button", { type: "button", class: "link", "aria-label": "Dismiss message", onclick: () => clear(outcome) }, "×");

export function showOk(text: string): void {
  outcome.className = "outcome ok";
  clear(outcome, h("span", {}, text), dismiss());
}

export function showError(action: string, err: unknown): void {
  const e = describeError(err);
  outcome.className = "outcome error";
  clear(
    outcome,
    h("span", {}, `${action} failed: ${e.message}`),
    e.requestId ? h("span", { class: "rid" }, " Request id: ", h("code", { id: "outcome-request-id" }, e.requestId)) : null,
    dismiss(),
  );
}

/** A plain problem of the page's own (no call was made). */
export function showProblem(text: string): void {
  outcome.className = "outcome error";
  clear(outcome, text);
}

/** A failed load, in place of what could not be loaded: "Could not … (request id …)". */
export function loadError(what: string, err: unknown): HTMLElement {
  const e = describeError(err);
  return h("p", { class: "error-text", role: "alert" }, `${what}: ${e.message}`, e.requestId ? ` (request id ${e.requestId})` : "");
}

export function confirmAction(text: string, confirmLabel: string): Promise<boolean> {
  const dlg = document.getElementById("confirm") as HTMLDialogElement;
  (document.getElementById("confirm-text") as HTMLElement).textContent = text;
  (document.getElementById("confirm-yes") as HTMLElement).textContent = confirmLabel;
  dlg.returnValue = "";
  dlg.showModal();
  // The safe choice has the focus: Enter alone never confirms.
  (document.getElementById("confirm-no") as HTMLElement).focus();
  return new Promise((resolve) => dlg.addEventListener("close", () => resolve(dlg.returnValue === "ok"), { once: true }));
}
