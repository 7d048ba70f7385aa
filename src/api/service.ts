// The leasehold.queue.v1.QueueService implementation: one plain object typed by the generated
// service, the one every transport calls, whether connect-es' router serves the call or a direct
// unary path does (direct/). Each method is thin: decode (convert.ts) → call the queue with the
// request's signal → encode (convert.ts). Authorization, deadlines, spans, metrics, error mapping and the
// request log's fields are the interceptors' (interceptors.ts), around every method alike.

import { create } from "@bufbuild/protobuf";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import {
  CancelJobResponseSchema,
  ClaimTasksResponseSchema,
  CompleteTaskResponseSchema,
  CreateJobResponseSchema,
  DeleteScheduleResponseSchema,
  FailTaskResponseSchema,
  GetScheduleResponseSchema,
  ListSchedulesResponseSchema,
  PauseScheduleResponseSchema,
  PutScheduleResponseSchema,
  ResumeScheduleResponseSchema,
  type CreateJobResponse,
  ListWorkloadsResponseSchema,
  PutWorkloadResponseSchema,
  QueueService as QueueServiceDesc,
  RenewLeaseResponseSchema,
  ReportProgressResponseSchema,
} from "../../gen/leasehold/queue/v1/queue_pb.js";
import type { ParkingCalls } from "../queue/long-poll.js";
import type { ApiQueue } from "../queue/service.js";
import type { CallOptions, CreateJobResult } from "../queue/types.js";
import { traceparentHeader } from "../telemetry/tracing.js";
import { accountsServiceImpl } from "./accounts-service.js";
import * as convert from "./convert.js";
import * as flowConvert from "./flow-convert.js";
import { putScheduleInput, scheduleMessage } from "./schedule-convert.js";
import { earlyAnswerKey } from "./early-answer.js";
import { deadlineKey, principalKey } from "./interceptors.js";
import { requestInfoKey } from "./request-info.js";

export type QueueServiceImpl = ServiceImpl<typeof QueueServiceDesc>;

/**
 * What a queue call gets from its request: the signal (aborted at the deadline), the deadline, and
 * the account of a bound token (the queue then sees only that account's jobs).
 */
function call(ctx: HandlerContext): CallOptions {
  return { signal: ctx.signal, deadline: ctx.values.get(deadlineKey), ...scope(ctx) };
}

/** The one place a bound token's account becomes CallOptions.account; nothing for other tokens or an open API. */
function scope(ctx: HandlerContext): Pick<CallOptions, "account"> {
  const account = ctx.values.get(principalKey)?.account;
  return account === undefined ? {} : { account };
}

function createJobResponse(r: CreateJobResult): CreateJobResponse {
  return create(CreateJobResponseSchema, { job: convert.jobMessage(r.job), tasks: r.tasks.map(convert.taskMessage) });
}

