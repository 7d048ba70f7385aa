// The workloads' RPCs of the QueueService, their registry (PutWorkload, ListWorkloads) and flow
// control (PutKeyLimit, PauseWorkload, ResumeWorkload, ListWorkloadKeys): each handler with its
// request's decoding and its answer's encoding.

import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import {
  FailurePolicy,
  ListWorkloadKeysResponseSchema,
  ListWorkloadsResponseSchema,
  PauseWorkloadResponseSchema,
  PutKeyLimitResponseSchema,
  PutWorkloadResponseSchema,
  ResumeWorkloadResponseSchema,
  WorkloadSchema,
  type ListWorkloadKeysResponse,
  type PauseWorkloadResponse,
  type PutKeyLimitRequest,
  type PutKeyLimitResponse,
  type PutWorkloadRequest,
  type QueueService as QueueServiceDesc,
  type ResumeWorkloadResponse,
  type Workload as PbWorkload,
} from "../../../gen/leasehold/queue/v1/queue_pb.js";
import type { ApiQueue } from "../../queue/service.js";
import type { KeyLimit, ListWorkloadKeysResult, PutKeyLimitInput, PutWorkloadInput, Workload } from "../../queue/types.js";
import { call } from "./call-options.js";
import { domainJson, FAILURE_POLICY, failurePolicyInput, struct, ts } from "./messages.js";

type WorkloadsImpl = Pick<
  ServiceImpl<typeof QueueServiceDesc>,
  "putWorkload" | "listWorkloads" | "listWorkloadKeys" | "putKeyLimit" | "pauseWorkload" | "resumeWorkload"
>;

export function workloadsService(queue: ApiQueue): WorkloadsImpl {
  return {
    async putWorkload(req, ctx) {
      const workload = await queue.putWorkload(putWorkloadInput(req), call(ctx));
      return create(PutWorkloadResponseSchema, { workload: workloadMessage(workload) });
    },

    async listWorkloads(_req, ctx) {
      const workloads = await queue.listWorkloads(call(ctx));
      return create(ListWorkloadsResponseSchema, { workloads: workloads.map(workloadMessage) });
    },

    async listWorkloadKeys(req, ctx) {
      return listWorkloadKeysResponse(await queue.listWorkloadKeys({ name: req.name, limit: req.limit }, call(ctx)));
    },

    async putKeyLimit(req, ctx) {
      return putKeyLimitResponse(await queue.putKeyLimit(putKeyLimitInput(req), call(ctx)));
    },

    async pauseWorkload(req, ctx) {
      return pauseWorkloadResponse(await queue.pauseWorkload(req.name, call(ctx)));
    },

    async resumeWorkload(req, ctx) {
      return resumeWorkloadResponse(await queue.resumeWorkload(req.name, call(ctx)));
    },
  };
}

// ---- requests → domain inputs ----

export function putWorkloadInput(r: PutWorkloadRequest): PutWorkloadInput {
  return {
    name: r.name,
    maxAttempts: r.maxAttempts,
    leaseSeconds: r.leaseSeconds,
    parametersSchema: domainJson(r.parametersSchema) ?? null,
    maxPendingSeconds: r.maxPendingSeconds,
    failurePolicy: failurePolicyInput(r.failurePolicy),
    maxFailedTasks: r.maxFailedTasks,
    maxLeased: r.maxLeased,
    maxLeasedPerKey: r.maxLeasedPerKey,
    maxLeasesPerSecond: r.maxLeasesPerSecond,
    leasesBurst: r.leasesBurst,
  };
}

export function putKeyLimitInput(r: PutKeyLimitRequest): PutKeyLimitInput {
  return { name: r.name, key: r.key, maxLeased: r.maxLeased, clear: r.clear };
}

// ---- domain results → messages ----

export function workloadMessage(w: Workload): PbWorkload {
  return create(WorkloadSchema, {
    name: w.name,
    maxAttempts: w.maxAttempts,
    leaseSeconds: w.leaseSeconds,
    parametersSchema: struct(w.parametersSchema),
    maxPendingSeconds: w.maxPendingSeconds ?? 0,
    failurePolicy: FAILURE_POLICY[w.failurePolicy] ?? FailurePolicy.UNSPECIFIED,
    maxFailedTasks: w.maxFailedTasks,
    maxLeased: w.maxLeased ?? 0,
    maxLeasedPerKey: w.maxLeasedPerKey ?? 0,
    maxLeasesPerSecond: w.maxLeasesPerSecond ?? 0,
    leasesBurst: w.leasesBurst ?? 0,
    paused: w.paused,
    createdAt: ts(w.createdAt),
    updatedAt: ts(w.updatedAt),
  });
}

export function putKeyLimitResponse(k: KeyLimit): PutKeyLimitResponse {
  return create(PutKeyLimitResponseSchema, { name: k.name, key: k.key, maxLeased: k.maxLeased });
}

export function pauseWorkloadResponse(w: Workload): PauseWorkloadResponse {
  return create(PauseWorkloadResponseSchema, { workload: workloadMessage(w) });
}

export function resumeWorkloadResponse(w: Workload): ResumeWorkloadResponse {
  return create(ResumeWorkloadResponseSchema, { workload: workloadMessage(w) });
}

export function listWorkloadKeysResponse(r: ListWorkloadKeysResult): ListWorkloadKeysResponse {
  return create(ListWorkloadKeysResponseSchema, { keys: r.keys, truncated: r.truncated });
}
