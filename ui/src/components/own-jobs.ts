// The overview's "Your jobs", for a token that may not read /metrics (a submitter, bound to an
// account or not, and billing): its newest jobs by status, through ListJobs, which the coordinator
// scopes to a bound token's account. /metrics holds every account's counts, so only admin and
// metrics tokens read it, and this page never asks for it with another token.
import { JobStatus } from "../../../gen/leasehold/queue/v1/queue_pb.js";
import { client } from "../api.js";
import { h } from "../dom.js";
import { jobStatusName } from "./status.js";

/** How many of the newest jobs are counted. */
const NEWEST = 200;

export async function ownJobsSection(): Promise<HTMLElement> {
  const page = await client.listJobs({ pageSize: NEWEST });
  const counts = new Map<JobStatus, number>();
  for (const job of page.jobs) counts.set(job.status, (counts.get(job.status) ?? 0) + 1);
  const statuses = [...counts.keys()].sort((a, b) => a - b);
  return h(
    "section",
    { class: "card", "aria-labelledby": "own-jobs-h" },
    h("h2", { id: "own-jobs-h" }, "Your jobs"),
    h(
      "p",
      {},
      `The newest ${NEWEST} jobs this token may read, by status (a token bound to an account reads that account's only). `,
      "Task counts per workload and rates come from /metrics, which admin and metrics tokens read.",
    ),
    statuses.length === 0
      ? h("p", {}, "No job yet.")
      : h(
          "table",
          { id: "own-jobs" },
          h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Status"), h("th", { scope: "col" }, "Jobs"))),
          h(
            "tbody",
            {},
            ...statuses.map((s) =>
              h(
                "tr",
                {},
                h("th", { scope: "row" }, h("a", { href: `#/jobs?status=${jobStatusName(s)}` }, jobStatusName(s))),
                h("td", {}, counts.get(s) ?? 0),
              ),
            ),
          ),
        ),
  );
}
