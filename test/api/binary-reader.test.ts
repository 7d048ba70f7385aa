// The compiled binary reader (src/api/direct/binary-reader.ts) reads what protobuf-es' fromBinary
// reads, the same message or the same refusal: for every message type of the contract (empty,
// filled in with varied values, which send some to fromBinary), for the workers' hot requests
// (which it must read itself), for wire forms a client may send (packed or not, a field twice,
// an unknown field), and for cut-off and random bytes.
import { create, fromBinary, toBinary, type DescMessage } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import {
  ClaimTasksRequestSchema,
  CompleteTaskRequestSchema,
  CompleteTasksRequestSchema,
  CreateJobRequestSchema,
  FailTaskRequestSchema,
  file_leasehold_queue_v1_queue,
  RenewLeaseRequestSchema,
  ReportProgressRequestSchema,
} from "../../gen/leasehold/queue/v1/queue_pb.js";
import { readBinary, readCompiled } from "../../src/api/direct/binary-reader.js";
import { filled } from "../support/filled-messages.js";

const SHA = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
const ID = "0193a1b2-0000-7000-8000-000000000001";

/** readBinary gives what fromBinary gives: the same message, or a refusal when fromBinary refuses. */
function same(schema: DescMessage, bytes: Uint8Array, what = schema.typeName) {
  let want: unknown;
  let refused: unknown;
  try {
    want = fromBinary(schema, bytes);
  } catch (err) {
    refused = err;
  }
  if (refused !== undefined) {
    expect(() => readBinary(schema, bytes), what).toThrow((refused as Error).message);
    return;
  }
  expect(readBinary(schema, bytes), what).toEqual(want);
}

const hot: [DescMessage, Uint8Array][] = [
  [ClaimTasksRequestSchema, toBinary(ClaimTasksRequestSchema, create(ClaimTasksRequestSchema, { workerId: "w-1", workloads: ["render"] }))],
  [
    ClaimTasksRequestSchema,
    toBinary(
      ClaimTasksRequestSchema,
      create(ClaimTasksRequestSchema, { workerId: "w-1", workloads: ["a", "b"], maxTasks: 10, waitSeconds: 5, labels: { gpu: "a100" } }),
    ),
  ],
  [
    CompleteTaskRequestSchema,
    toBinary(
      CompleteTaskRequestSchema,
      create(CompleteTaskRequestSchema, {
        taskId: ID,
        workerId: "w-1",
        attempt: 2,
        resultUri: "s3://out/7",
        resultSha256: SHA,
        metrics: {},
        usage: { gpu_ms: 1200n, tokens: 0n },
        claimNext: { workloads: ["render"], maxTasks: 1 },
      }),
    ),
  ],
  [
    CompleteTasksRequestSchema,
    toBinary(
      CompleteTasksRequestSchema,
      create(CompleteTasksRequestSchema, {
        results: Array.from({ length: 10 }, (_, i) => ({
          taskId: ID,
          workerId: "w-1",
          attempt: i,
          resultUri: `s3://out/${i}`,
          resultSha256: SHA,
        })),
        claimNext: { workloads: ["render"], maxTasks: 10 },
      }),
    ),
  ],
  [
    RenewLeaseRequestSchema,
    toBinary(RenewLeaseRequestSchema, create(RenewLeaseRequestSchema, { taskId: ID, workerId: "w-1", attempt: 1, leaseSeconds: 60 })),
  ],
  [
    FailTaskRequestSchema,
    toBinary(
      FailTaskRequestSchema,
      create(FailTaskRequestSchema, {
        taskId: ID,
        workerId: "w-1",
        attempt: 1,
        errorCode: "bad_chunk",
        errorMessage: "no frames",
        retryable: true,
      }),
    ),
  ],
  [
    ReportProgressRequestSchema,
    toBinary(
      ReportProgressRequestSchema,
      create(ReportProgressRequestSchema, { taskId: ID, workerId: "w-1", attempt: 1, progress: 0.5, message: "half" }),
    ),
  ],
  [
    CreateJobRequestSchema,
    toBinary(
      CreateJobRequestSchema,
      create(CreateJobRequestSchema, {
        workload: "render",
        priority: -3,
        tasks: [{ chunkIndex: 0, inputUri: "s3://in/0", inputSha256: SHA }],
        runAt: { seconds: 1_764_500_000n, nanos: 5 },
        view: 1,
      }),
    ),
  ],
];

describe("compiled binary reader", () => {
  it("reads the workers' hot requests itself, as fromBinary reads them", () => {
    for (const [schema, bytes] of hot) {
      const got = readCompiled(schema, bytes);
      expect(got, schema.typeName).toBeDefined();
      expect(got).toEqual(fromBinary(schema, bytes));
    }
  });

  it("reads every message type of the contract as fromBinary does, empty and filled", () => {
    for (const schema of file_leasehold_queue_v1_queue.messages) {
      same(schema, toBinary(schema, create(schema)));
      for (let seed = 0; seed < 16; seed++) same(schema, toBinary(schema, filled(schema, seed)), `${schema.typeName} seed ${seed}`);
    }
  });

  it("takes the wire forms a client may send: a scalar twice (the last wins), a message twice, an unknown field, packed and not", () => {
    const base = hot[2][1];
    const attempt = (n: number) => Uint8Array.of(0x18, n); // field 3 (attempt), a varint
    const claimNext = toBinary(CompleteTaskRequestSchema, create(CompleteTaskRequestSchema, { claimNext: { workloads: ["x"] } }));
    const cases = [
      Buffer.concat([base, attempt(9)]),
      Buffer.concat([base, claimNext]),
      Buffer.concat([base, Uint8Array.of(0xf8, 0x7f, 0x01)]), // field 2047, varint 1: unknown
      Buffer.concat([base, Uint8Array.of(0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01)]), // attempt -1 in ten bytes
    ];
    for (const bytes of cases) same(CompleteTaskRequestSchema, bytes);
    // workloads (field 2) as strings one by one: a repeated string is never packed.
    same(ClaimTasksRequestSchema, Uint8Array.of(0x12, 0x01, 0x61, 0x12, 0x01, 0x62));
  });

  it("refuses what fromBinary refuses: cut-off messages and random bytes", () => {
    for (const [schema, bytes] of hot)
      for (let n = 0; n < bytes.length; n++) same(schema, bytes.subarray(0, n), `${schema.typeName} cut at ${n}`);
    let seed = 7;
    const random = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) % 256;
    for (let i = 0; i < 3000; i++) {
      const bytes = Uint8Array.from({ length: 1 + (i % 40) }, random);
      for (const [schema] of hot.slice(0, 3)) same(schema, bytes, `random ${i}`);
    }
  });
});
