// Bearer tokens and roles. The authorization interceptor (interceptors.ts) calls
// authorize() at the start of every RPC, before anything reaches the queue, so
// gRPC, gRPC-Web, Connect and REST share this one check. Tokens are known only
// by their sha256 (AUTH_TOKENS_FILE, parsed in src/config): the presented token
// is hashed and compared with every configured hash in constant time. A submitter token may be
// bound to an account: the principal carries it, and the handlers pass it to the queue as
// CallOptions.account (services/call-options.ts), where every job and task call is scoped to it
// (the store's statements).

import { createHash, timingSafeEqual } from "node:crypto";
import type { MessageShape } from "@bufbuild/protobuf";
import type { QueueService as QueueServiceDesc } from "../../gen/leasehold/queue/v1/queue_pb.js";
import type { AuthTokenEntry, Role } from "../config/index.js";
import { PermissionDeniedError, UnauthenticatedError } from "../queue/errors.js";

type Methods = (typeof QueueServiceDesc)["method"];
export type MethodName = keyof Methods;
type RequestOf<M extends MethodName> = MessageShape<Methods[M]["input"]>;

interface Rule<M extends MethodName> {
  /** Roles besides admin (admin may call everything). */
  roles: readonly Exclude<Role, "admin">[];
  /** Worker RPCs: every worker_id the request acts as; each must be under a worker token's prefix. */
  workerIds?: (req: RequestOf<M>) => string[];
}

function claimNextWorker(next: { workerId: string } | undefined): string[] {
  return next?.workerId ? [next.workerId] : [];
}

/** Who may call what. Typed over every RPC: a new RPC does not compile until it has a row. */
export const ACCESS: { [M in MethodName]: Rule<M> } = {
  createJob: { roles: ["submitter"] },
  getJob: { roles: ["submitter", "billing"] },
  listCompletedResults: { roles: ["submitter", "billing"] },
  cancelJob: { roles: ["submitter"] },
  watchJob: { roles: ["submitter"] },
  retryJob: { roles: ["submitter"] },
  listJobs: { roles: ["submitter", "billing"] },
  listTasks: { roles: ["submitter", "billing"] },
  getTask: { roles: ["submitter", "billing"] },
  claimTasks: { roles: ["worker"], workerIds: (r) => [r.workerId] },
  renewLease: { roles: ["worker"], workerIds: (r) => [r.workerId] },
  // A claim_next acts as its own worker_id when it names one (an empty one is the reporter's).
  completeTask: { roles: ["worker"], workerIds: (r) => [r.workerId, ...claimNextWorker(r.claimNext)] },
  completeTasks: { roles: ["worker"], workerIds: (r) => [...r.results.map((x) => x.workerId), ...claimNextWorker(r.claimNext)] },
  failTask: { roles: ["worker"], workerIds: (r) => [r.workerId] },
  reportProgress: { roles: ["worker"], workerIds: (r) => [r.workerId] },
  putWorkload: { roles: [] },
  listWorkloads: { roles: [] },
  putKeyLimit: { roles: [] },
  pauseWorkload: { roles: [] },
  resumeWorkload: { roles: [] },
  listWorkloadKeys: { roles: [] },
  putSchedule: { roles: [] },
  getSchedule: { roles: [] },
  listSchedules: { roles: [] },
  deleteSchedule: { roles: [] },
  pauseSchedule: { roles: [] },
  resumeSchedule: { roles: [] },
  putAccount: { roles: [] },
  getAccount: { roles: [] },
  listAccounts: { roles: [] },
  getAccountUsage: { roles: ["billing"] },
  listSettlements: { roles: ["billing"] },
  settleJob: { roles: ["billing"] },
  listAdjustments: { roles: ["billing"] },
  settleAdjustment: { roles: ["billing"] },
  createWorkflow: { roles: ["submitter"] },
  getWorkflow: { roles: ["submitter", "billing"] },
  listWorkflows: { roles: ["submitter", "billing"] },
  watchWorkflow: { roles: ["submitter"] },
  cancelWorkflow: { roles: ["submitter"] },
  retryWorkflow: { roles: ["submitter"] },
};

/** Every worker_id a request acts as (empty for RPCs that are not a worker's). */
export function workerIdsOf<M extends MethodName>(method: M, req: RequestOf<M>): string[] {
  const rule: Rule<M> | undefined = ACCESS[method];
  return rule?.workerIds?.(req) ?? [];
}

export interface Principal {
  role: Role;
  workerPrefix?: string;
  /** A bound submitter's account: its calls see and create only that account's jobs (CallOptions.account). */
  account?: string;
}

const BEARER = /^Bearer[ \t]+(\S+)[ \t]*$/i;

function digest(token: string): Buffer {
  return createHash("sha256").update(token, "utf8").digest();
}

export class Authenticator {
  private readonly entries: { digest: Buffer; principal: Principal }[];

  constructor(tokens: readonly AuthTokenEntry[]) {
    if (tokens.length === 0) throw new Error("Authenticator needs at least one token");
    this.entries = tokens.map((t) => ({
      digest: Buffer.from(t.sha256, "hex"),
      principal: {
        role: t.role,
        ...(t.workerPrefix !== undefined ? { workerPrefix: t.workerPrefix } : {}),
        ...(t.account !== undefined ? { account: t.account } : {}),
      },
    }));
  }

  /** The principal of an Authorization header value; UnauthenticatedError when it is missing or unknown. */
  authenticate(authorization: string | null | undefined): Principal {
    if (!authorization) throw new UnauthenticatedError("missing bearer token (Authorization: Bearer <token>)");
    const m = BEARER.exec(authorization);
    if (!m) throw new UnauthenticatedError('the Authorization header must be "Bearer <token>"');
    const presented = digest(m[1]);
    // Compare with every entry, without stopping at a match, so the time taken says nothing about which one matched.
    let found: Principal | undefined;
    for (const entry of this.entries) {
      if (timingSafeEqual(presented, entry.digest)) found = entry.principal;
    }
    if (!found) throw new UnauthenticatedError("unknown bearer token");
    return found;
  }

  /**
   * Authenticates the call and checks that its role may make it (for workers: with
   * worker_ids under the token's prefix). Throws UnauthenticatedError or
   * PermissionDeniedError; returns the principal.
   */
  authorize<M extends MethodName>(authorization: string | null | undefined, method: M, rpcName: string, req: RequestOf<M>): Principal {
    const principal = this.authenticate(authorization);
    if (principal.role === "admin") return principal;
    const rule: Rule<M> = ACCESS[method];
    if (!(rule.roles as readonly Role[]).includes(principal.role)) {
      throw new PermissionDeniedError(`a ${principal.role} token may not call ${rpcName}`);
    }
    if (principal.role === "worker" && rule.workerIds) {
      const prefix = principal.workerPrefix ?? "";
      for (const id of rule.workerIds(req)) {
        if (prefix === "" || !id.startsWith(prefix)) {
          throw new PermissionDeniedError(`worker_id ${JSON.stringify(id)} is outside this token's prefix ${JSON.stringify(prefix)}`);
        }
      }
    }
    return principal;
  }
}

/**
 * Fields pino replaces with "[redacted]" should a log call ever carry request headers
 * (no log call does today: the request line names the role, never a header). Static
 * paths only: wildcards would cost a walk over every log line on the hot path.
 */
export const LOG_REDACT_PATHS = [
  "authorization",
  "headers.authorization",
  "req.headers.authorization",
  "request.headers.authorization",
  "metadata.authorization",
  "token",
];
