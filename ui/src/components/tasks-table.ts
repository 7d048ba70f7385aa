// A job's tasks, attempts and errors: a table of 50 tasks a page, filtered by status, loaded again
// when the job's events say tasks changed.
import { AttemptOutcome, TaskStatus, type TaskAttempt } from "../../../gen/leasehold/queue/v1/queue_pb.js";
import { client } from "../api.js";
import { append, clear, h } from "../dom.js";
import { showError } from "./outcome.js";
import { attemptText, badge, taskStatusName } from "./status.js";

export interface JobTablesContext {
  jobId: string;
  signal: AbortSignal;
  /** True once the page has been left: late answers are dropped. */
  stopped(): boolean;
  openChunk(chunk: number): void;
}

/**
 * Each attempt, and for a cancelled task why it stopped: the cancellation, never an earlier
 * attempt's error (which is marked as that attempt's, attemptText).
 */
function attemptsCell(status: TaskStatus, at: TaskAttempt[]): HTMLElement | string {
  const items = at.map((a) => h("li", {}, attemptText(a, status)));
  if (status === TaskStatus.CANCELLED) {
    const whileLeased = at.at(-1)?.outcome === AttemptOutcome.CANCELLED;
    items.push(h("li", { "data-cause": "cancelled" }, whileLeased ? "Cancelled with the job while leased" : "Cancelled with the job"));
  }
  return items.length ? h("ul", { class: "plain" }, ...items) : "—";
}

/** Fills `card` with the filter and the table; load() (re)reads the current page. */
export function createTasksTable(card: HTMLElement, ctx: JobTablesContext): { load(): Promise<void> } {
  let taskFilter = TaskStatus.UNSPECIFIED;
  let taskTokens: string[] = [];
  let taskPage = "";
  const tasksBody = h("div", { id: "tasks-body" });
  const taskSelect = h("select", { id: "task-status" }, h("option", { value: "0" }, "any"));
  for (const s of [TaskStatus.PENDING, TaskStatus.LEASED, TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED])
    taskSelect.append(h("option", { value: s }, taskStatusName(s)));
  taskSelect.addEventListener("change", () => {
    taskFilter = Number(taskSelect.value) as TaskStatus;
    taskTokens = [];
    taskPage = "";
    void loadTasks();
  });
  append(card, h("div", { class: "filters" }, h("div", {}, h("label", { for: "task-status" }, "Task status"), taskSelect)), tasksBody);

  const loadTasks = async () => {
    try {
      const r = await client.listTasks({ jobId: ctx.jobId, status: taskFilter, pageSize: 50, pageToken: taskPage }, { signal: ctx.signal });
      clear(
        tasksBody,
        r.tasks.length === 0
          ? h("p", {}, "No task matches.")
          : h(
              "table",
              { id: "tasks" },
              h(
                "thead",
                {},
                h("tr", {}, ...["Chunk", "Status", "Attempt", "Worker", "Attempts and errors"].map((t) => h("th", { scope: "col" }, t))),
              ),
              h(
                "tbody",
                {},
                ...r.tasks.map(({ task, attempts: at }) =>
                  h(
                    "tr",
                    {},
                    h(
                      "td",
                      { class: "num" },
                      h(
                        "button",
                        { type: "button", class: "link", onclick: () => ctx.openChunk(task?.chunkIndex ?? 0) },
                        task?.chunkIndex ?? 0,
                      ),
                    ),
                    h("td", {}, badge(taskStatusName(task?.status ?? 0))),
                    h("td", { class: "num" }, `${task?.attempt ?? 0}/${task?.maxAttempts ?? 0}`),
                    h("td", { class: "mono" }, task?.leaseOwner || "—"),
                    h("td", {}, attemptsCell(task?.status ?? TaskStatus.UNSPECIFIED, at)),
                  ),
                ),
              ),
            ),
        h(
          "nav",
          { class: "pager", "aria-label": "Pages of tasks" },
          h(
            "button",
            {
              type: "button",
              disabled: !taskPage,
              onclick: () => {
                taskPage = taskTokens.pop() ?? "";
                void loadTasks();
              },
            },
            "Previous tasks",
          ),
          h(
            "button",
            {
              type: "button",
              disabled: !r.nextPageToken,
              onclick: () => {
                taskTokens.push(taskPage);
                taskPage = r.nextPageToken;
                void loadTasks();
              },
            },
            "Next tasks",
          ),
        ),
      );
    } catch (err) {
      if (!ctx.stopped()) showError("Listing tasks", err);
    }
  };
  return { load: loadTasks };
}
