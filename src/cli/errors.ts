// The CLI's two failures of its own, and how a server's error reads on stderr. main() (program.ts)
// maps each to its exit code: UsageError 2 (with the command's usage), CliError and ConnectError 1.
import type { ConnectError } from "@connectrpc/connect";
import { codeToString } from "@connectrpc/connect/protocol-connect";
import { BadRequestSchema } from "../../gen/google/rpc/error_details_pb.js";

/** Bad usage: printed as "leasehold: <message>" and the command's usage, exit 2. */
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

/**
 * The certificate checks that fail in this process, not on the server (Node's codes for them, from
 * OpenSSL's verify results and its own host name check). Connect reports them as `internal`, a
 * code that otherwise means the server broke.
 */
const TLS_VERIFY_CODES = new Set([
  "DEPTH_ZERO_SELF_SIGNED_CERT",
  "SELF_SIGNED_CERT_IN_CHAIN",
  "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
  "UNABLE_TO_GET_ISSUER_CERT",
  "UNABLE_TO_GET_ISSUER_CERT_LOCALLY",
  "CERT_HAS_EXPIRED",
  "CERT_NOT_YET_VALID",
  "CERT_UNTRUSTED",
  "CERT_REJECTED",
  "CERT_SIGNATURE_FAILURE",
  "ERR_TLS_CERT_ALTNAME_INVALID",
]);

/**
 * "TLS: self-signed certificate (…)" when the call failed because this process did not trust the
 * coordinator's certificate (or could not speak TLS with it); undefined for any other failure.
 */
export function describeTlsFailure(err: ConnectError): string | undefined {
  for (let cause: unknown = err.cause; cause instanceof Error; cause = cause.cause) {
    const code = (cause as NodeJS.ErrnoException).code ?? "";
    if (TLS_VERIFY_CODES.has(code)) {
      return `TLS: ${cause.message} (pass --ca-file FILE, or set LEASEHOLD_CA_FILE, with the PEM certificate that signed the coordinator's)`;
    }
    if (code === "EPROTO" || code.startsWith("ERR_SSL_")) {
      return `TLS: ${cause.message} (is the coordinator serving TLS? use http:// for a cleartext one)`;
    }
  }
  return undefined;
}
