// The overview's "Tasks by concurrency key" (admins): for each workload whose tasks carry
// concurrency keys, each key's leased tasks against its cap and its pending ones (ListWorkloadKeys,
// counted by the coordinator when asked), busiest first.
import type { Workload, WorkloadKey } from "../../../gen/leasehold/queue/v1/queue_pb.js";
import { client } from "../api.js";
import { h } from "../dom.js";
import { loadError } from "./outcome.js";

/** Keys shown per workload: the busiest. */
const KEYS_SHOWN = 20;

function keyTable(w: Workload, keys: WorkloadKey[], truncated: boolean): HTMLElement {
  const id = `keys-${w.name}`;
  return h(
    "div",
    { class: "key-counts" },
    h(
      "table",
      { id, "data-workload": w.name },
      h(
        "caption",
        {},
        w.name,
        w.maxLeasedPerKey ? ` (per-key cap ${w.maxLeasedPerKey})` : "",
        w.paused ? " — paused" : "",
        truncated ? ` — the ${keys.length} busiest keys` : "",
      ),
      h(
        "thead",
        {},
        h(
          "tr",
          {},
          h("th", { scope: "col" }, "Key"),
          h("th", { scope: "col", class: "num" }, "Leased"),
          h("th", { scope: "col", class: "num" }, "Cap"),
          h("th", { scope: "col", class: "num" }, "Pending"),
        ),
      ),
      h(
        "tbody",
        {},
        ...keys.map((k) =>
          h(
            "tr",
            { "data-key": k.key },
            h("th", { scope: "row", class: "mono" }, k.key === "" ? "(no key)" : k.key),
            h("td", { class: "num" }, k.leased),
            h("td", { class: "num" }, k.maxLeased ? `${k.maxLeased}${k.ownLimit ? " (own)" : ""}` : "—"),
            h("td", { class: "num" }, k.pending),
          ),
        ),
      ),
    ),
  );
}

/**
 * How often the keys are counted again: each count reads a workload's unfinished tasks, so a tab
 * left open on a deep queue asks for it less often than for the cached /metrics.
 */
const REFRESH_MS = 15_000;

/**
 * One overview's source of the section: each call gives the section, or null when no workload has
 * keyed tasks, counted anew at most every REFRESH_MS (a new overview counts at once).
 */
export function keyCountsSource(): () => Promise<HTMLElement | null> {
  let last: { at: number; section: HTMLElement | null } | undefined;
  return async () => {
    if (last && performance.now() - last.at < REFRESH_MS) return last.section;
    const section = await countKeys();
    last = { at: performance.now(), section };
    return section;
  };
}

async function countKeys(): Promise<HTMLElement | null> {
  try {
    const { workloads } = await client.listWorkloads({});
    const lists = await Promise.all(
      workloads.map(async (w) => ({ w, r: await client.listWorkloadKeys({ name: w.name, limit: KEYS_SHOWN }) })),
    );
    const keyed = lists.filter(({ r }) => r.keys.some((k) => k.key !== ""));
    if (keyed.length === 0) return null;
    return h(
      "section",
      { class: "card", "aria-labelledby": "keys-h", id: "key-counts" },
      h("h2", { id: "keys-h" }, "Tasks by concurrency key"),
      ...keyed.map(({ w, r }) => keyTable(w, r.keys, r.truncated)),
      h("p", { class: "hint" }, "Leased counts live leases, as the caps do; a key's own cap (PutKeyLimit) is marked “own”."),
    );
  } catch (err) {
    return h("section", { class: "card" }, loadError("Could not load the per-key counts", err));
  }
}
