// The CLI's two failures of its own, and how a server's error reads on stderr. main() (program.ts)
// maps each to its exit code: UsageError 2 (with the usage text), CliError and ConnectError 1.
import type { ConnectError } from "@connectrpc/connect";
import { codeToString } from "@connectrpc/connect/protocol-connect";
import { BadRequestSchema } from "../../gen/google/rpc/error_details_pb.js";

/** Bad usage: printed as "leasehold: <message>" and the usage text, exit 2. */
export class UsageError extends Error {}

/** A plain runtime failure: printed as "leasehold: <message>", exit 1. */
export class CliError extends Error {}

/**
 * "leasehold: not_found: job … not found (request id …)", and each field violation on a line of
 * its own when there are several (one is already the message).
 */
export function describeConnectError(err: ConnectError): string {
  const requestId = err.metadata.get("x-request-id");
  const violations = err.findDetails(BadRequestSchema).flatMap((d) => d.fieldViolations);
  const list = violations.length > 1 ? violations.map((v) => `\n  ${v.field}: ${v.description}`).join("") : "";
  return `${codeToString(err.code)}: ${err.rawMessage}${requestId ? ` (request id ${requestId})` : ""}${list}`;
}
