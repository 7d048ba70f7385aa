// Bad input: a table of malformed, mistyped, oversized and hostile
// requests over REST and Connect JSON against a real server on a real,
// migrated PostgreSQL. Every one must be answered 4xx (never 5xx) with an
// X-Request-Id (echoed in the error body), a message naming the offending field
// where the request got far enough to have one, and no row written: the test
// fingerprints the jobs, tasks, workloads, task_events and job_watchers tables
// around every case.
//
// The setup leaves a pending task (so a claim that wrongly passed would lease it),
// a leased task (so lease calls reach the lease checks and a complete/fail/progress
// report that wrongly passed would change it) and a job that was never claimed
// (so a retry that wrongly passed would change it).
import { execFile } from "node:child_process";
import http from "node:http";
import net from "node:net";
import { promisify } from "node:util";
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { LIMITS } from "../../src/queue/validation.js";
import { createPool, PostgresQueue } from "../../src/store/postgres/store.js";
import { createTestDatabase, type TestDatabase } from "../support/db.js";
import { apiServerFixture, type ApiServerFixture } from "../support/api-server.js";
import { SWITCHES } from "../support/switches.js";
import { sha } from "../support/queue.js";

const MAX_BODY_BYTES = 96 * 1024; // above LIMITS.jsonBytes, so the parameters limit is reachable under the body limit
const MAX_TASKS_PER_JOB = 50;
const W = "bi_main";
const W_SCHEMA = "bi_schema";
const WORKER = "bi-worker";
const SERVICE = "/leasehold.queue.v1.QueueService";
const execFileAsync = promisify(execFile);
const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const UNKNOWN_ID = "3f1e2d4c-5b6a-4978-8a9b-0c1d2e3f4a5b";
const SQL = "'; DROP TABLE tasks; --";

const b64url = (s: string) => Buffer.from(s).toString("base64url");

interface Fixture {
  jobId: string;
  /** Leased by WORKER at attempt 1. */
  taskId: string;
  /** A job none of whose tasks was ever claimed (status pending). */
  pendingJobId: string;
}

/** Sent as bytes, not JSON-encoded. */
class Raw {
  constructor(readonly bytes: Buffer) {}
}
const raw = (s: string | Buffer | number[]) => new Raw(typeof s === "string" ? Buffer.from(s, "utf8") : Buffer.from(s));

type Lazy<T> = T | ((f: Fixture) => T);
/** A request body: JSON-encoded unless Raw; or made from the fixture. */
type BodyArg = Record<string, unknown> | Raw | ((f: Fixture) => Record<string, unknown> | Raw);

interface BadCase {
  name: string;
  via: "rest" | "connect";
  method: string;
  path: Lazy<string>;
  /** undefined: no body; Raw: these bytes; anything else: JSON.stringify. */
  body?: BodyArg;
  /** Default application/json when there is a body; null: no content-type header. */
  contentType?: string | null;
  /** Send the body with chunked transfer encoding (no content-length). */
  chunked?: boolean;
  status: number;
  /** Error code name (REST error.code / Connect code); by default derived from status. */
  code?: string;
  /** What the message must contain (the field name); undefined: any clear message. */
  field?: string | RegExp;
  /** The answer has no JSON error body (e.g. connect-es' own 415). */
  noBody?: boolean;
  /** A Connect path the router does not serve: the server's fallback answers in the REST error shape. */
  restShaped?: boolean;
}

interface Opts {
  status?: number;
  code?: string;
  contentType?: string | null;
  chunked?: boolean;
  noBody?: boolean;
  restShaped?: boolean;
}

const cases: BadCase[] = [];

function rest(
  name: string,
  method: string,
  path: Lazy<string>,
  body: BodyArg | undefined,
  field: string | RegExp | undefined,
  o: Opts = {},
): void {
  cases.push({ name, via: "rest", method, path, body, field, status: o.status ?? 400, ...o });
}

function rpc(
  name: string,
  rpcMethod: string,
  body: BodyArg | undefined,
  field: string | RegExp | undefined,
  o: Opts & { method?: string } = {},
): void {
  cases.push({
    name,
    via: "connect",
    method: o.method ?? "POST",
    path: rpcMethod.startsWith("/") ? rpcMethod : `${SERVICE}/${rpcMethod}`,
    body,
    field,
    status: o.status ?? 400,
    ...o,
  });
}

const DEFAULT_CODE: Record<number, string> = {
  400: "invalid_argument",
  404: "not_found",
  405: "unimplemented",
  413: "resource_exhausted",
  415: "invalid_argument",
};

// ---- request bodies that are valid except for what a case breaks ----
const spec = (i: number, extra: Record<string, unknown> = {}) => ({
  chunk_index: i,
  input_uri: `s3://bi/in/${i}`,
  input_sha256: sha(`in${i}`),
  ...extra,
});
const job = (extra: Record<string, unknown> = {}) => ({ workload: W, input_uri: "s3://bi/job", input_sha256: sha("job"), ...extra });
const jobWith = (t: Record<string, unknown>, extra: Record<string, unknown> = {}) => ({ workload: W, tasks: [spec(0, t)], ...extra });
const claim = (extra: Record<string, unknown> = {}) => ({ worker_id: "bi-claimer", workloads: [W], ...extra });
const lease = (extra: Record<string, unknown> = {}) => ({ worker_id: WORKER, attempt: 1, ...extra });
const result = (extra: Record<string, unknown> = {}) => lease({ result_uri: "s3://bi/out/0", result_sha256: sha("out0"), ...extra });
const failure = (extra: Record<string, unknown> = {}) => lease({ error_code: "oops", retryable: true, ...extra });
const progress = (extra: Record<string, unknown> = {}) =>
  lease({ progress: 0.5, message: "half way", partial_result_uri: "s3://bi/partial/0", ...extra });
const withId = (f: Fixture, body: Record<string, unknown>) => ({ task_id: f.taskId, ...body });
const nested = (depth: number): Record<string, unknown> => {
  let v: Record<string, unknown> = { leaf: 1 };
  for (let i = 0; i < depth; i++) v = { n: v };
  return v;
};
const big = (bytes: number) => "x".repeat(bytes);
const tooManyTasks = () => Array.from({ length: MAX_TASKS_PER_JOB + 1 }, (_, i) => spec(i));

// Paths of the fixture's leased task and job.
const hb = (f: Fixture) => `/tasks/${f.taskId}/heartbeat`;
const res = (f: Fixture) => `/tasks/${f.taskId}/result`;
const fl = (f: Fixture) => `/tasks/${f.taskId}/failure`;
const cancel = (f: Fixture) => `/jobs/${f.jobId}/cancel`;
const results = (q: string) => (f: Fixture) => `/jobs/${f.jobId}/results?${q}`;
const prog = (f: Fixture) => `/tasks/${f.taskId}/progress`;
const retry = (f: Fixture) => `/jobs/${f.jobId}/retry`;
const retryPending = (f: Fixture) => `/jobs/${f.pendingJobId}/retry`;
const events = (f: Fixture) => `/jobs/${f.jobId}/events`;

// =============================== REST ===============================

// Malformed and truncated JSON, bodies that are not objects.
rest("malformed JSON", "POST", "/jobs", raw("{not json"), /JSON/);
rest("truncated JSON (open list)", "POST", "/jobs", raw(`{"workload": "${W}", "tasks": [`), /JSON/);
rest("truncated JSON (missing brace)", "POST", "/tasks/claim", raw(`{"worker_id": "w", "workloads": ["${W}"]`), /JSON/);
rest("truncated JSON (mid string)", "POST", hb, raw(`{"worker_id": "${WORKER}`), /JSON/);
rest("trailing comma", "POST", "/tasks/claim", raw(`{"worker_id": "w", "workloads": ["${W}"],}`), /JSON/);
rest("single-quoted JSON", "POST", "/jobs", raw(`{'workload': '${W}'}`), /JSON/);
rest("garbage after the object", "POST", hb, raw(`{"worker_id": "${WORKER}", "attempt": 1}garbage`), /JSON/);
rest("NaN literal", "POST", "/tasks/claim", raw(`{"worker_id": "w", "workloads": ["${W}"], "max_tasks": NaN}`), /JSON/);
rest("JSON null body", "POST", "/jobs", raw("null"), /object/);
rest("JSON string body", "POST", "/tasks/claim", raw('"claim please"'), /object/);
rest("JSON number body", "POST", fl, raw("42"), /object/);
rest("JSON array body", "PUT", `/workloads/${W}`, raw("[{}]"), /object/);
rest(
  "truncated multi-byte character",
  "POST",
  "/tasks/claim",
  raw(Buffer.concat([Buffer.from('{"worker_id": "w'), Buffer.from("é").subarray(0, 1)])),
  /UTF-8/,
);

// Wrong JSON types.
rest("max_tasks: boolean", "POST", "/tasks/claim", claim({ max_tasks: true }), "max_tasks");
rest("worker_id: number", "POST", "/tasks/claim", claim({ worker_id: 42 }), "worker_id");
rest("worker_id: object", "POST", "/tasks/claim", claim({ worker_id: {} }), "worker_id");
rest("workloads: string for list", "POST", "/tasks/claim", claim({ workloads: W }), "workloads");
rest("workloads: [number]", "POST", "/tasks/claim", claim({ workloads: [1] }), "workloads");
rest("workloads: [object]", "POST", "/tasks/claim", claim({ workloads: [{ name: W }] }), "workloads");
rest("wait_seconds: string", "POST", "/tasks/claim", claim({ wait_seconds: "soon" }), "wait_seconds");
rest("tasks: object for list", "POST", "/jobs", { workload: W, tasks: spec(0) }, "tasks");
rest("tasks: [number]", "POST", "/jobs", { workload: W, tasks: [5] }, "tasks");
rest("parameters: array for object", "POST", "/jobs", job({ parameters: [1, 2] }), "parameters");
rest("parameters: string for object", "POST", "/jobs", job({ parameters: "quality=high" }), "parameters");
rest("priority: string", "POST", "/jobs", job({ priority: "high" }), "priority");
rest("idempotency_key: number", "POST", "/jobs", job({ idempotency_key: 7 }), "idempotency_key");
rest("chunk_index: string", "POST", "/jobs", jobWith({ chunk_index: "zero" }), "chunk_index");
rest("attempt: non-numeric string", "POST", hb, lease({ attempt: "1x" }), "attempt");
rest("attempt: boolean", "POST", hb, lease({ attempt: true }), "attempt");
rest("retryable: string", "POST", fl, failure({ retryable: "yes" }), "retryable");
rest("metrics: array for object", "POST", res, result({ metrics: [1, 2] }), "metrics");
rest("metrics: number for object", "POST", res, result({ metrics: 5 }), "metrics");
rest("max_attempts: string", "PUT", `/workloads/${W}`, { max_attempts: "3x" }, "max_attempts");
rest("parameters_schema: string", "PUT", `/workloads/${W}`, { parameters_schema: "object" }, "parameters_schema");
rest("reason: object", "POST", cancel, { reason: { why: "x" } }, "reason");
rest("result_uri: list", "POST", res, result({ result_uri: ["s3://a"] }), "result_uri");

