// The failure policy and the error model through the transports: the fields by their REST JSON
// names (and REST's short enum names) and over gRPC and Connect, bad values refused naming the
// field with nothing written, an unknown workload naming the registered ones (message, REST
// known_workloads, gRPC google.rpc.ErrorInfo), and an unknown body key as a REST violation.
import { Code, createClient, type Client, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BadRequestSchema, ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { FailurePolicy, JobStatus, QueueService } from "../../gen/leasehold/queue/v1/queue_pb.js";
import { restCall, type RestAnswer } from "../support/rest.js";
import { rpcError } from "../support/rpc.js";
import { sha, queueFixture, type QueueFixture } from "../support/queue.js";
import { apiServerFixture, type ApiServerFixture } from "../support/api-server.js";

const W = "fpa_render";

let pool: pg.Pool;
let fx: QueueFixture;
let api: ApiServerFixture;
let base: string;

const rest = (method: string, path: string, body?: unknown): Promise<RestAnswer> => restCall(base, method, path, body);

async function rows(): Promise<{ jobs: number; workloads: string }> {
  const { rows } = await pool.query(
    `SELECT (SELECT count(*)::int FROM jobs) AS jobs,
            (SELECT string_agg(name || ':' || failure_policy || ':' || max_failed_tasks, ',' ORDER BY name) FROM workloads) AS workloads`,
  );
  return rows[0];
}

beforeAll(async () => {
  fx = await queueFixture(
    {
      defaultLeaseSeconds: 60,
      defaultMaxAttempts: 3,
      maxTasksPerJob: 50,
    },
    { max: 6 },
  );
  pool = fx.pool;
  const queue = fx.queue;
  api = await apiServerFixture({ queue });
  base = api.base;
});

afterAll(async () => {
  await api?.close();
  await fx?.close();
});

describe("REST", () => {
  it("sets a workload's default and a job's own by their JSON names (short enum names too), and GetJob shows them", async () => {
    const put = await rest("PUT", `/workloads/${W}`, { failure_policy: "continue", max_failed_tasks: 2 });
    expect(put.status, put.text).toBe(200);
    expect(put.body.workload).toMatchObject({ failure_policy: "FAILURE_POLICY_CONTINUE", max_failed_tasks: 2 });
    const inherited = await rest("POST", "/jobs", { workload: W, input_uri: "s3://a", input_sha256: sha("a") });
    expect(inherited.status, inherited.text).toBe(201);
    expect(inherited.body.job).toMatchObject({ failure_policy: "FAILURE_POLICY_CONTINUE", max_failed_tasks: 2 });
    const own = await rest("POST", "/jobs", {
      workload: W,
      input_uri: "s3://b",
      input_sha256: sha("b"),
      failurePolicy: "FAILURE_POLICY_FAIL_FAST",
      maxFailedTasks: 0,
    });
    expect(own.status, own.text).toBe(201);
    const got = await rest("GET", `/jobs/${own.body.job.id}`);
    // max_failed_tasks 0 is the proto3 default, left out of the JSON like every zero.
    expect(got.body.job.failure_policy).toBe("FAILURE_POLICY_FAIL_FAST");
    expect(got.body.job.max_failed_tasks ?? 0).toBe(0);
    const listed = await rest("GET", "/workloads");
    expect(listed.body.workloads.find((w: { name: string }) => w.name === W)).toMatchObject({ failure_policy: "FAILURE_POLICY_CONTINUE" });
  });

  it("refuses bad values with a 400 naming the field in violations, writing nothing", async () => {
    const before = await rows();
    const cases: [string, string, unknown, string][] = [
      ["POST", "/jobs", { workload: W, input_uri: "s3://c", input_sha256: sha("c"), failure_policy: "sometimes" }, "failure_policy"],
      ["POST", "/jobs", { workload: W, input_uri: "s3://c", input_sha256: sha("c"), failure_policy: 7 }, "failure_policy"],
      ["POST", "/jobs", { workload: W, input_uri: "s3://c", input_sha256: sha("c"), max_failed_tasks: -1 }, "max_failed_tasks"],
      ["POST", "/jobs", { workload: W, input_uri: "s3://c", input_sha256: sha("c"), max_failed_tasks: "many" }, "max_failed_tasks"],
      ["POST", "/jobs", { workload: W, input_uri: "s3://c", input_sha256: sha("c"), max_failed_tasks: 2_000_000 }, "max_failed_tasks"],
      ["PUT", `/workloads/${W}`, { failure_policy: "FAILURE_POLICY_SOMETIMES" }, "failure_policy"],
      ["PUT", `/workloads/${W}`, { max_failed_tasks: -5 }, "max_failed_tasks"],
    ];
    for (const [method, path, body, field] of cases) {
      const a = await rest(method, path, body);
      expect(a.status, `${JSON.stringify(body)}: ${a.text}`).toBe(400);
      expect(a.body.error.code).toBe("invalid_argument");
      expect(a.body.error.message).toContain(field);
      expect(a.body.error.violations.map((v: { field: string }) => v.field)).toEqual([field]);
    }
    expect(await rows()).toEqual(before);
  });

  it("an unknown top-level (or nested) key is a violation naming it", async () => {
    const before = await rows();
    const top = await rest("POST", "/jobs", { workload: W, input_uri: "s3://d", input_sha256: sha("d"), failure_polciy: "continue" });
    expect(top.status).toBe(400);
    expect(top.body.error.violations).toEqual([{ field: "failure_polciy", description: expect.stringContaining("failure_policy") }]);
    const nested = await rest("POST", "/jobs", {
      workload: W,
      tasks: [{ chunk_index: 0, input_uri: "s3://e", input_sha256: sha("e"), size: 1 }],
    });
    expect(nested.status).toBe(400);
    expect(nested.body.error.violations).toEqual([{ field: "tasks[0].size", description: expect.any(String) }]);
    const claim = await rest("POST", "/tasks/claim", { worker_id: "w", workloads: [W], bogus: 1 });
    expect(claim.body.error.violations.map((v: { field: string }) => v.field)).toEqual(["bogus"]);
    expect(await rows()).toEqual(before);
  });

  it("a claim (or a job) of an unknown workload is a 404 naming the registered ones", async () => {
    const claim = await rest("POST", "/tasks/claim", { worker_id: "w", workloads: ["fpa_rendr"] });
    expect(claim.status).toBe(404);
    expect(claim.body.error.code).toBe("not_found");
    expect(claim.body.error.message).toContain(`registered workloads: ${W}`);
    expect(claim.body.error.known_workloads).toEqual([W]);
    const job = await rest("POST", "/jobs", { workload: "fpa_rendr", input_uri: "s3://f", input_sha256: sha("f") });
    expect(job.status).toBe(404);
    expect(job.body.error.known_workloads).toEqual([W]);
  });
});

const transports: [string, () => Transport][] = [
  ["gRPC", () => createGrpcTransport({ baseUrl: base })],
  ["Connect", () => createConnectTransport({ baseUrl: base, httpVersion: "1.1" })],
];

describe.each(transports)("%s", (label, transport) => {
  let client: Client<typeof QueueService>;
  const workload = `fpa_${label.toLowerCase()}`;

  beforeAll(async () => {
    client = createClient(QueueService, transport());
  });

  it("sets and shows the policy, and refuses bad values naming the field in a BadRequest, writing nothing", async () => {
    const { workload: w } = await client.putWorkload({ name: workload, failurePolicy: FailurePolicy.CONTINUE, maxFailedTasks: 1 });
    expect(w).toMatchObject({ failurePolicy: FailurePolicy.CONTINUE, maxFailedTasks: 1 });
    const { job } = await client.createJob({ workload, inputUri: "s3://g", inputSha256: sha("g"), maxFailedTasks: 4 });
    expect(job).toMatchObject({ failurePolicy: FailurePolicy.CONTINUE, maxFailedTasks: 4, status: JobStatus.PENDING });
    expect((await client.getJob({ jobId: job!.id })).job).toMatchObject({ failurePolicy: FailurePolicy.CONTINUE, maxFailedTasks: 4 });

    const before = await rows();
    const bad: [Promise<unknown>, string][] = [
      [client.createJob({ workload, inputUri: "s3://h", inputSha256: sha("h"), failurePolicy: 9 as FailurePolicy }), "failure_policy"],
      [client.createJob({ workload, inputUri: "s3://h", inputSha256: sha("h"), maxFailedTasks: -1 }), "max_failed_tasks"],
      [client.putWorkload({ name: workload, failurePolicy: 5 as FailurePolicy }), "failure_policy"],
    ];
    for (const [call, field] of bad) {
      const err = await rpcError(call);
      expect(err.code).toBe(Code.InvalidArgument);
      expect(err.findDetails(BadRequestSchema)[0]?.fieldViolations.map((v) => v.field)).toEqual([field]);
    }
    expect(await rows()).toEqual(before);
  });

  it("a claim of an unknown workload is NOT_FOUND naming the registered ones, with an ErrorInfo detail", async () => {
    const err = await rpcError(client.claimTasks({ workerId: "w", workloads: ["fpa_nope"] }));
    expect(err.code).toBe(Code.NotFound);
    expect(err.rawMessage).toContain("registered workloads:");
    expect(err.rawMessage).toContain(W);
    const [info] = err.findDetails(ErrorInfoSchema);
    expect(info).toMatchObject({ reason: "WORKLOAD_NOT_FOUND", domain: "leasehold" });
    expect(info.metadata.workload).toBe("fpa_nope");
    expect(info.metadata.known_workloads.split(",")).toContain(W);
  });
});
