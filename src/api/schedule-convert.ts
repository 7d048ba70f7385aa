// Schedules' messages ↔ the queue's types: PutSchedule's request, the Schedule message (with its
// job template as a CreateJobRequest), and the answers of the schedule RPCs.

import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import {
  BillingSchema,
  CatchUpPolicy,
  CreateJobRequestSchema,
  FailurePolicy,
  FinalizerSchema,
  OverlapPolicy,
  ScheduleSchema,
  TaskSpecSchema,
  type CreateJobRequest,
  type PutScheduleRequest,
  type Schedule as PbSchedule,
} from "../../gen/leasehold/queue/v1/queue_pb.js";
import type { CatchUpPolicy as DomainCatchUp, OverlapPolicy as DomainOverlap, PutScheduleInput, Schedule } from "../queue/schedules.js";
import type { CreateJobInput } from "../queue/types.js";
import { createJobInput } from "./convert.js";

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
    // Absent: validation names "job" as required.
    job: (r.job ? createJobInput(r.job) : undefined) as CreateJobInput,
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
  });
}

export function scheduleMessage(s: Schedule): PbSchedule {
  return create(ScheduleSchema, {
    name: s.name,
    cron: s.cron,
    timezone: s.timezone,
    job: jobTemplateMessage(s.job),
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
