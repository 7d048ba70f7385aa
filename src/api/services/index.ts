// The leasehold.queue.v1.QueueService implementation: one plain object typed by the generated
// service, the one every transport calls, whether connect-es' router serves the call or a direct
// unary path does (direct/). It is spread from one file per family of RPCs (jobs, tasks,
// workloads, schedules, accounts), each holding its handlers with their requests' decoding and
// their answers' encoding; messages.ts holds the messages more than one family uses. Each method
// is thin: decode → call the queue with the request's signal (call-options.ts) → encode.
// Authorization, deadlines, spans, metrics, error mapping and the request log's fields are the
// interceptors' (interceptors.ts), around every method alike.

import type { ServiceImpl } from "@connectrpc/connect";
import type { QueueService as QueueServiceDesc } from "../../../gen/leasehold/queue/v1/queue_pb.js";
import type { ParkingCalls } from "../../queue/long-poll.js";
import type { ApiQueue } from "../../queue/service.js";
import { accountsService } from "./accounts.js";
import { jobsService } from "./jobs.js";
import { schedulesService } from "./schedules.js";
import { tasksService } from "./tasks.js";
import { workflowsService } from "./workflows.js";
import { workloadsService } from "./workloads.js";

export type QueueServiceImpl = ServiceImpl<typeof QueueServiceDesc>;

/** `parking`: where claims, claim_next reports and watches go (the long poll); the queue itself without one. */
export function createQueueServiceImpl(queue: ApiQueue, parking: ParkingCalls = queue): QueueServiceImpl {
  return {
    ...jobsService(queue, parking),
    ...tasksService(queue, parking),
    ...workloadsService(queue),
    ...schedulesService(queue),
    ...accountsService(queue),
    ...workflowsService(queue, parking),
  };
}