// Missing required fields, unknown fields.
rest("empty body on claim", "POST", "/tasks/claim", undefined, "worker_id");
rest("empty JSON object on claim", "POST", "/tasks/claim", {}, "worker_id");
rest("claim without worker_id", "POST", "/tasks/claim", { workloads: [W] }, "worker_id");
rest("claim without workloads", "POST", "/tasks/claim", { worker_id: "w" }, "workloads");
rest("claim with empty workloads", "POST", "/tasks/claim", claim({ workloads: [] }), "workloads");
rest("job without workload", "POST", "/jobs", { input_uri: "s3://a", input_sha256: sha("a") }, "workload");
rest("job without tasks or input", "POST", "/jobs", { workload: W }, "input_uri");
rest("job without input_sha256", "POST", "/jobs", { workload: W, input_uri: "s3://a" }, "input_sha256");
rest("task without input_uri", "POST", "/jobs", { workload: W, tasks: [{ chunk_index: 0, input_sha256: sha(0) }] }, "tasks[0].input_uri");
rest(
  "task without input_sha256",
  "POST",
  "/jobs",
  { workload: W, tasks: [{ chunk_index: 0, input_uri: "s3://a" }] },
  "tasks[0].input_sha256",
);
rest("heartbeat without attempt", "POST", hb, { worker_id: WORKER }, "attempt");
rest("heartbeat without worker_id", "POST", hb, { attempt: 1 }, "worker_id");
rest("result without result_uri", "POST", res, lease({ result_sha256: sha("x") }), "result_uri");
rest("result without result_sha256", "POST", res, lease({ result_uri: "s3://bi/out" }), "result_sha256");
rest("failure without error_code", "POST", fl, lease(), "error_code");
rest("unknown field on a job", "POST", "/jobs", job({ colour: "red" }), "colour");
rest("unknown field in a task spec", "POST", "/jobs", jobWith({ size: 3 }), "size");
rest("unknown field on a heartbeat", "POST", hb, lease({ lease: 30 }), "lease");
rest("misspelt field (worker)", "POST", "/tasks/claim", { worker: "w", workloads: [W] }, "worker");
rest("unknown field on a workload", "PUT", `/workloads/${W}`, { retries: 3 }, "retries");
rest("body task_id differs from the path", "POST", hb, lease({ task_id: UNKNOWN_ID }), "task_id");
rest("body name differs from the path", "PUT", `/workloads/${W}`, { name: "other_name" }, "name");

// Empty and huge strings.
rest("worker_id empty", "POST", "/tasks/claim", claim({ worker_id: "" }), "worker_id");
rest("workload empty", "POST", "/jobs", job({ workload: "" }), "workload");
rest("input_uri over the limit", "POST", "/jobs", job({ input_uri: `s3://${big(LIMITS.uriLength)}` }), "input_uri");
rest("task input_uri over the limit", "POST", "/jobs", jobWith({ input_uri: `s3://${big(LIMITS.uriLength)}` }), "tasks[0].input_uri");
rest("worker_id over the limit", "POST", "/tasks/claim", claim({ worker_id: big(LIMITS.workerIdLength + 1) }), "worker_id");
rest("idempotency_key over the limit", "POST", "/jobs", job({ idempotency_key: big(LIMITS.idempotencyKeyLength + 1) }), "idempotency_key");
rest("cancel reason over the limit", "POST", cancel, { reason: big(LIMITS.reasonLength + 1) }, "reason");
rest("result_uri over the limit", "POST", res, result({ result_uri: `s3://${big(LIMITS.uriLength)}` }), "result_uri");
rest("parameters over the limit", "POST", "/jobs", job({ parameters: { blob: big(LIMITS.jsonBytes) } }), "parameters");
rest("metrics over the limit", "POST", res, result({ metrics: { blob: big(LIMITS.jsonBytes) } }), "metrics");
rest(
  "parameters_schema over the limit",
  "PUT",
  `/workloads/${W}`,
  { parameters_schema: { description: big(LIMITS.parametersSchemaBytes) } },
  "parameters_schema",
);
rest("workload name of 64 characters", "POST", "/jobs", job({ workload: `a${big(63)}` }), "workload");
rest(
  "too many workloads in a claim",
  "POST",
  "/tasks/claim",
  claim({ workloads: Array.from({ length: 65 }, (_, i) => `w${i}`) }),
  "workloads",
);
rest("input_uri with whitespace", "POST", "/jobs", job({ input_uri: "s3://bi/a b" }), "input_uri");
rest("worker_id with a space", "POST", "/tasks/claim", claim({ worker_id: "bi worker" }), "worker_id");
rest("worker_id not ASCII", "POST", "/tasks/claim", claim({ worker_id: "wörker" }), "worker_id");
rest("input_sha256 of 63 hex digits", "POST", "/jobs", job({ input_sha256: sha("a").slice(1) }), "input_sha256");
rest("result_sha256 not hex", "POST", res, result({ result_sha256: "z".repeat(64) }), "result_sha256");
rest("error_code with spaces and capitals", "POST", fl, failure({ error_code: "Bad Code" }), "error_code");
rest("error_code over 64 characters", "POST", fl, failure({ error_code: "e".repeat(65) }), "error_code");
rest("workloads entry with capitals", "POST", "/tasks/claim", claim({ workloads: [W, "BI_MAIN"] }), "workloads[1]");

// Negative and enormous numbers, fractions.
rest("max_tasks over the limit", "POST", "/tasks/claim", claim({ max_tasks: LIMITS.maxClaimBatch + 1 }), "max_tasks");
rest("max_tasks negative", "POST", "/tasks/claim", claim({ max_tasks: -1 }), "max_tasks");
rest("max_tasks beyond int32", "POST", "/tasks/claim", claim({ max_tasks: 2 ** 31 }), "max_tasks");
rest("max_tasks fractional", "POST", "/tasks/claim", claim({ max_tasks: 2.5 }), "max_tasks");
rest("lease_seconds over the limit", "POST", "/tasks/claim", claim({ lease_seconds: LIMITS.leaseSeconds.max + 1 }), "lease_seconds");
rest("lease_seconds negative", "POST", "/tasks/claim", claim({ lease_seconds: -5 }), "lease_seconds");
rest("max_tasks 0", "POST", "/tasks/claim", claim({ max_tasks: 0 }), "max_tasks");
rest("claim lease_seconds 0", "POST", "/tasks/claim", claim({ lease_seconds: 0 }), "lease_seconds");
rest("heartbeat lease_seconds 0", "POST", hb, lease({ lease_seconds: 0 }), "lease_seconds");
rest("progress lease_seconds 0", "POST", prog, progress({ lease_seconds: 0 }), "lease_seconds");
rest("workload max_attempts 0", "PUT", `/workloads/${W}`, { max_attempts: 0 }, "max_attempts");
rest("workload lease_seconds 0", "PUT", `/workloads/${W}`, { lease_seconds: 0 }, "lease_seconds");
rest("wait_seconds over the limit", "POST", "/tasks/claim", claim({ wait_seconds: LIMITS.waitSeconds.max + 1 }), "wait_seconds");
rest("wait_seconds negative", "POST", "/tasks/claim", claim({ wait_seconds: -1 }), "wait_seconds");
rest("wait_seconds 1e400", "POST", "/tasks/claim", raw(`{"worker_id": "w", "workloads": ["${W}"], "wait_seconds": 1e400}`), "wait_seconds");
rest("attempt 0", "POST", hb, lease({ attempt: 0 }), "attempt");
rest("attempt negative", "POST", hb, lease({ attempt: -1 }), "attempt");
rest("attempt over the attempt limit", "POST", hb, lease({ attempt: LIMITS.attempt.max + 1 }), "attempt");
rest("attempt 1.5", "POST", hb, lease({ attempt: 1.5 }), "attempt");
rest("attempt beyond int32", "POST", res, result({ attempt: 99_999_999_999 }), "attempt");
rest("attempt int32 max", "POST", res, result({ attempt: 2 ** 31 - 1 }), "attempt");
rest("heartbeat lease_seconds over the limit", "POST", hb, lease({ lease_seconds: 100_000 }), "lease_seconds");
rest("priority over the limit", "POST", "/jobs", job({ priority: LIMITS.priority.max + 1 }), "priority");
rest("priority below int32", "POST", "/jobs", job({ priority: -(2 ** 31) - 1 }), "priority");
rest("priority fractional", "POST", "/jobs", job({ priority: 0.5 }), "priority");
rest("max_attempts 0", "POST", "/jobs", job({ max_attempts: 0 }), "max_attempts");
rest("max_attempts over the limit", "POST", "/jobs", job({ max_attempts: LIMITS.maxAttempts.max + 1 }), "max_attempts");
rest("max_attempts negative", "POST", "/jobs", job({ max_attempts: -3 }), "max_attempts");
rest("chunk_index negative", "POST", "/jobs", jobWith({ chunk_index: -1 }), "tasks[0].chunk_index");
rest("chunk_index 1.5", "POST", "/jobs", jobWith({ chunk_index: 1.5 }), "chunk_index");
rest("chunk_index beyond int32", "POST", "/jobs", jobWith({ chunk_index: 2 ** 31 }), "chunk_index");
rest(
  "retry_after_seconds over the limit",
  "POST",
  fl,
  failure({ retry_after_seconds: LIMITS.retryAfterSeconds.max + 1 }),
  "retry_after_seconds",
);
rest("retry_after_seconds negative", "POST", fl, failure({ retry_after_seconds: -1 }), "retry_after_seconds");
rest("failure attempt 1.5", "POST", fl, failure({ attempt: 1.5 }), "attempt");
rest("workload lease_seconds over the limit", "PUT", `/workloads/${W}`, { lease_seconds: LIMITS.leaseSeconds.max + 1 }, "lease_seconds");
rest("workload lease_seconds negative", "PUT", `/workloads/${W}`, { lease_seconds: -1 }, "lease_seconds");
rest("workload max_attempts over the limit", "PUT", `/workloads/${W}`, { max_attempts: 1000 }, "max_attempts");
rest(
  "parameters with a non-finite number",
  "POST",
  "/jobs",
  raw(JSON.stringify(job({ parameters: { x: 0 } })).replace('"x":0', '"x":1e400')),
  "parameters",
);

// Duplicate chunk indexes, too many tasks, nesting.
rest("duplicate chunk_index", "POST", "/jobs", { workload: W, tasks: [spec(0), spec(1), spec(1)] }, "tasks[2].chunk_index");
rest("too many tasks", "POST", "/jobs", () => ({ workload: W, tasks: tooManyTasks() }), "tasks");
rest("parameters nested too deeply", "POST", "/jobs", job({ parameters: nested(40) }), "parameters");
rest("parameters nested 3000 levels", "POST", "/jobs", job({ parameters: nested(3000) }), "parameters");

