// The CLI's workflow pieces that need no coordinator: the workflow file read into a
// CreateWorkflowRequest (and its refusals, each naming the file and node), a refused node named by
// its name, the watch's per-node lines as a snapshot and events move them, and `workflow get`'s
// table. The commands against a live coordinator: cli-workflow.test.ts.
import { create, toJson, type MessageInitShape } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import {
  CreateWorkflowRequestSchema,
  JobStatus,
  WatchWorkflowResponseSchema,
  WorkflowEventSchema,
  WorkflowNodeCountsSchema,
  WorkflowNodeSchema,
  WorkflowSchema,
  type WorkflowEvent,
  type WorkflowNode,
} from "../../gen/leasehold/queue/v1/queue_pb.js";
import { describeWorkflow, nodeCountsText } from "../../src/cli/commands/workflow.js";
import { CliError } from "../../src/cli/errors.js";
import { parseWorkflowFile, withNodeNames } from "../../src/cli/workflow-file.js";
import { derivedStatus, WorkflowWatchState } from "../../src/cli/workflow-state.js";
import { runCli } from "../support/cli.js";
import { sha } from "../support/queue.js";

const SHA = sha("x");

const PIPELINE = `
# chunks, stitched, then reported
name: mesh-001
idempotency_key: mesh-001-v1
nodes:
  chunks:
    workload: scimesh
    failure_policy: continue
    tasks:
      - {chunk_index: 0, input_uri: s3://in/0, input_sha256: ${SHA}}
      - {chunk_index: 1, input_uri: s3://in/1, input_sha256: ${SHA}}
  stitch:
    after: [chunks]
    workload: stitch
    input_uri: s3://in/
    input_sha256: ${SHA}
    parameters: {out: s3://out/mesh-001}
  report:
    after:
      - stitch
      - {node: chunks, optional: true}
      - {job_id: 0190a4e2-0000-7000-8000-000000000001, optional: true}
    dependency_policy: all_final
    workload: report
    inputUri: s3://in/
    inputSha256: ${SHA}
`;

