// The compiled JSON writer (src/api/direct/json-writer.ts) writes what protobuf-es' toJsonString writes
// with the server's options, byte for byte: for every message type of the contract, at its zero
// value and filled in, and for the hot answers with the values the queue produces.
import { create, toBinary, toJsonString, type DescMessage, type DescField, type MessageShape } from "@bufbuild/protobuf";
import { timestampFromDate, timestampFromMs } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import {
  ClaimTasksResponseSchema,
  CompleteTaskResponseSchema,
  CompleteTasksResponseSchema,
  CreateJobResponseSchema,
  file_leasehold_queue_v1_queue,
  RenewLeaseResponseSchema,
  TaskSchema,
  TaskStatus,
} from "../../gen/leasehold/queue/v1/queue_pb.js";
import { jobMessage, taskMessage } from "../../src/api/services/messages.js";
import { hasCompiledWriter, writeJson, writeJsonChunks } from "../../src/api/direct/json-writer.js";
import type { Task } from "../../src/queue/types.js";
import { SAMPLE_NOW, sampleJob, sampleTask } from "../support/sample-rows.js";

const OPTIONS = { useProtoFieldName: true, alwaysEmitImplicit: true } as const;

const same = (schema: DescMessage, message: MessageShape<DescMessage>) =>
  expect(writeJson(schema, message, OPTIONS)).toBe(toJsonString(schema, message, OPTIONS));

/** A value for every field, varied by seed: strings with escapes and non-ASCII, odd numbers, times with and without fractions. */
function filled(schema: DescMessage, seed: number, depth = 0): MessageShape<DescMessage> {
  const init: Record<string, unknown> = {};
  for (const f of schema.fields) init[f.localName] = valueFor(f, seed + f.number, depth);
  return create(schema, init as never);
}

const STRINGS = ["", "plain", 'quote " backslash \\ newline \n tab \t', "ünïcødé ✓ 𝄞", "\u0000\u001f\u2028"];
const NUMBERS = [0, 1, -1, 2147483647, -2147483648, 42];
const DOUBLES = [0, 0.5, -1.25, 1e21, 1e-7, 0.1 + 0.2, NaN, Infinity, -Infinity];
const MILLIS = [0, 1_764_500_000_000, 1_764_500_000_123, -62_135_596_800_000];

function valueFor(f: DescField, seed: number, depth: number): unknown {
  switch (f.fieldKind) {
    case "scalar":
      return scalar(f.scalar, seed);
    case "enum":
      return f.enum.values[seed % f.enum.values.length].number;
    case "message":
      return depth > 2 ? undefined : message(f.message, seed, depth);
    case "list":
      if (f.listKind === "scalar") return [scalar(f.scalar, seed), scalar(f.scalar, seed + 1)];
      if (f.listKind === "enum") return [f.enum.values[0].number, f.enum.values[seed % f.enum.values.length].number, 99];
      return depth > 2 ? [] : [message(f.message, seed, depth), message(f.message, seed + 1, depth)];
    case "map":
      return {};
  }
}

function scalar(type: number, seed: number): unknown {
  switch (type) {
    case 9: // string
      return STRINGS[seed % STRINGS.length];
    case 8: // bool
      return seed % 2 === 0;
    case 1: // double
    case 2: // float
      return DOUBLES[seed % DOUBLES.length];
    default:
      return NUMBERS[seed % NUMBERS.length];
  }
}

function message(schema: DescMessage, seed: number, depth: number): unknown {
  if (schema.typeName === "google.protobuf.Timestamp") {
    const t = timestampFromMs(MILLIS[seed % MILLIS.length]);
    if (seed % 3 === 1) t.nanos += 456_000; // microseconds
    if (seed % 3 === 2) t.nanos += 789; // nanoseconds
    return t;
  }
  if (schema.typeName === "google.protobuf.Struct") return seed % 2 ? {} : { a: 1, b: [true, null, "x"], c: { 'd"e': 2.5 } };
  return filled(schema, seed, depth + 1);
}