// Invalid UUIDs and path segments.
rest("job id not a UUID", "GET", "/jobs/not-a-uuid", undefined, "job_id");
rest("task id a number", "POST", "/tasks/123/result", result(), "task_id");
rest("task id with a non-hex digit", "POST", "/tasks/00000000-0000-0000-0000-00000000000g/failure", failure(), "task_id");
rest("job id without dashes", "GET", `/jobs/${UNKNOWN_ID.replace(/-/g, "")}/results`, undefined, "job_id");
rest("job id one digit too long", "POST", `/jobs/${UNKNOWN_ID}0/cancel`, {}, "job_id");
rest("undecodable path segment", "GET", "/jobs/%E0%A4%A", undefined, "job_id");
rest("NUL as the task id", "POST", "/tasks/%00/heartbeat", lease(), "task_id");
rest("path traversal as the job id", "GET", "/jobs/..%2F..%2Fetc%2Fpasswd", undefined, "job_id");
rest("NUL as a workload name", "PUT", "/workloads/%00", {}, "name");
rest("workload name with a dot", "PUT", "/workloads/bi.main", {}, "name");
rest("workload name an emoji", "PUT", "/workloads/%F0%9F%92%A5", {}, "name");

// NUL characters.
rest("NUL in a task input_uri", "POST", "/jobs", jobWith({ input_uri: "s3://bi/\u0000" }), "tasks[0].input_uri");
rest("NUL in idempotency_key", "POST", "/jobs", job({ idempotency_key: "key\u0000" }), "idempotency_key");
rest("NUL in a parameters value", "POST", "/jobs", job({ parameters: { a: "x\u0000y" } }), "parameters");
rest("NUL in a parameters key", "POST", "/jobs", job({ parameters: { "a\u0000": 1 } }), "parameters");
rest("NUL deep in parameters", "POST", "/jobs", job({ parameters: { a: [{ b: ["\u0000"] }] } }), "parameters");
rest("NUL in a task's parameters", "POST", "/jobs", jobWith({ parameters: { q: "\u0000" } }), "tasks[0].parameters");
rest("NUL in a metrics value", "POST", res, result({ metrics: { note: "\u0000" } }), "metrics");
rest("NUL in a metrics key", "POST", res, result({ metrics: { "\u0000": 1 } }), "metrics");
rest("NUL in worker_id", "POST", "/tasks/claim", claim({ worker_id: "w\u0000" }), "worker_id");
rest("NUL in a heartbeat worker_id", "POST", hb, lease({ worker_id: `${WORKER}\u0000` }), "worker_id");
rest("NUL in a cancel reason", "POST", cancel, { reason: "because\u0000" }, "reason");
rest("NUL in parameters_schema", "PUT", `/workloads/${W}`, { parameters_schema: { description: "\u0000" } }, "parameters_schema");
rest("NUL in a workloads entry", "POST", "/tasks/claim", claim({ workloads: [`${W}\u0000`] }), "workloads[0]");
rest("NUL in result_uri", "POST", res, result({ result_uri: "s3://out/\u0000" }), "result_uri");

// Lone surrogates (JSON escapes that are not Unicode scalar values; not storable as UTF-8).
rest("lone surrogate in idempotency_key", "POST", "/jobs", job({ idempotency_key: "k\ud800" }), "idempotency_key");
rest("lone surrogate in a task input_uri", "POST", "/jobs", jobWith({ input_uri: "s3://bi/\udc00" }), "input_uri");
rest("lone surrogate in a parameters value", "POST", "/jobs", job({ parameters: { a: "\ud800" } }), "parameters");
rest("lone surrogate in a parameters key", "POST", "/jobs", job({ parameters: { "\udc00": 1 } }), "parameters");
rest("lone surrogate in a metrics value", "POST", res, result({ metrics: { m: "\udfff" } }), "metrics");
rest(
  "lone surrogate in parameters_schema",
  "PUT",
  `/workloads/${W}`,
  { parameters_schema: { description: "\ud800" } },
  "parameters_schema",
);
rest("lone surrogate in a cancel reason", "POST", cancel, { reason: "\ud83d" }, "reason");

// Invalid UTF-8 bytes.
rest(
  "0xff in worker_id",
  "POST",
  "/tasks/claim",
  raw(Buffer.concat([Buffer.from('{"worker_id": "w'), Buffer.from([0xff]), Buffer.from(`", "workloads": ["${W}"]}`)])),
  /UTF-8/,
);
rest(
  "overlong encoding of '/'",
  "POST",
  "/jobs",
  raw(
    Buffer.concat([
      Buffer.from(`{"workload": "${W}", "input_uri": "s3://a`),
      Buffer.from([0xc0, 0xaf]),
      Buffer.from(`", "input_sha256": "${sha("a")}"}`),
    ]),
  ),
  /UTF-8/,
);
rest(
  "UTF-8-encoded surrogate (CESU)",
  "POST",
  hb,
  raw(Buffer.concat([Buffer.from('{"worker_id": "'), Buffer.from([0xed, 0xa0, 0x80]), Buffer.from('", "attempt": 1}')])),
  /UTF-8/,
);

// SQL-looking strings: rejected by the field rules, or passed as plain data that changes nothing.
rest("SQL as worker_id", "POST", "/tasks/claim", claim({ worker_id: SQL }), "worker_id");
rest("SQL as workload", "POST", "/jobs", job({ workload: `x${SQL}` }), "workload");
rest("SQL in workloads", "POST", "/tasks/claim", claim({ workloads: [`${W}'; DELETE FROM tasks; --`] }), "workloads[0]");
rest("SQL as error_code", "POST", fl, failure({ error_code: "x';drop table tasks;--" }), "error_code");
rest("SQL as input_uri", "POST", "/jobs", job({ input_uri: `s3://${SQL}` }), "input_uri");
rest("SQL as traceparent", "POST", "/jobs", job({ traceparent: `00-${SQL}` }), "traceparent");
rest("SQL as a job id", "GET", "/jobs/%27%3B%20DROP%20TABLE%20jobs%3B%20--/results", undefined, "job_id");
rest("SQL as a workload name", "PUT", "/workloads/x%27%3B%20DROP%20TABLE%20workloads%3B%20--", {}, "name");
rest("SQL in a page_token", "GET", results(`page_token=${b64url("c:1; DROP TABLE tasks")}`), undefined, "page_token");
rest(
  "SQL result_uri on a stale attempt (data, refused by the lease check)",
  "POST",
  res,
  result({ attempt: 2, result_uri: "s3://x';DROP/**/TABLE/**/tasks;--" }),
  "attempt",
  { status: 409, code: "aborted" },
);
rest(
  "SQL worker_id without spaces (data, not the leaseholder)",
  "POST",
  res,
  result({ worker_id: "x';DELETE/**/FROM/**/tasks;--" }),
  /worker/,
  { status: 409, code: "aborted" },
);
rest("SQL idempotency_key with an unknown workload", "POST", "/jobs", job({ workload: "bi_nobody", idempotency_key: SQL }), "workload", {
  status: 404,
});

// Bad query parameters.
rest("page_size -1", "GET", results("page_size=-1"), undefined, "page_size");
rest("page_size abc", "GET", results("page_size=abc"), undefined, "page_size");
rest("page_size over the limit", "GET", results(`page_size=${LIMITS.pageSize.max + 1}`), undefined, "page_size");
rest("page_size 1.5", "GET", results("page_size=1.5"), undefined, "page_size");
rest("page_size beyond int32", "GET", results("page_size=99999999999"), undefined, "page_size");
rest("page_token garbage", "GET", results("page_token=!!!not-a-token!!!"), undefined, "page_token");
rest("page_token with an enormous index", "GET", results(`page_token=${b64url("c:99999999999")}`), undefined, "page_token");
rest("page_size given twice", "GET", results("page_size=1&page_size=2"), undefined, "page_size");
rest("unknown query parameter on /workloads", "GET", "/workloads?verbose=1", undefined, "verbose");
rest("page_size on GET /jobs/{id}", "GET", (f) => `/jobs/${f.jobId}?page_size=5`, undefined, "page_size");
rest("query parameter on a POST route", "POST", (f) => `/jobs/${f.jobId}/cancel?reason=x`, {}, /query/);
rest("results of an unknown job", "GET", `/jobs/${UNKNOWN_ID}/results?page_size=1`, undefined, UNKNOWN_ID, { status: 404 });

// Bad traceparent.
rest("traceparent too short", "POST", "/jobs", job({ traceparent: "00-abc" }), "traceparent");
rest("traceparent in capitals", "POST", "/jobs", job({ traceparent: `00-${"A".repeat(32)}-${"B".repeat(16)}-01` }), "traceparent");
rest("traceparent a number", "POST", "/jobs", job({ traceparent: 5 }), "traceparent");

// Wrong content types.
rest("text/plain", "POST", "/jobs", job(), /content-type/, { status: 415, contentType: "text/plain" });
rest("no content-type", "POST", "/tasks/claim", claim(), /content-type/, { status: 415, contentType: null });
rest(
  "multipart/form-data",
  "POST",
  "/jobs",
  raw('--b\r\ncontent-disposition: form-data; name="workload"\r\n\r\nbi_main\r\n--b--\r\n'),
  /content-type/,
  {
    status: 415,
    contentType: "multipart/form-data; boundary=b",
  },
);
rest("application/xml", "POST", hb, raw(`<heartbeat worker_id="${WORKER}" attempt="1"/>`), /content-type/, {
  status: 415,
  contentType: "application/xml",
});
rest("form-urlencoded on a workload", "PUT", `/workloads/${W}`, raw("max_attempts=3"), /content-type/, {
  status: 415,
  contentType: "application/x-www-form-urlencoded",
});

// Bodies over the limit.
rest("body over the limit (content-length)", "POST", "/jobs", () => job({ parameters: { blob: big(MAX_BODY_BYTES) } }), undefined, {
  status: 413,
});
rest("body over the limit (chunked)", "POST", "/tasks/claim", () => claim({ worker_id: big(MAX_BODY_BYTES) }), undefined, {
  status: 413,
  chunked: true,
});
rest("workload body over the limit", "PUT", `/workloads/${W}`, () => ({ parameters_schema: { d: big(MAX_BODY_BYTES) } }), undefined, {
  status: 413,
});

