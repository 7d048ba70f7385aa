// The failover test's load: producers creating jobs (with idempotency keys), workers claiming,
// reporting progress and results, and WatchJob streams (SSE) resumed with Last-Event-ID. Every
// answer is recorded by phase, so the test can say what clients saw during a gap.
import http from "node:http";
import { sha } from "../support/queue.js";

export const SHA = sha("ha");
export const WORKLOAD = "ha";

export interface Answer {
  status: number;
  body: Record<string, unknown> | null;
  ms: number;
}

const agent = new http.Agent({ keepAlive: true, maxSockets: 128 });
export const closeAgent = () => agent.destroy();

/** One REST call over node:http keep-alive; a transport failure is status 0. */
export function call(base: string, method: string, route: string, body?: unknown, timeoutMs = 20_000): Promise<Answer> {
  const t0 = Date.now();
  const data = body === undefined ? undefined : JSON.stringify(body);
  const url = new URL(route, base);
  return new Promise((resolve) => {
    const failed = (err?: NodeJS.ErrnoException) => {
      // A keep-alive socket the server closed as this request went out on it: the server never
      // read the request (Node's documented case for a retry), so it is sent again.
      if (req.reusedSocket && err?.code === "ECONNRESET") {
        void call(base, method, route, body, timeoutMs).then(resolve);
        return;
      }
      resolve({ status: 0, body: { error: err?.code ?? err?.message ?? "closed", reused: req.reusedSocket }, ms: Date.now() - t0 });
    };
    const req: http.ClientRequest = http.request(
      {
        host: url.hostname,
        port: url.port,
        method,
        path: url.pathname + url.search,
        agent,
        timeout: timeoutMs,
        headers: data === undefined ? {} : { "content-type": "application/json", "content-length": Buffer.byteLength(data) },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("error", (err) => resolve({ status: 0, body: { error: err.message }, ms: Date.now() - t0 }));
        res.on("end", () => {
          const text = Buffer.concat(chunks).toString();
          let parsed: Record<string, unknown> | null;
          try {
            parsed = text ? (JSON.parse(text) as Record<string, unknown>) : null;
          } catch {
            parsed = { raw: text };
          }
          resolve({ status: res.statusCode ?? 0, body: parsed, ms: Date.now() - t0 });
        });
      },
    );
    req.on("timeout", () => req.destroy(Object.assign(new Error("timeout"), { code: "TIMEOUT" })));
    req.on("error", failed);
    req.end(data);
  });
}

export const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Answers by operation and status, and every answer that is not an expected one. */
export class Ledger {
  readonly counts = new Map<string, number>();
  readonly unexpected: Array<{ op: string; status: number; body: unknown; at: number }> = [];
  record(op: string, a: Answer, expected: number[]): void {
    const key = `${op} ${a.status}`;
    this.counts.set(key, (this.counts.get(key) ?? 0) + 1);
    if (!expected.includes(a.status)) this.unexpected.push({ op, status: a.status, body: a.body, at: Date.now() });
  }
  summary(): Record<string, number> {
    return Object.fromEntries([...this.counts].sort());
  }
}

/** During a gap a client may see UNAVAILABLE (503) or DEADLINE_EXCEEDED (504), nothing else. */
export const GAP = [503, 504];

export interface Accepted {
  worker: string;
  attempt: number;
  resultUri: string;
  claimedAt: number;
  acceptedAt: number;
}

export interface LoadState {
  stop: boolean;
  /** Jobs whose CreateJob answered 201/200, with the tasks they were created with. */
  jobs: Map<string, { key: string; tasks: number; at: number }>;
  /** task id → every (worker, attempt) whose result was answered 200. */
  accepted: Map<string, Accepted[]>;
  /** coordinator index → claims answered 200 with at least one task: when asked, when answered. */
  claimsAt: Array<Array<{ asked: number; answered: number }>>;
  /** task id → its first lease: when that claim was asked, and the attempt it leased. */
  firstLease: Map<string, { at: number; attempt: number }>;
  ledger: Ledger;
}

export function newLoadState(coordinators: number): LoadState {
  return {
    stop: false,
    jobs: new Map(),
    accepted: new Map(),
    claimsAt: Array.from({ length: coordinators }, () => []),
    firstLease: new Map(),
    ledger: new Ledger(),
  };
}

