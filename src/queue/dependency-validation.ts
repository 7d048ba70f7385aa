// The rules of jobs that wait for others: CreateJob's after and dependency_policy, and a
// CreateWorkflow request as a whole (its nodes' names, its edges, no cycle, at most
// LIMITS.maxWorkflowNodes nodes). Each broken rule a ValidationError naming the field; a node's own
// job is checked by CreateJob's rules when the store prepares it (its violations named under
// nodes[i].job.).

import { ValidationError, type FieldViolation } from "./errors.js";
import { fail, LIMITS, optionalText, requireUuid, violationsError, WORKLOAD_NAME } from "./fields.js";
import { requireAccountName } from "./account-validation.js";
import { DEPENDENCY_POLICIES, type CreateJobInput, type DependencyPolicy } from "./types.js";
import type { CreateWorkflowInput } from "./types.js";

export interface NormalizedDependency {
  jobId: string;
  optional: boolean;
}

/** A CreateJob's parents: at most LIMITS.maxParents job ids, each once; undefined when none. */
export function validateAfter(field: string, v: unknown): NormalizedDependency[] | undefined {
  if (v === undefined || v === null) return undefined;
  if (!Array.isArray(v)) fail(field, "must be a list");
  if (v.length === 0) return undefined;
  if (v.length > LIMITS.maxParents) fail(field, `must name at most ${LIMITS.maxParents} parents`);
  const seen = new Set<string>();
  const violations: FieldViolation[] = [];
  const out: NormalizedDependency[] = [];
  v.forEach((d: unknown, i) => {
    try {
      if (d === null || typeof d !== "object" || Array.isArray(d)) fail(`${field}[${i}]`, "must be an object");
      const dep = d as { jobId?: unknown; optional?: unknown };
      const jobId = requireUuid(`${field}[${i}].job_id`, dep.jobId);
      if (seen.has(jobId)) fail(`${field}[${i}].job_id`, `names job ${jobId} twice`);
      if (dep.optional !== undefined && dep.optional !== null && typeof dep.optional !== "boolean")
        fail(`${field}[${i}].optional`, "must be a boolean");
      seen.add(jobId);
      out.push({ jobId, optional: dep.optional === true });
    } catch (err) {
      if (!(err instanceof ValidationError)) throw err;
      violations.push(...err.violations);
    }
  });
  if (violations.length > 0) throw violationsError(violations);
  return out;
}

/** A dependency policy, or undefined when absent (all_completed then applies). */
export function optionalDependencyPolicy(field: string, v: unknown): DependencyPolicy | undefined {
  if (v === undefined || v === null || v === "") return undefined;
  if (typeof v !== "string" || !(DEPENDENCY_POLICIES as readonly string[]).includes(v)) {
    fail(field, `must be one of ${DEPENDENCY_POLICIES.join(", ")}`);
  }
  return v as DependencyPolicy;
}

export interface NormalizedNode {
  name: string;
  job: CreateJobInput;
  /** the nodes it runs after, by position in the request */
  after: { node: number; optional: boolean }[];
}

export interface NormalizedWorkflow {
  name: string;
  idempotencyKey: string | null;
  account?: string;
  /** in the order given */
  nodes: NormalizedNode[];
  /** positions of the nodes, each after every node it runs after */
  order: number[];
}

/**
 * A CreateWorkflow request's shape: 1 to LIMITS.maxWorkflowNodes nodes with distinct names, each
 * with a job, edges naming other nodes of the workflow once each (as many as there are nodes: a
 * fan-in of the whole workflow into one node is one node's edges; its job's after, jobs outside
 * the workflow, keeps CreateJob's LIMITS.maxParents), and no cycle (the error names a node on one).
 * A node's job may not carry an idempotency key (the workflow's covers every node), nor an account
 * other than the workflow's.
 */
