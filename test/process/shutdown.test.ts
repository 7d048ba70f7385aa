// Shutdown drains HTTP/2: a gRPC long poll parked when the server starts closing is answered
// (empty), not reset with its connection.
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { pino } from "pino";
import { afterAll, beforeAll, expect, it } from "vitest";
import { QueueService } from "../../gen/leasehold/queue/v1/queue_pb.js";
import { createApiServer } from "../../src/api/server.js";
import { LongPollingQueue } from "../../src/queue/long-poll.js";
import { TaskListener } from "../../src/store/postgres/state/listener.js";
import { queueFixture, type QueueFixture } from "../support/queue.js";
import { SWITCHES } from "../support/switches.js";

let f: QueueFixture;
let listener: TaskListener;

beforeAll(async () => {
  f = await queueFixture();
  listener = new TaskListener(f.db.url);
  await listener.start();
});
afterAll(async () => {
  await listener?.stop();
  await f?.close();
});

it("answers a parked gRPC long poll with an empty result when the server shuts down", async () => {
  await f.queue.putWorkload({ name: "drain" });
  const queue = new LongPollingQueue(f.queue, listener, { pollIntervalMs: 60_000 });
  const server = createApiServer({
    directUnary: SWITCHES.directUnary,
    queue: f.queue,
    longPoll: queue,
    logger: pino({ level: "silent" }),
    maxBodyBytes: 1 << 20,
    requestTimeoutMs: 10_000,
    readiness: async () => ({ ready: true }),
  });
  const port = await server.listen(0, "127.0.0.1");
  const client = createClient(QueueService, createGrpcTransport({ baseUrl: `http://127.0.0.1:${port}` }));
  const parked = client.claimTasks({ workerId: "w", workloads: ["drain"], waitSeconds: 20 });
  for (let i = 0; i < 100 && queue.parked === 0; i++) await new Promise((r) => setTimeout(r, 20));
  expect(queue.parked).toBe(1);
  // main.ts's order: stop accepting, then answer parked claims, then wait for in-flight requests.
  const closing = server.close(5000);
  queue.close();
  const answer = await parked;
  expect(answer.tasks).toEqual([]);
  await closing;
});
