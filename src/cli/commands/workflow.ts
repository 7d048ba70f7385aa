// Workflows, jobs created together with the edges between them: `workflow create -f FILE`, `workflow
// get`, `workflow list`, `workflow watch`, `workflow cancel`, `workflow retry`.
import { ConnectError } from "@connectrpc/connect";
import {
  CancelWorkflowResponseSchema,
  CreateWorkflowResponseSchema,
  GetWorkflowResponseSchema,
  JobStatus,
  ListWorkflowsResponseSchema,
  RetryWorkflowResponseSchema,
  type Workflow,
  type WorkflowNodeCounts,
} from "../../../gen/leasehold/queue/v1/queue_pb.js";
import { intOption, readInput, stringOption } from "../args.js";
import type { CommandSpec } from "../command.js";
import { CliError, describeConnectError, UsageError } from "../errors.js";
import { jobStatusName, jsonOf, out, printJson, table, time } from "../format.js";
import { parseWorkflowFile, withNodeNames } from "../workflow-file.js";
import { watchWorkflow } from "../workflow-watch.js";

const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? "" : "s"}`;

/** "completed 2, running 1" (the statuses with a node in them). */
export function nodeCountsText(c: WorkflowNodeCounts | undefined): string {
  if (!c) return "-";
  const parts = (["waiting", "scheduled", "pending", "running", "completed", "failed", "cancelled"] as const)
    .filter((s) => c[s] > 0)
    .map((s) => `${s} ${c[s]}`);
  return parts.length > 0 ? parts.join(", ") : "-";
}

/** A workflow as lines: its status and times, then a table of its nodes with their edges and jobs. */
export function describeWorkflow(w: Workflow): string[] {
  const done = w.nodes.filter((n) => n.status === JobStatus.COMPLETED).length;
  const lines = [
    `workflow ${w.id}${w.name ? ` (${w.name})` : ""}: ${jobStatusName(w.status)}, ${done}/${w.nodes.length} nodes completed`,
    `nodes:    ${nodeCountsText(w.nodeCounts)}`,
    `created:  ${time(w.createdAt)}${w.completedAt ? `, final ${time(w.completedAt)}` : ""}`,
  ];
  if (w.account) lines.push(`account:  ${w.account}`);
  if (w.scheduleName) lines.push(`schedule: ${w.scheduleName} (tick ${time(w.scheduleFireTime)})`);
  const byName = new Map(w.nodes.map((n) => [n.name, n]));
  const rows = w.nodes.map((n) => {
    const after = n.after.map((a) => `${a.node}${a.optional ? "?" : ""}`).join(",") || "-";
    let note = "";
    if (n.status === JobStatus.WAITING) {
      const on = n.after.filter((a) => {
        const p = byName.get(a.node);
        return p !== undefined && ![JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED].includes(p.status);
      });
      const outside = n.waitingParents - on.length;
      note = `waits for ${[...on.map((a) => a.node), ...(outside > 0 ? [plural(outside, "job")] : [])].join(", ") || plural(n.waitingParents, "parent")}`;
    } else if (n.status === JobStatus.CANCELLED && n.cancelReason) note = n.cancelReason;
    return [n.name, jobStatusName(n.status), n.workload, `${n.completedTasks}/${n.totalTasks}`, after, n.jobId, note];
  });
  lines.push(table([["NODE", "STATUS", "WORKLOAD", "TASKS", "AFTER", "JOB", ""], ...rows]).replace(/ +$/gm, ""));
  return lines;
}

export const workflowCommands: CommandSpec[] = [
  {
    name: "workflow create",
    positionals: [],
    options: [
      {
        name: "file",
        short: "f",
        value: "FILE.yaml|-",
        required: true,
        help: "the workflow file (YAML or JSON; - reads stdin):\nnodes by name, each a CreateJob body with after: [names]",
      },
      { name: "name", value: "LABEL" },
      { name: "idempotency-key", value: "K" },
      { name: "account", value: "NAME" },
      { name: "watch" },
    ],
    summary: ["create a workflow from a YAML file: named nodes, each", "a CreateJob body with after: [names]; --watch follows it"],
    async run(inv) {
      const file = stringOption(inv.opts.file);
      if (file === undefined) throw new UsageError("workflow create: -f FILE.yaml (or - for stdin) is required");
      const source = file === "-" ? "stdin" : file;
      const request = parseWorkflowFile(source, await readInput(file));
      request.name = stringOption(inv.opts.name) ?? request.name;
      request.idempotencyKey = stringOption(inv.opts["idempotency-key"]) ?? request.idempotencyKey;
      request.account = stringOption(inv.opts.account) ?? request.account;
      let res;
      try {
        res = await inv.client.createWorkflow(request, inv.callOptions);
      } catch (err) {
        // The coordinator names a refused node by its place (nodes[2]); the file names it by its name.
        if (err instanceof ConnectError) throw new CliError(withNodeNames(describeConnectError(err), request));
        throw err;
      }
      const w = res.workflow;
      if (inv.json) printJson(jsonOf(CreateWorkflowResponseSchema, res));
      else if (w) for (const line of describeWorkflow(w)) out(line);
      if (inv.opts.watch === true && w) return watchWorkflow(inv, w.id);
      return 0;
    },
  },
  {
    name: "workflow get",
    positionals: ["ID"],
    options: [],
    summary: ["a workflow and its nodes: status, tasks, edges, jobs"],
    async run({ client, callOptions, json, args: [workflowId] }) {
      const res = await client.getWorkflow({ workflowId }, callOptions);
      if (json) printJson(jsonOf(GetWorkflowResponseSchema, res));
      else if (res.workflow) for (const line of describeWorkflow(res.workflow)) out(line);
      return 0;
    },
  },
  {
    name: "workflow list",
    positionals: [],
    options: [
      { name: "account", value: "A" },
      { name: "schedule", value: "NAME" },
      { name: "limit", value: "N" },
    ],
    summary: ["newest workflows first (at most --limit, default 50)", "with their nodes counted by status"],
    async run({ client, callOptions, json, opts }) {
      const limit = intOption("limit", opts.limit, 1) ?? 50;
      const account = stringOption(opts.account) ?? "";
      const scheduleName = stringOption(opts.schedule) ?? "";
      const workflows: Workflow[] = [];
      let pageToken = "";
      do {
        const pageSize = Math.min(limit - workflows.length, 1000);
        const res = await client.listWorkflows({ account, scheduleName, pageSize, pageToken }, callOptions);
        workflows.push(...res.workflows.slice(0, limit - workflows.length));
        pageToken = res.nextPageToken;
      } while (pageToken !== "" && workflows.length < limit);
      if (json) {
        printJson(
          jsonOf(ListWorkflowsResponseSchema, {
            $typeName: "leasehold.queue.v1.ListWorkflowsResponse",
            workflows,
            nextPageToken: pageToken,
          }),
        );
      } else if (workflows.length === 0) out("no workflows");
      else {
        const rows = workflows.map((w) => [w.id, jobStatusName(w.status), w.name || "-", nodeCountsText(w.nodeCounts), time(w.createdAt)]);
        out(table([["ID", "STATUS", "NAME", "NODES", "CREATED"], ...rows]));
      }
      return 0;
    },
  },
  {
    name: "workflow watch",
    positionals: ["ID"],
    options: [],
    summary: ["follow a workflow until every node is final: a line", "per node (redrawn in place on a terminal)"],
    run: (inv) => watchWorkflow(inv, inv.args[0]),
  },
  {
    name: "workflow cancel",
    positionals: ["ID"],
    options: [{ name: "reason", value: "R" }],
    summary: ["cancel every node of a workflow not final yet"],
    async run({ client, callOptions, json, args: [workflowId], opts }) {
      const res = await client.cancelWorkflow({ workflowId, reason: stringOption(opts.reason) ?? "" }, callOptions);
      if (json) printJson(jsonOf(CancelWorkflowResponseSchema, res));
      else
        out(
          `workflow ${workflowId} ${jobStatusName(res.workflow?.status ?? JobStatus.UNSPECIFIED)}: ${plural(res.cancelledNodes, "node")} cancelled`,
        );
      return 0;
    },
  },
  {
    name: "workflow retry",
    positionals: ["ID"],
    options: [{ name: "max-attempts", value: "N" }],
    summary: ["run its failed and cancelled nodes again, and every", "node after them"],
    async run({ client, callOptions, json, args: [workflowId], opts }) {
      const maxAttempts = intOption("max-attempts", opts["max-attempts"], 1);
      const res = await client.retryWorkflow({ workflowId, maxAttempts }, callOptions);
      if (json) printJson(jsonOf(RetryWorkflowResponseSchema, res));
      else {
        out(
          `workflow ${workflowId} ${jobStatusName(res.workflow?.status ?? JobStatus.UNSPECIFIED)}: ${plural(res.retriedNodes, "node")} (${plural(res.retriedTasks, "task")}) back to run`,
        );
      }
      return 0;
    },
  },
];
