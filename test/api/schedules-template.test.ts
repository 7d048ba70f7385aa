// A schedule's job template, field by field: every field of CreateJobRequest (and of its TaskSpec
// and Finalizer) is walked from the descriptor, so a field added to the proto fails this test
// until it has a case. Each is either on every tick's job (PutSchedule over gRPC, then a real
// scheduler pass against real PostgreSQL fires the tick, and the job's rows are read) or refused
// at PutSchedule with INVALID_ARGUMENT naming it, writing nothing. None is accepted and dropped.
import { create, isFieldSet, toJson, type MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { Code, createClient, type Client } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BadRequestSchema } from "../../gen/google/rpc/error_details_pb.js";
import {
  BillingSchema,
  CreateJobRequestSchema,
  DependencyPolicy,
  DependencySchema,
  FailurePolicy,
  FinalizerSchema,
  JobView,
  QueueService,
  TaskSpecSchema,
} from "../../gen/leasehold/queue/v1/queue_pb.js";
import type { Job } from "../../src/queue/types.js";
import { queueFixture, sha, type QueueFixture } from "../support/queue.js";
import { restCall } from "../support/rest.js";
import { rpcError } from "../support/rpc.js";
import { apiServerFixture, type ApiServerFixture } from "../support/api-server.js";

let f: QueueFixture;
let api: ApiServerFixture;
let base: string;
let client: Client<typeof QueueService>;

const W = "tpl_main";
const OTHER = "tpl_other";
const FIN = "tpl_fin";
const ACCOUNT = "tpl-account";
const TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
const LATER = timestampFromDate(new Date(Date.now() + 3_600_000));

type Init = MessageInitShape<typeof CreateJobRequestSchema>;
type TaskInit = MessageInitShape<typeof TaskSpecSchema>;

/** A task row as stored. */
interface TaskRow {
  chunk_index: number;
  workload: string;
  input_uri: string;
  input_sha256: string;
  parameters: Record<string, unknown>;
  max_attempts: number;
  required_labels: Record<string, string> | null;
}

/** A field's case: the value the template is given, and what the fired job must show (or the refused field's name). */
type Case<I> = { value: I[keyof I]; refused: string } | { value: I[keyof I]; check: (job: Job, tasks: TaskRow[]) => void };

/** The smallest template CreateJob takes: one task from the job's input. */
const BASE: Init = { workload: W, inputUri: "s3://tpl/in", inputSha256: sha("tpl") };

const JOB_FIELDS: Record<string, Case<Init>> = {
  workload: { value: OTHER, check: (j, t) => expect([j.workload, t[0].workload]).toEqual([OTHER, OTHER]) },
  input_uri: {
    value: "s3://tpl/other",
    check: (j, t) => expect([j.inputUri, t[0].input_uri]).toEqual(["s3://tpl/other", "s3://tpl/other"]),
  },
  input_sha256: { value: sha("other"), check: (j, t) => expect([j.inputSha256, t[0].input_sha256]).toEqual([sha("other"), sha("other")]) },
  parameters: { value: { day: "mon" }, check: (j, t) => expect([j.parameters, t[0].parameters]).toEqual([{ day: "mon" }, { day: "mon" }]) },
  priority: { value: 7, check: (j) => expect(j.priority).toBe(7) },
  max_attempts: { value: 5, check: (_j, t) => expect(t[0].max_attempts).toBe(5) },
  idempotency_key: { value: "once", refused: "job.idempotency_key" },
  traceparent: { value: TRACEPARENT, check: (j) => expect(j.traceparent).toBe(TRACEPARENT) },
  tasks: {
    value: [
      { chunkIndex: 0, inputUri: "s3://tpl/0", inputSha256: sha(0) },
      { chunkIndex: 1, inputUri: "s3://tpl/1", inputSha256: sha(1) },
    ],
    check: (_j, t) =>
      expect(t.map((r) => [r.chunk_index, r.input_uri])).toEqual([
        [0, "s3://tpl/0"],
        [1, "s3://tpl/1"],
      ]),
  },
  failure_policy: { value: FailurePolicy.CONTINUE, check: (j) => expect(j.failurePolicy).toBe("continue") },
  max_failed_tasks: { value: 2, check: (j) => expect(j.maxFailedTasks).toBe(2) },
  concurrency_key: { value: "customer-1", check: (j) => expect(j.concurrencyKey).toBe("customer-1") },
  required_labels: {
    value: { gpu: "a100" },
    check: (j, t) => expect([j.requiredLabels, t[0].required_labels]).toEqual([{ gpu: "a100" }, { gpu: "a100" }]),
  },
  run_at: { value: LATER, refused: "job.run_at" },
  finalizer: {
    value: create(FinalizerSchema, { workload: FIN, parameters: { out: "s3://manifest" }, runOnFailure: true }),
    check: (j) => expect(j.finalizer).toEqual({ workload: FIN, parameters: { out: "s3://manifest" }, runOnFailure: true }),
  },
  // Every tick's job is the account's, with its priority and its name as the concurrency key.
  account: { value: ACCOUNT, check: (j) => expect([j.account, j.priority, j.concurrencyKey]).toEqual([ACCOUNT, 9, ACCOUNT]) },
  // A billing key is one job's; a template's reserved units alone reach each tick (the REST case below).
  billing: { value: create(BillingSchema, { reservedUnits: 10n, billingKey: "once" }), refused: "job.billing.billing_key" },
  // A job template has no parents: the same jobs on every tick would be waited for; a workflow template orders its nodes.
  after: { value: [create(DependencySchema, { jobId: "0190f3a0-0000-7000-8000-000000000000" })], refused: "job.after" },
  dependency_policy: { value: DependencyPolicy.ALL_FINAL, refused: "job.dependency_policy" },
  // What a CreateJob's answer holds: a tick has no answer.
  view: { value: JobView.BASIC, refused: "job.view" },
};

