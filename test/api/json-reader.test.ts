// The compiled JSON reader (src/api/direct/json-reader.ts) decodes request JSON to the same message as
// protobuf-es' fromJson with the server's options, and where fromJson refuses, refuses with the
// same error: for every request type of the contract, with plain, odd and broken input.
import { fromJson, type DescMessage, type JsonValue } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { file_leasehold_queue_v1_queue, QueueService } from "../../gen/leasehold/queue/v1/queue_pb.js";
import { compiles, readJson } from "../../src/api/direct/json-reader.js";

const OPTIONS = { ignoreUnknownFields: false };

function outcome(f: () => unknown): { value?: unknown; error?: string } {
  try {
    return { value: f() };
  } catch (err) {
    return { error: (err as Error).message };
  }
}

function agree(schema: DescMessage, json: JsonValue) {
  const expected = outcome(() => fromJson(schema, json, OPTIONS));
  const got = outcome(() => readJson(schema, json, OPTIONS));
  expect(got, `${schema.typeName} ${JSON.stringify(json)}`).toStrictEqual(expected);
}

const SHA = "a".repeat(64);
const task = (i: number) => ({ chunk_index: i, input_uri: `s3://in/${i}`, input_sha256: SHA });

describe("compiled JSON reader", () => {
  it("agrees with fromJson on the hot requests, plain and odd", () => {
    const C = QueueService.method;
    const cases: [DescMessage, JsonValue][] = [
      [C.claimTasks.input, { worker_id: "w-1", workloads: ["a", "b"] }],
      [C.claimTasks.input, { workerId: "w-1", workloads: [], max_tasks: 10, lease_seconds: 30, wait_seconds: 5 }],
      [C.claimTasks.input, { worker_id: "w-1", max_tasks: 0 }],
      [C.claimTasks.input, { worker_id: "w-1", workerId: "w-2" }],
      [C.claimTasks.input, { worker_id: "w-1", max_tasks: "10" }],
      [C.claimTasks.input, { worker_id: "w-1", max_tasks: 1.5 }],
      [C.claimTasks.input, { worker_id: "w-1", max_tasks: 2 ** 31 }],
      [C.claimTasks.input, { worker_id: "w-1", max_tasks: -0 }],
      [C.claimTasks.input, { worker_id: null }],
      [C.claimTasks.input, { worker_id: 5 }],
      [C.claimTasks.input, { worker_id: "\ud800" }],
      [C.claimTasks.input, { worker_id: "w", bogus: 1 }],
      [C.claimTasks.input, { worker_id: "w", workloads: "a" }],
      [C.claimTasks.input, { worker_id: "w", workloads: [null] }],
      [C.claimTasks.input, []],
      [C.claimTasks.input, null],
      [C.claimTasks.input, "x"],
      [C.completeTask.input, { task_id: "t", worker_id: "w", attempt: 1, result_uri: "s3://o", result_sha256: SHA }],
      [C.completeTask.input, { task_id: "t", worker_id: "w", attempt: 1, metrics: { ms: 12, nested: { a: [1, "x", null, true] } } }],
      [C.completeTask.input, { task_id: "t", metrics: [] }],
      [C.completeTask.input, { task_id: "t", metrics: null }],
      [C.completeTask.input, { task_id: "t", metrics: { z: -0 } }],
      [
        C.completeTasks.input,
        {
          results: [
            { task_id: "t", worker_id: "w", attempt: 2 },
            { taskId: "u", attempt: 1 },
          ],
        },
      ],
      [C.completeTasks.input, { results: [{ task_id: "t", attempt: "x" }] }],
      [C.renewLease.input, { task_id: "t", worker_id: "w", attempt: 1, lease_seconds: 60 }],
      [C.failTask.input, { task_id: "t", worker_id: "w", attempt: 1, error_code: "oom", retryable: false, retry_after_seconds: 3 }],
      [C.failTask.input, { task_id: "t", retryable: "no" }],
      [C.createJob.input, { workload: "w", input_uri: "s3://in", input_sha256: SHA, parameters: { a: 1 }, priority: -3 }],
      [C.createJob.input, { workload: "w", tasks: Array.from({ length: 20 }, (_, i) => task(i)), max_attempts: 2, idempotency_key: "k" }],
      [C.createJob.input, { workload: "w", tasks: [{ ...task(0), parameters: { x: "y" }, workload: "other" }] }],
      [C.createJob.input, { workload: "w", tasks: [{ ...task(0), chunkIndex: 1 }] }],
      [C.createJob.input, { workload: "w", tasks: [{ ...task(0), extra: true }] }],
      [C.createJob.input, { workload: "w", tasks: {} }],
      [C.listJobs.input, { status: "JOB_STATUS_FAILED", page_size: 10 }],
      [C.listJobs.input, { status: "failed" }],
      [C.listJobs.input, { status: 3 }],
      [C.completeTask.input, { task_id: "t", worker_id: "w", attempt: 1, usage: { gpu_ms: 1200, tokens: "5300" } }],
      [C.completeTask.input, { task_id: "t", usage: { big: "9223372036854775807", low: "-9223372036854775808" } }],
      [C.completeTask.input, { task_id: "t", usage: { over: "9223372036854775808" } }],
      [C.completeTask.input, { task_id: "t", usage: { unsafe: 2 ** 53 } }],
      [C.completeTask.input, { task_id: "t", usage: { frac: 1.5 } }],
      [C.completeTask.input, { task_id: "t", usage: { lead: "007" } }],
      [C.completeTask.input, { task_id: "t", usage: { plus: "+7" } }],
      [C.completeTask.input, { task_id: "t", usage: { neg0: -0 } }],
      [C.completeTask.input, { task_id: "t", usage: { n: null } }],
      [C.completeTask.input, { task_id: "t", usage: [] }],
      [C.completeTasks.input, { results: [{ task_id: "t", attempt: 1, usage: { gpu_ms: 3 } }] }],
      [C.failTask.input, { task_id: "t", worker_id: "w", attempt: 1, error_code: "oom", usage: { gpu_ms: "0" } }],
      [
        C.createJob.input,
        { workload: "w", input_uri: "s3://in", input_sha256: SHA, account: "acme", billing: { reserved_units: 5000, billing_key: "k" } },
      ],
      [C.createJob.input, { workload: "w", billing: { reserved_units: "5000" } }],
      [C.createJob.input, { workload: "w", billing: { reserved_units: "x" } }],
      [C.createJob.input, { workload: "w", input_uri: "s3://in", input_sha256: SHA, run_at: "2030-01-01T00:00:00Z" }],
      [C.createJob.input, { workload: "w", run_at: "tomorrow" }],
      [C.settleJob.input, { job_id: "j", settlement_key: "s", settled_units: 1300 }],
    ];
    for (const [schema, json] of cases) agree(schema, json);
  });

  it("has a compiled reader for every request type of the contract (none falls back to fromJson as a whole)", () => {
    const fallback = Object.entries(QueueService.method)
      .filter(([, m]) => !compiles(m.input))
      .map(([name]) => name);
    expect(fallback).toEqual([]);
  });

  it("agrees with fromJson on every message type of the contract, empty and with a stray key", () => {
    for (const schema of file_leasehold_queue_v1_queue.messages) {
      agree(schema, {});
      agree(schema, { not_a_field: 1 });
    }
  });
});
