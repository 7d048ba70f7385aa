// Usage in the messages: a CompleteTask's, each CompleteTasks result's and a FailTask's map<string,
// int64> becomes the domain's counters (empty: none), an int64 past Number.MAX_SAFE_INTEGER is
// INVALID_ARGUMENT naming its place in the request, and Job, Task and TaskAttempt carry theirs back.
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { CompleteTaskRequestSchema, CompleteTasksRequestSchema, FailTaskRequestSchema } from "../../gen/leasehold/queue/v1/queue_pb.js";
import { completeTaskInput, completeTasksInput, failTaskInput, taskAttemptMessage } from "../../src/api/services/tasks.js";
import { ValidationError } from "../../src/queue/errors.js";

describe("usage in the messages", () => {
  it("requests: counters as numbers, none when empty, an int64 too large named by its field", () => {
    expect(completeTaskInput(create(CompleteTaskRequestSchema, { usage: { gpu_ms: 12n } })).usage).toEqual({ gpu_ms: 12 });
    expect(completeTaskInput(create(CompleteTaskRequestSchema, {})).usage).toBeUndefined();
    expect(failTaskInput(create(FailTaskRequestSchema, { usage: { tokens: 3n } })).usage).toEqual({ tokens: 3 });
    const big = BigInt(Number.MAX_SAFE_INTEGER) + 1n;
    const batch = create(CompleteTasksRequestSchema, { results: [{ usage: { a: 1n } }, { usage: { b: big } }] });
    const err = (() => {
      try {
        completeTasksInput(batch);
      } catch (e) {
        return e;
      }
    })();
    expect(err).toBeInstanceOf(ValidationError);
    expect((err as ValidationError).violations[0].field).toBe("results[1].usage.b");
  });

  it("an attempt's usage goes back as int64", () => {
    const m = taskAttemptMessage({
      attempt: 1,
      workerId: "w",
      leasedAt: new Date(),
      endedAt: new Date(),
      outcome: "completed",
      errorCode: null,
      errorMessage: null,
      retried: false,
      lastProgress: null,
      usage: { gpu_ms: 5 },
    });
    expect(m.usage).toEqual({ gpu_ms: 5n });
  });
});
