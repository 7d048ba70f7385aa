// `leasehold` command line (package.json "bin"; `npm run leasehold -- …` in a
// checkout). It never starts the coordinator (that is `npm start`).
//
//   leasehold token new --role submitter|worker|admin [--worker-prefix P] [--json]
//
// prints a fresh random token and the AUTH_TOKENS_FILE line that admits it (the
// line holds only the token's sha256; the token itself is stored nowhere).
import { createHash, randomBytes } from "node:crypto";
import { parseArgs } from "node:util";
import { ROLES, tokenEntryProblem } from "./config/index.js";

const USAGE = `usage: leasehold token new --role ${ROLES.join("|")} [--worker-prefix PREFIX] [--json]

  --role           what the token may do (worker tokens also need --worker-prefix)
  --worker-prefix  worker tokens: every worker_id they use must start with this
  --json           print {"token": …, "config_line": …}
`;

class UsageError extends Error {}

/** A token: "lh_" and 32 random bytes in base64url (256 bits). */
export function newToken(): string {
  return `lh_${randomBytes(32).toString("base64url")}`;
}

export function configLine(token: string, role: string, workerPrefix?: string): string {
  const hash = createHash("sha256").update(token, "utf8").digest("hex");
  const fields = [hash, role, ...(workerPrefix !== undefined ? [workerPrefix] : [])];
  const problem = tokenEntryProblem(fields);
  if (problem) throw new UsageError(problem.replace("as third field", "(--worker-prefix)"));
  return fields.join(" ");
}

function tokenNew(args: string[]): string {
  const { values } = parseArgs({
    args,
    options: { role: { type: "string" }, "worker-prefix": { type: "string" }, json: { type: "boolean", default: false } },
    strict: true,
    allowPositionals: false,
  });
  if (values.role === undefined) throw new UsageError("--role is required");
  const token = newToken();
  const line = configLine(token, values.role, values["worker-prefix"]);
  if (values.json) return `${JSON.stringify({ token, config_line: line })}\n`;
  return `${token}\n${line}\n`;
}

export function main(argv: string[]): number {
  try {
    const [group, command, ...rest] = argv;
    if (group === "help" || group === "--help" || group === "-h" || group === undefined) {
      process.stdout.write(USAGE);
      return group === undefined ? 2 : 0;
    }
    if (group !== "token" || command !== "new") throw new UsageError(`unknown command: ${[group, command].filter(Boolean).join(" ")}`);
    process.stdout.write(tokenNew(rest));
    if (!rest.includes("--json") && process.stderr.isTTY) {
      process.stderr.write("first line: the token (give it to the client; it is not stored anywhere)\n");
      process.stderr.write("second line: append it to the file named by AUTH_TOKENS_FILE and restart the coordinator\n");
    }
    return 0;
  } catch (err) {
    if (err instanceof UsageError || (err as { code?: string }).code?.startsWith("ERR_PARSE_ARGS")) {
      process.stderr.write(`leasehold: ${(err as Error).message}\n${USAGE}`);
      return 2;
    }
    throw err;
  }
}

process.exitCode = main(process.argv.slice(2));
