// A submitter: creates a job of four chunks (one of them corrupt) that keeps going past a failed
// chunk, watches it to the end, then explains the failure and lists what the other chunks made.
// Its workload is `scimesh`, which `npm start` registers; LEASEHOLD_WORKLOAD names another.
//   LEASEHOLD_URL=http://127.0.0.1:8080 LEASEHOLD_TRANSPORT=grpc node submit.js
import { createHash } from "node:crypto";
import { Client, FailurePolicy, JobStatus, JobView, TaskStatus, InvalidArgumentError, toJson, type TransportName } from "@leasehold/client";

const sha = (s: string): string => createHash("sha256").update(s).digest("hex");
const workload = process.env.LEASEHOLD_WORKLOAD ?? "scimesh";
const client = new Client(process.env.LEASEHOLD_URL ?? "http://127.0.0.1:8080", {
  token: process.env.LEASEHOLD_TOKEN,
  transport: (process.env.LEASEHOLD_TRANSPORT ?? "connect") as TransportName,
});

try {
  const inputs = ["s3://in/0", "s3://in/1", "s3://in/corrupt", "s3://in/flaky"];
  const created = await client.createJob(
    workload,
    inputs.map((uri, i) => ({ chunkIndex: i, inputUri: uri, inputSha256: sha(uri) })),
    // JobView.BASIC: the job alone, as its tasks are not read here.
    { parameters: { size: 128 }, failurePolicy: FailurePolicy.CONTINUE, view: JobView.BASIC },
  );
  console.log(`job ${created.id} created with ${inputs.length} tasks`);

  for await (const { update } of client.watch(created.id)) {
    if (update.case === "event" && update.value.errorCode) {
      console.log(`event: chunk ${update.value.chunkIndex} ${TaskStatus[update.value.taskStatus]} ${update.value.errorCode}`);
    }
  }

  const job = await client.getJob(created.id); // the job, with its task counts, progress and failure
  console.log(`status: ${JobStatus[job.status]}`);
  if (job.failure) {
    const f = job.failure;
    console.log(`failure: chunk ${f.chunkIndex} ${f.errorCode}: ${f.errorMessage} (attempt ${f.attempt}, worker ${f.workerId})`);
  }
  for await (const detail of client.listTasks(job.id, { status: TaskStatus.FAILED })) {
    for (const a of detail.attempts)
      console.log(`  attempt ${a.attempt} of chunk ${detail.task!.chunkIndex}: ${a.errorCode} ${a.errorMessage}`);
  }
  for await (const m of client.results(job.id)) console.log(`result: chunk ${m.chunkIndex} ${m.resultUri}`);
  console.log(`json: ${JSON.stringify(toJson(job))}`); // int64 fields are bigints: toJson gives protobuf's JSON form

  try {
    await client.createJob(workload, [{ chunkIndex: 0, inputUri: "", inputSha256: "nope" }]);
  } catch (e) {
    if (!(e instanceof InvalidArgumentError)) throw e;
    for (const v of e.violations) console.log(`refused: ${v.field}: ${v.description}`);
  }
} finally {
  client.close();
}
