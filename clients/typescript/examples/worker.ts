// A worker: reports progress, stops when its task is cancelled, fails a chunk whose input it cannot
// read for good (a TaskError), logs each outcome from the worker's events, and drains on SIGTERM.
// Its workload is `scimesh`, which `npm start` registers; LEASEHOLD_WORKLOAD names another.
//   LEASEHOLD_URL=http://127.0.0.1:8080 LEASEHOLD_TRANSPORT=grpc node worker.js
import { createHash } from "node:crypto";
import { RetryableError, TaskError, UnavailableError, Worker, WorkerConfigError, type TransportName } from "@leasehold/client";

const workload = process.env.LEASEHOLD_WORKLOAD ?? "scimesh";
const worker = new Worker(process.env.LEASEHOLD_URL ?? "http://127.0.0.1:8080", {
  workloads: [workload],
  concurrency: 4,
  token: process.env.LEASEHOLD_TOKEN,
  transport: (process.env.LEASEHOLD_TRANSPORT ?? "connect") as TransportName,
  unreachableTimeoutMs: 30_000, // run() rejects once the coordinator has not answered for 30 s
});

worker.handle(workload, async (task) => {
  await task.progress(0.5, `chunk ${task.chunkIndex}: halfway`); // renews the lease; throws once cancelled
  if (task.inputUri.endsWith("/corrupt")) {
    throw new TaskError(`chunk ${task.chunkIndex}: input is corrupt`, { code: "bad_input" }); // permanent
  }
  if (task.inputUri.endsWith("/flaky") && task.attempt === 1) {
    throw new RetryableError("storage timed out", { retryAfterSeconds: 0 }); // tried again
  }
  task.throwIfCancelled();
  const data = `thumbnail of ${task.inputUri} at ${JSON.stringify(task.parameters)}`;
  return { uri: `mem://out/${task.jobId}/${task.chunkIndex}`, sha256: createHash("sha256").update(data).digest("hex") };
});

worker
  .on("completed", (task, result) => console.log(`completed: chunk ${task.chunkIndex} ${result.uri}`))
  .on("failed", (task, error) => console.log(`failed: chunk ${task.chunkIndex} attempt ${task.attempt}: ${String(error)}`))
  .on("cancelled", (task, reason) => console.log(`cancelled: chunk ${task.chunkIndex}: ${reason}`));

try {
  await worker.run(); // until SIGTERM or SIGINT, then drains
  console.log(`worker stopped: ${JSON.stringify(worker.stats)}`);
} catch (e) {
  if (e instanceof WorkerConfigError || e instanceof UnavailableError) {
    console.error(`worker: ${e.message}`);
    process.exit(2);
  }
  throw e;
}
