// The compiled binary writer (src/api/direct/binary-writer.ts) writes what protobuf-es' toBinary writes,
// byte for byte: for every message type of the contract, at its zero value and filled in with
// varied values (negative numbers, non-ASCII and lone-surrogate strings, optional fields set to
// zero, packed lists, Structs, Timestamps before 1970), and for the hot answers.
import { create, toBinary, type DescField, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import {
  ClaimTasksResponseSchema,
  CompleteTaskResponseSchema,
  CompleteTasksResponseSchema,
  CreateJobResponseSchema,
  file_leasehold_queue_v1_queue,
  RenewLeaseResponseSchema,
} from "../../gen/leasehold/queue/v1/queue_pb.js";
import { jobMessage, taskMessage } from "../../src/api/services/messages.js";
import { hasCompiledBinaryWriter, writeBinary } from "../../src/api/direct/binary-writer.js";
import { SAMPLE_NOW, sampleJob, sampleTask } from "../support/sample-rows.js";

const hex = (b: Uint8Array) => Buffer.from(b).toString("hex");
const same = (schema: DescMessage, message: MessageShape<DescMessage>, what = schema.typeName) => {
  const got = hex(writeBinary(schema, message));
  const want = hex(toBinary(schema, message));
  let i = 0;
  while (i < got.length && got[i] === want[i]) i++;
  expect(got.slice(Math.max(0, i - 20), i + 40), `${what} differs at byte ${i / 2}`).toBe(want.slice(Math.max(0, i - 20), i + 40));
  expect(got.length, what).toBe(want.length);
};

const STRINGS = ["", "plain", "ünïcødé ✓", "𝄞 pair", "lone \ud800 surrogate", "x".repeat(70), "é".repeat(80), "\u0000"];
const INTS = [0, 1, -1, 127, 128, 16383, 16384, 2147483647, -2147483648, 300];
const DOUBLES = [0, 0.5, -1.25, 1e21, NaN, Infinity, -0];
const MILLIS = [0, 1_764_500_000_123, -62_135_596_800_000, -1];

function filled(schema: DescMessage, seed: number, depth = 0): MessageShape<DescMessage> {
  const init: Record<string, unknown> = {};
  for (const f of schema.fields) init[f.localName] = valueFor(f, seed + f.number, depth);
  return create(schema, init as never);
}

function valueFor(f: DescField, seed: number, depth: number): unknown {
  switch (f.fieldKind) {
    case "scalar":
      return scalar(f.scalar, seed);
    case "enum":
      return f.enum.values[seed % f.enum.values.length].number;
    case "message":
      return depth > 2 ? undefined : message(f.message, seed, depth);
    case "list":
      if (f.listKind === "scalar") return [scalar(f.scalar, seed), scalar(f.scalar, seed + 1), scalar(f.scalar, seed + 2)];
      if (f.listKind === "enum") return [0, f.enum.values[seed % f.enum.values.length].number];
      return depth > 2 ? [] : [message(f.message, seed, depth), message(f.message, seed + 1, depth)];
    case "map":
      return {};
  }
}

function scalar(type: number, seed: number): unknown {
  switch (type) {
    case 9:
      return STRINGS[seed % STRINGS.length];
    case 8:
      return seed % 2 === 0;
    case 1:
    case 2:
      return DOUBLES[seed % DOUBLES.length];
    case 13: // uint32
      return Math.abs(INTS[seed % INTS.length]);
    default:
      return INTS[seed % INTS.length];
  }
}

function message(schema: DescMessage, seed: number, depth: number): unknown {
  if (schema.typeName === "google.protobuf.Timestamp") {
    const t = timestampFromMs(MILLIS[seed % MILLIS.length]);
    if (seed % 3 === 1) t.nanos += 789;
    return t;
  }
  if (schema.typeName === "google.protobuf.Struct") return seed % 2 ? {} : { a: 1, b: [true, null, "x"], c: { d: 2.5 } };
  return filled(schema, seed, depth + 1);
}

const now = SAMPLE_NOW;
const task = sampleTask();
const job = sampleJob({ parameters: { mesh: "fine" } });

describe("compiled binary writer", () => {
  it("compiles every hot answer (no fallback to reflection)", () => {
    for (const schema of [
      ClaimTasksResponseSchema,
      CompleteTaskResponseSchema,
      CompleteTasksResponseSchema,
      RenewLeaseResponseSchema,
      CreateJobResponseSchema,
    ])
      expect(hasCompiledBinaryWriter(schema), schema.typeName).toBe(true);
  });

  it("writes every message type of the contract as toBinary does, empty and filled", () => {
    for (const schema of file_leasehold_queue_v1_queue.messages) {
      same(schema, create(schema));
      for (let seed = 0; seed < 16; seed++) same(schema, filled(schema, seed), `${schema.typeName} seed ${seed}`);
    }
  });

  it("writes the queue's answers as toBinary does", () => {
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
      create(ClaimTasksResponseSchema, { tasks: Array.from({ length: 10 }, (_, i) => taskMessage({ ...task, chunkIndex: i })) }),
    );
    same(CompleteTaskResponseSchema, create(CompleteTaskResponseSchema, { task: taskMessage(done) }));
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
  });

  it("writes an answer longer than its scratch buffer, and one after it, as toBinary does", () => {
    // ~290 bytes a task: 10,000 tasks take the writer through several growths of its buffer, and
    // a length prefix of three bytes; the small answer after it starts on a fresh buffer.
    const tasks = Array.from({ length: 10_000 }, (_, i) =>
      taskMessage({ ...task, chunkIndex: i, inputUri: `s3://in/${"é".repeat(i % 90)}` }),
    );
    same(CreateJobResponseSchema, create(CreateJobResponseSchema, { job: jobMessage(job), tasks }));
    same(ClaimTasksResponseSchema, create(ClaimTasksResponseSchema, { tasks: tasks.slice(0, 1) }));
  });

  it("leaves the bytes asked for free in front of the message (gRPC's frame prefix)", () => {
    const message = create(ClaimTasksResponseSchema, { tasks: [taskMessage(task)] });
    const framed = writeBinary(ClaimTasksResponseSchema, message, 5);
    expect(hex(framed.subarray(5))).toBe(hex(toBinary(ClaimTasksResponseSchema, message)));
  });
});
