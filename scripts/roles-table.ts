// The table of who may call what in docs/authentication.md, generated from ACCESS (src/api/auth.ts),
// the table the coordinator enforces, so the two cannot drift: `npm run docs:roles` rewrites the
// page between its roles markers, and test/docs/readme-roles.test.ts fails while they differ.
import { readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { QueueService } from "../gen/leasehold/queue/v1/queue_pb.js";
import { ACCESS, type MethodName } from "../src/api/auth.js";

export const ROLES_PAGE = path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "docs", "authentication.md");
const BEGIN = "<!-- roles:begin (generated from ACCESS in src/api/auth.ts by npm run docs:roles) -->";
const END = "<!-- roles:end -->";

/** The RPCs in the order the proto declares them, as ACCESS lists their rules. */
function methods(): { name: MethodName; rpc: string }[] {
  return QueueService.methods.map((m) => ({ name: m.localName as MethodName, rpc: m.name }));
}

const code = (s: string) => `\`${s}\``;

export function rolesTable(): string {
  const all = methods();
  const of = (role: "submitter" | "worker" | "billing") => all.filter((m) => (ACCESS[m.name].roles as readonly string[]).includes(role));
  const submitter = of("submitter");
  const worker = of("worker");
  const billing = of("billing");
  const scoped = worker.some((m) => ACCESS[m.name].workerIds !== undefined);
  const adminOnly = all.filter((m) => ACCESS[m.name].roles.length === 0);
  const rows = [
    [
      "`submitter`",
      `${submitter.map((m) => code(m.rpc)).join(", ")}; bound to an account: only that account's jobs and tasks (another's are not found)`,
    ],
    [
      "`worker`",
      `${worker.map((m) => code(m.rpc)).join(", ")}${
        scoped ? ", only as a `worker_id` that starts with its prefix (in `CompleteTasks`: every result's; a `claim_next`'s own too)" : ""
      }`,
    ],
    ["`billing`", billing.map((m) => code(m.rpc)).join(", ")],
    ["`metrics`", "no RPC: `GET /metrics` only (a scrape token; admin tokens may scrape too, no other role)"],
    ["`admin`", `every RPC (${all.length}), including ${adminOnly.map((m) => code(m.rpc)).join(" and ")}, which only admin may call`],
  ];
  return ["| Role | May call |", "|---|---|", ...rows.map(([role, calls]) => `| ${role} | ${calls} |`)].join("\n");
}

/** The page with its roles section regenerated. */
export function withRolesTable(page: string): string {
  const start = page.indexOf(BEGIN);
  const end = page.indexOf(END);
  if (start < 0 || end < start) throw new Error(`docs/authentication.md has no "${BEGIN}" … "${END}" section`);
  return `${page.slice(0, start)}${BEGIN}\n${rolesTable()}\n${page.slice(end)}`;
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const before = readFileSync(ROLES_PAGE, "utf8");
  const after = withRolesTable(before);
  if (after !== before) writeFileSync(ROLES_PAGE, after);
  process.stdout.write(
    after === before ? "docs/authentication.md roles table already current\n" : "docs/authentication.md roles table updated\n",
  );
}