// Unknown routes and wrong methods.
rest("GET /tasks/claim", "GET", "/tasks/claim", undefined, /GET/, { status: 405 });
rest("DELETE /jobs/x", "DELETE", "/jobs/x", undefined, /DELETE/, { status: 405 });
rest("PATCH a workload", "PATCH", `/workloads/${W}`, {}, /PATCH/, { status: 405 });
rest("POST /workloads", "POST", "/workloads", {}, /POST/, { status: 405 });
rest("PUT /jobs", "PUT", "/jobs", job(), /PUT/, { status: 405 });
rest("DELETE a result", "DELETE", res, undefined, /DELETE/, { status: 405 });
rest("GET /nope", "GET", "/nope", undefined, /nope/, { status: 404 });
rest("POST /tasks", "POST", "/tasks", claim(), /tasks/, { status: 404 });
rest("POST /jobs/ (empty id)", "POST", "/jobs/", job(), /jobs/, { status: 404 });
rest("heartbeat with an extra segment", "POST", (f) => `/tasks/${f.taskId}/heartbeat/extra`, lease(), /heartbeat/, { status: 404 });
rest("GET the service prefix", "GET", SERVICE, undefined, /QueueService/, { status: 404 });

// Well-formed requests the database refuses without a write.
rest("unknown workload on a task", "POST", "/jobs", jobWith({ workload: "bi_nobody" }), "tasks[0].workload", { status: 404 });
rest(
  "parameters against the workload schema",
  "POST",
  "/jobs",
  { workload: W_SCHEMA, input_uri: "s3://a", input_sha256: sha("a"), parameters: { quality: "ultra" } },
  "parameters",
);
rest("invalid JSON Schema", "PUT", `/workloads/${W}`, { parameters_schema: { type: 12 } }, "parameters_schema");
rest("claim of an unknown workload", "POST", "/tasks/claim", claim({ workloads: ["bi_nobody"] }), "workloads[0]", { status: 404 });
rest("heartbeat of an unknown task", "POST", `/tasks/${UNKNOWN_ID}/heartbeat`, lease(), "task", { status: 404 });
rest("heartbeat with a stale attempt", "POST", hb, lease({ attempt: 2 }), "attempt", { status: 409, code: "aborted" });
rest("failure from a foreign worker", "POST", fl, failure({ worker_id: "intruder" }), /intruder/, { status: 409, code: "aborted" });
rest("cancel of an unknown job", "POST", `/jobs/${UNKNOWN_ID}/cancel`, {}, "job", { status: 404 });

// ReportProgress: POST /tasks/{task_id}/progress (lease checks as a heartbeat; a pass would extend the lease and add a task_events row).
rest("progress -0.1", "POST", prog, progress({ progress: -0.1 }), "progress");
rest("progress 1.5", "POST", prog, progress({ progress: 1.5 }), "progress");
rest('progress "NaN"', "POST", prog, progress({ progress: "NaN" }), "progress");
rest('progress "Infinity"', "POST", prog, progress({ progress: "Infinity" }), "progress");
rest("progress: non-numeric string", "POST", prog, progress({ progress: "half" }), "progress");
rest("progress: boolean", "POST", prog, progress({ progress: true }), "progress");
rest("progress 1e400", "POST", prog, raw(`{"worker_id": "${WORKER}", "attempt": 1, "progress": 1e400}`), "progress");
rest("progress without worker_id", "POST", prog, { attempt: 1, progress: 0.5 }, "worker_id");
rest("progress without attempt", "POST", prog, { worker_id: WORKER, progress: 0.5 }, "attempt");
rest("progress empty body", "POST", prog, undefined, "worker_id");
rest("progress attempt 0", "POST", prog, progress({ attempt: 0 }), "attempt");
rest("progress message over the limit", "POST", prog, progress({ message: big(LIMITS.progressMessageLength + 1) }), "message");
rest("progress message: number", "POST", prog, progress({ message: 5 }), "message");
rest("NUL in a progress message", "POST", prog, progress({ message: "half\u0000way" }), "message");
rest("lone surrogate in a progress message", "POST", prog, progress({ message: "half\ud800" }), "message");
rest("partial_result_uri with whitespace", "POST", prog, progress({ partial_result_uri: "s3://bi/part ial" }), "partial_result_uri");
rest("partial_result_uri with a newline", "POST", prog, progress({ partial_result_uri: "s3://bi/partial\n" }), "partial_result_uri");
rest(
  "partial_result_uri over the limit",
  "POST",
  prog,
  progress({ partial_result_uri: `s3://${big(LIMITS.uriLength)}` }),
  "partial_result_uri",
);
rest("progress lease_seconds over the limit", "POST", prog, progress({ lease_seconds: LIMITS.leaseSeconds.max + 1 }), "lease_seconds");
rest("progress lease_seconds negative", "POST", prog, progress({ lease_seconds: -1 }), "lease_seconds");
rest("unknown field on a progress report", "POST", prog, progress({ percent: 50 }), "percent");
rest("progress body task_id differs from the path", "POST", prog, progress({ task_id: UNKNOWN_ID }), "task_id");
rest("progress task id not a UUID", "POST", "/tasks/not-a-uuid/progress", progress(), "task_id");
rest("progress task id a number", "POST", "/tasks/123/progress", progress(), "task_id");
rest("progress query parameter", "POST", (f) => `/tasks/${f.taskId}/progress?progress=0.5`, progress(), /query/);
rest("progress text/plain", "POST", prog, progress(), /content-type/, { status: 415, contentType: "text/plain" });
rest("GET a progress route", "GET", prog, undefined, /GET/, { status: 405 });
rest("progress of an unknown task", "POST", `/tasks/${UNKNOWN_ID}/progress`, progress(), "task", { status: 404 });
rest("progress with a stale attempt", "POST", prog, progress({ attempt: 2 }), "attempt", { status: 409, code: "aborted" });
rest("progress from a foreign worker", "POST", prog, progress({ worker_id: "intruder" }), /intruder/, { status: 409, code: "aborted" });

// RetryJob: POST /jobs/{job_id}/retry (a pass would put tasks back to pending and write events).
rest("retry job id not a UUID", "POST", "/jobs/not-a-uuid/retry", {}, "job_id");
rest("retry job id one digit too long", "POST", `/jobs/${UNKNOWN_ID}0/retry`, {}, "job_id");
rest("SQL as a retry job id", "POST", "/jobs/%27%3B%20DROP%20TABLE%20jobs%3B%20--/retry", {}, "job_id");
// max_attempts is 1..100 as on CreateJob: an explicit 0 is not "unset" (the field has presence).
rest("retry max_attempts 0", "POST", retryPending, { max_attempts: 0 }, "max_attempts");
rest("retry max_attempts 101", "POST", retryPending, { max_attempts: LIMITS.maxAttempts.max + 1 }, "max_attempts");
rest("retry max_attempts negative", "POST", retryPending, { max_attempts: -1 }, "max_attempts");
rest("retry max_attempts 1.5", "POST", retryPending, { max_attempts: 1.5 }, "max_attempts");
rest("retry max_attempts: string", "POST", retryPending, { max_attempts: "3x" }, "max_attempts");
rest("retry max_attempts beyond int32", "POST", retryPending, { max_attempts: 2 ** 31 }, "max_attempts");
rest("unknown field on a retry", "POST", retry, { reason: "again" }, "reason");
rest("retry body job_id differs from the path", "POST", retry, { job_id: UNKNOWN_ID }, "job_id");
rest("retry JSON array body", "POST", retry, raw("[]"), /object/);
rest("retry query parameter", "POST", (f) => `/jobs/${f.jobId}/retry?max_attempts=3`, {}, /query/);
rest("GET a retry route", "GET", retry, undefined, /GET/, { status: 405 });
rest("retry of an unknown job", "POST", `/jobs/${UNKNOWN_ID}/retry`, {}, UNKNOWN_ID, { status: 404 });
rest("retry of an unknown job with max_attempts", "POST", `/jobs/${UNKNOWN_ID}/retry`, { max_attempts: 5 }, UNKNOWN_ID, { status: 404 });
rest("retry of a pending job", "POST", retryPending, {}, /pending/, { code: "failed_precondition" });
rest("retry of a pending job with max_attempts", "POST", retryPending, { max_attempts: 5 }, /pending/, { code: "failed_precondition" });
rest("retry of a running job", "POST", retry, {}, /running/, { code: "failed_precondition" });

// ListJobs: GET /jobs?status=&workload=&page_size=&page_token=.
rest("jobs status=bogus", "GET", "/jobs?status=bogus", undefined, "status");
rest("jobs status=JOB_STATUS_BOGUS", "GET", "/jobs?status=JOB_STATUS_BOGUS", undefined, "status");
rest("jobs status=99", "GET", "/jobs?status=99", undefined, "status");
rest("jobs status SQL", "GET", `/jobs?status=${encodeURIComponent(SQL)}`, undefined, "status");
rest("jobs status given twice", "GET", "/jobs?status=failed&status=pending", undefined, "status");
rest("jobs page_size -1", "GET", "/jobs?page_size=-1", undefined, "page_size");
rest("jobs page_size over the limit", "GET", `/jobs?page_size=${LIMITS.pageSize.max + 1}`, undefined, "page_size");
rest("jobs page_size x", "GET", "/jobs?page_size=x", undefined, "page_size");
rest("jobs page_size 1.5", "GET", "/jobs?page_size=1.5", undefined, "page_size");
rest("jobs page_size beyond int32", "GET", "/jobs?page_size=99999999999", undefined, "page_size");
rest("jobs page_token garbage", "GET", "/jobs?page_token=!!!not-a-token!!!", undefined, "page_token");
rest("jobs page_token of the results route", "GET", `/jobs?page_token=${b64url("c:1")}`, undefined, "page_token");
rest(
  "jobs page_token with a bad time",
  "GET",
  `/jobs?page_token=${b64url(`j:2024-13-45T99:99:99.000000Z|${UNKNOWN_ID}`)}`,
  undefined,
  "page_token",
);
rest(
  "jobs page_token with a bad id",
  "GET",
  `/jobs?page_token=${b64url("j:2024-01-01T00:00:00.000000Z|zzzzzzzz-zzzz-zzzz-zzzz-zzzzzzzzzzzz")}`,
  undefined,
  "page_token",
);
rest(
  "SQL in a jobs page_token",
  "GET",
  `/jobs?page_token=${b64url(`j:2024-01-01T00:00:00.000000Z|${UNKNOWN_ID}'; DROP TABLE jobs; --`)}`,
  undefined,
  "page_token",
);
rest("jobs workload with capitals", "GET", "/jobs?workload=BI_MAIN", undefined, "workload");
rest("jobs workload with a space", "GET", "/jobs?workload=bi%20main", undefined, "workload");
rest("jobs workload with a dot", "GET", "/jobs?workload=bi.main", undefined, "workload");
rest("SQL as a jobs workload", "GET", `/jobs?workload=${encodeURIComponent(`${W}${SQL}`)}`, undefined, "workload");
rest("NUL in a jobs workload", "GET", "/jobs?workload=bi%00", undefined, "workload");
rest("unknown query parameter on /jobs", "GET", "/jobs?colour=red", undefined, "colour");
rest("misspelt query parameter on /jobs", "GET", "/jobs?pagesize=5", undefined, "pagesize");