describe("the workflow file", () => {
  it("reads named nodes, their jobs and edges (by name, optional, and to a job outside) into a CreateWorkflowRequest", () => {
    const r = parseWorkflowFile("pipeline.yaml", PIPELINE);
    expect(toJson(CreateWorkflowRequestSchema, r, { useProtoFieldName: true })).toEqual({
      name: "mesh-001",
      idempotency_key: "mesh-001-v1",
      nodes: [
        {
          name: "chunks",
          job: {
            workload: "scimesh",
            failure_policy: "FAILURE_POLICY_CONTINUE",
            tasks: [
              { input_uri: "s3://in/0", input_sha256: SHA },
              { chunk_index: 1, input_uri: "s3://in/1", input_sha256: SHA },
            ],
          },
        },
        {
          name: "stitch",
          job: { workload: "stitch", input_uri: "s3://in/", input_sha256: SHA, parameters: { out: "s3://out/mesh-001" } },
          after: [{ node: "chunks" }],
        },
        {
          name: "report",
          job: {
            workload: "report",
            input_uri: "s3://in/",
            input_sha256: SHA,
            dependency_policy: "DEPENDENCY_POLICY_ALL_FINAL",
            after: [{ job_id: "0190a4e2-0000-7000-8000-000000000001", optional: true }],
          },
          after: [{ node: "stitch" }, { node: "chunks", optional: true }],
        },
      ],
    });
  });

  it("takes CreateWorkflowRequest's own JSON (nodes as a list) too", () => {
    const json = JSON.stringify({
      name: "two",
      nodes: [
        { name: "a", job: { workload: "w", input_uri: "s3://a", input_sha256: SHA } },
        {
          name: "b",
          job: { workload: "w", input_uri: "s3://b", input_sha256: SHA, dependency_policy: "all_final" },
          after: [{ node: "a" }],
        },
      ],
    });
    const r = parseWorkflowFile("wf.json", json);
    expect(r.nodes.map((n) => [n.name, n.after.map((a) => a.node), n.job?.dependencyPolicy])).toEqual([
      ["a", [], 0],
      ["b", ["a"], 2],
    ]);
  });

  it("refuses what is not a workflow, naming the file, the node and the field", () => {
    const refused = (text: string) => {
      try {
        parseWorkflowFile("p.yaml", text);
      } catch (err) {
        expect(err).toBeInstanceOf(CliError);
        return (err as Error).message;
      }
      throw new Error("accepted");
    };
    expect(refused("nodes: [a, b\n")).toMatch(/^p\.yaml: not YAML: .*line 2/);
    expect(refused("- a\n- b\n")).toMatch(/^p\.yaml: must be a mapping with nodes/);
    expect(refused("name: x\n")).toMatch(/^p\.yaml: nodes must map each node's name to its job/);
    expect(refused("nodes: {a: {workload: w}}\nowner: me\n")).toMatch(/^p\.yaml: unknown field "owner"/);
    expect(refused("nodes:\n  a: {workload: w, priorty: 3}\n")).toMatch(/^p\.yaml: node "a": not a CreateJobRequest: .*priorty/);
    expect(refused("nodes:\n  a: [1]\n")).toMatch(/^p\.yaml: node "a": must be a mapping/);
    expect(refused("nodes:\n  a: {workload: w, after: b}\n")).toMatch(/^p\.yaml: node "a": after must be a list/);
    expect(refused("nodes:\n  a: {workload: w, after: [{nod: b}]}\n")).toMatch(/^p\.yaml: node "a": after\[0\]: must be a node's name/);
    expect(refused("nodes:\n  a: {workload: w}\n  a: {workload: v}\n")).toMatch(/not YAML: .*[Uu]nique|not YAML: .*duplicate/i);
  });

  it("names a refused node by its name after its place in the coordinator's message", () => {
    const r = parseWorkflowFile("p.yaml", PIPELINE);
    expect(withNodeNames("nodes[2].after[0].node: unknown node; nodes[0].job.workload: not found; nodes[7]: ?", r)).toBe(
      "nodes[2] (report).after[0].node: unknown node; nodes[0] (chunks).job.workload: not found; nodes[7]: ?",
    );
  });

  it("a usage error needs no coordinator: no -f, or a policy without parents (exit 2)", async () => {
    const noFile = await runCli(["--url", "http://127.0.0.1:9", "workflow", "create"]);
    expect(noFile.code).toBe(2);
    expect(noFile.stderr).toMatch(/-f FILE\.yaml/);
    const policy = await runCli([
      "--url",
      "http://127.0.0.1:9",
      "job",
      "create",
      "w",
      "--input-uri",
      "s3://x",
      "--input-sha256",
      SHA,
      "--dependency-policy",
      "all_final",
    ]);
    expect(policy.code).toBe(2);
    expect(policy.stderr).toContain("--dependency-policy needs --after");
    const missing = await runCli(["--url", "http://127.0.0.1:9", "workflow", "create", "-f", "/nonexistent/p.yaml"]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain("cannot read /nonexistent/p.yaml: ENOENT");
  });
});

const node = (name: string, status: JobStatus, init: MessageInitShape<typeof WorkflowNodeSchema> = {}) =>
  create(WorkflowNodeSchema, { name, status, jobId: `job-${name}`, workload: "w", totalTasks: 2, ...init });

function snapshot(nodes: WorkflowNode[]) {
  return create(WatchWorkflowResponseSchema, {
    update: { case: "snapshot", value: { workflow: { id: "wf-1", name: "mesh", nodes } } },
  });
}

const event = (id: bigint, name: string, previousStatus: JobStatus, status: JobStatus) =>
  create(WatchWorkflowResponseSchema, {
    update: { case: "event", value: create(WorkflowEventSchema, { id, node: name, jobId: `job-${name}`, status, previousStatus }) },
  });

describe("workflow watch's state", () => {
  it("draws a line per node from the snapshot, and moves them with each node's events", () => {
    const s = new WorkflowWatchState("wf-1");
    s.apply(
      snapshot([
        node("chunks", JobStatus.RUNNING, { completedTasks: 1 }),
        node("stitch", JobStatus.WAITING, { after: [{ node: "chunks" }], totalTasks: 1 }),
        node("report", JobStatus.WAITING, { after: [{ node: "stitch" }], totalTasks: 1 }),
      ]),
    );
    expect(s.lines()).toEqual([
      "workflow wf-1 (mesh): running, 0/3 nodes completed",
      "chunks  running    [##########----------] 1/2 tasks",
      "stitch  waiting    [--------------------] 0/1 tasks  waits for chunks",
      "report  waiting    [--------------------] 0/1 tasks  waits for stitch",
    ]);
    const completed = event(5n, "chunks", JobStatus.RUNNING, JobStatus.COMPLETED);
    const done = s.apply(completed);
    expect(done?.name).toBe("chunks");
    done!.completed = 2;
    expect(s.eventLine(completed.update.value as WorkflowEvent, done)).toBe("chunks: running → completed (2/2 tasks completed)");
    s.apply(event(6n, "stitch", JobStatus.WAITING, JobStatus.PENDING));
    // An event the stream repeats after a reconnect changes nothing.
    expect(s.apply(event(6n, "stitch", JobStatus.WAITING, JobStatus.RUNNING))).toBeUndefined();
    expect(s.lastEventId).toBe(6n);
    expect(s.lines()[2]).toBe("stitch  pending    [--------------------] 0/1 tasks");
    expect(s.lines()[3]).toBe("report  waiting    [--------------------] 0/1 tasks  waits for stitch");
    s.apply(event(7n, "stitch", JobStatus.PENDING, JobStatus.FAILED));
    const cancelled = s.apply(event(8n, "report", JobStatus.WAITING, JobStatus.CANCELLED))!;
    cancelled.cancelReason = "parent stitch failed";
    expect(s.allFinal()).toBe(true);
    expect(s.status()).toBe(JobStatus.FAILED);
    expect(s.lines()[3]).toBe("report  cancelled  [--------------------] 0/1 tasks  parent stitch failed");
  });

  it("fits a terminal: the completed nodes are counted in one line when every node does not fit", () => {
    const s = new WorkflowWatchState("wf-2");
    s.apply(snapshot([...Array.from({ length: 6 }, (_, i) => node(`n${i}`, JobStatus.COMPLETED)), node("last", JobStatus.RUNNING)]));
    expect(s.lines(4)).toEqual([
      "workflow wf-1 (mesh): running, 6/7 nodes completed",
      "last  running    [--------------------] 0/2 tasks",
      "… 6 more nodes (6 completed)",
    ]);
  });

  it("derives the workflow's status from its nodes' as the coordinator does", () => {
    const { PENDING, WAITING, RUNNING, COMPLETED, FAILED, CANCELLED } = JobStatus;
    expect(derivedStatus([PENDING, WAITING])).toBe(PENDING);
    expect(derivedStatus([COMPLETED, WAITING])).toBe(RUNNING);
    expect(derivedStatus([COMPLETED, COMPLETED])).toBe(COMPLETED);
    expect(derivedStatus([COMPLETED, CANCELLED, FAILED])).toBe(FAILED);
    expect(derivedStatus([COMPLETED, CANCELLED])).toBe(CANCELLED);
  });
});

describe("workflow get's text", () => {
  it("a line for the workflow, its nodes' counts, then a table of nodes with their edges, jobs and why they wait", () => {
    const w = create(WorkflowSchema, {
      id: "wf-3",
      name: "mesh",
      status: JobStatus.RUNNING,
      nodeCounts: create(WorkflowNodeCountsSchema, { completed: 1, waiting: 1, cancelled: 1 }),
      nodes: [
        node("chunks", JobStatus.COMPLETED, { completedTasks: 2 }),
        node("stitch", JobStatus.WAITING, { after: [{ node: "chunks" }, { node: "lint", optional: true }], waitingParents: 2 }),
        node("lint", JobStatus.CANCELLED, { cancelReason: "cancelled from the console", totalTasks: 1 }),
      ],
    });
    const lines = describeWorkflow(w);
    expect(lines[0]).toBe("workflow wf-3 (mesh): running, 1/3 nodes completed");
    expect(lines[1]).toBe("nodes:    waiting 1, completed 1, cancelled 1");
    expect(lines.slice(3).join("\n")).toBe(
      [
        "NODE    STATUS     WORKLOAD  TASKS  AFTER         JOB",
        "chunks  completed  w         2/2    -             job-chunks",
        "stitch  waiting    w         0/2    chunks,lint?  job-stitch  waits for 2 jobs",
        "lint    cancelled  w         0/1    -             job-lint    cancelled from the console",
      ].join("\n"),
    );
    expect(nodeCountsText(undefined)).toBe("-");
  });
});
