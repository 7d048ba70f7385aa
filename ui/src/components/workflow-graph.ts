// A workflow drawn as its graph: one box per node in columns by depth (a node stands one column right
// of its deepest parent), an arrow per edge (dashed when optional), each box a link to the node's job
// page that says its status and task counts. SVG built with the DOM, never from markup, so names are
// always text; colours come from classes (the page's CSP allows no inline style).
import { JobStatus, type Workflow, type WorkflowNode } from "../../../gen/leasehold/queue/v1/queue_pb.js";
import { jobStatusName } from "./status.js";

const SVG = "http://www.w3.org/2000/svg";
const BOX_W = 216;
const BOX_H = 52;
const GAP_X = 56;
const GAP_Y = 14;
const PAD = 8;

function svg<K extends keyof SVGElementTagNameMap>(tag: K, attrs: Record<string, string | number> = {}): SVGElementTagNameMap[K] {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  return el;
}

/** Where each node stands: its column (depth) and its row within the column. */
export interface Placement {
  column: number;
  row: number;
}

/**
 * Columns by longest path from a root, in the nodes' given order; then each column's nodes sorted
 * by the mean row of their parents, so edges cross less. An edge to a node not in the list (or a
 * cycle, which the coordinator refuses) is ignored rather than looped on.
 */
export function layout(nodes: Pick<WorkflowNode, "name" | "after">[]): Map<string, Placement> {
  const index = new Map(nodes.map((n, i) => [n.name, i]));
  const column = new Map<string, number>();
  const visiting = new Set<string>();
  const depth = (name: string): number => {
    const known = column.get(name);
    if (known !== undefined) return known;
    if (visiting.has(name)) return 0;
    visiting.add(name);
    const node = nodes[index.get(name) ?? -1];
    const parents = (node?.after ?? []).map((a) => a.node).filter((p) => index.has(p));
    const d = parents.length === 0 ? 0 : 1 + Math.max(...parents.map(depth));
    visiting.delete(name);
    column.set(name, d);
    return d;
  };
  const columns: string[][] = [];
  for (const n of nodes) (columns[depth(n.name)] ??= []).push(n.name);
  const placed = new Map<string, Placement>();
  columns.forEach((names, c) => {
    const mean = (name: string) => {
      const rows = (nodes[index.get(name)!].after ?? []).map((a) => placed.get(a.node)?.row).filter((r): r is number => r !== undefined);
      return rows.length === 0 ? index.get(name)! : rows.reduce((x, y) => x + y, 0) / rows.length;
    };
    const sorted = c === 0 ? names : [...names].sort((a, b) => mean(a) - mean(b) || index.get(a)! - index.get(b)!);
    sorted.forEach((name, row) => placed.set(name, { column: c, row }));
  });
  return placed;
}

/** "completed 3/3 tasks", "waiting for chunks" and the like: what a node's box and its link say. */
export function nodeSummary(node: WorkflowNode, waitingFor: string[]): string {
  const tasks = `${node.completedTasks}/${node.totalTasks} tasks`;
  if (node.status === JobStatus.WAITING && waitingFor.length > 0) return `waiting for ${waitingFor.join(", ")} · ${tasks}`;
  return `${jobStatusName(node.status)} · ${tasks}`;
}

const FINAL = new Set([JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED]);

/** The parents in the workflow a node still waits for. */
export function waitingFor(node: WorkflowNode, byName: Map<string, WorkflowNode>): string[] {
  return node.after.map((a) => a.node).filter((p) => !FINAL.has(byName.get(p)?.status ?? JobStatus.COMPLETED));
}

function clip(text: string, max: number): string {
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

/** The graph of `w` as an SVG element (replaced whole on each change: a few hundred elements draw in a few ms). */
export function drawWorkflow(w: Workflow): SVGSVGElement {
  const byName = new Map(w.nodes.map((n) => [n.name, n]));
  const placed = layout(w.nodes);
  const columns = Math.max(1, ...[...placed.values()].map((p) => p.column + 1));
  const rows = Math.max(1, ...[...placed.values()].map((p) => p.row + 1));
  const width = PAD * 2 + columns * BOX_W + (columns - 1) * GAP_X;
  const height = PAD * 2 + rows * BOX_H + (rows - 1) * GAP_Y;
  const root = svg("svg", { id: "workflow-graph", width, height, viewBox: `0 0 ${width} ${height}`, role: "group" });
  root.setAttribute("aria-label", `Graph of ${w.nodes.length} nodes; each box opens its node's job`);
  const defs = svg("defs");
  const marker = svg("marker", { id: "wf-arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto" });
  marker.append(svg("path", { d: "M0,0 L10,5 L0,10 z", class: "wf-arrowhead" }));
  defs.append(marker);
  root.append(defs);
  const at = (name: string) => {
    const p = placed.get(name)!;
    return { x: PAD + p.column * (BOX_W + GAP_X), y: PAD + p.row * (BOX_H + GAP_Y) };
  };
  const edges = svg("g", { class: "wf-edges", "aria-hidden": "true" });
  for (const n of w.nodes) {
    for (const a of n.after) {
      if (!placed.has(a.node)) continue;
      const from = at(a.node);
      const to = at(n.name);
      const [x1, y1, x2, y2] = [from.x + BOX_W, from.y + BOX_H / 2, to.x - 2, to.y + BOX_H / 2];
      const mid = (x1 + x2) / 2;
      edges.append(
        svg("path", {
          d: `M${x1},${y1} C${mid},${y1} ${mid},${y2} ${x2},${y2}`,
          class: `wf-edge${a.optional ? " wf-optional" : ""}`,
          "marker-end": "url(#wf-arrow)",
          "data-edge": `${a.node}>${n.name}`,
        }),
      );
    }
  }
  root.append(edges);
  for (const n of w.nodes) {
    const { x, y } = at(n.name);
    const status = jobStatusName(n.status);
    const summary = nodeSummary(n, waitingFor(n, byName));
    const link = svg("a", {
      href: `#/jobs/${encodeURIComponent(n.jobId)}`,
      class: `wf-node wf-s-${status}`,
      "data-node": n.name,
      "data-status": status,
    });
    // One text of two lines with a space between them, so the box reads "stitch waiting for chunks · …"
    // as it shows, and the link's name starts with exactly that (speech input users say what they see).
    const text = svg("text", { x: x + 14, y: y + 20 });
    const name = svg("tspan", { class: "wf-name" });
    name.textContent = clip(n.name, 26);
    const line = svg("tspan", { x: x + 14, dy: 18, class: "wf-line" });
    line.textContent = clip(summary, 33);
    text.append(name, " ", line);
    const more = `workload ${n.workload}${n.cancelReason ? `, ${n.cancelReason}` : ""}`;
    link.setAttribute("aria-label", `${name.textContent} ${line.textContent} (${more}); opens its job`);
    const fraction = n.totalTasks > 0 ? Math.min(1, n.completedTasks / n.totalTasks) : 0;
    link.append(
      svg("rect", { x, y, width: BOX_W, height: BOX_H, rx: 6, class: "wf-box" }),
      svg("rect", { x, y, width: 6, height: BOX_H, rx: 2, class: "wf-stripe" }),
      svg("rect", { x: x + 6, y: y + BOX_H - 4, width: Math.round((BOX_W - 6) * fraction), height: 4, class: "wf-bar" }),
      text,
    );
    root.append(link);
  }
  return root;
}
