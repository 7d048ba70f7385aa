// The compiled binary writer (src/api/direct/binary-writer.ts) writes what protobuf-es' toBinary writes,
// byte for byte: for every message type of the contract, at its zero value and filled in with
// varied values (negative numbers, non-ASCII and lone-surrogate strings, optional fields set to
// zero, packed lists, Structs, Timestamps before 1970), and for the hot answers.
import { create, toBinary, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
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
import { filled } from "../support/filled-messages.js";
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
