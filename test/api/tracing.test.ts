// Traces: an in-memory OpenTelemetry SDK registered in this test file,
// a real server (createApiServer on port 0) over a real, migrated PostgreSQL.
// An RPC has one span, made by the interceptor chain: it continues the caller's
// `traceparent`, names the workload and, on failure, the error type; CreateJob
// stores the header's traceparent when the request has none, which ClaimTasks
// hands to workers.
import { randomBytes, randomUUID } from "node:crypto";
import { Code, createClient, type Client } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { context, propagation, SpanKind, SpanStatusCode, trace } from "@opentelemetry/api";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { InMemorySpanExporter, NodeTracerProvider, SimpleSpanProcessor, type ReadableSpan } from "@opentelemetry/sdk-trace-node";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { QueueService } from "../../gen/leasehold/queue/v1/queue_pb.js";
import { ConfigError, loadConfig } from "../../src/config/index.js";
import { rpcError } from "../support/rpc.js";
import { sha, queueFixture, type QueueFixture } from "../support/queue.js";
import { apiServerFixture, type ApiServerFixture } from "../support/api-server.js";

const WORKLOAD = "traced";

const exporter = new InMemorySpanExporter();
let provider: NodeTracerProvider;
let fx: QueueFixture;
let api: ApiServerFixture;
let base: string;
let client: Client<typeof QueueService>;

function newTraceparent(): { header: string; traceId: string; spanId: string } {
  const traceId = randomBytes(16).toString("hex");
  const spanId = randomBytes(8).toString("hex");
  return { header: `00-${traceId}-${spanId}-01`, traceId, spanId };
}

beforeAll(async () => {
  provider = new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  provider.register({ propagator: new W3CTraceContextPropagator() });
  fx = await queueFixture(
    {
      defaultLeaseSeconds: 60,
      defaultMaxAttempts: 3,
      maxTasksPerJob: 50,
    },
    { max: 4 },
  );
  const store = fx.queue;
  await store.putWorkload({ name: WORKLOAD });
  api = await apiServerFixture({ queue: store });
  base = api.base;
  client = createClient(QueueService, createGrpcTransport({ baseUrl: base }));
});

afterAll(async () => {
  await api?.close();
  await fx?.close();
  await provider?.shutdown();
  trace.disable();
  context.disable();
  propagation.disable();
});

beforeEach(() => exporter.reset());

async function postJob(body: Record<string, unknown>, headers: Record<string, string> = {}) {
  const res = await fetch(`${base}/jobs`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify({ workload: WORKLOAD, input_uri: "s3://in/x", input_sha256: sha("x"), ...body }),
  });
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  return { status: res.status, requestId: res.headers.get("x-request-id"), body: (await res.json()) as any };
}

function spansNamed(name: string): ReadableSpan[] {
  return exporter.getFinishedSpans().filter((s) => s.name === name);
}