/** `parking`: where claims, claim_next reports and watches go (the long poll); the queue itself without one. */
export function createQueueServiceImpl(queue: ApiQueue, parking: ParkingCalls = queue): QueueServiceImpl {
  return {
    ...accountsServiceImpl(queue, call),
    async createJob(req, ctx) {
      const input = convert.createJobInput(req);
      // Without a traceparent field, the caller's traceparent header (an idempotent replay ignores either).
      if (!input.traceparent) input.traceparent = traceparentHeader(ctx.requestHeader);
      const opts = call(ctx);
      // A big job's answer is known before its insert ends: the transport may encode it meanwhile.
      const early = ctx.values.get(earlyAnswerKey);
      let prepared: { result: CreateJobResult; message: CreateJobResponse } | undefined;
      if (early) {
        opts.prepared = (result) => {
          prepared = { result, message: createJobResponse(result) };
          early(prepared.message);
        };
      }
      const r = await queue.createJob(input, opts);
      const info = ctx.values.get(requestInfoKey);
      if (info) info.created = r.created;
      return prepared?.result === r ? prepared.message : createJobResponse(r);
    },

    async claimTasks(req, ctx) {
      const tasks = await parking.claimTasks(convert.claimTasksInput(req), call(ctx));
      return create(ClaimTasksResponseSchema, { tasks: tasks.map(convert.taskMessage) });
    },

    async renewLease(req, ctx) {
      const task = await queue.renewLease(convert.renewLeaseInput(req), call(ctx));
      return create(RenewLeaseResponseSchema, { task: convert.taskMessage(task) });
    },

    async completeTask(req, ctx) {
      const input = convert.completeTaskInput(req);
      if (req.claimNext) {
        const r = await parking.completeTaskAndClaim(input, convert.claimNextInput(req.claimNext, [input]), call(ctx));
        return create(CompleteTaskResponseSchema, { task: convert.taskMessage(r.task), nextTasks: r.next.map(convert.taskMessage) });
      }
      const task = await queue.completeTask(input, call(ctx));
      return create(CompleteTaskResponseSchema, { task: convert.taskMessage(task) });
    },

    async completeTasks(req, ctx) {
      const inputs = convert.completeTasksInput(req);
      if (req.claimNext) {
        const r = await parking.completeTasksAndClaim(inputs, convert.claimNextInput(req.claimNext, inputs), call(ctx));
        return convert.completeTasksResponse(inputs, r.outcomes, r.next);
      }
      return convert.completeTasksResponse(inputs, await queue.completeTasks(inputs, call(ctx)));
    },

    async failTask(req, ctx) {
      const task = await queue.failTask(convert.failTaskInput(req), call(ctx));
      return create(FailTaskResponseSchema, { task: convert.taskMessage(task) });
    },

    async getJob(req, ctx) {
      return convert.getJobResponse(await queue.getJobStatus(req.jobId, call(ctx)));
    },

    async listCompletedResults(req, ctx) {
      return convert.listCompletedResultsResponse(await queue.listCompletedResults(convert.listCompletedResultsInput(req), call(ctx)));
    },

    async cancelJob(req, ctx) {
      const job = await queue.cancelJob(convert.cancelJobInput(req), call(ctx));
      return create(CancelJobResponseSchema, { job: convert.jobMessage(job) });
    },

    async putWorkload(req, ctx) {
      const workload = await queue.putWorkload(convert.putWorkloadInput(req), call(ctx));
      return create(PutWorkloadResponseSchema, { workload: convert.workloadMessage(workload) });
    },

    async listWorkloadKeys(req, ctx) {
      return flowConvert.listWorkloadKeysResponse(await queue.listWorkloadKeys({ name: req.name, limit: req.limit }, call(ctx)));
    },
    async putKeyLimit(req, ctx) {
      return flowConvert.putKeyLimitResponse(await queue.putKeyLimit(flowConvert.putKeyLimitInput(req), call(ctx)));
    },

    async pauseWorkload(req, ctx) {
      return flowConvert.pauseWorkloadResponse(await queue.pauseWorkload(req.name, call(ctx)));
    },

    async resumeWorkload(req, ctx) {
      return flowConvert.resumeWorkloadResponse(await queue.resumeWorkload(req.name, call(ctx)));
    },

    async putSchedule(req, ctx) {
      const r = await queue.putSchedule(putScheduleInput(req), call(ctx));
      return create(PutScheduleResponseSchema, { schedule: scheduleMessage(r.schedule), created: r.created });
    },

    async getSchedule(req, ctx) {
      return create(GetScheduleResponseSchema, { schedule: scheduleMessage(await queue.getSchedule(req.name, call(ctx))) });
    },

    async listSchedules(_req, ctx) {
      return create(ListSchedulesResponseSchema, { schedules: (await queue.listSchedules(call(ctx))).map(scheduleMessage) });
    },

    async deleteSchedule(req, ctx) {
      return create(DeleteScheduleResponseSchema, { schedule: scheduleMessage(await queue.deleteSchedule(req.name, call(ctx))) });
    },

    async pauseSchedule(req, ctx) {
      return create(PauseScheduleResponseSchema, { schedule: scheduleMessage(await queue.pauseSchedule(req.name, call(ctx))) });
    },

    async resumeSchedule(req, ctx) {
      return create(ResumeScheduleResponseSchema, { schedule: scheduleMessage(await queue.resumeSchedule(req.name, call(ctx))) });
    },

    async listWorkloads(_req, ctx) {
      const workloads = await queue.listWorkloads(call(ctx));
      return create(ListWorkloadsResponseSchema, { workloads: workloads.map(convert.workloadMessage) });
    },

    async reportProgress(req, ctx) {
      const task = await queue.reportProgress(convert.reportProgressInput(req), call(ctx));
      return create(ReportProgressResponseSchema, { task: convert.taskMessage(task) });
    },

    async retryJob(req, ctx) {
      return convert.retryJobResponse(await queue.retryJob(convert.retryJobInput(req), call(ctx)));
    },

    async listJobs(req, ctx) {
      return convert.listJobsResponse(await queue.listJobs(convert.listJobsInput(req), call(ctx)));
    },

    async listTasks(req, ctx) {
      return convert.listTasksResponse(await queue.listTasks(convert.listTasksInput(req), call(ctx)));
    },

    async getTask(req, ctx) {
      const detail = await queue.getTask(convert.getTaskInput(req), call(ctx));
      const info = ctx.values.get(requestInfoKey);
      if (info) info.jobId = detail.task.jobId;
      return convert.getTaskResponse(detail);
    },

    // A stream lives as long as the job runs (or the client stays), so the interceptors give it no
    // request deadline; each database read inside has its own.
    async *watchJob(req, ctx) {
      for await (const update of parking.watchJob(req.jobId, { signal: ctx.signal, ...scope(ctx), ...convert.watchOptions(req) }))
        yield convert.watchJobResponse(update);
    },
  };
}