// WatchJob over SSE: GET /jobs/{job_id}/events; an error before the first message is a plain JSON REST error.
rest("events job id not a UUID", "GET", "/jobs/not-a-uuid/events", undefined, "job_id");
rest("events job id without dashes", "GET", `/jobs/${UNKNOWN_ID.replace(/-/g, "")}/events`, undefined, "job_id");
rest("events path traversal as the job id", "GET", "/jobs/..%2F..%2Fetc%2Fpasswd/events", undefined, "job_id");
rest("events of an unknown job", "GET", `/jobs/${UNKNOWN_ID}/events`, undefined, UNKNOWN_ID, { status: 404 });
rest("events unknown query parameter", "GET", (f) => `/jobs/${f.jobId}/events?since=5`, undefined, "since");
rest("events query job_id differs from the path", "GET", (f) => `/jobs/${f.jobId}/events?job_id=${UNKNOWN_ID}`, undefined, "job_id");
rest("POST on events", "POST", events, {}, /POST/, { status: 405 });
rest("PUT on events", "PUT", events, {}, /PUT/, { status: 405 });
rest("events with an extra segment", "GET", (f) => `/jobs/${f.jobId}/events/extra`, undefined, /events/, { status: 404 });

// Resuming an SSE stream: Last-Event-ID / after_event_id must be an event id.
rest("events after_event_id not a number", "GET", (f) => `/jobs/${f.jobId}/events?after_event_id=yesterday`, undefined, "after_event_id");
rest("events after_event_id negative", "GET", (f) => `/jobs/${f.jobId}/events?after_event_id=-1`, undefined, "after_event_id");
rest(
  "events after_event_id beyond int64",
  "GET",
  (f) => `/jobs/${f.jobId}/events?after_event_id=99999999999999999999`,
  undefined,
  "after_event_id",
);
rest("events after_event_id of an unknown job", "GET", `/jobs/${UNKNOWN_ID}/events?after_event_id=1`, undefined, UNKNOWN_ID, {
  status: 404,
});

// ListTasks: GET /jobs/{job_id}/tasks?status=&page_size=&page_token=; GetTask: GET /tasks/{task_id}.
const tasksOf = (q: string) => (f: Fixture) => `/jobs/${f.jobId}/tasks?${q}`;
rest(
  "tasks status=done",
  "GET",
  tasksOf("status=done"),
  undefined,
  /status: "done" is not a value: must be one of pending, leased, completed, failed, cancelled/,
);
rest("tasks status of a job (running)", "GET", tasksOf("status=running"), undefined, "status");
rest("tasks status=TASK_STATUS_BOGUS", "GET", tasksOf("status=TASK_STATUS_BOGUS"), undefined, "status");
rest("tasks status=99", "GET", tasksOf("status=99"), undefined, "status");
rest("tasks status SQL", "GET", (f) => `/jobs/${f.jobId}/tasks?status=${encodeURIComponent(SQL)}`, undefined, "status");
rest("tasks page_size -1", "GET", tasksOf("page_size=-1"), undefined, "page_size");
rest("tasks page_size over the limit", "GET", tasksOf(`page_size=${LIMITS.pageSize.max + 1}`), undefined, "page_size");
rest("tasks page_token garbage", "GET", tasksOf("page_token=!!!not-a-token!!!"), undefined, "page_token");
rest("tasks page_token of the results route", "GET", tasksOf(`page_token=${b64url("c:1")}`), undefined, "page_token");
rest(
  "tasks page_token of another status",
  "GET",
  tasksOf(`status=failed&page_token=${b64url("t:*:0")}`),
  undefined,
  /page_token: was issued for a different status filter/,
);
rest("tasks page_token beyond the chunk range", "GET", tasksOf(`page_token=${b64url("t:*:9999999999")}`), undefined, "page_token");
rest("tasks of a job id not a UUID", "GET", "/jobs/not-a-uuid/tasks", undefined, "job_id");
rest("tasks of an unknown job", "GET", `/jobs/${UNKNOWN_ID}/tasks`, undefined, UNKNOWN_ID, { status: 404 });
rest("tasks unknown query parameter", "GET", tasksOf("state=failed"), undefined, "state");
rest("POST on tasks", "POST", (f) => `/jobs/${f.jobId}/tasks`, {}, /POST/, { status: 405 });
rest("task id not a UUID", "GET", "/tasks/chunk-3117", undefined, "task_id");
rest("task SQL as the id", "GET", `/tasks/${encodeURIComponent(SQL)}`, undefined, "task_id");
rest("unknown task", "GET", `/tasks/${UNKNOWN_ID}`, undefined, UNKNOWN_ID, { status: 404 });
rest("task unknown query parameter", "GET", (f) => `/tasks/${f.taskId}?attempts=all`, undefined, "attempts");
rest("DELETE on a task", "DELETE", (f) => `/tasks/${f.taskId}`, undefined, /DELETE/, { status: 405 });

// Required fields say so; an attempt ahead of the current one is not called stale.
rest("heartbeat with attempt 0 (missing)", "POST", hb, lease({ attempt: 0 }), /^attempt: is required/);
rest(
  "result without worker_id",
  "POST",
  res,
  { attempt: 1, result_uri: "s3://bi/out", result_sha256: sha("out") },
  /^worker_id: is required/,
);
rest("failure with an empty error_code", "POST", fl, failure({ error_code: "" }), /^error_code: is required/);
rest(
  "heartbeat with an attempt ahead",
  "POST",
  hb,
  lease({ attempt: 7 }),
  /attempt 7 of task \S+ was never leased; the current attempt is 1/,
  { status: 409, code: "aborted" },
);
rest(
  "parameters breaking the schema twice",
  "POST",
  "/jobs",
  { workload: W_SCHEMA, input_uri: "s3://a", input_sha256: sha("a"), parameters: { quality: "ultra", size: 3 } },
  /\(2 problems\)/,
);

// PutWorkload max_pending_seconds: 0 (off) or 1..2,592,000.
rest("max_pending_seconds negative", "PUT", `/workloads/${W}`, { max_pending_seconds: -1 }, "max_pending_seconds");
rest(
  "max_pending_seconds over the limit",
  "PUT",
  `/workloads/${W}`,
  { max_pending_seconds: LIMITS.maxPendingSeconds.max + 1 },
  "max_pending_seconds",
);
rest("max_pending_seconds: string", "PUT", `/workloads/${W}`, { max_pending_seconds: "a day" }, "max_pending_seconds");
rest("max_pending_seconds 1.5", "PUT", `/workloads/${W}`, { max_pending_seconds: 1.5 }, "max_pending_seconds");
rest("max_pending_seconds beyond int32", "PUT", `/workloads/${W}`, { max_pending_seconds: 2 ** 31 }, "max_pending_seconds");
rest(
  "max_pending_seconds over the limit on a new workload",
  "PUT",
  "/workloads/bi_new",
  { max_pending_seconds: LIMITS.maxPendingSeconds.max + 1 },
  "max_pending_seconds",
);

// ============================ Connect JSON ============================

