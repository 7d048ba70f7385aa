// A coordinator with the real API layer (createApiServer: Connect + REST, request ids, error
// mapping) over a queue that answers from memory: what the load generator and the API layer
// can do with no database behind them. Used by npm run bench for the generator's own ceiling,
// and by npm run bench:api (bench/api-cost.ts) for the API layer's own CPU per call:
//   STUB_LOG_LEVEL (warn)  pino level of the request log (info: one line per request, as in production)
//   STUB_METRICS (unset)   1: the RPC duration histogram on, as in production
//   STUB_BARE (unset)      1: no API layer at all, a bare node:http server answering the REST claim and
//                          result with fixed JSON of the same size (the floor: HTTP parsing and syscalls)
import { randomUUID } from "node:crypto";
import http from "node:http";
import { create, toJsonString } from "@bufbuild/protobuf";
import { pino } from "pino";
import { ClaimTasksResponseSchema } from "../gen/leasehold/queue/v1/queue_pb.js";
import { taskMessage } from "../src/api/services/messages.js";
import { createApiServer } from "../src/api/server.js";
import { createHttpListener } from "../src/api/http-listener.js";
import { createLogger } from "../src/logger.js";
import type { LogLevel } from "../src/config/index.js";
import { Metrics } from "../src/telemetry/metrics.js";
import type { ApiQueue } from "../src/queue/service.js";
import type { Task } from "../src/queue/types.js";
import { parseDirectUnary } from "../src/config/index.js";

const now = new Date();
let seq = 0;
function task(workerId: string): Task {
  const n = ++seq;
  return {
    id: `00000000-0000-4000-8000-${String(n % 1e12).padStart(12, "0")}`,
    jobId: "00000000-0000-4000-8000-000000000000",
    chunkIndex: n,
    workload: "stub",
    inputUri: "s3://stub",
    inputSha256: "a".repeat(64),
    parameters: {},
    status: "leased",
    attempt: 1,
    maxAttempts: 3,
    priority: 0,
    leaseOwner: workerId,
    leaseExpiresAt: now,
    resultUri: null,
    resultSha256: null,
    metrics: null,
    errorCode: null,
    errorMessage: null,
    createdAt: now,
    startedAt: now,
    completedAt: null,
    runAfter: now,
    version: 1,
    traceparent: null,
    concurrencyKey: "",
    requiredLabels: null,
  };
}

/** The calls the benchmarks make; the stub answers them from memory. */
type Served =
  "claimTasks" | "completeTask" | "completeTasks" | "completeTaskAndClaim" | "completeTasksAndClaim" | "createJob" | "listWorkloads";
const served: Pick<ApiQueue, Served> = {
  claimTasks: async (input) => Array.from({ length: input.maxTasks ?? 1 }, () => task(input.workerId)),
  completeTask: async (input) => ({
    ...task(input.workerId),
    id: input.taskId,
    status: "completed",
    resultUri: input.resultUri,
    resultSha256: input.resultSha256,
  }),
  completeTasks: async (inputs) =>
    inputs.map((i) => ({
      task: { ...task(i.workerId), id: i.taskId, status: "completed" as const, resultUri: i.resultUri, resultSha256: i.resultSha256 },
    })),
  completeTaskAndClaim: async (input, next) => ({ task: await served.completeTask(input), next: await served.claimTasks(next) }),
  completeTasksAndClaim: async (inputs, next) => ({ outcomes: await served.completeTasks(inputs), next: await served.claimTasks(next) }),
  createJob: async (input) => {
    const jobId = "00000000-0000-4000-8000-000000000001";
    const job = {
      id: jobId,
      workload: input.workload,
      inputUri: input.inputUri ?? "",
      inputSha256: input.inputSha256 ?? null,
      parameters: input.parameters ?? {},
      status: "pending" as const,
      priority: input.priority ?? 0,
      idempotencyKey: input.idempotencyKey ?? null,
      traceparent: input.traceparent ?? null,
      cancelReason: null,
      createdAt: now,
      updatedAt: now,
      completedAt: null,
      failurePolicy: input.failurePolicy ?? ("fail_fast" as const),
      maxFailedTasks: input.maxFailedTasks ?? 0,
      concurrencyKey: "",
      requiredLabels: null,
      scheduleName: null,
      scheduleFireAt: null,
      runAt: null,
      finalizer: null,
      finalizerJobId: null,
      parentJobId: null,
    };
    const specs = input.tasks?.length ? input.tasks : [{ chunkIndex: 0, inputUri: job.inputUri, inputSha256: job.inputSha256 ?? "" }];
    const tasks = specs.map((t) => ({
      ...task(""),
      jobId,
      chunkIndex: t.chunkIndex,
      inputUri: t.inputUri,
      inputSha256: t.inputSha256,
      status: "pending" as const,
      leaseOwner: null,
      leaseExpiresAt: null,
      startedAt: null,
    }));
    return { job, tasks, created: true };
  },
  listWorkloads: async () => [],
};
// Any other RPC finds no method and is answered INTERNAL: a new RPC needs nothing here.
const queue = served as ApiQueue;

if (process.env.STUB_BARE === "1") {
  const claim = toJsonString(ClaimTasksResponseSchema, create(ClaimTasksResponseSchema, { tasks: [taskMessage(task("w-0"))] }), {
    useProtoFieldName: true,
    alwaysEmitImplicit: true,
  });
  const answer = (res: http.ServerResponse, body: string) => {
    res.setHeader("content-type", "application/json");
    res.setHeader("x-request-id", randomUUID());
    res.setHeader("content-length", Buffer.byteLength(body));
    res.end(body);
  };
  const onBare = (req: http.IncomingMessage, res: http.ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      if (req.url === "/healthz") return answer(res, "{}");
      JSON.parse(Buffer.concat(chunks).toString());
      answer(res, claim);
    });
  };
  if (process.env.STUB_BARE_LISTENER === "1") await createHttpListener(onBare as never).listen(Number(process.env.PORT), "127.0.0.1");
  else http.createServer(onBare).listen(Number(process.env.PORT), "127.0.0.1");
  process.on("SIGTERM", () => process.exit(0));
} else {
  await startStub();
}

async function startStub() {
  const logLevel = process.env.STUB_LOG_LEVEL;
  const logger = logLevel ? createLogger(logLevel as LogLevel) : pino({ level: "warn" });
  const server = createApiServer({
    directUnary: parseDirectUnary(process.env),
    queue,
    logger,
    metrics: process.env.STUB_METRICS === "1" ? new Metrics({ logger }) : undefined,
    maxBodyBytes: 8 << 20,
    requestTimeoutMs: 10_000,
    readiness: async () => ({ ready: true }),
  });
  await server.listen(Number(process.env.PORT), "127.0.0.1");
  process.on("SIGTERM", () => void server.close(1000).then(() => process.exit(0)));
}