function tasks(n: number, prefix: string) {
  return Array.from({ length: n }, (_, i) => ({ chunk_index: i, input_uri: `s3://in/${prefix}/${i}`, input_sha256: SHA }));
}

/** CreateJob with an idempotency key, asked again through any gap until it is answered. */
export async function createJob(state: LoadState, base: string, key: string, n: number, priority = 0): Promise<string | undefined> {
  const body = { workload: WORKLOAD, idempotency_key: key, priority, tasks: tasks(n, key) };
  for (;;) {
    const a = await call(base, "POST", "/jobs", body, 60_000);
    state.ledger.record("create", a, [200, 201, ...GAP]);
    if (a.status === 200 || a.status === 201) {
      const id = (a.body!.job as { id: string }).id;
      state.jobs.set(id, { key, tasks: n, at: Date.now() });
      return id;
    }
    if (!GAP.includes(a.status)) return undefined;
    await pause(100);
  }
}

/** A producer: one job of `size` tasks every `everyMs` until stopped. */
export async function producer(state: LoadState, bases: string[], p: number, size: number, everyMs: number): Promise<void> {
  for (let i = 0; !state.stop; i++) {
    await createJob(state, bases[(p + i) % bases.length], `p${p}-${i}`, size);
    await pause(everyMs);
  }
}

/**
 * A worker on one coordinator: claim up to `batch`, report progress once, then the result, asked
 * again through a gap until it is accepted (200) or the lease moved on (409). `draining()` says
 * when an empty claim means there is nothing left for it.
 */
export async function worker(state: LoadState, bases: string[], w: number, batch: number, draining: () => boolean): Promise<void> {
  const me = `w${w}`;
  const ci = w % bases.length;
  const base = bases[ci];
  while (!(state.stop && draining())) {
    const claimedAt = Date.now();
    const claim = await call(base, "POST", "/tasks/claim", { worker_id: me, workloads: [WORKLOAD], max_tasks: batch });
    state.ledger.record("claim", claim, [200, 204, ...GAP]);
    if (claim.status !== 200) {
      if (claim.status === 204 && draining()) return;
      await pause(claim.status === 204 ? 50 : 100);
      continue;
    }
    state.claimsAt[ci].push({ asked: claimedAt, answered: Date.now() });
    for (const t of claim.body!.tasks as Array<{ id: string; attempt: number }>) {
      if (!state.firstLease.has(t.id)) state.firstLease.set(t.id, { at: claimedAt, attempt: t.attempt });
      const progress = await call(base, "POST", `/tasks/${t.id}/progress`, {
        worker_id: me,
        attempt: t.attempt,
        progress: 0.5,
        message: "half",
      });
      state.ledger.record("progress", progress, [200, 409, ...GAP]);
      const resultUri = `s3://out/${t.id}/${me}/${t.attempt}`;
      for (;;) {
        const res = await call(base, "POST", `/tasks/${t.id}/result`, {
          worker_id: me,
          attempt: t.attempt,
          result_uri: resultUri,
          result_sha256: SHA,
        });
        state.ledger.record("result", res, [200, 409, ...GAP]);
        if (res.status === 200) {
          const list = state.accepted.get(t.id) ?? [];
          // A replay after a lost answer is answered 200 again: the same acceptance.
          if (!list.some((a) => a.worker === me && a.attempt === t.attempt)) {
            list.push({ worker: me, attempt: t.attempt, resultUri, claimedAt, acceptedAt: Date.now() });
          }
          state.accepted.set(t.id, list);
        }
        if (!GAP.includes(res.status)) break;
        await pause(100);
      }
    }
  }
}

export interface Watch {
  jobId: string;
  final?: string;
  /** Event ids in the order received, across every connection. */
  ids: number[];
  opens: number;
  resumes: number;
  /** The test cut the stream while the job was not final yet. */
  cutWhileOpen: boolean;
  cut: () => void;
}

/**
 * A WatchJob stream over SSE, opened again after every end (an outage ends it with an `event:
 * error`, or the test cuts it) with the last event id as Last-Event-ID, until the job is final.
 */
