// `token new`: a fresh random token and the AUTH_TOKENS_FILE line that admits it. The line holds
// only the token's sha256; the token itself is stored nowhere. No coordinator is involved.
import { createHash, randomBytes } from "node:crypto";
import { ROLES, tokenEntryProblem } from "../../config/index.js";
import { stringOption } from "../args.js";
import type { CommandSpec } from "../command.js";
import { UsageError } from "../errors.js";

/** A token: "lh_" and 32 random bytes in base64url (256 bits). */
export function newToken(): string {
  return `lh_${randomBytes(32).toString("base64url")}`;
}

/** The line for a token: a worker's third field is its worker_id prefix, a bound submitter's its account. */
export function configLine(token: string, role: string, workerPrefix?: string, account?: string): string {
  if (workerPrefix !== undefined && account !== undefined) throw new UsageError("--worker-prefix and --account exclude each other");
  const hash = createHash("sha256").update(token, "utf8").digest("hex");
  const third = workerPrefix ?? account;
  const fields = [hash, role, ...(third !== undefined ? [third] : [])];
  if (account !== undefined && role !== "submitter")
    throw new UsageError(`only submitter tokens are bound to an account (--account), not ${role}`);
  if (workerPrefix !== undefined && role !== "worker") throw new UsageError(`only worker tokens take --worker-prefix, not ${role}`);
  const problem = tokenEntryProblem(fields);
  if (problem)
    throw new UsageError(problem.replace("as third field", "(--worker-prefix)").replace("a submitter's third field", "--account"));
  return fields.join(" ");
}

export const tokenCommands: CommandSpec[] = [
  {
    name: "token new",
    positionals: [],
    options: [
      { name: "role", value: ROLES.join("|"), required: true },
      { name: "worker-prefix", value: "PREFIX", help: "token new, worker tokens: every worker_id they use must start with this" },
      { name: "account", value: "NAME", help: "token new, submitter tokens: bind to this account (its jobs only); unbound sees every job" },
    ],
    summary: ["print a new token and its AUTH_TOKENS_FILE line"],
    async run({ json, opts }) {
      const role = stringOption(opts.role);
      if (role === undefined) throw new UsageError("--role is required");
      const token = newToken();
      const line = configLine(token, role, stringOption(opts["worker-prefix"]), stringOption(opts.account));
      process.stdout.write(json ? `${JSON.stringify({ token, config_line: line })}\n` : `${token}\n${line}\n`);
      if (!json && process.stderr.isTTY) {
        process.stderr.write("first line: the token (give it to the client; it is not stored anywhere)\n");
        process.stderr.write("second line: append it to the file named by AUTH_TOKENS_FILE and restart the coordinator\n");
      }
      return 0;
    },
  },
];