/** Through the template's one listed task (tasks[0], chunk 0 unless the case says otherwise). */
const BASE_TASK: TaskInit = { chunkIndex: 0, inputUri: "s3://tpl/task", inputSha256: sha("task") };

const TASK_FIELDS: Record<string, Case<TaskInit>> = {
  chunk_index: { value: 3, check: (_j, t) => expect(t.map((r) => r.chunk_index)).toEqual([3]) },
  input_uri: { value: "s3://tpl/t2", check: (_j, t) => expect(t[0].input_uri).toBe("s3://tpl/t2") },
  input_sha256: { value: sha("t2"), check: (_j, t) => expect(t[0].input_sha256).toBe(sha("t2")) },
  parameters: { value: { part: 1 }, check: (_j, t) => expect(t[0].parameters).toEqual({ part: 1 }) },
  workload: { value: OTHER, check: (j, t) => expect([j.workload, t[0].workload]).toEqual([W, OTHER]) },
  required_labels: { value: { region: "eu" }, check: (_j, t) => expect(t[0].required_labels).toEqual({ region: "eu" }) },
  run_at: { value: LATER, refused: "job.tasks[0].run_at" },
};

beforeAll(async () => {
  f = await queueFixture();
  api = await apiServerFixture({ queue: f.queue, maxBodyBytes: 1 << 20, requestTimeoutMs: 10_000 });
  base = api.base;
  client = createClient(QueueService, createGrpcTransport({ baseUrl: base }));
  await f.queue.putWorkload({ name: W, failurePolicy: "fail_fast", maxAttempts: 3 });
  await f.queue.putWorkload({ name: OTHER });
  await f.queue.putWorkload({ name: FIN });
  await f.queue.putAccount({ name: ACCOUNT, priority: 9 });
});

afterAll(async () => {
  await api?.close();
  await f?.close();
});

/** What the database holds of schedules and jobs (a refused PutSchedule changes none of it). */
async function written(): Promise<unknown> {
  const { rows } = await f.pool.query(`SELECT (SELECT count(*) FROM schedules) AS s, (SELECT count(*) FROM jobs) AS j`);
  return rows[0];
}

/** Makes the schedule's next tick due now and runs one scheduler pass; the job that tick created, with its tasks. */
async function fireTick(name: string): Promise<{ job: Job; tasks: TaskRow[] }> {
  await f.pool.query(`UPDATE schedules SET next_fire_at = now() WHERE name = $1`, [name]);
  const pass = await f.queue.fireSchedules();
  expect(pass.failures).toEqual([]);
  const { rows } = await f.pool.query(`SELECT id FROM jobs WHERE schedule_name = $1`, [name]);
  expect(rows).toHaveLength(1);
  const { job } = await f.queue.getJobStatus(rows[0].id as string);
  const tasks = await f.pool.query<TaskRow>(`SELECT * FROM tasks WHERE job_id = $1 ORDER BY chunk_index`, [job.id]);
  return { job, tasks: tasks.rows };
}

/** Puts the template; a refused field is INVALID_ARGUMENT naming it, with nothing written; an accepted one is on the fired job. */
async function walk(name: string, template: Init, c: Case<Init> | Case<TaskInit>): Promise<void> {
  const before = await written();
  const put = client.putSchedule({ name, cron: "0 0 1 1 *", job: template });
  if ("refused" in c) {
    const err = await rpcError(put);
    expect(err.code).toBe(Code.InvalidArgument);
    expect(err.findDetails(BadRequestSchema).flatMap((d) => d.fieldViolations.map((v) => v.field))).toEqual([c.refused]);
    expect(await written()).toEqual(before);
    return;
  }
  const { schedule } = await put;
  // The stored template gives back what was put.
  const sent = toJson(CreateJobRequestSchema, create(CreateJobRequestSchema, template));
  expect(toJson(CreateJobRequestSchema, schedule!.job!)).toEqual(sent);
  const { job, tasks } = await fireTick(name);
  c.check(job, tasks);
}

