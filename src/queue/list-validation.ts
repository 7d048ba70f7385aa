// The listing RPCs' rules: page sizes, status filters and the page tokens (opaque to clients),
// each broken rule a ValidationError naming its field. Split from validation.ts, which holds the
// rules of the RPCs that write.

import { ValidationError } from "./errors.js";
import type { JobStatus, ListCompletedResultsInput, ListJobsInput, ListTasksInput, TaskStatus } from "./types.js";
import { JOB_STATUSES, TASK_STATUSES } from "./types.js";
import { LIMITS, optionalInt, requireUuid, requireWorkloadName } from "./validation.js";
import { requireAccountName } from "./account-validation.js";

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

function fail(field: string, message: string): never {
  throw new ValidationError(field, message);
}

/** Page tokens are opaque to clients; inside they carry the last chunk_index returned. */
export function encodePageToken(lastChunkIndex: number): string {
  return Buffer.from(`c:${lastChunkIndex}`).toString("base64url");
}

export function validateListResults(input: ListCompletedResultsInput): { jobId: string; pageSize: number; afterChunk: number } {
  const jobId = requireUuid("job_id", input.jobId);
  const pageSize = optionalInt("page_size", input.pageSize || undefined, 1, LIMITS.pageSize.max) ?? LIMITS.pageSize.default;
  let afterChunk = -1;
  if (input.pageToken) {
    const m = typeof input.pageToken === "string" ? /^c:(\d{1,10})$/.exec(Buffer.from(input.pageToken, "base64url").toString()) : null;
    if (!m || Number(m[1]) > LIMITS.chunkIndexMax) fail("page_token", "is not a token this server issued");
    afterChunk = Number(m[1]);
  }
  return { jobId, pageSize, afterChunk };
}

/** ListJobs pages newest first; the token is the last job's (created_at, id), created_at as the database wrote it (µs). */
export function encodeJobsPageToken(createdAt: string, id: string): string {
  return Buffer.from(`j:${createdAt}|${id}`).toString("base64url");
}

const JOBS_TOKEN = /^j:(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z)\|([0-9a-f-]{36})$/;

export function validateListJobs(input: ListJobsInput): {
  status: JobStatus | null;
  workload: string | null;
  pageSize: number;
  after: { createdAt: string; id: string } | null;
  scheduleName: string | null;
  account: string | null;
} {
  let status: JobStatus | null = null;
  if (input.status !== undefined && input.status !== null) {
    if (!(JOB_STATUSES as readonly string[]).includes(input.status)) fail("status", `must be one of ${JOB_STATUSES.join(", ")}`);
    status = input.status;
  }
  const workload = input.workload ? requireWorkloadName("workload", input.workload) : null;
  const pageSize = optionalInt("page_size", input.pageSize || undefined, 1, LIMITS.pageSize.max) ?? LIMITS.pageSize.default;
  let after: { createdAt: string; id: string } | null = null;
  if (input.pageToken) {
    const m = typeof input.pageToken === "string" ? JOBS_TOKEN.exec(Buffer.from(input.pageToken, "base64url").toString()) : null;
    if (!m || !UUID.test(m[2]) || Number.isNaN(Date.parse(m[1]))) fail("page_token", "is not a token this server issued");
    after = { createdAt: m[1], id: m[2].toLowerCase() };
  }
  // Schedule names follow the workload names' pattern.
  const scheduleName = input.scheduleName ? requireWorkloadName("schedule_name", input.scheduleName) : null;
  const account = input.account ? requireAccountName("account", input.account) : null;
  return { status, workload, pageSize, after, scheduleName, account };
}

/**
 * ListTasks pages in chunk order; the token carries the last chunk_index returned and the status
 * filter it was issued under, so a token is never applied to a different listing.
 */
export function encodeTasksPageToken(status: TaskStatus | null, lastChunkIndex: number): string {
  return Buffer.from(`t:${status ?? "*"}:${lastChunkIndex}`).toString("base64url");
}

const TASKS_TOKEN = /^t:([a-z]+|\*):(\d{1,10})$/;

export function validateListTasks(input: ListTasksInput): {
  jobId: string;
  status: TaskStatus | null;
  pageSize: number;
  afterChunk: number;
} {
  const jobId = requireUuid("job_id", input.jobId);
  let status: TaskStatus | null = null;
  if (input.status !== undefined && input.status !== null) {
    if (!(TASK_STATUSES as readonly string[]).includes(input.status)) fail("status", `must be one of ${TASK_STATUSES.join(", ")}`);
    status = input.status;
  }
  const pageSize = optionalInt("page_size", input.pageSize || undefined, 1, LIMITS.pageSize.max) ?? LIMITS.pageSize.default;
  let afterChunk = -1;
  if (input.pageToken) {
    const m = typeof input.pageToken === "string" ? TASKS_TOKEN.exec(Buffer.from(input.pageToken, "base64url").toString()) : null;
    if (!m || Number(m[2]) > LIMITS.chunkIndexMax) fail("page_token", "is not a token this server issued");
    if (m[1] !== (status ?? "*")) fail("page_token", "was issued for a different status filter");
    afterChunk = Number(m[2]);
  }
  return { jobId, status, pageSize, afterChunk };
}
