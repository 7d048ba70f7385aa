// The overview's "Workers holding leases": who holds what, from the leases of the newest running
// jobs (a worker is seen while it holds a lease; the coordinator keeps no list of workers).
import { JobStatus, TaskStatus } from "../../../gen/leasehold/queue/v1/queue_pb.js";
import { client } from "../api.js";
import { duration, h } from "../dom.js";
import { ts } from "./status.js";

export async function workersSection(): Promise<HTMLElement> {
  const running = await client.listJobs({ status: JobStatus.RUNNING, pageSize: 20 });
  const byWorker = new Map<string, { tasks: number; jobs: Set<string>; expires: number }>();
  await Promise.all(
    running.jobs.map(async (job) => {
      const page = await client.listTasks({ jobId: job.id, status: TaskStatus.LEASED, pageSize: 1000 });
      for (const { task } of page.tasks) {
        if (!task?.leaseOwner) continue;
        const w = byWorker.get(task.leaseOwner) ?? { tasks: 0, jobs: new Set<string>(), expires: Infinity };
        w.tasks++;
        w.jobs.add(job.id);
        w.expires = Math.min(w.expires, ts(task.leaseExpiresAt)?.getTime() ?? Infinity);
        byWorker.set(task.leaseOwner, w);
      }
    }),
  );
  const rows = [...byWorker.entries()].sort((a, b) => a[0].localeCompare(b[0]));
  return h(
    "section",
    { class: "card", "aria-labelledby": "workers-h" },
    h("h2", { id: "workers-h" }, "Workers holding leases"),
    rows.length === 0
      ? h("p", {}, "No worker holds a lease right now.")
      : h(
          "table",
          { id: "workers" },
          h(
            "thead",
            {},
            h(
              "tr",
              {},
              h("th", { scope: "col" }, "Worker"),
              h("th", { scope: "col" }, "Tasks held"),
              h("th", { scope: "col" }, "Jobs"),
              h("th", { scope: "col" }, "Next lease expiry"),
            ),
          ),
          h(
            "tbody",
            {},
            ...rows.map(([name, w]) =>
              h(
                "tr",
                {},
                h("th", { scope: "row" }, name),
                h("td", {}, w.tasks),
                h("td", {}, ...[...w.jobs].flatMap((id, i) => [i ? ", " : "", h("a", { href: `#/jobs/${id}` }, id.slice(0, 8))])),
                h("td", {}, Number.isFinite(w.expires) ? `in ${duration((w.expires - Date.now()) / 1000)}` : "—"),
              ),
            ),
          ),
        ),
  );
}
