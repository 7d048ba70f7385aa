// The coordinator's one LISTEN connection. A dedicated session (not a pooled connection:
// LISTEN lives on a session, which a transaction-mode pooler such as PgBouncer does not keep),
// reconnected with backoff after the database restarts.

import pg from "pg";
import type { WakeSource } from "../../../queue/long-poll.js";
import { EVENTS_CHANNEL, NOTIFY_CHANNEL } from "../sql/channels.js";
import type { JobEventWakes } from "./context.js";

export interface ListenerLogger {
  warn(obj: object, msg: string): void;
  info(obj: object, msg: string): void;
}

export interface ListenerOptions {
  /** Longest wait to open the session (PG_CONNECT_TIMEOUT_MS), and for an answer to a ping. */
  connectTimeoutMs?: number;
  /** How often the idle session is pinged; 0: never. */
  pingIntervalMs?: number;
}

/** Reconnect backoff: doubling from the first to the last, so a failover costs at most the last. */
const RETRY_FIRST_MS = 100;
const RETRY_MAX_MS = 1000;

/** Claim wake-ups (leasehold_tasks) and WatchJob wake-ups (leasehold_events) over one session. */
export class TaskListener implements WakeSource, JobEventWakes {
  private client: pg.Client | undefined;
  private stopped = false;
  private retryMs = RETRY_FIRST_MS;
  private retryTimer: NodeJS.Timeout | undefined;
  private pingTimer: NodeJS.Timeout | undefined;
  private readonly connectTimeoutMs: number;
  private readonly pingIntervalMs: number;
  private readonly subscribers = new Set<{ onWake: (workload: string, count: number, head?: string) => void; onReconnect: () => void }>();
  private connectedOnce = false;
  /** WatchJob streams by job id. */
  private readonly jobSubscribers = new Map<string, Set<() => void>>();

  constructor(
    private readonly connectionString: string,
    private readonly log?: ListenerLogger,
    opts: ListenerOptions = {},
  ) {
    this.connectTimeoutMs = opts.connectTimeoutMs ?? 2000;
    this.pingIntervalMs = opts.pingIntervalMs ?? 5000;
  }

  /** Resolves once listening (or keeps retrying in the background if the database is down). */
  async start(): Promise<void> {
    await this.connect();
  }

  get listening(): boolean {
    return this.client !== undefined;
  }

  subscribe(onWake: (workload: string, count: number, head?: string) => void, onReconnect: () => void): () => void {
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
    clearTimeout(this.pingTimer);
    const c = this.client;
    this.client = undefined;
    await c?.end().catch(() => {});
  }

  private async connect(): Promise<void> {
    if (this.stopped) return;
    const client = new pg.Client({
      connectionString: this.connectionString,
      application_name: "leasehold-listener",
      keepAlive: true,
      connectionTimeoutMillis: this.connectTimeoutMs,
    });
    const lost = (err?: Error) => {
      if (this.client !== client) return;
      this.client = undefined;
      clearTimeout(this.pingTimer);
      // end() would wait for a server that no longer answers; the socket goes at once.
      (client as unknown as { connection?: { stream?: { destroy(): void } } }).connection?.stream?.destroy();
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
      // `workload:count`, or `workload:count:head` (the lowest claim-order key announced: claim-hints.ts).
      // A count of 0 wakes no claim: it only moves claim hints (a retry in backoff).
      const [workload, n, head] = msg.payload.split(":");
      const parsed = Number(n);
      const count = n === undefined || n === "" || !Number.isFinite(parsed) ? 1 : parsed;
      for (const s of this.subscribers) s.onWake(workload, count, head);
    });
    try {
      await client.connect();
      // On a standby (a demoted leader the proxy still routes to for a moment) LISTEN fails with
      // "cannot execute LISTEN during recovery", and this retries until it reaches the primary:
      // a NOTIFY is delivered only on the server that runs it.
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
    this.retryMs = RETRY_FIRST_MS;
    this.schedulePing(client, lost);
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
    this.retryMs = Math.min(this.retryMs * 2, RETRY_MAX_MS);
  }

  /**
   * An idle LISTEN session hears nothing when its server is cut off without closing it (a leader
   * lost to the network): parked claims would fall back to polling for good. A ping that gets no
   * answer within the connect timeout counts as a lost session.
   */
  private schedulePing(client: pg.Client, lost: (err?: Error) => void): void {
    if (this.pingIntervalMs <= 0) return;
    clearTimeout(this.pingTimer);
    this.pingTimer = setTimeout(() => {
      if (this.client !== client) return;
      let answered = false;
      const timer = setTimeout(() => {
        if (!answered) lost(new Error(`no answer to a ping within ${this.connectTimeoutMs} ms`));
      }, this.connectTimeoutMs);
      client.query("SELECT 1").then(
        () => {
          answered = true;
          clearTimeout(timer);
          this.schedulePing(client, lost);
        },
        (err: Error) => {
          answered = true;
          clearTimeout(timer);
          lost(err);
        },
      );
    }, this.pingIntervalMs);
    this.pingTimer.unref();
  }
}