rpc("malformed JSON", "ClaimTasks", raw("{not json"), /JSON/);
rpc("truncated JSON", "CreateJob", raw(`{"workload": "${W}", "tasks": [{"chunk_index": 0`), /JSON/);
rpc("JSON array body", "RenewLease", raw("[]"), /JSON|object/);
rpc("trailing garbage", "GetJob", raw(`{"job_id": "${UNKNOWN_ID}"} x`), /JSON/);
rpc(
  "invalid UTF-8 in worker_id",
  "ClaimTasks",
  raw(Buffer.concat([Buffer.from('{"worker_id": "w'), Buffer.from([0xff]), Buffer.from(`", "workloads": ["${W}"]}`)])),
  /UTF-8|worker_id/i,
);
rpc(
  "invalid UTF-8 in an input_uri (else valid)",
  "CreateJob",
  raw(
    Buffer.concat([
      Buffer.from(`{"workload": "${W}", "input_uri": "s3://bi/`),
      Buffer.from([0xc3, 0x28]),
      Buffer.from(`", "input_sha256": "${sha("utf8")}"}`),
    ]),
  ),
  /UTF-8|input_uri/i,
);
rpc("max_tasks: string", "ClaimTasks", claim({ max_tasks: "many" }), "max_tasks");
rpc("workloads: string for list", "ClaimTasks", claim({ workloads: W }), "workloads");
// connect-es decodes Connect bodies before our code runs; for a message-typed field its error names the type.
rpc("parameters: array for object", "CreateJob", job({ parameters: ["a"] }), /google\.protobuf\.Struct/);
rpc("tasks: object for list", "CreateJob", { workload: W, tasks: spec(0) }, "tasks");
rpc("attempt: string", "RenewLease", (f) => withId(f, lease({ attempt: "one" })), "attempt");
rpc("metrics: array for object", "CompleteTask", (f) => withId(f, result({ metrics: [] })), /google\.protobuf\.Struct/);
rpc("retryable: string", "FailTask", (f) => withId(f, failure({ retryable: "y" })), "retryable");
rpc("priority: object", "CreateJob", job({ priority: { v: 1 } }), "priority");
rpc("unknown field", "ClaimTasks", claim({ bogus: 1 }), "bogus");
rpc("unknown field in a task spec", "CreateJob", jobWith({ colour: "red" }), "colour");
rpc("empty ClaimTasks", "ClaimTasks", {}, "worker_id");
rpc("empty CreateJob", "CreateJob", {}, "workload");
rpc("empty RenewLease", "RenewLease", {}, "task_id");
rpc("CompleteTask without result_uri", "CompleteTask", (f) => withId(f, lease({ result_sha256: sha("x") })), "result_uri");
rpc("FailTask without error_code", "FailTask", (f) => withId(f, lease()), "error_code");
rpc("empty GetJob", "GetJob", {}, "job_id");
rpc("empty CancelJob", "CancelJob", {}, "job_id");
rpc("empty ListCompletedResults", "ListCompletedResults", {}, "job_id");
rpc("empty PutWorkload", "PutWorkload", {}, "name");
rpc("empty CompleteTasks", "CompleteTasks", {}, "results");
rpc("worker_id over the limit", "ClaimTasks", claim({ worker_id: big(LIMITS.workerIdLength + 1) }), "worker_id");
rpc("input_uri over the limit", "CreateJob", job({ input_uri: `s3://${big(LIMITS.uriLength)}` }), "input_uri");
rpc("idempotency_key over the limit", "CreateJob", job({ idempotency_key: big(LIMITS.idempotencyKeyLength + 1) }), "idempotency_key");
rpc("reason over the limit", "CancelJob", (f) => ({ job_id: f.jobId, reason: big(LIMITS.reasonLength + 1) }), "reason");
rpc("parameters over the limit", "CreateJob", job({ parameters: { blob: big(LIMITS.jsonBytes) } }), "parameters");
rpc("max_tasks over the limit", "ClaimTasks", claim({ max_tasks: LIMITS.maxClaimBatch + 1 }), "max_tasks");
rpc("max_tasks negative", "ClaimTasks", claim({ max_tasks: -1 }), "max_tasks");
rpc("lease_seconds over the limit", "ClaimTasks", claim({ lease_seconds: LIMITS.leaseSeconds.max + 1 }), "lease_seconds");
rpc("wait_seconds over the limit", "ClaimTasks", claim({ wait_seconds: LIMITS.waitSeconds.max + 1 }), "wait_seconds");
rpc("wait_seconds negative", "ClaimTasks", claim({ wait_seconds: -1 }), "wait_seconds");
rpc("attempt 0", "RenewLease", (f) => withId(f, lease({ attempt: 0 })), "attempt");
rpc("attempt 1.5", "CompleteTask", (f) => withId(f, result({ attempt: 1.5 })), "attempt");
rpc("attempt beyond int32", "FailTask", (f) => withId(f, failure({ attempt: 2 ** 31 })), "attempt");
rpc("renew lease_seconds negative", "RenewLease", (f) => withId(f, lease({ lease_seconds: -1 })), "lease_seconds");
rpc("priority over the limit", "CreateJob", job({ priority: LIMITS.priority.max + 1 }), "priority");
rpc("max_attempts 0", "CreateJob", job({ max_attempts: 0 }), "max_attempts");
rpc("workload max_attempts over the limit", "PutWorkload", { name: W, max_attempts: LIMITS.maxAttempts.max + 1 }, "max_attempts");
rpc("chunk_index negative", "CreateJob", jobWith({ chunk_index: -1 }), "tasks[0].chunk_index");
rpc("chunk_index 1.5", "CreateJob", jobWith({ chunk_index: 1.5 }), "chunk_index");
rpc("retry_after_seconds negative", "FailTask", (f) => withId(f, failure({ retry_after_seconds: -1 })), "retry_after_seconds");
rpc("page_size negative", "ListCompletedResults", (f) => ({ job_id: f.jobId, page_size: -1 }), "page_size");
rpc("page_size over the limit", "ListCompletedResults", (f) => ({ job_id: f.jobId, page_size: LIMITS.pageSize.max + 1 }), "page_size");
rpc("page_token garbage", "ListCompletedResults", (f) => ({ job_id: f.jobId, page_token: "garbage" }), "page_token");
rpc("job_id not a UUID", "GetJob", { job_id: "nope" }, "job_id");
rpc("task_id not a UUID", "RenewLease", lease({ task_id: "x" }), "task_id");
rpc("task_id not a UUID in a batch", "CompleteTasks", { results: [result({ task_id: "nope" })] }, "results[0].task_id");
rpc("SQL as a job_id", "CancelJob", { job_id: `${UNKNOWN_ID}${SQL}` }, "job_id");
rpc("job_id with a NUL", "ListCompletedResults", { job_id: `${UNKNOWN_ID}\u0000` }, "job_id");
rpc("NUL in worker_id", "ClaimTasks", claim({ worker_id: "w\u0000" }), "worker_id");
rpc("NUL in a parameters value", "CreateJob", job({ parameters: { a: "\u0000" } }), "parameters");
rpc("NUL in a parameters key", "CreateJob", job({ parameters: { "k\u0000": "v" } }), "parameters");
rpc("NUL in a metrics key", "CompleteTask", (f) => withId(f, result({ metrics: { "m\u0000": 1 } })), "metrics");
rpc("NUL in a reason", "CancelJob", (f) => ({ job_id: f.jobId, reason: "\u0000" }), "reason");
rpc("NUL in idempotency_key", "CreateJob", job({ idempotency_key: "\u0000" }), "idempotency_key");
rpc("lone surrogate in a parameters value", "CreateJob", job({ parameters: { a: "\udbff" } }), "parameters");
rpc("lone surrogate in a metrics value", "CompleteTask", (f) => withId(f, result({ metrics: { m: "\ud800x" } })), "metrics");
rpc("lone surrogate in idempotency_key", "CreateJob", job({ idempotency_key: "\udc00" }), "idempotency_key");
rpc("SQL as worker_id", "ClaimTasks", claim({ worker_id: SQL }), "worker_id");
rpc("SQL as workload", "CreateJob", job({ workload: SQL }), "workload");
rpc("SQL as error_code", "FailTask", (f) => withId(f, failure({ error_code: SQL })), "error_code");
rpc("SQL as a workload name", "PutWorkload", { name: `w${SQL}` }, "name");
rpc("duplicate chunk_index", "CreateJob", { workload: W, tasks: [spec(3), spec(3)] }, "tasks[1].chunk_index");
rpc("too many tasks", "CreateJob", () => ({ workload: W, tasks: tooManyTasks() }), "tasks");
rpc("bad traceparent", "CreateJob", job({ traceparent: "01-zz" }), "traceparent");
rpc("invalid JSON Schema", "PutWorkload", { name: W, parameters_schema: { type: "nonsense" } }, "parameters_schema");
rpc("unknown workload", "ClaimTasks", claim({ workloads: ["bi_nobody"] }), "workloads[0]", { status: 404 });
rpc("stale attempt", "RenewLease", (f) => withId(f, lease({ attempt: 2 })), "attempt", { status: 409, code: "aborted" });
// ReportProgress, RetryJob, ListJobs, PutWorkload max_pending_seconds.
rpc("empty ReportProgress", "ReportProgress", {}, "task_id");
rpc("ReportProgress without worker_id", "ReportProgress", (f) => ({ task_id: f.taskId, attempt: 1, progress: 0.5 }), "worker_id");
rpc("ReportProgress without attempt", "ReportProgress", (f) => ({ task_id: f.taskId, worker_id: WORKER, progress: 0.5 }), "attempt");
rpc("progress -0.1", "ReportProgress", (f) => withId(f, progress({ progress: -0.1 })), "progress");
rpc("progress 1.5", "ReportProgress", (f) => withId(f, progress({ progress: 1.5 })), "progress");
rpc('progress "NaN"', "ReportProgress", (f) => withId(f, progress({ progress: "NaN" })), "progress");
rpc('progress "-Infinity"', "ReportProgress", (f) => withId(f, progress({ progress: "-Infinity" })), "progress");
rpc("progress: string", "ReportProgress", (f) => withId(f, progress({ progress: "half" })), "progress");
rpc(
  "progress message over the limit",
  "ReportProgress",
  (f) => withId(f, progress({ message: big(LIMITS.progressMessageLength + 1) })),
  "message",
);
rpc("NUL in a progress message", "ReportProgress", (f) => withId(f, progress({ message: "\u0000" })), "message");
rpc(
  "partial_result_uri with whitespace",
  "ReportProgress",
  (f) => withId(f, progress({ partial_result_uri: "s3://bi/a b" })),
  "partial_result_uri",
);
rpc(
  "partial_result_uri over the limit",
  "ReportProgress",
  (f) => withId(f, progress({ partial_result_uri: `s3://${big(LIMITS.uriLength)}` })),
  "partial_result_uri",
);
rpc(
  "progress lease_seconds over the limit",
  "ReportProgress",
  (f) => withId(f, progress({ lease_seconds: LIMITS.leaseSeconds.max + 1 })),
  "lease_seconds",
);
rpc("progress task_id not a UUID", "ReportProgress", progress({ task_id: "nope" }), "task_id");
rpc("unknown field on ReportProgress", "ReportProgress", (f) => withId(f, progress({ percent: 50 })), "percent");
rpc("progress of an unknown task", "ReportProgress", progress({ task_id: UNKNOWN_ID }), "task", { status: 404 });
rpc("progress with a stale attempt", "ReportProgress", (f) => withId(f, progress({ attempt: 2 })), "attempt", {
  status: 409,
  code: "aborted",
});
rpc("progress from a foreign worker", "ReportProgress", (f) => withId(f, progress({ worker_id: "intruder" })), /intruder/, {
  status: 409,
  code: "aborted",
});
rpc("empty RetryJob", "RetryJob", {}, "job_id");
rpc("retry job_id not a UUID", "RetryJob", { job_id: "nope" }, "job_id");
rpc("SQL as a retry job_id", "RetryJob", { job_id: `${UNKNOWN_ID}${SQL}` }, "job_id");
rpc("retry max_attempts 0", "RetryJob", (f) => ({ job_id: f.pendingJobId, max_attempts: 0 }), "max_attempts");
rpc("retry max_attempts 101", "RetryJob", (f) => ({ job_id: f.pendingJobId, max_attempts: LIMITS.maxAttempts.max + 1 }), "max_attempts");
rpc("retry max_attempts: string", "RetryJob", (f) => ({ job_id: f.pendingJobId, max_attempts: "3x" }), "max_attempts");
rpc("unknown field on RetryJob", "RetryJob", (f) => ({ job_id: f.jobId, reason: "again" }), "reason");
rpc("retry of an unknown job", "RetryJob", { job_id: UNKNOWN_ID }, UNKNOWN_ID, { status: 404 });
rpc("retry of a pending job", "RetryJob", (f) => ({ job_id: f.pendingJobId }), /pending/, { code: "failed_precondition" });
rpc("retry of a running job", "RetryJob", (f) => ({ job_id: f.jobId, max_attempts: 5 }), /running/, { code: "failed_precondition" });
// connect-es names the enum type, not the field, of an enum it cannot decode.
rpc("ListJobs status bogus", "ListJobs", { status: "bogus" }, /leasehold\.queue\.v1\.JobStatus/);
rpc("ListJobs status 99", "ListJobs", { status: 99 }, "status");
rpc("ListJobs status: object", "ListJobs", { status: { v: 1 } }, /leasehold\.queue\.v1\.JobStatus/);
rpc("ListJobs page_size negative", "ListJobs", { page_size: -1 }, "page_size");
rpc("ListJobs page_size over the limit", "ListJobs", { page_size: LIMITS.pageSize.max + 1 }, "page_size");
rpc("ListJobs page_size: string", "ListJobs", { page_size: "x" }, "page_size");
rpc("ListJobs page_token garbage", "ListJobs", { page_token: "garbage" }, "page_token");
rpc("ListJobs workload with capitals", "ListJobs", { workload: "BI_MAIN" }, "workload");
rpc("ListJobs unknown field", "ListJobs", { colour: "red" }, "colour");
rpc("max_pending_seconds negative", "PutWorkload", { name: W, max_pending_seconds: -1 }, "max_pending_seconds");
rpc(
  "max_pending_seconds over the limit",
  "PutWorkload",
  { name: W, max_pending_seconds: LIMITS.maxPendingSeconds.max + 1 },
  "max_pending_seconds",
);
rpc("max_pending_seconds: string", "PutWorkload", { name: W, max_pending_seconds: "a day" }, "max_pending_seconds");
rpc("GET on ReportProgress", "ReportProgress", undefined, undefined, { status: 405, method: "GET", noBody: true });
rpc("ListTasks job_id missing", "ListTasks", {}, /^job_id: is required/);
rpc("ListTasks status 99", "ListTasks", (f) => ({ job_id: f.jobId, status: 99 }), "status");
rpc("ListTasks page_token garbage", "ListTasks", (f) => ({ job_id: f.jobId, page_token: "garbage" }), "page_token");
rpc("ListTasks unknown job", "ListTasks", { job_id: UNKNOWN_ID }, UNKNOWN_ID, { status: 404 });
rpc("GetTask task_id missing", "GetTask", {}, /^task_id: is required/);
rpc("GetTask task_id not a UUID", "GetTask", { task_id: "x" }, "task_id");
rpc("GetTask unknown task", "GetTask", { task_id: UNKNOWN_ID }, UNKNOWN_ID, { status: 404 });
rpc("RenewLease attempt missing", "RenewLease", (f) => ({ task_id: f.taskId, worker_id: WORKER }), /^attempt: is required/);
rpc("FailTask attempt ahead", "FailTask", (f) => withId(f, failure({ attempt: 9 })), /never leased/, { status: 409, code: "aborted" });
rpc("body over the limit", "CreateJob", () => job({ parameters: { blob: big(MAX_BODY_BYTES) } }), undefined, {
  status: 413,
  code: "resource_exhausted",
});
rpc("text/plain", "ClaimTasks", claim(), /application\/json/, { status: 415, contentType: "text/plain" });
rpc("no content-type", "CreateJob", job(), /application\/json/, { status: 415, contentType: null });
rpc("form-urlencoded (urllib's default)", "ClaimTasks", raw("worker_id=w"), /application\/json/, {
  status: 415,
  contentType: "application/x-www-form-urlencoded",
});
rpc("multipart/form-data", "GetJob", raw("--b\r\n\r\nx\r\n--b--\r\n"), /application\/json/, {
  status: 415,
  contentType: "multipart/form-data; boundary=b",
});
// Optional fields: present and out of range is an error, 0 included; only an absent field takes the default.
rpc("max_tasks 0", "ClaimTasks", claim({ max_tasks: 0 }), "max_tasks");
rpc("claim lease_seconds 0", "ClaimTasks", claim({ lease_seconds: 0 }), "lease_seconds");
rpc("renew lease_seconds 0", "RenewLease", (f) => withId(f, lease({ lease_seconds: 0 })), "lease_seconds");
rpc("progress lease_seconds 0", "ReportProgress", (f) => withId(f, progress({ lease_seconds: 0 })), "lease_seconds");
rpc("workload max_attempts 0", "PutWorkload", { name: W, max_attempts: 0 }, "max_attempts");
rpc("workload lease_seconds 0", "PutWorkload", { name: W, lease_seconds: 0 }, "lease_seconds");
rpc("unknown method", "Nope", {}, /Nope/, { status: 404, restShaped: true });
// ---- pipelines: CreateJob's after, and workflows ----
const dep = (extra: Record<string, unknown> = {}) => job({ after: [{ job_id: UNKNOWN_ID }], ...extra });
rest("after: not a list", "POST", "/jobs", job({ after: { job_id: UNKNOWN_ID } }), "after");
rest("after: a job_id that is no UUID", "POST", "/jobs", job({ after: [{ job_id: "nope" }] }), "after[0].job_id");
rest("after: a parent without a job_id", "POST", "/jobs", job({ after: [{ optional: true }] }), "after[0].job_id");
rest("after: the same parent twice", "POST", "/jobs", job({ after: [{ job_id: UNKNOWN_ID }, { job_id: UNKNOWN_ID }] }), "after[1].job_id");
rest(
  "after: 101 parents",
  "POST",
  "/jobs",
  job({ after: Array.from({ length: 101 }, () => ({ job_id: UNKNOWN_ID })) }),
  /^after: .*at most 100/,
);
rest("after: an unknown parent", "POST", "/jobs", dep(), "after[0].job_id", { status: 404 });
rest("dependency_policy: unknown", "POST", "/jobs", dep({ dependency_policy: "sometimes" }), "dependency_policy");
rest("after: optional not a boolean", "POST", "/jobs", job({ after: [{ job_id: UNKNOWN_ID, optional: "yes" }] }), "after[0].optional");
rpc("CreateJob after an unknown parent", "CreateJob", dep(), "after[0].job_id", { status: 404 });
const node = (name: string, extra: Record<string, unknown> = {}) => ({ name, job: job(), ...extra });
rest("workflow without nodes", "POST", "/workflows", {}, /^nodes: is required/);
rest("workflow node without a name", "POST", "/workflows", { nodes: [{ job: job() }] }, "nodes[0].name");
rest("workflow node named badly", "POST", "/workflows", { nodes: [node("Bad Name")] }, "nodes[0].name");
rest("workflow nodes of one name", "POST", "/workflows", { nodes: [node("a"), node("a")] }, "nodes[1].name");
rest("workflow node without a job", "POST", "/workflows", { nodes: [{ name: "a" }] }, "nodes[0].job");
rest("workflow edge to no node", "POST", "/workflows", { nodes: [node("a", { after: [{ node: "zz" }] })] }, "nodes[0].after[0].node");
rest("workflow edge to itself", "POST", "/workflows", { nodes: [node("a", { after: [{ node: "a" }] })] }, "nodes[0].after[0].node");
rest(
  "workflow with a cycle",
  "POST",
  "/workflows",
  { nodes: [node("a", { after: [{ node: "c" }] }), node("b", { after: [{ node: "a" }] }), node("c", { after: [{ node: "b" }] })] },
  /cycle/,
);
rest(
  "workflow of 1001 nodes",
  "POST",
  "/workflows",
  { nodes: Array.from({ length: 1001 }, (_, i) => ({ name: `n${i}` })) },
  /^nodes: must hold at most 1000 nodes/,
);
rest(
  "workflow node of an unknown workload",
  "POST",
  "/workflows",
  { nodes: [node("a"), node("b", { job: job({ workload: "bi_nope" }) })] },
  "nodes[1].job.workload",
  {
    status: 404,
  },
);
rest(
  "workflow node with a bad job",
  "POST",
  "/workflows",
  { nodes: [node("a", { job: job({ input_sha256: "xyz" }) })] },
  "nodes[0].job.input_sha256",
);
rest(
  "workflow node with its own idempotency_key",
  "POST",
  "/workflows",
  { nodes: [node("a", { job: job({ idempotency_key: "k" }) })] },
  "nodes[0].job.idempotency_key",
);
rest("workflow node after an unknown job", "POST", "/workflows", { nodes: [node("a", { job: dep() })] }, "nodes[0].job.after[0].job_id", {
  status: 404,
});
rest("workflow name too long", "POST", "/workflows", { name: "x".repeat(201), nodes: [node("a")] }, "name");
rpc("CreateWorkflow with a cycle", "CreateWorkflow", { nodes: [node("a", { after: [{ node: "a" }] })] }, "nodes[0].after[0].node");
rest("GET /workflows/{id} not a UUID", "GET", "/workflows/nope", undefined, "workflow_id");
rest("GET /workflows/{id} unknown", "GET", `/workflows/${UNKNOWN_ID}`, undefined, "workflow_id", { status: 404 });
rest("GET /workflows/{id}/events not a UUID", "GET", "/workflows/nope/events", undefined, "workflow_id");
rest("GET /workflows/{id}/events unknown", "GET", `/workflows/${UNKNOWN_ID}/events`, undefined, "workflow_id", { status: 404 });
rest("GET /workflows with a forged page token", "GET", "/workflows?page_token=bm9wZQ", undefined, "page_token");
rest("cancel a workflow that is not a UUID", "POST", "/workflows/nope/cancel", {}, "workflow_id");
rest("cancel an unknown workflow", "POST", `/workflows/${UNKNOWN_ID}/cancel`, {}, "workflow_id", { status: 404 });
rest("retry an unknown workflow", "POST", `/workflows/${UNKNOWN_ID}/retry`, {}, "workflow_id", { status: 404 });
rest("retry a workflow with max_attempts 0", "POST", `/workflows/${UNKNOWN_ID}/retry`, { max_attempts: 0 }, "max_attempts");
rpc("GetWorkflow of an unknown workflow", "GetWorkflow", { workflow_id: UNKNOWN_ID }, "workflow_id", { status: 404 });

