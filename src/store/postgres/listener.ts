// The coordinator's one LISTEN connection. A dedicated session (not a pooled connection:
// LISTEN lives on a session, which a transaction-mode pooler such as PgBouncer does not keep),
// reconnected with backoff after the database restarts.

import pg from "pg";
import type { WakeSource } from "../../queue/long-poll.js";
import { EVENTS_CHANNEL, NOTIFY_CHANNEL } from "./channels.js";
import type { JobEventWakes } from "./context.js";

export interface ListenerLogger {
  warn(obj: object, msg: string): void;
  info(obj: object, msg: string): void;
}

/** Claim wake-ups (leasehold_tasks) and WatchJob wake-ups (leasehold_events) over one session. */
export class TaskListener implements WakeSource, JobEventWakes {
  private client: pg.Client | undefined;
  private stopped = false;
  private retryMs = 100;
  private retryTimer: NodeJS.Timeout | undefined;
  private readonly subscribers = new Set<{ onWake: (workload: string, count: number) => void; onReconnect: () => void }>();
  private connectedOnce = false;
  /** WatchJob streams by job id. */
  private readonly jobSubscribers = new Map<string, Set<() => void>>();

  constructor(
    private readonly connectionString: string,
    private readonly log?: ListenerLogger,
  ) {}

  /** Resolves once listening (or keeps retrying in the background if the database is down). */
  async start(): Promise<void> {
    await this.connect();
  }

  get listening(): boolean {
    return this.client !== undefined;
  }

  subscribe(onWake: (workload: string, count: number) => void, onReconnect: () => void): () => void {
    const sub = { onWake, onReconnect };
    this.subscribers.add(sub);
    return () => this.subscribers.delete(sub);
  }

  subscribeJob(jobId: string, onWake: () => void): () => void {
    let subs = this.jobSubscribers.get(jobId);
    if (!subs) this.jobSubscribers.set(jobId, (subs = new Set()));
    subs.add(onWake);
    return () => {
      subs.delete(onWake);
      if (subs.size === 0 && this.jobSubscribers.get(jobId) === subs) this.jobSubscribers.delete(jobId);
    };
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.retryTimer);
    const c = this.client;
    this.client = undefined;
    await c?.end().catch(() => {});
  }

  private async connect(): Promise<void> {
    if (this.stopped) return;
    const client = new pg.Client({ connectionString: this.connectionString, application_name: "leasehold-listener", keepAlive: true });
    const lost = (err?: Error) => {
      if (this.client !== client) return;
      this.client = undefined;
      client.end().catch(() => {});
      if (!this.stopped) {
        this.log?.warn({ err: err?.message }, "LISTEN connection lost; reconnecting");
        this.scheduleReconnect();
      }
    };
    client.on("error", lost);
    client.on("end", () => lost());
    client.on("notification", (msg) => {
      if (msg.channel === EVENTS_CHANNEL && msg.payload) {
        for (const wake of this.jobSubscribers.get(msg.payload) ?? []) wake();
        return;
      }
      if (msg.channel !== NOTIFY_CHANNEL || !msg.payload) return;
      const sep = msg.payload.lastIndexOf(":");
      const workload = sep < 0 ? msg.payload : msg.payload.slice(0, sep);
      const count = sep < 0 ? 1 : Number(msg.payload.slice(sep + 1)) || 1;
      for (const s of this.subscribers) s.onWake(workload, count);
    });
    try {
      await client.connect();
      await client.query(`LISTEN ${NOTIFY_CHANNEL}; LISTEN ${EVENTS_CHANNEL}`);
    } catch (err) {
      client.end().catch(() => {});
      if (!this.stopped) this.scheduleReconnect();
      if (!this.connectedOnce) this.log?.warn({ err: (err as Error).message }, "LISTEN connection failed; retrying");
      return;
    }
    if (this.stopped) {
      await client.end().catch(() => {});
      return;
    }
    this.client = client;
    this.retryMs = 100;
    if (this.connectedOnce) {
      this.log?.info({}, "LISTEN connection restored");
      for (const s of this.subscribers) s.onReconnect();
      for (const subs of this.jobSubscribers.values()) for (const wake of subs) wake();
    }
    this.connectedOnce = true;
  }

  private scheduleReconnect(): void {
    clearTimeout(this.retryTimer);
    this.retryTimer = setTimeout(() => void this.connect(), this.retryMs);
    this.retryMs = Math.min(this.retryMs * 2, 2000);
  }
}
