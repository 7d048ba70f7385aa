// A worker for the "thumbs" workload: reports progress, stops when its task is cancelled, fails a
// chunk whose input it cannot read for good (a TaskError), and drains on SIGTERM.
//   LEASEHOLD_URL=http://127.0.0.1:8080 LEASEHOLD_TRANSPORT=grpc node worker.js
import { createHash } from "node:crypto";
import { RetryableError, TaskError, Worker, WorkerConfigError, type TransportName } from "@leasehold/client";

const worker = new Worker(process.env.LEASEHOLD_URL ?? "http://127.0.0.1:8080", {
  workloads: ["thumbs"],
  concurrency: 4,
  token: process.env.LEASEHOLD_TOKEN,
  transport: (process.env.LEASEHOLD_TRANSPORT ?? "connect") as TransportName,
});

worker.handle("thumbs", async (task) => {
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

try {
  await worker.run(); // until SIGTERM or SIGINT, then drains
  console.log(`worker stopped: ${JSON.stringify(worker.stats)}`);
} catch (e) {
  if (e instanceof WorkerConfigError) {
    console.error(`worker: ${e.message}`);
    process.exit(2);
  }
  throw e;
}
