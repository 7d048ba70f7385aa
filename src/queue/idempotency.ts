// Idempotent CreateJob: what makes two requests "the same request".
import { createHash } from "node:crypto";
import type { JsonValue } from "@bufbuild/protobuf";
import type { NormalizedCreateJob } from "./validation.js";

/** JSON with object keys sorted, so equal documents (jsonb drops key order) compare equal. */
export function canonicalJson(v: JsonValue | undefined): string {
  if (v === undefined) return "null";
  if (Array.isArray(v)) return `[${v.map(canonicalJson).join(",")}]`;
  if (v !== null && typeof v === "object") {
    return `{${Object.keys(v)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonicalJson(v[k])}`)
      .join(",")}}`;
  }
  return JSON.stringify(v);
}

/**
 * What makes two CreateJobs "the same request": everything but the traceparent, which a traced
 * client's retry renews. The failure policy's fields count only when given, so a request without
 * them has the fingerprint it had before they existed (a replay across an upgrade is still one).
 */
export function requestFingerprint(job: NormalizedCreateJob): string {
  const { traceparent: _trace, failurePolicy, maxFailedTasks, ...rest } = job;
  const request: Record<string, unknown> = { ...rest };
  if (failurePolicy !== undefined) request.failurePolicy = failurePolicy;
  if (maxFailedTasks !== undefined) request.maxFailedTasks = maxFailedTasks;
  return createHash("sha256")
    .update(canonicalJson(request as unknown as JsonValue))
    .digest("hex");
}
