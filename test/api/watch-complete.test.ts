// A watch is complete: over SSE and WatchJob (gRPC and Connect), a watcher receives every event of
// the job up to and including the last one written by the transaction that made the job final,
// and the counts it keeps (its snapshot, then each task status change) are GetJob's when it ends.
// The transactions that end a job write other events with its final one: a fail_fast failure
// cancels the job's unfinished tasks, and a transaction may write them after the job's event (the
// raw transaction below does so on purpose), which a stream that closed on the job's event lost.
import http from "node:http";
import { createClient, type Client, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { JobEventKind, JobStatus, QueueService, TaskStatus, type WatchJobResponse } from "../../gen/leasehold/queue/v1/queue_pb.js";
import { sha, queueFixture, type QueueFixture } from "../support/queue.js";
import { apiServerFixture, type ApiServerFixture } from "../support/api-server.js";

type Counts = Record<"pending" | "leased" | "completed" | "failed" | "cancelled" | "waiting", number>;

let pool: pg.Pool;
let fx: QueueFixture;
let api: ApiServerFixture;
let base: string;
let client: Client<typeof QueueService>;

beforeAll(async () => {
  fx = await queueFixture(
    {
      defaultLeaseSeconds: 60,
      defaultMaxAttempts: 1,
      maxTasksPerJob: 50,
      watchPollIntervalMs: 200,
    },
    { max: 8 },
  );
  pool = fx.pool;
  const queue = fx.queue;
  api = await apiServerFixture({ queue });
  base = api.base;
  client = createClient(QueueService, createConnectTransport({ baseUrl: base, httpVersion: "1.1" }));
});

afterAll(async () => {
  await api?.close();
  await fx?.close();
});

/** One message of a stream, whatever the transport: the snapshot's counts, or an event. */
type Message =
  { snapshot: Counts } | { event: { id: string; kind: "task_status" | "task_progress" | "job_status"; status: string; previous: string } };

interface Watch {
  /** Resolves when the stream's first message arrived (so later changes reach it as events). */
  started: Promise<void>;
  messages: Promise<Message[]>;
}

const lower = (name: string | undefined) => (name ?? "").replace(/^(TASK|JOB)_STATUS_/, "").toLowerCase();

function fromJson(m: {
  snapshot?: { task_counts: Partial<Counts> };
  event?: {
    id: string;
    kind: string;
    task_status?: string;
    previous_task_status?: string;
    job_status?: string;
    previous_job_status?: string;
  };
}): Message {
  if (m.snapshot) return { snapshot: { ...zero(), ...m.snapshot.task_counts } };
  const e = m.event!;
  const kind = e.kind.replace("JOB_EVENT_KIND_", "").toLowerCase() as "task_status" | "task_progress" | "job_status";
  const job = kind === "job_status";
  return {
    event: {
      id: e.id,
      kind,
      status: lower(job ? e.job_status : e.task_status),
      previous: lower(job ? e.previous_job_status : e.previous_task_status),
    },
  };
}

function fromMessage(m: WatchJobResponse): Message {
  if (m.update.case === "snapshot") {
    const c = m.update.value.taskCounts!;
    return {
      snapshot: {
        pending: c.pending,
        leased: c.leased,
        completed: c.completed,
        failed: c.failed,
        cancelled: c.cancelled,
        waiting: c.waiting,
      },
    };
  }
  const e = m.update.value!;
  const kind = e.kind === JobEventKind.JOB_STATUS ? "job_status" : e.kind === JobEventKind.TASK_STATUS ? "task_status" : "task_progress";
  const job = kind === "job_status";
  return {
    event: {
      id: e.id.toString(),
      kind,
      status: lower(job ? JobStatus[e.jobStatus] : TaskStatus[e.taskStatus]),
      previous: lower(job ? JobStatus[e.previousJobStatus] : TaskStatus[e.previousTaskStatus]),
    },
  };
}

function zero(): Counts {
  return { pending: 0, leased: 0, completed: 0, failed: 0, cancelled: 0, waiting: 0 };
}

/** SSE: GET /jobs/{id}/events (resumed with Last-Event-ID), read to its end. */
function sseWatch(jobId: string, after?: string): Watch {
  let started!: () => void;
  const startedP = new Promise<void>((r) => (started = r));
  const messages = new Promise<Message[]>((resolve, reject) => {
    const headers: Record<string, string> = after ? { "last-event-id": after } : {};
    const req = http.get(`${base}/jobs/${jobId}/events`, { headers }, (res) => {
      let raw = "";
      res.setEncoding("utf8");
      res.on("data", (d: string) => {
        raw += d;
        if (raw.includes("data: ")) started();
      });
      res.on("end", () => {
        const out = raw
          .split("\n\n")
          .flatMap((block) => block.split("\n").filter((l) => l.startsWith("data: ")))
          .map((l) => fromJson(JSON.parse(l.slice(6))));
        resolve(out);
      });
    });
    req.on("error", reject);
  });
  return { started: startedP, messages };
}

/** WatchJob through a generated client on this transport, read to its end. */
function rpcWatch(transport: Transport, jobId: string, after?: string): Watch {
  const c = createClient(QueueService, transport);
  let started!: () => void;
  const startedP = new Promise<void>((r) => (started = r));
  const messages = (async () => {
    const out: Message[] = [];
    for await (const m of c.watchJob({ jobId, afterEventId: after ? BigInt(after) : 0n }, { timeoutMs: 20_000 })) {
      out.push(fromMessage(m));
      started();
    }
    return out;
  })();
  return { started: startedP, messages };
}

const transports: [string, (jobId: string, after?: string) => Watch][] = [
  ["SSE", sseWatch],
  ["WatchJob over gRPC", (jobId, after) => rpcWatch(createGrpcTransport({ baseUrl: base }), jobId, after)],
  ["WatchJob over Connect", (jobId, after) => rpcWatch(createConnectTransport({ baseUrl: base, httpVersion: "1.1" }), jobId, after)],
];

/** The counts a watcher keeps: its snapshot, then each task status change applied. */
function watchedCounts(messages: Message[], start: Counts = zero()): Counts {
  const counts = { ...start };
  for (const m of messages) {
    if ("snapshot" in m) Object.assign(counts, m.snapshot);
    else if (m.event.kind === "task_status" && m.event.status !== m.event.previous) {
      counts[m.event.previous as keyof Counts]--;
      counts[m.event.status as keyof Counts]++;
    }
  }
  return counts;
}

async function getJobCounts(jobId: string): Promise<Counts> {
  const c = (await client.getJob({ jobId })).taskCounts!;
  return { pending: c.pending, leased: c.leased, completed: c.completed, failed: c.failed, cancelled: c.cancelled, waiting: c.waiting };
}

/** The job's events as the database has them, in id order: the ids of the last transaction's too. */
async function eventIds(jobId: string): Promise<string[]> {
  const { rows } = await pool.query("SELECT id::text AS id FROM task_events WHERE job_id = $1 ORDER BY id", [jobId]);
  return rows.map((r) => r.id as string);
}

describe.each(transports)("%s", (label, watch) => {
  const workload = `wc_${label.replace(/[^a-z]+/gi, "_").toLowerCase()}`.replace(/_+$/, "");

  beforeAll(async () => {
    await client.putWorkload({ name: workload, maxAttempts: 1 });
  });

  async function job(chunks: number): Promise<string> {
    const tasks = Array.from({ length: chunks }, (_, i) => ({ chunkIndex: i, inputUri: `s3://wc/${i}`, inputSha256: sha(`${label}${i}`) }));
    return (await client.createJob({ workload, tasks })).job!.id;
  }

  it("a fail_fast failure: the stream carries the cancellations written with the job's failure, and ends with GetJob's counts", async () => {
    const jobId = await job(4);
    const { tasks } = await client.claimTasks({ workerId: "wc-w", workloads: [workload], maxTasks: 3 });
    const w = watch(jobId);
    await w.started;
    await client.failTask({ taskId: tasks[0].id, workerId: "wc-w", attempt: 1, errorCode: "bad_chunk", retryable: false });
    const messages = await w.messages;
    const events = messages.flatMap((m) => ("event" in m ? [m.event] : []));
    expect(events.filter((e) => e.status === "cancelled" && e.kind === "task_status")).toHaveLength(3);
    expect(events.at(-1)).toMatchObject({ kind: "job_status", status: "failed" });
    expect(watchedCounts(messages)).toEqual(await getJobCounts(jobId));
    expect(watchedCounts(messages)).toEqual({ pending: 0, leased: 0, completed: 0, failed: 1, cancelled: 3, waiting: 0 });
    // Every event the job has, in order: nothing was left out.
    expect(events.map((e) => e.id)).toEqual((await eventIds(jobId)).slice(-events.length));
  });

  it("a transaction that writes the job's final event before its other events: the stream still sends them all, live and resumed", async () => {
    const jobId = await job(3);
    const [before] = (await eventIds(jobId)).slice(-1);
    const w = watch(jobId);
    await w.started;
    // As any statement may: the job's final event first, then its tasks' (triggers write both).
    const c = await pool.connect();
    try {
      await c.query("BEGIN");
      await c.query("UPDATE jobs SET status = 'cancelled', completed_at = now(), updated_at = now() WHERE id = $1", [jobId]);
      await c.query("UPDATE tasks SET status = 'cancelled', completed_at = now() WHERE job_id = $1", [jobId]);
      await c.query("COMMIT");
    } finally {
      c.release();
    }
    const all = await eventIds(jobId);
    const live = await w.messages;
    const liveEvents = live.flatMap((m) => ("event" in m ? [m.event] : []));
    expect(liveEvents.map((e) => e.id)).toEqual(all);
    expect(liveEvents[0]).toMatchObject({ kind: "job_status", status: "cancelled" });
    expect(watchedCounts(live)).toEqual(await getJobCounts(jobId));
    expect(watchedCounts(live)).toEqual({ pending: 0, leased: 0, completed: 0, failed: 0, cancelled: 3, waiting: 0 });

    // Resumed from before the transaction (or from the job's final event itself): the same events, then the end.
    const resumed = await watch(jobId, before ?? "1").messages;
    expect(resumed.flatMap((m) => ("event" in m ? [m.event.id] : []))).toEqual(
      all.filter((id) => before === undefined || BigInt(id) > BigInt(before)),
    );
    const fromFinal = await watch(jobId, all[0]).messages;
    expect(fromFinal.flatMap((m) => ("event" in m ? [m.event.id] : []))).toEqual(all.slice(1));
  });
});
