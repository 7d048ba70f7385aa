// A big CreateJob over REST, end to end: its answer (written as Buffers by the JSON writer, from
// rows the store does not read back, while PostgreSQL copies the tasks) must be, byte for byte, the
// JSON of the rows as the database holds them, as a replay reading them back would answer.
import { create, toJsonString } from "@bufbuild/protobuf";
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CreateJobResponseSchema } from "../../gen/leasehold/queue/v1/queue_pb.js";
import { jobMessage, taskMessage } from "../../src/api/services/messages.js";
import { toJob, toTask } from "../../src/store/postgres/sql/rows.js";
import { sha, queueFixture, type QueueFixture } from "../support/queue.js";
import { apiServerFixture, type ApiServerFixture } from "../support/api-server.js";

let pool: pg.Pool;
let fx: QueueFixture;
let api: ApiServerFixture;
let base: string;

beforeAll(async () => {
  fx = await queueFixture(
    {
      defaultLeaseSeconds: 60,
      defaultMaxAttempts: 3,
      maxTasksPerJob: 10_000,
    },
    { max: 4 },
  );
  pool = fx.pool;
  const queue = fx.queue;
  api = await apiServerFixture({ queue, maxBodyBytes: 8 * 1024 * 1024, requestTimeoutMs: 10_000 });
  base = api.base;
});

afterAll(async () => {
  await api?.close();
  await fx?.close();
});

/** The answer CreateJob gives for a job, made from the rows the database holds. */
async function answerOfRows(jobId: string): Promise<string> {
  const { rows: job } = await pool.query("SELECT * FROM jobs WHERE id = $1", [jobId]);
  const { rows: tasks } = await pool.query("SELECT * FROM tasks WHERE job_id = $1 ORDER BY chunk_index", [jobId]);
  const message = create(CreateJobResponseSchema, { job: jobMessage(toJob(job[0])), tasks: tasks.map((t) => taskMessage(toTask(t))) });
  return toJsonString(CreateJobResponseSchema, message, { useProtoFieldName: true, alwaysEmitImplicit: true });
}

describe("POST /jobs with many tasks", () => {
  it("answers, byte for byte, the JSON of the rows it wrote", async () => {
    await fetch(`${base}/workloads/cj_rest_big`, { method: "PUT", headers: { "content-type": "application/json" }, body: "{}" });
    const odd = ['quote " back\\slash', "ünïcødé ✓ 𝄞", "{a,b} NULL", "tab\tnl\n"];
    // Parameters with their keys in jsonb's order: the answer carries a task's parameters as they
    // were sent (the job's merged with its own), the row as jsonb orders them.
    for (const parameters of [{}, { a: 1 }]) {
      const body = {
        workload: "cj_rest_big",
        parameters,
        tasks: Array.from({ length: 2500 }, (_, i) => ({
          chunk_index: 2499 - i,
          input_uri: `s3://in/${i}/q"b\\ü✓𝄞{a,b}`,
          input_sha256: sha(String(i)),
          ...(i % 7 === 0 ? { parameters: { i, own: odd[i % odd.length] } } : {}),
        })),
      };
      const res = await fetch(`${base}/jobs`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(body),
      });
      const text = await res.text();
      expect(res.status, text.slice(0, 200)).toBe(201);
      expect(Number(res.headers.get("content-length"))).toBe(Buffer.byteLength(text));
      const jobId = (JSON.parse(text) as { job: { id: string } }).job.id;
      const expected = await answerOfRows(jobId);
      const differsAt = [...text].findIndex((c, i) => c !== expected[i]);
      expect(text === expected, `differs at ${differsAt}: ${text.slice(differsAt - 80, differsAt + 80)}`).toBe(true);
    }
  });
});