rpc("unknown service", "/leasehold.queue.v1.Other/ClaimTasks", claim(), /Other/, { status: 404, restShaped: true });
rpc("GET on ClaimTasks", "ClaimTasks", undefined, undefined, { status: 405, method: "GET", noBody: true });
rpc("PUT on CreateJob", "CreateJob", job(), undefined, { status: 405, method: "PUT", noBody: true });

// ============================ the harness ============================

let db: TestDatabase;
let pool: pg.Pool;
let api: ApiServerFixture;
let port: number;
let fixture: Fixture;
let initial: Snapshot;

interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  text: string;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  json: any;
}

function send(method: string, path: string, body: Buffer | undefined, headers: Record<string, string>, chunked = false): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const h: Record<string, string | number> = { ...headers };
    if (body !== undefined && !chunked) h["content-length"] = body.length;
    const req = http.request({ host: "127.0.0.1", port, method, path, headers: h, agent: false }, (r) => {
      const chunks: Buffer[] = [];
      r.on("data", (c: Buffer) => chunks.push(c));
      r.on("error", reject);
      r.on("end", () => {
        const text = Buffer.concat(chunks).toString("utf8");
        let json: unknown;
        try {
          json = text ? JSON.parse(text) : undefined;
        } catch {
          json = undefined;
        }
        resolve({ status: r.statusCode ?? 0, headers: r.headers, text, json });
      });
    });
    // The server may answer (413) and close before the whole body is sent: the answer still counts.
    req.on("error", (err) => setTimeout(() => reject(err), 200));
    if (body === undefined) req.end();
    else if (chunked) {
      for (let i = 0; i < body.length; i += 8192) req.write(body.subarray(i, i + 8192));
      req.end();
    } else req.end(body);
  });
}

/** A raw HTTP/1.1 exchange, for requests no client library will send. */
function sendRaw(bytes: string): Promise<{ head: string; body: string }> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, "127.0.0.1", () => socket.write(bytes));
    let data = "";
    socket.setEncoding("utf8");
    socket.on("data", (d: string) => (data += d));
    socket.on("error", reject);
    socket.on("close", () => {
      const i = data.indexOf("\r\n\r\n");
      resolve({ head: i < 0 ? data : data.slice(0, i), body: i < 0 ? "" : data.slice(i + 4) });
    });
    socket.setTimeout(5000, () => socket.destroy());
  });
}

interface Snapshot {
  jobs: number;
  tasks: number;
  workloads: number;
  task_events: number;
  job_watchers: number;
  workflows: number;
  job_dependencies: number;
  digest: string;
}

/**
 * Row counts and a digest of every row, so an UPDATE (a lease taken, a task finished) shows as well
 * as an INSERT; task_events (progress reports, status changes) and job_watchers (WatchJob streams,
 * which must be gone by the time the answer is) included.
 */
