// The HTTP status of a REST call's success, by RPC name: the one place a REST answer is not 200.
// Both ways of serving a unary call (direct/rest.ts and direct/router.ts) answer with it.

import type { DescMethod } from "@bufbuild/protobuf";
import type { RequestInfo } from "./request-info.js";

/**
 * The status of a REST call's success: a created job or workflow is 201 (an idempotent replay 200), an empty
 * claim 204 No Content, anything else 200. `emptyClaim` tells whether a ClaimTasks answer has no task.
 */
export function successStatus(rpc: DescMethod, info: RequestInfo, emptyClaim: () => boolean): number {
  if (rpc.name === "CreateJob" || rpc.name === "CreateWorkflow") return info.created === false ? 200 : 201;
  if (rpc.name === "ClaimTasks" && emptyClaim()) return 204;
  return 200;
}
