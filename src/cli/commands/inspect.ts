// Reading what happened: `job tasks` (a job's tasks with their attempts and errors), `task get`
// (one task, attempt by attempt) and `jobs list` (newest jobs first, with each one's progress).
import {
  type GetJobResponse,
  GetTaskResponseSchema,
  JobStatus,
  ListJobsResponseSchema,
  ListTasksResponseSchema,
  TaskStatus,
  type Job,
  type TaskDetail,
  WaitingReason,
} from "../../../gen/leasehold/queue/v1/queue_pb.js";
import { JOB_STATUSES, TASK_STATUSES } from "../../queue/types.js";
import { intOption, parseJobStatus, parseTaskStatus, stringOption } from "../args.js";
import type { CommandSpec } from "../command.js";
import {
  attemptRow,
  errorText,
  waitingReasonName,
  jobStatusName,
  jsonOf,
  out,
  percent,
  printJson,
  table,
  taskErrorCell,
  taskStatusName,
  time,
} from "../format.js";

/** GetJob calls in flight at once for the PROGRESS column. */
const PROGRESS_CALLS = 8;

/**
 * Each job's progress as GetJob counts it ("42%"): a job list carries no task counts. A few calls
 * at a time, so a long list neither waits for one call after another nor floods the coordinator.
 */
async function progressOf(jobs: Job[], getJob: (jobId: string) => Promise<GetJobResponse>): Promise<string[]> {
  const cells: string[] = new Array<string>(jobs.length).fill("-");
  let next = 0;
  const worker = async () => {
    for (let i = next++; i < jobs.length; i = next++) cells[i] = percent((await getJob(jobs[i].id)).progress);
  };
  await Promise.all(Array.from({ length: Math.min(PROGRESS_CALLS, jobs.length) }, worker));
  return cells;
}

export const inspectCommands: CommandSpec[] = [
  {
    name: "job tasks",
    positionals: ["ID"],
    options: [{ name: "status", value: TASK_STATUSES.join("|") }],
    summary: ["a job's tasks in chunk order, with attempts and errors"],
    async run({ client, callOptions, json, args: [jobId], opts }) {
      const filter = stringOption(opts.status);
      const status = filter !== undefined ? parseTaskStatus(filter) : TaskStatus.UNSPECIFIED;
      const tasks: TaskDetail[] = [];
      let pageToken = "";
      do {
        const res = await client.listTasks({ jobId, status, pageSize: 1000, pageToken }, callOptions);
        tasks.push(...res.tasks);
        pageToken = res.nextPageToken;
      } while (pageToken !== "");
      if (json) printJson(jsonOf(ListTasksResponseSchema, { $typeName: "leasehold.queue.v1.ListTasksResponse", tasks, nextPageToken: "" }));
      else if (tasks.length === 0) out("no tasks");
      else {
        const rows = tasks.map((detail) => {
          const { task, attempts } = detail;
          return [
            String(task?.chunkIndex ?? "?"),
            taskStatusName(task?.status ?? TaskStatus.UNSPECIFIED),
            `${task?.attempt ?? 0}/${task?.maxAttempts ?? 0}`,
            attempts.at(-1)?.workerId || "-",
            task?.id ?? "?",
            taskErrorCell(detail),
          ];
        });
        out(table([["CHUNK", "STATUS", "ATTEMPT", "WORKER", "TASK", "ERROR"], ...rows]));
      }
      return 0;
    },
  },
  {
    name: "task get",
    positionals: ["ID"],
    options: [],
    summary: ["one task and each of its attempts: worker, times, outcome", "(a pending one: why it waits)"],
    async run({ client, callOptions, json, args: [taskId] }) {
      const res = await client.getTask({ taskId }, callOptions);
      if (json) printJson(jsonOf(GetTaskResponseSchema, res));
      else {
        const t = res.task;
        out(`task ${t?.id} (job ${t?.jobId}, chunk ${t?.chunkIndex}, workload ${t?.workload})`);
        out(`status:   ${taskStatusName(t?.status ?? TaskStatus.UNSPECIFIED)} (attempt ${t?.attempt ?? 0} of ${t?.maxAttempts ?? 0})`);
        // Why a pending task is not running (computed by the coordinator when asked).
        if (res.waitingReason !== WaitingReason.UNSPECIFIED)
          out(`waiting:  ${waitingReasonName(res.waitingReason)}${res.waitingDetail ? `: ${res.waitingDetail}` : ""}`);
        // The task's error is the cause only when it failed; otherwise an earlier attempt's.
        if (t?.errorCode)
          out(t.status === TaskStatus.FAILED ? `error:    ${errorText(t.errorCode, t.errorMessage)}` : `earlier:  ${taskErrorCell(res)}`);
        if (t?.resultUri) out(`result:   ${t.resultUri} ${t.resultSha256}`);
        if (res.attempts.length === 0) out("attempts: none (never leased)");
        else {
          out("attempts:");
          out(table(res.attempts.map(attemptRow)).replace(/^/gm, "  "));
        }
      }
      return 0;
    },
  },
  {
    name: "jobs list",
    positionals: [],
    options: [
      { name: "status", value: JOB_STATUSES.join("|") },
      { name: "workload", value: "W" },
      { name: "limit", value: "N" },
    ],
    summary: ["newest jobs first (at most --limit, default 50)"],
    async run({ client, callOptions, json, opts }) {
      const filter = stringOption(opts.status);
      const status = filter !== undefined ? parseJobStatus(filter) : JobStatus.UNSPECIFIED;
      const workload = stringOption(opts.workload) ?? "";
      const limit = intOption("limit", opts.limit, 1) ?? 50;
      const jobs: Job[] = [];
      let pageToken = "";
      do {
        const pageSize = Math.min(limit - jobs.length, 1000);
        const res = await client.listJobs({ status, workload, pageSize, pageToken }, callOptions);
        jobs.push(...res.jobs.slice(0, limit - jobs.length));
        pageToken = res.nextPageToken;
      } while (pageToken !== "" && jobs.length < limit);
      if (json)
        printJson(jsonOf(ListJobsResponseSchema, { $typeName: "leasehold.queue.v1.ListJobsResponse", jobs, nextPageToken: pageToken }));
      else if (jobs.length === 0) out("no jobs");
      else {
        const progress = await progressOf(jobs, (jobId) => client.getJob({ jobId }, callOptions));
        const rows = jobs.map((j, i) => [j.id, jobStatusName(j.status), progress[i], j.workload, String(j.priority), time(j.createdAt)]);
        out(table([["ID", "STATUS", "PROGRESS", "WORKLOAD", "PRIORITY", "CREATED"], ...rows]));
      }
      return 0;
    },
  },
];
