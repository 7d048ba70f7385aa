// The console's one way to the coordinator: the generated Connect client over Connect JSON on the
// page's own origin, with the operator's bearer token (kept in this tab's session storage only).
import { Code, ConnectError, createClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { QueueService } from "../../gen/leasehold/queue/v1/queue_pb.js";

const TOKEN_KEY = "leasehold.token";

export function getToken(): string {
  return sessionStorage.getItem(TOKEN_KEY) ?? "";
}

export function setToken(token: string): void {
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  else sessionStorage.removeItem(TOKEN_KEY);
}

function authHeaders(): Record<string, string> {
  const t = getToken();
  return t ? { authorization: `Bearer ${t}` } : {};
}

const bearer: Interceptor = (next) => async (req) => {
  const t = getToken();
  if (t) req.header.set("authorization", `Bearer ${t}`);
  return next(req);
};

export const client = createClient(
  QueueService,
  createConnectTransport({
    baseUrl: location.origin,
    interceptors: [bearer],
    // A newer coordinator may answer with fields this build does not know yet.
    jsonOptions: { ignoreUnknownFields: true },
  }),
);

/** What the token may do; "open" is a coordinator without tokens, where everything is allowed. */
export type Role = "admin" | "billing" | "submitter" | "worker" | "open" | "signed-out";

/** Finds the role by asking: an admin-only RPC, then a submitter one, then a billing one (all read-only and cheap). */
export async function probeRole(): Promise<Role> {
  try {
    await client.listWorkloads({});
    return getToken() ? "admin" : "open";
  } catch (err) {
    const e = ConnectError.from(err);
    if (e.code === Code.Unauthenticated) return "signed-out";
    if (e.code !== Code.PermissionDenied) throw err;
  }
  let readsJobs = true;
  try {
    await client.listJobs({ pageSize: 1 });
  } catch (err) {
    const e = ConnectError.from(err);
    if (e.code === Code.Unauthenticated) return "signed-out";
    if (e.code !== Code.PermissionDenied) throw err;
    readsJobs = false;
  }
  if (await maySettle()) return "billing";
  return readsJobs ? "submitter" : "worker";
}

/** Whether the token may list settlements: only a refusal says no, any other failure came from past the access check. */
async function maySettle(): Promise<boolean> {
  try {
    await client.listSettlements({ pageSize: 1 });
    return true;
  } catch (err) {
    const e = ConnectError.from(err);
    return ![Code.PermissionDenied, Code.Unauthenticated, Code.Unimplemented].includes(e.code);
  }
}

export interface ErrorText {
  message: string;
  requestId: string;
}

/** A failed call as an operator reads it: the Connect code, the server's message and the request id to quote. */
export function describeError(err: unknown): ErrorText {
  const e = ConnectError.from(err);
  const requestId = e.metadata.get("x-request-id") ?? "";
  return { message: `${Code[e.code] ?? "Unknown"}: ${e.rawMessage}`, requestId };
}

export interface MetricSample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** GET /metrics (Prometheus text), parsed; undefined when the coordinator serves none. */
export async function fetchMetrics(): Promise<MetricSample[] | undefined> {
  const res = await fetch("/metrics", { headers: authHeaders(), cache: "no-store" });
  if (res.status === 404) return undefined;
  if (!res.ok) throw new Error(`/metrics answered ${res.status} (request id ${res.headers.get("x-request-id") ?? "?"})`);
  return parseMetrics(await res.text());
}

const LINE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/;
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;

export function parseMetrics(text: string): MetricSample[] {
  const out: MetricSample[] = [];
  for (const line of text.split("\n")) {
    if (line.startsWith("#") || line.trim() === "") continue;
    const m = LINE.exec(line);
    if (!m || !m[1].startsWith("leasehold_")) continue;
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? "").matchAll(LABEL)) labels[l[1]] = l[2].replace(/\\(.)/g, (_, c: string) => (c === "n" ? "\n" : c));
    out.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return out;
}
