// Schedules (#/schedules, admin only): each periodic schedule with its cron, timezone, workload,
// next fire times and last job, and buttons to pause, resume or delete it (after a confirmation).
// Schedules are created with PutSchedule (the API, `leasehold schedule put`, the Python client).
import { CatchUpPolicy, OverlapPolicy, type Schedule } from "../../../gen/leasehold/queue/v1/queue_pb.js";
import { client } from "../api.js";
import { confirmAction, showError, showOk } from "../components/outcome.js";
import { ts } from "../components/status.js";
import { clear, h, when } from "../dom.js";
import { main } from "../layout.js";
import { isAdmin } from "../session.js";

const OVERLAP: Record<number, string> = { [OverlapPolicy.ALLOW]: "allow", [OverlapPolicy.SKIP]: "skip" };
const CATCH_UP: Record<number, string> = { [CatchUpPolicy.SKIP]: "skip", [CatchUpPolicy.ONE]: "one", [CatchUpPolicy.ALL]: "all" };

export function renderSchedules(): void {
  if (!isAdmin()) {
    clear(main, h("h1", {}, "Schedules"), h("p", {}, "Schedules need an admin token."));
    return;
  }
  const list = h("div", { id: "schedule-list" }, h("p", {}, "Loading…"));

  const act = async (s: Schedule, action: "pause" | "resume" | "delete") => {
    const text = {
      pause: `Pause schedule "${s.name}"? Its ticks create no job until it is resumed, and missed ticks are not caught up.`,
      resume: `Resume schedule "${s.name}" from its next tick?`,
      delete: `Delete schedule "${s.name}"? It creates no more jobs; the jobs it created stay.`,
    }[action];
    if (!(await confirmAction(text, `${action[0].toUpperCase()}${action.slice(1)} schedule`))) return;
    try {
      if (action === "pause") await client.pauseSchedule({ name: s.name });
      else if (action === "resume") await client.resumeSchedule({ name: s.name });
      else await client.deleteSchedule({ name: s.name });
      showOk(`Schedule ${s.name} ${action === "delete" ? "deleted" : action === "pause" ? "paused" : "resumed"}.`);
      await loadList();
    } catch (err) {
      showError(`${action[0].toUpperCase()}${action.slice(1)} schedule ${s.name}`, err);
    }
  };

  const row = (s: Schedule) =>
    h(
      "tr",
      { "data-schedule": s.name },
      h("th", { scope: "row" }, s.name),
      h("td", {}, h("code", {}, s.cron)),
      h("td", {}, s.timezone),
      h("td", {}, s.job?.workload ?? ""),
      h("td", {}, `overlap ${OVERLAP[s.overlap] ?? "allow"}, catch-up ${CATCH_UP[s.catchUp] ?? "one"}`),
      h("td", {}, s.paused ? "paused" : "active"),
      h(
        "td",
        { class: "next-fire-times" },
        s.nextFireTimes.length === 0 ? "—" : h("ul", { class: "plain" }, ...s.nextFireTimes.map((t) => h("li", {}, when(ts(t))))),
      ),
      h("td", {}, s.lastJobId ? h("a", { href: `#/jobs/${encodeURIComponent(s.lastJobId)}` }, when(ts(s.lastFireTime))) : "—"),
      h(
        "td",
        {},
        s.paused
          ? h("button", { type: "button", "aria-label": `Resume schedule ${s.name}`, onclick: () => void act(s, "resume") }, "Resume")
          : h("button", { type: "button", "aria-label": `Pause schedule ${s.name}`, onclick: () => void act(s, "pause") }, "Pause"),
        " ",
        h("button", { type: "button", "aria-label": `Delete schedule ${s.name}`, onclick: () => void act(s, "delete") }, "Delete"),
      ),
    );

  const loadList = async () => {
    try {
      const r = await client.listSchedules({});
      if (r.schedules.length === 0) {
        clear(list, h("p", {}, "No schedules. Create one with PutSchedule (PUT /schedules/{name}) or `leasehold schedule put`."));
        return;
      }
      clear(
        list,
        h(
          "table",
          { id: "schedules" },
          h(
            "thead",
            {},
            h(
              "tr",
              {},
              ...["Name", "Cron", "Timezone", "Workload", "Policies", "State", "Next fire times (UTC)", "Last job", ""].map((t) =>
                h("th", { scope: "col" }, t || h("span", { class: "sr-only" }, "Actions")),
              ),
            ),
          ),
          h("tbody", {}, ...r.schedules.map(row)),
        ),
      );
    } catch (err) {
      showError("Listing schedules", err);
    }
  };
  clear(main, h("h1", {}, "Schedules"), h("section", { class: "card", "aria-label": "Periodic schedules" }, list));
  void loadList();
}
