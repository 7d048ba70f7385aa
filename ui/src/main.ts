// The Leasehold console: a hash-routed page (#/, #/jobs, #/jobs/<id>, #/workflows, #/workflows/<id>,
// #/workloads, #/settlements) over the Connect API (api.ts). This file signs in and routes; each
// route is a page in pages/, built from the parts in components/. The overview reads /metrics every
// few seconds (the counts there are cached by the coordinator); a job page follows WatchJob and a
// workflow page WatchWorkflow, and each asks for anything else only when an event says something
// changed.
import "./style.css";
import { describeError, getToken, probeRole, setToken } from "./api.js";
import { clear, h } from "./dom.js";
import { main } from "./layout.js";
import { renderJob } from "./pages/job.js";
import { renderJobs } from "./pages/jobs.js";
import { renderOverview } from "./pages/overview.js";
import { renderSchedules } from "./pages/schedules.js";
import { renderSettlements } from "./pages/settlements.js";
import { renderSignIn } from "./pages/sign-in.js";
import { renderWorkflow } from "./pages/workflow.js";
import { renderWorkflows } from "./pages/workflows.js";
import { renderWorkloads } from "./pages/workloads.js";
import { canSettle, currentRole, isAdmin, setRole } from "./session.js";

/** Stops the current view's timers and streams when the route changes. */
let cleanup: (() => void) | undefined;

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
  const role = currentRole();
  if (role === "signed-out") return renderSignIn(() => void start());
  if (role === "worker") {
    clear(
      main,
      h("h1", {}, "Console"),
      h("p", {}, "This is a worker token: it cannot read jobs. Sign in with a submitter or admin token."),
    );
    return;
  }
  const job = /^\/jobs\/([^/]+)$/.exec(path);
  const workflow = /^\/workflows\/([^/]+)$/.exec(path);
  if (job) cleanup = renderJob(decodeURIComponent(job[1]));
  else if (workflow) cleanup = renderWorkflow(decodeURIComponent(workflow[1]));
  else if (path === "/jobs") renderJobs(params);
  else if (path === "/workflows") renderWorkflows(params);
  else if (path === "/workloads") renderWorkloads();
  else if (path === "/schedules") renderSchedules();
  else if (path === "/settlements") renderSettlements(params);
  else cleanup = renderOverview();
}

async function start(): Promise<void> {
  let role;
  try {
    role = await probeRole();
  } catch (err) {
    const e = describeError(err);
    clear(main, h("p", { class: "error-text", role: "alert" }, `The coordinator did not answer: ${e.message}`));
    return;
  }
  setRole(role);
  if (role === "signed-out" && getToken()) {
    setToken("");
    renderSignIn(() => void start(), "That token was not accepted.");
    return;
  }
  document.body.dataset.role = role;
  const who = document.getElementById("who") as HTMLElement;
  who.textContent = role === "open" ? "Open coordinator (no tokens)" : role === "signed-out" ? "" : `Signed in: ${role}`;
  (document.getElementById("sign-out") as HTMLButtonElement).hidden = !getToken();
  for (const el of document.querySelectorAll<HTMLElement>("[data-role=admin]")) el.hidden = !isAdmin();
  for (const el of document.querySelectorAll<HTMLElement>("[data-role=billing]")) el.hidden = !canSettle();
  route();
}

document.getElementById("sign-out")?.addEventListener("click", () => {
  setToken("");
  void start();
});
window.addEventListener("hashchange", route);
void start();