const now = SAMPLE_NOW;
const task = sampleTask({ parameters: { mesh: "fine", steps: 40 } });
const job = sampleJob({ idempotencyKey: "k-1" });

describe("compiled JSON writer", () => {
  const messages = file_leasehold_queue_v1_queue.messages;

  it("compiles every hot answer (no fallback to reflection)", () => {
    for (const schema of [
      ClaimTasksResponseSchema,
      CompleteTaskResponseSchema,
      CompleteTasksResponseSchema,
      RenewLeaseResponseSchema,
      CreateJobResponseSchema,
    ])
      expect(hasCompiledWriter(schema), schema.typeName).toBe(true);
  });

  it("writes every message type of the contract as toJsonString does, empty and filled", () => {
    for (const schema of messages) {
      same(schema, create(schema));
      for (let seed = 0; seed < 12; seed++) {
        const m = filled(schema, seed);
        let expected: string | undefined;
        try {
          expected = toJsonString(schema, m, OPTIONS);
        } catch {
          expected = undefined;
        }
        if (expected === undefined) expect(() => writeJson(schema, m, OPTIONS), schema.typeName).toThrow();
        else expect(writeJson(schema, m, OPTIONS), `${schema.typeName} seed ${seed}`).toBe(expected);
      }
    }
  });

  it("builds Task messages (taskMessage, a literal for speed) exactly as create() does", () => {
    const variants: Task[] = [
      task,
      { ...task, leaseOwner: null, leaseExpiresAt: null, startedAt: null, parameters: {} },
      { ...task, status: "completed", resultUri: "s3://o", resultSha256: "b".repeat(64), metrics: { a: [1] }, completedAt: new Date(-1) },
      { ...task, errorCode: "oom", errorMessage: "out of memory", traceparent: "00-" + "1".repeat(32) + "-" + "2".repeat(16) + "-01" },
    ];
    for (const t of variants) {
      const viaCreate = create(TaskSchema, {
        id: t.id,
        jobId: t.jobId,
        chunkIndex: t.chunkIndex,
        workload: t.workload,
        inputUri: t.inputUri,
        inputSha256: t.inputSha256,
        parameters: t.parameters,
        status: { leased: TaskStatus.LEASED, completed: TaskStatus.COMPLETED, pending: TaskStatus.PENDING }[t.status as string],
        attempt: t.attempt,
        maxAttempts: t.maxAttempts,
        priority: t.priority,
        leaseOwner: t.leaseOwner ?? "",
        leaseExpiresAt: t.leaseExpiresAt ? timestampFromDate(t.leaseExpiresAt) : undefined,
        resultUri: t.resultUri ?? "",
        resultSha256: t.resultSha256 ?? "",
        metrics: t.metrics ?? undefined,
        errorCode: t.errorCode ?? "",
        errorMessage: t.errorMessage ?? "",
        createdAt: timestampFromDate(t.createdAt),
        startedAt: t.startedAt ? timestampFromDate(t.startedAt) : undefined,
        completedAt: t.completedAt ? timestampFromDate(t.completedAt) : undefined,
        version: t.version,
        traceparent: t.traceparent ?? "",
      });
      expect(taskMessage(t)).toStrictEqual(viaCreate);
      expect(toBinary(TaskSchema, taskMessage(t))).toEqual(toBinary(TaskSchema, viaCreate));
    }
  });

  it("writes the queue's answers as toJsonString does", () => {
    const done = {
      ...task,
      status: "completed" as const,
      resultUri: "s3://out/7",
      resultSha256: "b".repeat(64),
      metrics: { ms: 12 },
      completedAt: now,
    };
    same(ClaimTasksResponseSchema, create(ClaimTasksResponseSchema, { tasks: [] }));
    same(
      ClaimTasksResponseSchema,
      create(ClaimTasksResponseSchema, { tasks: [taskMessage(task), taskMessage({ ...task, leaseOwner: null })] }),
    );
    same(CompleteTaskResponseSchema, create(CompleteTaskResponseSchema, { task: taskMessage(done) }));
    same(RenewLeaseResponseSchema, create(RenewLeaseResponseSchema, { task: taskMessage(task) }));
    same(
      CreateJobResponseSchema,
      create(CreateJobResponseSchema, { job: jobMessage(job), tasks: [taskMessage({ ...task, status: "pending" })] }),
    );
    same(
      CompleteTasksResponseSchema,
      create(CompleteTasksResponseSchema, {
        outcomes: [
          { taskId: task.id, task: taskMessage(done) },
          { taskId: "x", error: { code: "aborted", message: "lease lost" } },
        ],
      }),
    );
    expect(TaskStatus[taskMessage(task).status]).toBe("LEASED");
  });

  it("writes a long answer as UTF-8 Buffers with the same bytes, and a short one as the same string", () => {
    // Past the point where a chunked write turns to Buffers, with non-ASCII, escapes and lone
    // surrogates spread over the tasks, and times that differ between neighbours.
    const tasks = Array.from({ length: 3000 }, (_, i) =>
      taskMessage({
        ...task,
        chunkIndex: i,
        inputUri: `s3://in/${i}${STRINGS[i % STRINGS.length]}${i % 97 === 0 ? "\ud800" : ""}`,
        parameters: i % 5 === 0 ? { n: i, s: STRINGS[i % STRINGS.length] } : {},
        createdAt: new Date(now.getTime() + (i % 3) * 1000 + (i % 7 === 0 ? 0 : 1)),
      }),
    );
    const long = create(CreateJobResponseSchema, { job: jobMessage(job), tasks });
    const chunks = writeJsonChunks(CreateJobResponseSchema, long, OPTIONS);
    expect(Array.isArray(chunks)).toBe(true);
    expect((chunks as Buffer[]).length).toBeGreaterThan(1);
    expect(Buffer.concat(chunks as Buffer[]).equals(Buffer.from(toJsonString(CreateJobResponseSchema, long, OPTIONS)))).toBe(true);
    same(CreateJobResponseSchema, long);
    const short = create(CreateJobResponseSchema, { job: jobMessage(job), tasks: tasks.slice(0, 10) });
    expect(writeJsonChunks(CreateJobResponseSchema, short, OPTIONS)).toBe(toJsonString(CreateJobResponseSchema, short, OPTIONS));
  });

  it("writes remembered timestamps as they were, past the memo's size and between neighbours that differ", () => {
    // More distinct times than the writer and taskMessage remember (512), interleaved with
    // repeats, sub-millisecond and pre-1970 times, so a wrong or stale memo entry shows up as a byte.
    const times = Array.from(
      { length: 1500 },
      (_, i) => new Date(SAMPLE_NOW.getTime() + (i % 700) * 7 - (i % 11 === 0 ? 86_400_000 * 365 * 60 : 0)),
    );
    const tasks = times.map((t, i) =>
      taskMessage({ ...sampleTask(), chunkIndex: i, createdAt: t, startedAt: times[(i * 31) % times.length] }),
    );
    same(ClaimTasksResponseSchema, create(ClaimTasksResponseSchema, { tasks }));
    const odd = create(TaskSchema, {
      createdAt: { seconds: 1_764_500_000n, nanos: 1 },
      startedAt: { seconds: 1_764_500_000n, nanos: 123_000_000 },
    });
    same(TaskSchema, odd);
    same(TaskSchema, odd);
    // A negative nanos is out of range: refused as toJsonString refuses it, even with its millisecond remembered.
    const bad = create(TaskSchema, { createdAt: { seconds: 1_764_500_001n, nanos: -877_000_000 } });
    expect(() => writeJson(TaskSchema, bad, OPTIONS)).toThrow();
    expect(() => toJsonString(TaskSchema, bad, OPTIONS)).toThrow();
  });
});