export function validateCreateWorkflow(input: CreateWorkflowInput): NormalizedWorkflow {
  if (input === null || typeof input !== "object") fail("request", "must be an object");
  const name = optionalText("name", input.name, LIMITS.workflowNameLength) ?? "";
  const idempotencyKey = optionalText("idempotency_key", input.idempotencyKey, LIMITS.idempotencyKeyLength) ?? null;
  const account = input.account ? requireAccountName("account", input.account) : undefined;
  const specs = input.nodes;
  if (!Array.isArray(specs) || specs.length === 0) fail("nodes", "is required: at least one node");
  if (specs.length > LIMITS.maxWorkflowNodes) fail("nodes", `must hold at most ${LIMITS.maxWorkflowNodes} nodes, not ${specs.length}`);

  const violations: FieldViolation[] = [];
  const check = (fn: () => void) => {
    try {
      fn();
    } catch (err) {
      if (!(err instanceof ValidationError)) throw err;
      violations.push(...err.violations);
    }
  };
  const position = new Map<string, number>();
  specs.forEach((n, i) =>
    check(() => {
      if (n === null || typeof n !== "object") fail(`nodes[${i}]`, "must be an object");
      if (n.name === undefined || n.name === null || n.name === "") fail(`nodes[${i}].name`, "is required");
      if (typeof n.name !== "string" || !WORKLOAD_NAME.test(n.name)) fail(`nodes[${i}].name`, "must match ^[a-z][a-z0-9_-]{0,62}$");
      if (position.has(n.name)) fail(`nodes[${i}].name`, `names node "${n.name}" again (nodes[${position.get(n.name)}])`);
      position.set(n.name, i);
    }),
  );
  const nodes: NormalizedNode[] = specs.map((n, i) => {
    const after: NormalizedNode["after"] = [];
    check(() => {
      if (n === null || typeof n !== "object") return;
      const job = n.job as CreateJobInput | undefined | null;
      if (job === undefined || job === null) fail(`nodes[${i}].job`, "is required");
      if (typeof job !== "object" || Array.isArray(job)) fail(`nodes[${i}].job`, "must be an object");
      if (job.idempotencyKey) fail(`nodes[${i}].job.idempotency_key`, "must be empty: the workflow's idempotency_key covers its nodes");
      if (job.account && account !== undefined && job.account !== account)
        fail(`nodes[${i}].job.account`, `must be empty or the workflow's account ("${account}")`);
      if (job.account && account === undefined) fail(`nodes[${i}].job.account`, "must be empty: set the workflow's account");
      const edges = n.after ?? [];
      if (!Array.isArray(edges)) fail(`nodes[${i}].after`, "must be a list");
      const seen = new Set<number>();
      edges.forEach((e, k) => {
        const at = `nodes[${i}].after[${k}]`;
        if (e === null || typeof e !== "object") fail(at, "must be an object");
        if (e.node === undefined || e.node === null || e.node === "") fail(`${at}.node`, "is required");
        const p = typeof e.node === "string" ? position.get(e.node) : undefined;
        if (p === undefined) fail(`${at}.node`, `names no node of the workflow: ${JSON.stringify(e.node)}`);
        if (p === i) fail(`${at}.node`, "names the node itself");
        if (seen.has(p)) fail(`${at}.node`, `names node "${e.node}" twice`);
        if (e.optional !== undefined && e.optional !== null && typeof e.optional !== "boolean") fail(`${at}.optional`, "must be a boolean");
        seen.add(p);
        after.push({ node: p, optional: e.optional === true });
      });
    });
    return { name: typeof n?.name === "string" ? n.name : "", job: (n?.job ?? {}) as CreateJobInput, after };
  });
  if (violations.length > 0) throw violationsError(violations);
  return { name, idempotencyKey, ...(account === undefined ? {} : { account }), nodes, order: topologicalOrder(nodes) };
}

/** Kahn's order of the nodes; a cycle is INVALID_ARGUMENT naming a node on it and the path back to it. */
function topologicalOrder(nodes: readonly NormalizedNode[]): number[] {
  const children: number[][] = nodes.map(() => []);
  const indegree = nodes.map((n) => n.after.length);
  nodes.forEach((n, i) => n.after.forEach((e) => children[e.node].push(i)));
  const order: number[] = [];
  const ready = indegree.flatMap((d, i) => (d === 0 ? [i] : []));
  while (ready.length > 0) {
    const i = ready.shift()!;
    order.push(i);
    for (const c of children[i]) if (--indegree[c] === 0) ready.push(c);
  }
  if (order.length === nodes.length) return order;
  // Walk back along unfinished edges from a node left over until a node repeats: that is a cycle.
  const left = new Set(indegree.flatMap((d, i) => (d > 0 ? [i] : [])));
  let at = [...left][0];
  const path: number[] = [];
  const seenAt = new Map<number, number>();
  while (!seenAt.has(at)) {
    seenAt.set(at, path.length);
    path.push(at);
    at = nodes[at].after.find((e) => left.has(e.node))!.node;
  }
  const cycle = path.slice(seenAt.get(at)).reverse();
  const names = [...cycle, cycle[0]].map((i) => `"${nodes[i].name}"`).join(" → ");
  throw new ValidationError(`nodes[${cycle[0]}].after`, `the edges form a cycle: ${names}`);
}
