// A job's result manifest: the first 200 results in chunk order (the REST route pages through the
// rest), loaded again when the job's events say tasks changed.
import { client } from "../api.js";
import { clear, h, when } from "../dom.js";
import { showError } from "./outcome.js";
import { ts } from "./status.js";
import type { JobTablesContext } from "./tasks-table.js";

export function createResultsTable(
  card: HTMLElement,
  ctx: Pick<JobTablesContext, "jobId" | "signal" | "stopped">,
): { load(): Promise<void> } {
  const resultsBody = h("div", { id: "results-body" });
  card.append(resultsBody);
  const loadResults = async () => {
    try {
      const rows: HTMLElement[] = [];
      let token = "";
      let shown = 0;
      do {
        const r = await client.listCompletedResults({ jobId: ctx.jobId, pageSize: 200, pageToken: token }, { signal: ctx.signal });
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
          ? h(
              "p",
              { class: "hint" },
              `The first ${shown} results, in chunk order; GET /jobs/${ctx.jobId}/results pages through all of them.`,
            )
          : null,
      );
    } catch (err) {
      if (!ctx.stopped()) showError("Listing results", err);
    }
  };
  return { load: loadResults };
}