describe("every field of CreateJobRequest in a schedule's template is on the fired job or refused", () => {
  it("the cases cover the descriptor's fields, and none is a field's default", () => {
    expect(Object.keys(JOB_FIELDS).sort()).toEqual(CreateJobRequestSchema.fields.map((x) => x.name).sort());
    expect(Object.keys(TASK_FIELDS).sort()).toEqual(TaskSpecSchema.fields.map((x) => x.name).sort());
    for (const field of CreateJobRequestSchema.fields) {
      const m = create(CreateJobRequestSchema, { ...BASE, [field.localName]: JOB_FIELDS[field.name].value });
      expect(isFieldSet(m, field), field.name).toBe(true);
    }
    // The finalizer's case sets each of its fields.
    const fin = JOB_FIELDS.finalizer.value as MessageInitShape<typeof FinalizerSchema>;
    for (const field of FinalizerSchema.fields) expect(isFieldSet(create(FinalizerSchema, fin), field), field.name).toBe(true);
  });

  for (const field of CreateJobRequestSchema.fields) {
    it(`CreateJobRequest.${field.name}`, async () => {
      const c = JOB_FIELDS[field.name];
      await walk(`job-${field.name.replace(/_/g, "-")}`, { ...BASE, [field.localName]: c.value }, c);
    });
  }

  for (const field of TaskSpecSchema.fields) {
    it(`CreateJobRequest.tasks[0].${field.name}`, async () => {
      const c = TASK_FIELDS[field.name];
      const task = { ...BASE_TASK, [field.localName]: c.value };
      await walk(`task-${field.name.replace(/_/g, "-")}`, { workload: W, tasks: [task] }, c);
    });
  }
});

describe("over REST, as a user writes it", () => {
  it("PUT /schedules/s1 with a finalizer: every tick's job has it, and the finalizer runs when that job ends", async () => {
    // A workload of its own: the claim below must take this tick's task, not one an earlier test left pending.
    const own = "tpl_rest";
    await f.queue.putWorkload({ name: own });
    const put = await restCall(base, "PUT", "/schedules/s1", {
      cron: "0 0 1 1 *",
      job: {
        ...{ workload: own, input_uri: "s3://rest/in", input_sha256: sha("rest") },
        finalizer: { workload: FIN, parameters: { k: "v" } },
      },
    });
    expect(put.status, put.text).toBe(200);
    expect(put.body.schedule.job.finalizer).toEqual({ workload: FIN, parameters: { k: "v" }, run_on_failure: false });
    const { job } = await fireTick("s1");
    expect(job.finalizer).toEqual({ workload: FIN, parameters: { k: "v" }, runOnFailure: false });
    const [task] = await f.queue.claimTasks({ workerId: "w", workloads: [own] });
    expect(task.jobId).toBe(job.id);
    await f.queue.completeTask({ taskId: task.id, workerId: "w", attempt: task.attempt, resultUri: "s3://out", resultSha256: sha("out") });
    const { rows } = await f.pool.query(`SELECT workload, parameters FROM jobs WHERE parent_job_id = $1`, [job.id]);
    expect(rows).toEqual([{ workload: FIN, parameters: { k: "v", parent_job_id: job.id, parent_status: "completed" } }]);
  });

  it("PUT /schedules/s3 with billing's reserved units: every tick's job has them", async () => {
    const put = await restCall(base, "PUT", "/schedules/s3", {
      cron: "0 0 1 1 *",
      job: { workload: W, input_uri: "s3://rest/in", input_sha256: sha("rest"), account: ACCOUNT, billing: { reserved_units: "25" } },
    });
    expect(put.status, put.text).toBe(200);
    expect(put.body.schedule.job.billing).toEqual({ reserved_units: "25", billing_key: "" });
    const { job } = await fireTick("s3");
    expect([job.account, job.billing]).toEqual([ACCOUNT, { reservedUnits: 25, billingKey: null }]);
  });

  it("PUT /schedules/s2 with a run_at is 400 naming job.run_at, and writes nothing", async () => {
    const before = await written();
    const r = await restCall(base, "PUT", "/schedules/s2", {
      cron: "0 0 1 1 *",
      job: { workload: W, input_uri: "s3://rest/in", input_sha256: sha("rest"), run_at: "2030-01-01T00:00:00Z" },
    });
    expect(r.status, r.text).toBe(400);
    expect(r.body.error.violations.map((v: { field: string }) => v.field)).toEqual(["job.run_at"]);
    expect(await written()).toEqual(before);
  });
});