export function watch(state: LoadState, bases: string[], jobId: string): { watch: Watch; done: Promise<void> } {
  let current: http.ClientRequest | undefined;
  const w: Watch = {
    jobId,
    ids: [],
    opens: 0,
    resumes: 0,
    cutWhileOpen: false,
    cut: () => {
      if (w.final) return;
      // A stream that has had no event yet carries no id to resume from: it reopens without
      // Last-Event-ID, so only a cut after an event is one the test can expect to see resumed.
      if (w.ids.length > 0) w.cutWhileOpen = true;
      current?.destroy();
    },
  };
  const done = (async () => {
    while (!w.final && !(state.stop && Date.now() > stopDeadline(state))) {
      const base = bases[w.opens % bases.length];
      w.opens++;
      const last = w.ids.at(-1);
      if (last !== undefined) w.resumes++;
      await new Promise<void>((resolve) => {
        const headers: Record<string, string> = last !== undefined ? { "last-event-id": String(last) } : {};
        const req = http.get(new URL(`/jobs/${jobId}/events`, base), { agent: false, headers }, (res) => {
          if (res.statusCode !== 200) state.ledger.record("watch", { status: res.statusCode ?? 0, body: null, ms: 0 }, GAP);
          let buf = "";
          res.setEncoding("utf8");
          res.on("data", (d: string) => {
            buf += d;
            let end: number;
            while ((end = buf.indexOf("\n\n")) >= 0) {
              const frame = buf.slice(0, end);
              buf = buf.slice(end + 2);
              const id = /^id: (\d+)$/m.exec(frame);
              if (id) w.ids.push(Number(id[1]));
              // The final job_status event, or a snapshot of a job that is final already.
              const status = /^data: \{"event"/m.test(frame)
                ? /"job_status":"(JOB_STATUS_(?:COMPLETED|FAILED|CANCELLED))"/.exec(frame)
                : /^data: \{"snapshot":\{"job":\{[^{]*"status":"(JOB_STATUS_(?:COMPLETED|FAILED|CANCELLED))"/m.exec(frame);
              if (status) w.final = status[1];
              if (/^event: error$/m.test(frame)) state.ledger.record("watch-error", { status: 503, body: { frame }, ms: 0 }, [503]);
            }
          });
          res.on("end", resolve);
          res.on("error", () => resolve());
          res.on("close", () => resolve());
        });
        current = req;
        req.on("error", () => resolve());
      });
      if (!w.final) await pause(200);
    }
  })();
  return { watch: w, done };
}

const stopDeadlines = new WeakMap<LoadState, number>();
function stopDeadline(state: LoadState): number {
  if (!stopDeadlines.has(state)) stopDeadlines.set(state, Date.now() + 60_000);
  return stopDeadlines.get(state)!;
}

/** A workload that never has tasks: a claim on it answered 204 is a claim the database served. */
export const PROBE_WORKLOAD = "ha-probe";

/**
 * One claim every 100 ms on each coordinator, on the empty probe workload, so the time to the first
 * claim served after a disruption does not depend on what the workers happen to be doing.
 */
export async function probeClaims(state: LoadState, bases: string[], served: Array<Array<{ asked: number; answered: number }>>) {
  await Promise.all(
    bases.map(async (b, i) => {
      while (!state.stop) {
        const asked = Date.now();
        const a = await call(b, "POST", "/tasks/claim", { worker_id: `probe${i}`, workloads: [PROBE_WORKLOAD], max_tasks: 1 });
        state.ledger.record("probe-claim", a, [204, ...GAP]);
        if (a.status === 204) served[i].push({ asked, answered: Date.now() });
        await pause(100);
      }
    }),
  );
}

/** Readiness as a load balancer probes it: the time each coordinator last turned ready. */
export async function probeReadiness(
  state: LoadState,
  bases: string[],
  log: Array<{ i: number; status: number; at: number; detail?: string }>,
): Promise<void> {
  const last = bases.map(() => 0);
  while (!state.stop) {
    await Promise.all(
      bases.map(async (b, i) => {
        const a = await call(b, "GET", "/readyz", undefined, 3000);
        if (a.status !== last[i]) log.push({ i, status: a.status, at: Date.now(), detail: a.body?.detail as string | undefined });
        last[i] = a.status;
      }),
    );
    await pause(100);
  }
}
