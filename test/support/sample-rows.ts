// A leased task and its running job as the store returns them, for tests of the answer writers:
// every field set or null as a real row has it, so a writer's output covers each kind of field.
import type { Job, Task } from "../../src/queue/types.js";

export const SAMPLE_NOW = new Date("2026-11-30T12:34:56.789Z");

export function sampleTask(overrides: Partial<Task> = {}): Task {
  return {
    id: "0193a1b2-0000-7000-8000-000000000001",
    jobId: "0193a1b2-0000-7000-8000-000000000000",
    chunkIndex: 7,
    workload: "scimesh",
    inputUri: "s3://in/7",
    inputSha256: "a".repeat(64),
    parameters: {},
    status: "leased",
    attempt: 2,
    maxAttempts: 3,
    priority: -1,
    leaseOwner: "worker-1",
    leaseExpiresAt: SAMPLE_NOW,
    resultUri: null,
    resultSha256: null,
    metrics: null,
    errorCode: null,
    errorMessage: null,
    createdAt: SAMPLE_NOW,
    startedAt: SAMPLE_NOW,
    completedAt: null,
    runAfter: SAMPLE_NOW,
    version: 3,
    traceparent: null,
    concurrencyKey: "",
    requiredLabels: null,
    ...overrides,
  };
}

export function sampleJob(overrides: Partial<Job> = {}): Job {
  return {
    id: "0193a1b2-0000-7000-8000-000000000000",
    workload: "scimesh",
    inputUri: "s3://in",
    inputSha256: null,
    parameters: {},
    status: "running",
    priority: 0,
    idempotencyKey: null,
    traceparent: null,
    cancelReason: null,
    createdAt: SAMPLE_NOW,
    updatedAt: SAMPLE_NOW,
    completedAt: null,
    failurePolicy: "fail_fast",
    maxFailedTasks: 0,
    concurrencyKey: "",
    requiredLabels: null,
    scheduleName: null,
    scheduleFireAt: null,
    runAt: null,
    finalizer: null,
    finalizerJobId: null,
    parentJobId: null,
    ...overrides,
  };
}
