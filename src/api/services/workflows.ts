// The workflows' RPCs of the QueueService (CreateWorkflow, GetWorkflow, ListWorkflows,
// WatchWorkflow, CancelWorkflow, RetryWorkflow): each handler with its request's decoding and its
// answer's encoding.

import { Code, ConnectError, type ServiceImpl } from "@connectrpc/connect";
import type { QueueService as QueueServiceDesc } from "../../../gen/leasehold/queue/v1/queue_pb.js";

type WorkflowsImpl = Pick<
  ServiceImpl<typeof QueueServiceDesc>,
  "createWorkflow" | "getWorkflow" | "listWorkflows" | "watchWorkflow" | "cancelWorkflow" | "retryWorkflow"
>;

const notYet = () => new ConnectError("workflows are not served yet", Code.Unimplemented);

export function workflowsService(): WorkflowsImpl {
  return {
    createWorkflow() {
      throw notYet();
    },
    getWorkflow() {
      throw notYet();
    },
    listWorkflows() {
      throw notYet();
    },
    // eslint-disable-next-line require-yield
    async *watchWorkflow() {
      throw notYet();
    },
    cancelWorkflow() {
      throw notYet();
    },
    retryWorkflow() {
      throw notYet();
    },
  };
}
