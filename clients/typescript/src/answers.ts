// The client's answers: every call that answers a job gives a Job (the generated message), with
// what its RPC says besides the job as fields of the same object (a snapshot's counts, a retry's
// number of tasks); and their JSON form. Messages hold int64 fields as bigint and carry $typeName,
// so JSON.stringify cannot take them as they are: toJson gives protobuf's JSON form.
import { createRegistry, toJson as messageToJson, type JsonValue, type JsonWriteOptions, type Message } from "@bufbuild/protobuf";
import { errorFor } from "./errors.js";
import {
  file_leasehold_queue_v1_queue,
  type Job,
  type JobFailure,
  type Task,
  type TaskCounts,
  type Workflow,
} from "./gen/leasehold/queue/v1/queue_pb.js";

/** CreateJob's answer: the job, with its tasks as created (in chunk order). */
export interface CreatedJob extends Job {
  /** The job's tasks as created, in chunk order; empty when it was created with `view: JobView.BASIC`. */
  tasks: Task[];
}

/** GetJob's answer (and `wait`'s): the job with its task counts, progress and, while it is failed, why. */
export interface JobSnapshot extends Job {
  /** How many of its tasks are in each status. */
  taskCounts: TaskCounts | undefined;
  /** How many tasks the job has. */
  totalTasks: number;
  /** 0 to 1: completed tasks and the running ones' reported progress, over all its tasks. */
  progress: number;
  /** While the job is failed: the task failure that failed it (chunk, code, message, attempt, worker). */
  failure: JobFailure | undefined;
}

/** RetryJob's answer: the job, with how many of its tasks were put back to pending. */
export interface RetriedJob extends Job {
  /** How many failed or cancelled tasks were put back to pending. */
  retriedTasks: number;
}

/** CancelWorkflow's answer: the workflow after the cancel, with how many nodes it cancelled. */
export interface CancelledWorkflow extends Workflow {
  cancelledNodes: number;
}

/** RetryWorkflow's answer: the workflow, with the nodes reopened and their tasks put back. */
export interface RetriedWorkflow extends Workflow {
  retriedNodes: number;
  retriedTasks: number;
}

/** The whole answer a job came in, for toJson: kept on the job, not enumerable, so the job's own fields stay as they are. */
const ANSWER = Symbol("leasehold.answer");

/** The job of an RPC's answer; an answer without one is the coordinator's fault, not a value to hand on. */
export function jobOf(method: string, answer: { job?: Job }): Job {
  if (!answer.job) throw errorFor("internal", `${method}: the coordinator's answer holds no job`);
  return answer.job;
}

/** The workflow of an RPC's answer (as jobOf a job). */
export function workflowOf(method: string, answer: { workflow?: Workflow }): Workflow {
  if (!answer.workflow) throw errorFor("internal", `${method}: the coordinator's answer holds no workflow`);
  return answer.workflow;
}

/** The workflow of `answer` with `extras` as its own fields (as jobWith a job's). */
export function workflowWith<T extends object>(method: string, answer: Message & { workflow?: Workflow }, extras: T): Workflow & T {
  const workflow = Object.assign(workflowOf(method, answer), extras);
  Object.defineProperty(workflow, ANSWER, { value: answer, enumerable: false });
  return workflow;
}

/** The job of `answer` with `extras` (the answer's other fields) as its own fields. */
export function jobWith<T extends object>(method: string, answer: Message & { job?: Job }, extras: T): Job & T {
  const job = Object.assign(jobOf(method, answer), extras);
  Object.defineProperty(job, ANSWER, { value: answer, enumerable: false });
  return job;
}

const registry = createRegistry(file_leasehold_queue_v1_queue);

/**
 * Any message the client answered with (a `Job`, `JobSnapshot`, `TaskDetail`, `Workload`, ...) in
 * protobuf's JSON form, which `JSON.stringify` takes: int64 fields (bigint here) as decimal
 * strings, timestamps as RFC 3339 strings, enums by name (`"JOB_STATUS_FAILED"`), field names in
 * lowerCamelCase, fields at their default value left out; no `$typeName`. A `CreatedJob`,
 * `JobSnapshot` or `RetriedJob` keeps its extra fields (`tasks`, `taskCounts`, `progress`,
 * `failure`, `retriedTasks`...). `options` are @bufbuild/protobuf's: `{ alwaysEmitImplicit: true }`
 * writes default values too, `{ useProtoFieldName: true }` snake_case names (as the REST API).
 *
 * @example
 * const job = await client.getJob(id);
 * console.log(JSON.stringify(toJson(job)));   // {"id":"…","workload":"render","status":"JOB_STATUS_RUNNING",…,"progress":0.5}
 */
export function toJson(message: Message, options?: Partial<JsonWriteOptions>): JsonValue {
  const json = messageJson(message, options);
  const answer = (message as { [ANSWER]?: Message })[ANSWER];
  if (answer === undefined) return json;
  const whole = messageJson(answer, options) as { [key: string]: JsonValue };
  delete whole.job;
  delete whole.workflow;
  return { ...(json as { [key: string]: JsonValue }), ...whole };
}

function messageJson(message: Message, options: Partial<JsonWriteOptions> | undefined): JsonValue {
  const schema = registry.getMessage(message.$typeName);
  if (!schema) throw new TypeError(`toJson: ${message.$typeName} is not a message of leasehold.queue.v1`);
  return messageToJson(schema, message, options);
}
