// Flow control's messages ↔ the queue's types: the requests and answers of
// PutKeyLimit, PauseWorkload, ResumeWorkload and ListWorkloadKeys.

import { create } from "@bufbuild/protobuf";
import {
  ListWorkloadKeysResponseSchema,
  PauseWorkloadResponseSchema,
  PutKeyLimitResponseSchema,
  ResumeWorkloadResponseSchema,
  type ListWorkloadKeysResponse,
  type PauseWorkloadResponse,
  type PutKeyLimitRequest,
  type PutKeyLimitResponse,
  type ResumeWorkloadResponse,
} from "../../gen/leasehold/queue/v1/queue_pb.js";
import type { KeyLimit, ListWorkloadKeysResult, PutKeyLimitInput, Workload } from "../queue/types.js";
import { workloadMessage } from "./convert.js";

export function putKeyLimitInput(r: PutKeyLimitRequest): PutKeyLimitInput {
  return { name: r.name, key: r.key, maxLeased: r.maxLeased, clear: r.clear };
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
