// A workflow file (`leasehold workflow create -f pipeline.yaml`): YAML (or JSON, which YAML reads
// too) that names each node and says what it runs after, read into a CreateWorkflowRequest.
//
//   name: mesh-001                    # a label; optional, as are idempotency_key and account
//   nodes:
//     chunks:                         # the node's name, then its job as CreateJob takes it
//       workload: scimesh
//       tasks:
//         - {chunk_index: 0, input_uri: s3://bucket/mesh-001/0.h5, input_sha256: 9f86d0…}
//     stitch:
//       after: [chunks]               # the nodes it runs after; {node: chunks, optional: true};
//       workload: stitch              # {job_id: UUID} for a job outside the workflow
//       input_uri: s3://bucket/mesh-001/
//       input_sha256: 2c26b4…
//
// A node's fields are CreateJobRequest's in proto JSON (snake_case or lowerCamelCase), with the
// short names the REST API takes for its enums (dependency_policy: all_final, failure_policy:
// continue). `nodes` given as a list is CreateWorkflowRequest's own JSON, taken as it is.
import { create, fromJson, type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import { parseDocument } from "yaml";
import {
  CreateJobRequestSchema,
  CreateWorkflowRequestSchema,
  NodeDependencySchema,
  WorkflowNodeSpecSchema,
  type CreateWorkflowRequest,
  type WorkflowNodeSpec,
} from "../../gen/leasehold/queue/v1/queue_pb.js";
import { CliError } from "./errors.js";

/** The workflow's own fields in the file (beside `nodes`), in both spellings. */
const WORKFLOW_FIELDS = new Set(["name", "idempotency_key", "idempotencyKey", "account"]);

/** Enum fields of a node's job that may be written by their short names, and each enum's prefix. */
const SHORT_ENUMS: Record<string, string> = {
  dependency_policy: "DEPENDENCY_POLICY_",
  dependencyPolicy: "DEPENDENCY_POLICY_",
  failure_policy: "FAILURE_POLICY_",
  failurePolicy: "FAILURE_POLICY_",
};

const isObject = (v: unknown): v is JsonObject => typeof v === "object" && v !== null && !Array.isArray(v);

/** "all_final" → "DEPENDENCY_POLICY_ALL_FINAL" for the enum fields above; other values as they are. */
function withFullEnumNames(job: JsonObject): JsonObject {
  const out: JsonObject = { ...job };
  for (const [field, prefix] of Object.entries(SHORT_ENUMS)) {
    const v = out[field];
    if (typeof v === "string" && v !== "" && !v.toUpperCase().startsWith(prefix)) out[field] = `${prefix}${v.toUpperCase()}`;
  }
  return out;
}

/** The file's text as a JSON value; a YAML error names the line and column. */
function parseText(source: string, text: string): JsonValue {
  const doc = parseDocument(text);
  if (doc.errors.length > 0) throw new CliError(`${source}: not YAML: ${doc.errors[0].message.split("\n")[0]}`);
  return doc.toJS() as JsonValue;
}

/** One entry of a node's `after`: an edge to another node, or (job_id) a dependency on a job outside the workflow. */
function dependency(where: string, entry: JsonValue): { node?: JsonObject; job?: JsonObject } {
  if (typeof entry === "string") return { node: { node: entry } };
  if (isObject(entry)) {
    const keys = Object.keys(entry);
    const optional: JsonObject = entry.optional === undefined ? {} : { optional: entry.optional };
    const jobId = entry.job_id ?? entry.jobId;
    if (typeof entry.node === "string" && keys.every((k) => k === "node" || k === "optional"))
      return { node: { node: entry.node, ...optional } };
    if (typeof jobId === "string" && keys.every((k) => k === "job_id" || k === "jobId" || k === "optional")) {
      return { job: { job_id: jobId, ...optional } };
    }
  }
  throw new CliError(`${where}: must be a node's name, {node: NAME, optional: true} or {job_id: ID, optional: true}`);
}

/** One node of the mapping form: its job (with the parents outside the workflow) and its edges. */
function nodeOf(source: string, name: string, body: JsonValue): WorkflowNodeSpec {
  const where = `${source}: node ${JSON.stringify(name)}`;
  if (!isObject(body)) throw new CliError(`${where}: must be a mapping of the node's job fields (workload, tasks, after, …)`);
  const { after = [], ...rest } = body;
  if (!Array.isArray(after)) throw new CliError(`${where}: after must be a list`);
  const deps = after.map((entry, i) => dependency(`${where}: after[${i}]`, entry));
  const jobJson = withFullEnumNames(rest);
  const external = deps.flatMap((d) => (d.job ? [d.job] : []));
  if (external.length > 0) jobJson.after = external;
  let job;
  try {
    job = fromJson(CreateJobRequestSchema, jobJson);
  } catch (err) {
    throw new CliError(`${where}: not a CreateJobRequest: ${(err as Error).message}`);
  }
  return create(WorkflowNodeSpecSchema, {
    name,
    job,
    after: deps.flatMap((d) => (d.node ? [fromJson(NodeDependencySchema, d.node)] : [])),
  });
}

/**
 * A workflow file's text (YAML or JSON) as the CreateWorkflowRequest it describes. `source` names
 * the file in errors; a file that is not YAML, or a node that is not a CreateJobRequest, is a
 * CliError naming the node. What only the coordinator can check (workloads, edges to unknown
 * nodes, cycles, quotas) is left to it.
 */
export function parseWorkflowFile(source: string, text: string): CreateWorkflowRequest {
  const doc = parseText(source, text);
  if (!isObject(doc)) throw new CliError(`${source}: must be a mapping with nodes (and optionally name, idempotency_key, account)`);
  const { nodes, ...own } = doc;
  if (Array.isArray(nodes)) {
    // CreateWorkflowRequest's own JSON (a list of {name, job, after}), with the short enum names allowed.
    const json = { ...doc, nodes: nodes.map((n) => (isObject(n) && isObject(n.job) ? { ...n, job: withFullEnumNames(n.job) } : n)) };
    try {
      return fromJson(CreateWorkflowRequestSchema, json);
    } catch (err) {
      throw new CliError(`${source}: not a CreateWorkflowRequest: ${(err as Error).message}`);
    }
  }
  if (!isObject(nodes) || Object.keys(nodes).length === 0) {
    throw new CliError(`${source}: nodes must map each node's name to its job (chunks: {workload: …, tasks: […]})`);
  }
  const unknown = Object.keys(own).filter((k) => !WORKFLOW_FIELDS.has(k));
  if (unknown.length > 0) {
    throw new CliError(
      `${source}: unknown field ${unknown.map((k) => JSON.stringify(k)).join(", ")} (known: name, idempotency_key, account, nodes)`,
    );
  }
  let request;
  try {
    request = fromJson(CreateWorkflowRequestSchema, own);
  } catch (err) {
    throw new CliError(`${source}: ${(err as Error).message}`);
  }
  request.nodes = Object.entries(nodes).map(([name, body]) => nodeOf(source, name, body));
  return request;
}

/**
 * A coordinator's message with each `nodes[i]` followed by that node's name, so a refusal of the
 * mapping form reads by the names the file uses: "nodes[2] (report).job.workload: …".
 */
export function withNodeNames(text: string, request: Pick<CreateWorkflowRequest, "nodes">): string {
  return text.replace(/\bnodes\[(\d+)\]/g, (whole, i: string) => {
    const name = request.nodes[Number(i)]?.name;
    return name ? `${whole} (${name})` : whole;
  });
}