async function snapshot(): Promise<Snapshot> {
  const { rows } = await pool.query<Snapshot>(`
    SELECT (SELECT count(*) FROM jobs)::int AS jobs,
           (SELECT count(*) FROM tasks)::int AS tasks,
           (SELECT count(*) FROM workloads)::int AS workloads,
           (SELECT count(*) FROM task_events)::int AS task_events,
           (SELECT count(*) FROM job_watchers)::int AS job_watchers,
           (SELECT count(*) FROM workflows)::int AS workflows,
           (SELECT count(*) FROM job_dependencies)::int AS job_dependencies,
           md5(concat_ws('#',
             (SELECT string_agg(j::text, '|' ORDER BY j.id) FROM jobs j),
             (SELECT string_agg(t::text, '|' ORDER BY t.id) FROM tasks t),
             (SELECT string_agg(w::text, '|' ORDER BY w.name) FROM workloads w),
             (SELECT string_agg(e::text, '|' ORDER BY e.id) FROM task_events e),
             (SELECT string_agg(jw::text, '|' ORDER BY jw.id) FROM job_watchers jw),
             (SELECT string_agg(wf::text, '|' ORDER BY wf.id) FROM workflows wf),
             (SELECT string_agg(d::text, '|' ORDER BY d.parent_id, d.child_id) FROM job_dependencies d))) AS digest`);
  return rows[0];
}

function lazy<T>(v: Lazy<T>): T {
  return typeof v === "function" ? (v as (f: Fixture) => T)(fixture) : v;
}

beforeAll(async () => {
  db = await createTestDatabase();
  pool = createPool({ connectionString: db.url, max: 8, statementTimeoutMs: 10_000, connectTimeoutMs: 5000 });
  const queue = new PostgresQueue(pool, {
    coalescing: SWITCHES.coalescing,
    defaultLeaseSeconds: 3600,
    defaultMaxAttempts: 3,
    maxTasksPerJob: MAX_TASKS_PER_JOB,
  });
  api = await apiServerFixture({ queue, maxBodyBytes: MAX_BODY_BYTES, requestTimeoutMs: 10_000 });
  port = api.port;

  await queue.putWorkload({ name: W, maxAttempts: 3, leaseSeconds: 3600 });
  await queue.putWorkload({
    name: W_SCHEMA,
    parametersSchema: { type: "object", properties: { quality: { enum: ["low", "high"] } }, additionalProperties: false },
  });
  const created = await queue.createJob({
    workload: W,
    tasks: [0, 1].map((i) => ({ chunkIndex: i, inputUri: `s3://bi/setup/${i}`, inputSha256: sha(`setup${i}`) })),
  });
  const [leased] = await queue.claimTasks({ workerId: WORKER, workloads: [W], maxTasks: 1, leaseSeconds: 3600 });
  expect(leased.attempt).toBe(1);
  // Created after the claim, so never claimed: pending, and RetryJob must refuse it.
  const pending = await queue.createJob({ workload: W, inputUri: "s3://bi/setup/pending", inputSha256: sha("setup-pending") });
  expect(pending.job.status).toBe("pending");
  fixture = { jobId: created.job.id, taskId: leased.id, pendingJobId: pending.job.id };
  initial = await snapshot();
  // The claim's status changes are events; no watcher is left.
  expect(initial).toMatchObject({ jobs: 2, tasks: 3, workloads: 2, job_watchers: 0 });
  expect(initial.task_events).toBeGreaterThan(0);
});

afterAll(async () => {
  await api?.close();
  await pool?.end();
  await db?.drop();
});

describe("bad input", () => {
  it("has at least 100 cases, over REST and Connect JSON", () => {
    const byTransport = { rest: cases.filter((c) => c.via === "rest").length, connect: cases.filter((c) => c.via === "connect").length };
    expect(byTransport.rest + byTransport.connect).toBeGreaterThanOrEqual(100);
    expect(byTransport.connect).toBeGreaterThanOrEqual(50);
    expect(new Set(cases.map((c) => `${c.via} ${c.name}`)).size).toBe(cases.length);
  });

  it.each(cases.map((c, i) => [`${c.via}: ${c.name}`, c, i] as const))("%s", async (_label, c, i) => {
    const before = await snapshot();
    const path = lazy(c.path);
    const value = lazy(c.body);
    const body = value === undefined ? undefined : value instanceof Raw ? value.bytes : Buffer.from(JSON.stringify(value), "utf8");
    const headers: Record<string, string> = {};
    // Half the cases bring their own request id (kept), half get one made up.
    const sentId = i % 2 === 0 ? `bad-input-${i}` : undefined;
    if (sentId) headers["x-request-id"] = sentId;
    const contentType = c.contentType === undefined ? (body === undefined ? undefined : "application/json") : c.contentType;
    if (contentType) headers["content-type"] = contentType;
    if (c.chunked) headers["transfer-encoding"] = "chunked";

    const a = await send(c.method, path, body, headers, c.chunked);
    const where = `${c.method} ${path} → ${a.status} ${a.text.slice(0, 500)}`;

    expect(a.status, where).toBeGreaterThanOrEqual(400);
    expect(a.status, where).toBeLessThan(500);
    expect(a.status, where).toBe(c.status);

    const requestId = a.headers["x-request-id"];
    expect(requestId, `X-Request-Id of ${where}`).toBeTypeOf("string");
    if (sentId) expect(requestId, where).toBe(sentId);
    else expect(requestId, where).toMatch(UUID_RE);

    const code =
      c.code ??
      (c.via === "rest" ? DEFAULT_CODE[c.status] : c.status === 400 ? "invalid_argument" : c.status === 404 ? "not_found" : undefined);
    let message: string | undefined;
    if (c.via === "rest" || c.restShaped) {
      // REST errors, and the server's own fallback for unknown Connect paths; JSON even on the SSE route.
      expect(a.headers["content-type"], where).toMatch(/^application\/json/);
      expect(a.json?.error, where).toBeTypeOf("object");
      expect(a.json.error.request_id, where).toBe(requestId);
      if (code) expect(a.json.error.code, where).toBe(code);
      message = a.json.error.message;
    } else if (!c.noBody) {
      // Connect JSON error: {"code", "message"}; the request id is in the header, and
      // in the message when the service (not connect-es) raised the error.
      expect(a.json, where).toBeTypeOf("object");
      if (code) expect(a.json.code, where).toBe(code);
      message = a.json.message;
      const inMessage = /request_id: ([^)]+)\)/.exec(message ?? "");
      if (inMessage) expect(inMessage[1], where).toBe(requestId);
    }
    if (!c.noBody) {
      expect(message, where).toBeTypeOf("string");
      expect(message!.length, where).toBeGreaterThan(0);
      if (c.field !== undefined) {
        if (typeof c.field === "string") expect(message, where).toContain(c.field);
        else expect(message, where).toMatch(c.field);
      }
      // Never database text.
      expect(message, where).not.toMatch(/syntax error|relation "|violates|pg_|SQLSTATE|invalid input syntax/i);
    }

    expect(await snapshot(), `rows changed by ${where}`).toEqual(before);
  });

  it("a request the HTTP parser refuses still gets a 4xx with a request id", async () => {
    const a = await sendRaw("GET /jobs/a b c HTTP/1.1\r\nhost: x\r\n\r\n");
    expect(a.head).toMatch(/^HTTP\/1\.1 4\d\d /);
    expect(a.head.toLowerCase(), a.head).toMatch(/\r\nx-request-id: \S+/);
  });

  it("Python's urllib, which sends a whole over-limit body before it reads, gets the 413 and its JSON error on REST and Connect", async () => {
    const before = await snapshot();
    // 20 MiB of JSON whitespace: urllib sends `Connection: close` and writes it all, then reads.
    const script = `
import json, sys, urllib.request, urllib.error
body = b'{"workload": "${W}", "tasks": [' + b' ' * (20 * 1024 * 1024) + b']}'
out = []
for path in ["/jobs", "${SERVICE}/CreateJob"]:
    req = urllib.request.Request(sys.argv[1] + path, data=body, method="POST", headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            out.append({"path": path, "status": r.status})
    except urllib.error.HTTPError as e:
        out.append({"path": path, "status": e.code, "body": json.loads(e.read()), "request_id": e.headers.get("x-request-id")})
    except Exception as e:
        out.append({"path": path, "error": repr(e)})
print(json.dumps(out))
`;
    // Asynchronously: the server answering it runs in this process.
    const r = await execFileAsync(inject("python"), ["-c", script, `http://127.0.0.1:${port}`], { encoding: "utf8", timeout: 60_000 });
    const [restAnswer, connectAnswer] = JSON.parse(r.stdout) as Array<Record<string, any>>; // eslint-disable-line @typescript-eslint/no-explicit-any
    expect(restAnswer).toMatchObject({ status: 413, body: { error: { code: "resource_exhausted" } } });
    expect(restAnswer.body.error.request_id).toBe(restAnswer.request_id);
    expect(restAnswer.body.error.message).toContain(String(MAX_BODY_BYTES));
    expect(connectAnswer).toMatchObject({ status: 413, body: { code: "resource_exhausted" } });
    expect(connectAnswer.request_id).toBeTruthy();
    expect(await snapshot()).toEqual(before);
  });

  it("wrote nothing across the whole table, and every table is still there", async () => {
    expect(await snapshot()).toEqual(initial);
    const { rows } = await pool.query(
      "SELECT to_regclass('jobs') IS NOT NULL AS jobs, to_regclass('tasks') IS NOT NULL AS tasks, to_regclass('workloads') IS NOT NULL AS workloads, to_regclass('task_events') IS NOT NULL AS task_events",
    );
    expect(rows[0]).toEqual({ jobs: true, tasks: true, workloads: true, task_events: true });
  });
});

describe("SQL-looking strings that are valid data", () => {
  it("are stored verbatim and change nothing else", async () => {
    const key = SQL;
    const uri = "s3://bucket/x';DROP/**/TABLE/**/tasks;--";
    const reason = "'); DELETE FROM jobs; --";
    const before = await snapshot();
    const created = await send("POST", "/jobs", Buffer.from(JSON.stringify(job({ idempotency_key: key, input_uri: uri }))), {
      "content-type": "application/json",
    });
    expect(created.status, created.text).toBe(201);
    expect(created.json.job).toMatchObject({ idempotency_key: key, input_uri: uri });
    const id = created.json.job.id as string;
    const cancelled = await send("POST", `/jobs/${id}/cancel`, Buffer.from(JSON.stringify({ reason })), {
      "content-type": "application/json",
    });
    expect(cancelled.status, cancelled.text).toBe(200);
    const { rows } = await pool.query("SELECT idempotency_key, input_uri, cancel_reason FROM jobs WHERE id = $1", [id]);
    expect(rows[0]).toEqual({ idempotency_key: key, input_uri: uri, cancel_reason: reason });
    const after = await snapshot();
    expect(after).toMatchObject({ jobs: before.jobs + 1, tasks: before.tasks + 1, workloads: before.workloads });
  });
});
