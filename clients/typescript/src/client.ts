// The submitter's and operator's client: every call of the QueueService they make, typed with the
// generated messages, with pages read through and a watch that survives reconnects.
import type { JsonObject, MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { createClient, type Client as RpcClient, type CallOptions } from "@connectrpc/connect";
import { openTransport, type OpenTransport } from "#transport";
import {
  jobOf,
  jobWith,
  workflowOf,
  workflowWith,
  type CancelledWorkflow,
  type CreatedJob,
  type JobSnapshot,
  type RetriedJob,
  type RetriedWorkflow,
} from "./answers.js";
import { DeadlineExceededError, InternalError, toLeaseholdError, UnavailableError } from "./errors.js";
import { checkBaseUrl, type ConnectionOptions } from "./options.js";
import {
  dependencies,
  NodeStatuses,
  workflowFinished,
  workflowRequest,
  type DependencyInit,
  type WorkflowNodeInit,
  type WorkflowOptions,
} from "./workflows.js";
import {
  JobEventKind,
  JobStatus,
  QueueService,
  type CreateJobRequestSchema,
  type GetTaskResponse,
  type Job,
  type PutKeyLimitResponse,
  type PutScheduleRequestSchema,
  type PutScheduleResponse,
  type PutWorkloadRequestSchema,
  type ResultManifest,
  type Schedule,
  type TaskDetail,
  type TaskSpecSchema,
  type TaskStatus,
  type WatchJobResponse,
  type Workload,
  type ListWorkloadKeysResponse,
  type Account,
  type GetAccountUsageResponse,
  type UsageAdjustment,
  type WatchWorkflowResponse,
  type Workflow,
} from "./gen/leasehold/queue/v1/queue_pb.js";

/** A chunk of a job as submitted (`{ chunkIndex, inputUri, inputSha256, parameters? }`). */
export type TaskSpecInit = MessageInitShape<typeof TaskSpecSchema>;
/** Everything of a CreateJob request besides its workload and tasks; `after` takes job ids too. */
export type CreateJobOptions = Omit<MessageInitShape<typeof CreateJobRequestSchema>, "workload" | "tasks" | "$typeName" | "after"> & {
  after?: DependencyInit[];
};
/** A workload's settings (PutWorkload) besides its name. */
export type WorkloadOptions = Omit<MessageInitShape<typeof PutWorkloadRequestSchema>, "name" | "$typeName">;
/** A schedule's settings (PutSchedule) besides its name, cron and job. */
export type ScheduleOptions = Omit<MessageInitShape<typeof PutScheduleRequestSchema>, "name" | "cron" | "job" | "$typeName">;

/** The job states that do not change any more. */
export const FINAL_JOB_STATUSES: readonly JobStatus[] = [JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED];

/** Options of one call that waits: an AbortSignal, and a bound in milliseconds. */
export interface WaitOptions {
  signal?: AbortSignal;
  timeoutMs?: number;
}

/**
 * A client for submitters and operators.
 *
 * @example
 * const client = new Client("http://127.0.0.1:8080", { token, transport: "grpc" });
 * const job = await client.createJob("render", [{ chunkIndex: 0, inputUri: "s3://in/0", inputSha256: sha }]);
 * for await (const update of client.watch(job.id)) console.log(update.update.case);
 * for await (const m of client.results(job.id)) console.log(m.chunkIndex, m.resultUri);
 * client.close();
 */
export class Client {
  /**
   * The coordinator's base URL, without a trailing slash. A path in it is kept as the prefix of
   * every call (`<url>/leasehold.queue.v1.QueueService/<Method>`), for a proxy that serves the
   * coordinator under one; the coordinator itself serves the calls at its root.
   */
  readonly url: string;
  readonly #open: OpenTransport;
  readonly #rpc: RpcClient<typeof QueueService>;
  readonly #timeoutMs: number;

  /** Throws a TypeError for a URL that is not `http://` or `https://`, or that has a query, fragment or credentials. */
  constructor(url: string, options: ConnectionOptions = {}) {
    this.url = checkBaseUrl(url);
    this.#open = openTransport(this.url, options);
    this.#rpc = createClient(QueueService, this.#open.transport);
    this.#timeoutMs = options.timeoutMs ?? 10_000;
  }

  /** Closes the client's connections (a Node program then exits once it is done). */
  close(): void {
    this.#open.close();
  }

  /** `client.close()` for `using client = new Client(...)`. */
  [Symbol.dispose](): void {
    this.close();
  }

  async #call<K extends keyof RpcClient<typeof QueueService>, R>(
    method: K,
    fn: (rpc: RpcClient<typeof QueueService>, opts: CallOptions) => Promise<R>,
    opts: CallOptions = {},
  ): Promise<R> {
    try {
      return await fn(this.#rpc, { timeoutMs: this.#timeoutMs, ...opts });
    } catch (e) {
      throw toLeaseholdError(methodName(method), e, { url: this.url, callerAborted: opts.signal?.aborted ?? false });
    }
  }

  /**
   * Creates a job of `tasks` (or of one task from `options.inputUri`) and returns it, with its
   * `tasks` as created; with an `idempotencyKey`, the same request again returns the first job.
   * `after` (job ids, or `{ jobId, optional: true }`) makes it wait for those jobs: it is WAITING
   * until they are final as `dependencyPolicy` asks, then pending, and its tasks carry `parents`.
   * `options.view: JobView.BASIC` returns the job alone (`tasks` empty): the coordinator neither
   * writes nor sends a large job's tasks back (it needs a coordinator that knows CreateJob's `view`).
   */
  async createJob(workload: string, tasks: TaskSpecInit[], options: CreateJobOptions = {}): Promise<CreatedJob> {
    const request = { ...options, after: dependencies(options.after), workload, tasks };
    const res = await this.#call("createJob", (r, o) => r.createJob(request, o));
    return jobWith("CreateJob", res, { tasks: res.tasks });
  }

  /** The job, with its `taskCounts`, `totalTasks`, `progress` and, while it is failed, the `failure` that failed it. */
  async getJob(jobId: string): Promise<JobSnapshot> {
    const res = await this.#call("getJob", (r, o) => r.getJob({ jobId }, o));
    return jobWith("GetJob", res, { taskCounts: res.taskCounts, totalTasks: res.totalTasks, progress: res.progress, failure: res.failure });
  }

  /** One task with its attempts (oldest first) and, while pending, why it waits. */
  getTask(taskId: string): Promise<GetTaskResponse> {
    return this.#call("getTask", (r, o) => r.getTask({ taskId }, o));
  }

  /** The job's tasks with their attempts, in chunk order, every page; `status` filters. */
  async *listTasks(jobId: string, options: { status?: TaskStatus; pageSize?: number } = {}): AsyncGenerator<TaskDetail> {
    let pageToken = "";
    do {
      const page = await this.#call("listTasks", (r, o) =>
        r.listTasks({ jobId, status: options.status, pageSize: options.pageSize ?? 0, pageToken }, o),
      );
      yield* page.tasks;
      pageToken = page.nextPageToken;
    } while (pageToken);
  }

  /** Jobs, newest first, every page; filtered by `status`, `workload`, `scheduleName`, `account`. */
  async *listJobs(
    options: { status?: JobStatus; workload?: string; scheduleName?: string; account?: string; pageSize?: number } = {},
  ): AsyncGenerator<Job> {
    let pageToken = "";
    do {
      const page = await this.#call("listJobs", (r, o) => r.listJobs({ ...options, pageSize: options.pageSize ?? 0, pageToken }, o));
      yield* page.jobs;
      pageToken = page.nextPageToken;
    } while (pageToken);
  }

  /** The result manifests of the job's completed tasks, in chunk order, every page. */
  async *results(jobId: string, options: { pageSize?: number } = {}): AsyncGenerator<ResultManifest> {
    let pageToken = "";
    do {
      const page = await this.#call("listCompletedResults", (r, o) =>
        r.listCompletedResults({ jobId, pageSize: options.pageSize ?? 0, pageToken }, o),
      );
      yield* page.results;
      pageToken = page.nextPageToken;
    } while (pageToken);
  }

  /**
   * A snapshot of the job, then every event until the job is final. A stream the network or the
   * coordinator breaks is opened again from the last event seen (`after_event_id`), with backoff,
   * so no event is lost or repeated (the resumed stream sends no second snapshot).
   */
  watch(jobId: string, options: WaitOptions = {}): AsyncGenerator<WatchJobResponse> {
    return this.#resumable(
      "WatchJob",
      `job ${jobId}`,
      (afterEventId, signal) => this.#rpc.watchJob({ jobId, afterEventId }, { signal }),
      (u) => (u.update.case === "event" ? u.update.value.id : undefined),
      isFinalUpdate,
      options,
    );
  }

  /**
   * A server stream followed to its end across breaks: opened again after the last event seen
   * (`afterEventId`), with jittered backoff from 0.1 s doubling to 5 s, until `done` says the
   * update just yielded was the last one. `options.timeoutMs` bounds the whole of it.
   */
  async *#resumable<U>(
    method: string,
    what: string,
    open: (afterEventId: bigint, signal: AbortSignal) => AsyncIterable<U>,
    eventId: (u: U) => bigint | undefined,
    done: (u: U) => boolean,
    options: WaitOptions,
  ): AsyncGenerator<U> {
    let afterEventId = 0n;
    let delayMs = 100;
    // One signal for the caller's abort and the bound, cleared on the way out: connect-es' own
    // timeoutMs leaves its timer running when a stream is left early, holding a Node program open.
    const stop = new AbortController();
    const onAbort = () => stop.abort(options.signal?.reason);
    options.signal?.addEventListener("abort", onAbort, { once: true });
    if (options.signal?.aborted) onAbort();
    const timer =
      options.timeoutMs === undefined
        ? undefined
        : setTimeout(
            () => stop.abort(new DeadlineExceededError(`${method}: ${what} not final within ${options.timeoutMs} ms`)),
            options.timeoutMs,
          );
    try {
      for (;;) {
        try {
          for await (const update of open(afterEventId, stop.signal)) {
            delayMs = 100;
            afterEventId = eventId(update) ?? afterEventId;
            yield update;
            if (done(update)) return;
          }
          // The coordinator ends a stream when it shuts down: open it again.
        } catch (e) {
          if (stop.signal.reason instanceof DeadlineExceededError) throw stop.signal.reason;
          const err = toLeaseholdError(method, e, { url: this.url, callerAborted: stop.signal.aborted });
          if (!(err instanceof UnavailableError)) throw err;
        }
        await sleep(delayMs * (0.5 + Math.random() / 2), stop.signal).catch((reason: unknown) => {
          throw reason instanceof DeadlineExceededError ? reason : toLeaseholdError(method, reason, { url: this.url, callerAborted: true });
        });
        delayMs = Math.min(delayMs * 2, 5000);
      }
    } finally {
      clearTimeout(timer);
      options.signal?.removeEventListener("abort", onAbort);
      stop.abort();
    }
  }

  /**
   * Waits until the job is final (following its watch) and returns it as `getJob` does, with its
   * `failure` when it failed. With `timeoutMs`, rejects with `DeadlineExceededError` (code
   * `deadline_exceeded`) once that passes first.
   */
  async wait(jobId: string, options: WaitOptions = {}): Promise<JobSnapshot> {
    for await (const _ of this.watch(jobId, options)) {
      // every update until the final one
    }
    return this.getJob(jobId);
  }

  /** Cancels the job (its unfinished tasks with it) and returns it; cancelling a final job changes nothing. */
  async cancel(jobId: string, reason = ""): Promise<Job> {
    return jobOf("CancelJob", await this.#call("cancelJob", (r, o) => r.cancelJob({ jobId, reason }, o)));
  }

  /** Runs a failed or cancelled job's unfinished tasks again and returns it, with `retriedTasks`; `maxAttempts` raises their budget. */
  async retry(jobId: string, options: { maxAttempts?: number } = {}): Promise<RetriedJob> {
    const res = await this.#call("retryJob", (r, o) => r.retryJob({ jobId, maxAttempts: options.maxAttempts }, o));
    return jobWith("RetryJob", res, { retriedTasks: res.retriedTasks });
  }

  /**
   * Creates a workflow in one call: `nodes` by name, each a job as `createJob` takes it with the
   * nodes it runs after (`after: ["chunks"]`), written in one transaction, and returns it with each
   * node's job id and status. Refused whole (an unknown workload, an edge to an unknown node, a
   * cycle, a quota): nothing is written, and the error names the field (`nodes[2].after[0].node`).
   *
   * @example
   * const wf = await client.createWorkflow({
   *   chunks: { workload: "scimesh", tasks },
   *   stitch: { workload: "stitch", inputUri, inputSha256, after: ["chunks"] },
   * }, { name: "mesh-001" });
   */
  async createWorkflow(nodes: Record<string, WorkflowNodeInit>, options: WorkflowOptions = {}): Promise<Workflow> {
    const res = await this.#call("createWorkflow", (r, o) => r.createWorkflow(workflowRequest(nodes, options), o));
    return workflowOf("CreateWorkflow", res);
  }

  /** The workflow with every node's status, task counts and job. */
  async getWorkflow(workflowId: string): Promise<Workflow> {
    return workflowOf("GetWorkflow", await this.#call("getWorkflow", (r, o) => r.getWorkflow({ workflowId }, o)));
  }

  /** Workflows, newest first, every page, without their nodes (`nodeCounts` says how they stand). */
  async *listWorkflows(options: { account?: string; scheduleName?: string; pageSize?: number } = {}): AsyncGenerator<Workflow> {
    let pageToken = "";
    do {
      const page = await this.#call("listWorkflows", (r, o) =>
        r.listWorkflows({ ...options, pageSize: options.pageSize ?? 0, pageToken }, o),
      );
      yield* page.workflows;
      pageToken = page.nextPageToken;
    } while (pageToken);
  }

  /**
   * A snapshot of the workflow, then each node's status change until every node is final; opened
   * again after the last event when the stream breaks, as `watch` is.
   */
  watchWorkflow(workflowId: string, options: WaitOptions = {}): AsyncGenerator<WatchWorkflowResponse> {
    const nodes = new NodeStatuses();
    return this.#resumable(
      "WatchWorkflow",
      `workflow ${workflowId}`,
      (afterEventId, signal) => this.#rpc.watchWorkflow({ workflowId, afterEventId }, { signal }),
      (u) => (u.update.case === "event" ? u.update.value.id : undefined),
      (u) => {
        nodes.apply(u);
        return nodes.allFinal;
      },
      options,
    );
  }

  /** Waits until every node of the workflow is final and returns it, with its nodes. */
  async waitWorkflow(workflowId: string, options: WaitOptions = {}): Promise<Workflow> {
    for await (const _ of this.watchWorkflow(workflowId, options)) {
      // every update until the last node is final
    }
    const workflow = await this.getWorkflow(workflowId);
    if (!workflowFinished(workflow)) throw new InternalError(`WatchWorkflow ended while workflow ${workflowId} is not final`);
    return workflow;
  }

  /** Cancels every node that is not final; returns the workflow with `cancelledNodes`. */
  async cancelWorkflow(workflowId: string, reason = ""): Promise<CancelledWorkflow> {
    const res = await this.#call("cancelWorkflow", (r, o) => r.cancelWorkflow({ workflowId, reason }, o));
    return workflowWith("CancelWorkflow", res, { cancelledNodes: res.cancelledNodes });
  }

  /**
   * Runs the failed and cancelled nodes again with every node after them that did not complete;
   * returns the workflow with `retriedNodes` and `retriedTasks`.
   */
  async retryWorkflow(workflowId: string, options: { maxAttempts?: number } = {}): Promise<RetriedWorkflow> {
    const res = await this.#call("retryWorkflow", (r, o) => r.retryWorkflow({ workflowId, maxAttempts: options.maxAttempts }, o));
    return workflowWith("RetryWorkflow", res, { retriedNodes: res.retriedNodes, retriedTasks: res.retriedTasks });
  }

  /** Creates or updates a workload (admin). */
  async putWorkload(name: string, options: WorkloadOptions = {}): Promise<Workload> {
    return (await this.#call("putWorkload", (r, o) => r.putWorkload({ ...options, name }, o))).workload!;
  }

  /** Every workload the coordinator knows. */
  async listWorkloads(): Promise<Workload[]> {
    return (await this.#call("listWorkloads", (r, o) => r.listWorkloads({}, o))).workloads;
  }

  /** One concurrency key's own cap of leased tasks in a workload (admin). */
  putKeyLimit(workload: string, key: string, maxLeased: number): Promise<PutKeyLimitResponse> {
    return this.#call("putKeyLimit", (r, o) => r.putKeyLimit({ name: workload, key, maxLeased }, o));
  }

  /** The busiest concurrency keys of a workload, with their counts and caps. */
  listWorkloadKeys(workload: string, limit = 0): Promise<ListWorkloadKeysResponse> {
    return this.#call("listWorkloadKeys", (r, o) => r.listWorkloadKeys({ name: workload, limit }, o));
  }

  /** Stops leasing the workload's tasks (held leases run on; jobs are still accepted). */
  async pause(workload: string): Promise<Workload> {
    return (await this.#call("pauseWorkload", (r, o) => r.pauseWorkload({ name: workload }, o))).workload!;
  }

  /** Leases the workload's tasks again. */
  async resume(workload: string): Promise<Workload> {
    return (await this.#call("resumeWorkload", (r, o) => r.resumeWorkload({ name: workload }, o))).workload!;
  }

  /** Creates or replaces a schedule that creates `job` at each time of `cron`. */
  putSchedule(
    name: string,
    cron: string,
    job: MessageInitShape<typeof CreateJobRequestSchema>,
    options: ScheduleOptions = {},
  ): Promise<PutScheduleResponse> {
    return this.#call("putSchedule", (r, o) => r.putSchedule({ ...options, name, cron, job }, o));
  }

  /** One schedule. */
  async getSchedule(name: string): Promise<Schedule> {
    return (await this.#call("getSchedule", (r, o) => r.getSchedule({ name }, o))).schedule!;
  }

  /** Every schedule. */
  async listSchedules(): Promise<Schedule[]> {
    return (await this.#call("listSchedules", (r, o) => r.listSchedules({}, o))).schedules;
  }

  /** Deletes a schedule (its jobs stay). */
  async deleteSchedule(name: string): Promise<Schedule> {
    return (await this.#call("deleteSchedule", (r, o) => r.deleteSchedule({ name }, o))).schedule!;
  }

  /** Stops a schedule from firing. */
  async pauseSchedule(name: string): Promise<Schedule> {
    return (await this.#call("pauseSchedule", (r, o) => r.pauseSchedule({ name }, o))).schedule!;
  }

  /** Lets a paused schedule fire again. */
  async resumeSchedule(name: string): Promise<Schedule> {
    return (await this.#call("resumeSchedule", (r, o) => r.resumeSchedule({ name }, o))).schedule!;
  }

  /**
   * Registers an account or replaces its settings (admin): `maxPendingTasks` bounds the pending
   * tasks over its jobs (0: no limit; CreateJob past it is `resource_exhausted`), `priority` is its
   * jobs' priority when they set none (its tier).
   */
  async putAccount(name: string, options: { maxPendingTasks?: number; priority?: number } = {}): Promise<Account> {
    return (await this.#call("putAccount", (r, o) => r.putAccount({ ...options, name }, o))).account!;
  }

  /** One account with its pending tasks now; `not_found` when unknown. */
  async getAccount(name: string): Promise<Account> {
    return (await this.#call("getAccount", (r, o) => r.getAccount({ name }, o))).account!;
  }

  /** Every account, ordered by name. */
  async listAccounts(): Promise<Account[]> {
    return (await this.#call("listAccounts", (r, o) => r.listAccounts({}, o))).accounts;
  }

  /** An account's use per workload over [`from`, `to`) (unset: from the beginning, until now). */
  getAccountUsage(account: string, options: { from?: Date; to?: Date } = {}): Promise<GetAccountUsageResponse> {
    return this.#call("getAccountUsage", (r, o) =>
      r.getAccountUsage(
        { account, from: options.from && timestampFromDate(options.from), to: options.to && timestampFromDate(options.to) },
        o,
      ),
    );
  }

  /**
   * Final, unsettled billable jobs (with an account or a billing context), oldest final first, every
   * page; each with its account, billing context, usage totals and final status. `account` filters.
   */
  async *listSettlements(options: { account?: string; pageSize?: number } = {}): AsyncGenerator<Job> {
    let pageToken = "";
    do {
      const page = await this.#call("listSettlements", (r, o) =>
        r.listSettlements({ account: options.account ?? "", pageSize: options.pageSize ?? 0, pageToken }, o),
      );
      yield* page.jobs;
      pageToken = page.nextPageToken;
    } while (pageToken);
  }

  /**
   * Records a final job's settlement once and returns the job with it. The same key and units again
   * answer the same (a settler may retry); another key or amount is `already_exists` naming what was
   * recorded; a job not yet final is `failed_precondition`.
   */
  async settleJob(jobId: string, settlementKey: string, settledUnits: number | bigint): Promise<Job> {
    const req = { jobId, settlementKey, settledUnits: BigInt(settledUnits) };
    return jobOf("SettleJob", await this.#call("settleJob", (r, o) => r.settleJob(req, o)));
  }

  /**
   * Unsettled adjustments, oldest first, every page: usage a late result reported after its job was
   * settled, to be charged apart with `settleAdjustment` (docs/money-path.md). `account` filters.
   */
  async *listAdjustments(options: { account?: string; pageSize?: number } = {}): AsyncGenerator<UsageAdjustment> {
    let pageToken = "";
    do {
      const page = await this.#call("listAdjustments", (r, o) =>
        r.listAdjustments({ account: options.account ?? "", pageSize: options.pageSize ?? 0, pageToken }, o),
      );
      yield* page.adjustments;
      pageToken = page.nextPageToken;
    } while (pageToken);
  }

  /**
   * Records an adjustment's settlement once, as `settleJob` does a job's, and returns the adjustment
   * with it; the same key and units again answer the same, another is `already_exists`.
   */
  async settleAdjustment(adjustmentId: string, settlementKey: string, settledUnits: number | bigint): Promise<UsageAdjustment> {
    const req = { adjustmentId, settlementKey, settledUnits: BigInt(settledUnits) };
    const res = await this.#call("settleAdjustment", (r, o) => r.settleAdjustment(req, o));
    if (!res.adjustment) throw new InternalError("SettleAdjustment answered without its adjustment");
    return res.adjustment;
  }
}

/** Parameters of a job or task as a JSON object (what `google.protobuf.Struct` fields take). */
export type Parameters = JsonObject;

function isFinalUpdate(u: WatchJobResponse): boolean {
  if (u.update.case === "snapshot") return !!u.update.value.job && FINAL_JOB_STATUSES.includes(u.update.value.job.status);
  if (u.update.case === "event")
    return FINAL_JOB_STATUSES.includes(u.update.value.jobStatus) && u.update.value.kind === JobEventKind.JOB_STATUS;
  return false;
}

/** `createJob` → `CreateJob`, the method's name in the proto and in the coordinator's log. */
export function methodName(key: string | number | symbol): string {
  const s = String(key);
  return s.charAt(0).toUpperCase() + s.slice(1);
}

export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(done, ms);
    function done() {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }
    function onAbort() {
      clearTimeout(t);
      reject(signal!.reason);
    }
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