/** Spans end when the handler returns; the response may reach the client a moment earlier. */
async function waitForSpan(name: string): Promise<ReadableSpan> {
  for (let i = 0; i < 100; i++) {
    const found = spansNamed(name);
    if (found.length > 0) return found[0];
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(
    `no span ${name}; have ${exporter
      .getFinishedSpans()
      .map((s) => s.name)
      .join(", ")}`,
  );
}

describe("CreateJob over REST with a traceparent header", () => {
  it("stores the header, continues its trace, and names the workload on the one span of the RPC", async () => {
    const caller = newTraceparent();
    const created = await postJob({}, { traceparent: caller.header });
    expect(created.status).toBe(201);
    expect(created.body.job.traceparent).toBe(caller.header);
    expect(created.body.tasks[0].traceparent).toBe(caller.header);

    const rpc = await waitForSpan("leasehold.queue.v1.QueueService/CreateJob");
    expect(rpc.kind).toBe(SpanKind.SERVER);
    expect(rpc.spanContext().traceId).toBe(caller.traceId);
    expect(rpc.parentSpanContext?.spanId).toBe(caller.spanId);
    expect(rpc.parentSpanContext?.isRemote).toBe(true);
    expect(rpc.attributes).toMatchObject({
      "rpc.method": "CreateJob",
      "rpc.service": "leasehold.queue.v1.QueueService",
      "leasehold.request_id": created.requestId,
      "leasehold.job_id": created.body.job.id,
      "leasehold.protocol": "rest",
      "rpc.connect_rpc.status_code": "ok",
    });
    expect(rpc.status.code).not.toBe(SpanStatusCode.ERROR);
    expect(rpc.attributes["leasehold.workload"]).toBe(WORKLOAD);
    // One span per RPC: the queue below makes none of its own.
    expect(exporter.getFinishedSpans().map((s) => s.name)).toEqual(["leasehold.queue.v1.QueueService/CreateJob"]);
  });

  it("the traceparent field wins over the header", async () => {
    const field = newTraceparent();
    const header = newTraceparent();
    const created = await postJob({ traceparent: field.header }, { traceparent: header.header });
    expect(created.body.job.traceparent).toBe(field.header);
    // The span still continues the caller's (header) trace.
    expect((await waitForSpan("leasehold.queue.v1.QueueService/CreateJob")).spanContext().traceId).toBe(header.traceId);
  });

  it("an invalid header is ignored: no stored traceparent, no parent", async () => {
    const created = await postJob({}, { traceparent: "00-not-a-traceparent-01" });
    expect(created.status).toBe(201);
    expect(created.body.job.traceparent).toBe("");
    expect((await waitForSpan("leasehold.queue.v1.QueueService/CreateJob")).parentSpanContext).toBeUndefined();
  });

  it("with an idempotency key, a retry under a new traceparent is still a replay of the first job", async () => {
    const key = `k-${randomUUID()}`;
    const firstTrace = newTraceparent().header;
    const first = await postJob({ idempotency_key: key }, { traceparent: firstTrace });
    expect(first.status).toBe(201);
    expect(first.body.job.traceparent).toBe(firstTrace);
    const retry = await postJob({ idempotency_key: key }, { traceparent: newTraceparent().header });
    expect(retry.status).toBe(200);
    expect(retry.body.job.id).toBe(first.body.job.id);
    expect(retry.body.job.traceparent).toBe(firstTrace);
  });
});

describe("traceparent round trip to workers", () => {
  it("ClaimTasks (gRPC and REST) returns the traceparent stored at CreateJob", async () => {
    const workload = "traced_claim";
    await client.putWorkload({ name: workload });
    const viaGrpc = newTraceparent();
    const viaRest = newTraceparent();
    // gRPC metadata carries the header the same way.
    const a = await client.createJob(
      { workload, inputUri: "s3://in/a", inputSha256: sha("a"), priority: 9 },
      { headers: { traceparent: viaGrpc.header } },
    );
    expect(a.job?.traceparent).toBe(viaGrpc.header);
    const rpc = await waitForSpan("leasehold.queue.v1.QueueService/CreateJob");
    expect(rpc.spanContext().traceId).toBe(viaGrpc.traceId);
    expect(rpc.attributes["leasehold.protocol"]).toBe("grpc");
    const b = await postJob({ workload, input_uri: "s3://in/b", input_sha256: sha("b"), priority: 1 }, { traceparent: viaRest.header });
    expect(b.status).toBe(201);

    const claimed = await client.claimTasks({ workerId: "w-1", workloads: [workload], maxTasks: 1 });
    expect(claimed.tasks.map((t) => t.traceparent)).toEqual([viaGrpc.header]);
    const res = await fetch(`${base}/tasks/claim`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ worker_id: "w-2", workloads: [workload] }),
    });
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    const body = (await res.json()) as any;
    expect(body.tasks.map((t: { traceparent: string }) => t.traceparent)).toEqual([viaRest.header]);

    const claims = exporter.getFinishedSpans().filter((s) => s.name === "leasehold.queue.v1.QueueService/ClaimTasks");
    expect(claims.length).toBe(2);
    for (const span of claims) {
      expect(span.parentSpanContext).toBeUndefined(); // no traceparent header: a new trace
      expect(span.attributes["rpc.connect_rpc.status_code"]).toBe("ok");
    }
  });
});

describe("failed calls", () => {
  it("mark the RPC span as an error with the code and the error type", async () => {
    const err = await rpcError(client.getJob({ jobId: randomUUID() }));
    expect(err.code).toBe(Code.NotFound);
    const rpc = await waitForSpan("leasehold.queue.v1.QueueService/GetJob");
    expect(rpc.status).toMatchObject({ code: SpanStatusCode.ERROR, message: "not_found" });
    expect(rpc.attributes["rpc.connect_rpc.status_code"]).toBe("not_found");
    expect(rpc.attributes["error.type"]).toBe("NotFoundError");
    // An expected outcome is no exception.
    expect(rpc.events.filter((e) => e.name === "exception")).toEqual([]);
  });
});

describe("OTEL_EXPORTER_OTLP_ENDPOINT", () => {
  it("is optional, an http(s) URL when set, and a config error naming the variable otherwise", () => {
    expect(loadConfig({}).otelExporterOtlpEndpoint).toBeUndefined();
    expect(loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: "" }).otelExporterOtlpEndpoint).toBeUndefined();
    expect(loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318" }).otelExporterOtlpEndpoint).toBe("http://collector:4318");
    for (const bad of ["collector:4318", "grpc://collector:4317", "not a url"]) {
      expect(() => loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: bad })).toThrow(ConfigError);
      expect(() => loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: bad })).toThrow(/^OTEL_EXPORTER_OTLP_ENDPOINT: /);
    }
  });
});
