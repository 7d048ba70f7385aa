// The schedules' RPCs of the QueueService (PutSchedule, GetSchedule, ListSchedules,
// DeleteSchedule, PauseSchedule, ResumeSchedule): each handler with PutSchedule's request, the
// Schedule message (with its job template as a CreateJobRequest) and the answers.

import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import {
  BillingSchema,
  CatchUpPolicy,
  CreateJobRequestSchema,
  CreateWorkflowRequestSchema,
  DeleteScheduleResponseSchema,
  FailurePolicy,
  FinalizerSchema,
  GetScheduleResponseSchema,
  ListSchedulesResponseSchema,
  JobView,
  OverlapPolicy,
  PauseScheduleResponseSchema,
  PutScheduleResponseSchema,
  ResumeScheduleResponseSchema,
  ScheduleSchema,
  TaskSpecSchema,
  type CreateJobRequest,
  type CreateWorkflowRequest,
  type PutScheduleRequest,
  type QueueService as QueueServiceDesc,
  type Schedule as PbSchedule,
} from "../../../gen/leasehold/queue/v1/queue_pb.js";
import type { CatchUpPolicy as DomainCatchUp, OverlapPolicy as DomainOverlap, PutScheduleInput, Schedule } from "../../queue/types.js";
import { ValidationError } from "../../queue/errors.js";
import type { ApiQueue } from "../../queue/service.js";
import type { CreateJobInput, CreateWorkflowInput } from "../../queue/types.js";
import { call } from "./call-options.js";
import { createJobInput, createWorkflowInput, DEPENDENCY_POLICY } from "./messages.js";

type SchedulesImpl = Pick<
  ServiceImpl<typeof QueueServiceDesc>,
  "putSchedule" | "getSchedule" | "listSchedules" | "deleteSchedule" | "pauseSchedule" | "resumeSchedule"
>;

export function schedulesService(queue: ApiQueue): SchedulesImpl {
  return {
    async putSchedule(req, ctx) {
      // CreateJob's view says what its answer holds; a tick's job is answered to no one.
      if (req.job !== undefined && req.job.view !== JobView.UNSPECIFIED)
        throw new ValidationError("job.view", "must be unset: a schedule's ticks create jobs no call is answered with");
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
  };
}

const OVERLAP: Record<DomainOverlap, OverlapPolicy> = { allow: OverlapPolicy.ALLOW, skip: OverlapPolicy.SKIP };
const CATCH_UP: Record<DomainCatchUp, CatchUpPolicy> = { skip: CatchUpPolicy.SKIP, one: CatchUpPolicy.ONE, all: CatchUpPolicy.ALL };

/** UNSPECIFIED (0) is absent; an unknown number is passed on for validation to refuse. */
function enumInput<D extends string>(table: Record<D, number>, v: number): D | undefined {
  if (v === 0) return undefined;
  return ((Object.entries(table) as [D, number][]).find(([, n]) => n === v)?.[0] ?? String(v)) as D;
}

export function putScheduleInput(r: PutScheduleRequest): PutScheduleInput {
  return {
    name: r.name,
    cron: r.cron,
    timezone: r.timezone,
    // Neither: validation names "job" as required.
    job: r.job ? createJobInput(r.job) : undefined,
    workflow: r.workflow ? createWorkflowInput(r.workflow) : undefined,
    overlap: enumInput(OVERLAP, r.overlap),
    catchUp: enumInput(CATCH_UP, r.catchUp),
    maxCatchUp: r.maxCatchUp,
  };
}

/** The stored template as the CreateJobRequest it was given as. */
export function jobTemplateMessage(j: CreateJobInput): CreateJobRequest {
  return create(CreateJobRequestSchema, {
    workload: j.workload,
    inputUri: j.inputUri ?? "",
    inputSha256: j.inputSha256 ?? "",
    parameters: j.parameters,
    priority: j.priority ?? 0,
    maxAttempts: j.maxAttempts,
    traceparent: j.traceparent ?? "",
    tasks: (j.tasks ?? []).map((t) =>
      create(TaskSpecSchema, {
        chunkIndex: t.chunkIndex,
        inputUri: t.inputUri,
        inputSha256: t.inputSha256,
        parameters: t.parameters,
        workload: t.workload ?? "",
        requiredLabels: t.requiredLabels ?? {},
      }),
    ),
    failurePolicy:
      j.failurePolicy === "fail_fast"
        ? FailurePolicy.FAIL_FAST
        : j.failurePolicy === "continue"
          ? FailurePolicy.CONTINUE
          : FailurePolicy.UNSPECIFIED,
    maxFailedTasks: j.maxFailedTasks,
    concurrencyKey: j.concurrencyKey ?? "",
    requiredLabels: j.requiredLabels ?? {},
    // run_at is refused in a template (schedules.ts): there is none to give back.
    finalizer: j.finalizer
      ? create(FinalizerSchema, {
          workload: j.finalizer.workload,
          parameters: j.finalizer.parameters,
          runOnFailure: j.finalizer.runOnFailure,
        })
      : undefined,
    account: j.account ?? "",
    // A billing key is refused in a template (schedules.ts): only the reserved units come back.
    billing: j.billing ? create(BillingSchema, { reservedUnits: BigInt(j.billing.reservedUnits ?? 0) }) : undefined,
    // A workflow node's policy (a job template's is refused, as its after is).
    dependencyPolicy: j.dependencyPolicy ? DEPENDENCY_POLICY[j.dependencyPolicy] : undefined,
  });
}

/** The stored workflow template as the CreateWorkflowRequest it was given as. */
export function workflowTemplateMessage(w: CreateWorkflowInput): CreateWorkflowRequest {
  return create(CreateWorkflowRequestSchema, {
    name: w.name ?? "",
    account: w.account ?? "",
    nodes: w.nodes.map((n) => ({
      name: n.name,
      job: jobTemplateMessage(n.job),
      after: (n.after ?? []).map((a) => ({ node: a.node, optional: a.optional === true })),
    })),
  });
}

export function scheduleMessage(s: Schedule): PbSchedule {
  return create(ScheduleSchema, {
    name: s.name,
    cron: s.cron,
    timezone: s.timezone,
    job: s.job ? jobTemplateMessage(s.job) : undefined,
    workflow: s.workflow ? workflowTemplateMessage(s.workflow) : undefined,
    lastWorkflowId: s.lastWorkflowId ?? "",
    overlap: OVERLAP[s.overlap],
    catchUp: CATCH_UP[s.catchUp],
    maxCatchUp: s.maxCatchUp,
    paused: s.paused,
    nextFireTimes: s.nextFireTimes.map(timestampFromDate),
    lastFireTime: s.lastFireAt ? timestampFromDate(s.lastFireAt) : undefined,
    lastJobId: s.lastJobId ?? "",
    createdAt: timestampFromDate(s.createdAt),
    updatedAt: timestampFromDate(s.updatedAt),
  });
}
