// Losing the primary loses nothing: on the HA rig (deploy/ha: Patroni with a synchronous standby,
// HAProxy, PgBouncer, three coordinators), under a steady load of new jobs, claims, progress and
// results and with WatchJob streams open, the leader's postmaster is killed with SIGKILL, and
// later the leadership is switched over by plan. Afterwards every acknowledged write is there,
// nothing was accepted twice, clients saw only 503/504 in the gaps, and the same coordinator
// processes serve again.
import { mkdirSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ensurePackages } from "../../deploy/ha/packages.js";
import { TEST_BASE_PORT } from "../../deploy/ha/ports.js";
import { alive, clusterHealthy, clusterView, postmasterPid, teardown, until, up, type RigState } from "../../deploy/ha/rig.js";
import { ROOT } from "../support/process.js";
import {
  call,
  closeAgent,
  createJob,
  newLoadState,
  pause,
  probeClaims,
  probeReadiness,
  producer,
  PROBE_WORKLOAD,
  SHA,
  watch,
  worker,
  WORKLOAD,
} from "./load.js";

// Below the kernel's ephemeral port range (deploy/ha/ports.ts); when one of its ports is taken the
// rig moves to the next free block. HA_TEST_BASE_PORT fixes it.
const RUN_DIR = path.join(os.tmpdir(), "leasehold-ha-test");
const STATE_FILE = `${RUN_DIR}.json`;
const log = (m: string) => process.stderr.write(`[ha] ${m}\n`);

let rig: RigState | undefined;

// Its own hook and timeout: on a clean machine apt-get may take minutes before the rig starts.
beforeAll(() => ensurePackages(log), 900_000);

beforeAll(async () => {
  // A run that was killed (its afterAll never ran) left its rig running: this test's own rig,
  // on its own ports and run directory, so it is stopped here rather than refused.
  if (await teardown(STATE_FILE, log)) log(`stopped the rig a previous run left in ${RUN_DIR}`);
  const started = Date.now();
  rig = await up({
    basePort: process.env.HA_TEST_BASE_PORT === undefined ? undefined : Number(process.env.HA_TEST_BASE_PORT),
    preferredBasePort: TEST_BASE_PORT,
    runDir: () => RUN_DIR,
    stateFile: STATE_FILE,
    log,
    coordinatorEnv: { LOG_LEVEL: "warn", REAPER_INTERVAL_MS: "500" },
  });
  log(`rig up in ${Date.now() - started} ms`);
});

afterAll(async () => {
  closeAgent();
  await teardown(STATE_FILE, log);
});

type Served = Array<Array<{ asked: number; answered: number }>>;

interface Event {
  kind: "kill" | "switchover";
  at: number;
  from: string;
  to: string;
  /** ms from the kill (or the switchover request) until Patroni reports another leader. */
  newLeaderMs: number;
  /** per coordinator: ms until a claim asked after the disruption began was served (answered 204 by the database). */
  firstClaimMs: number[];
  /** per coordinator: ms until /readyz answered 200 again (0: it never turned unready). */
  readyAgainMs?: number[];
  /** per coordinator: the longest time between two served probe claims around the disruption. */
  longestGapMs?: number[];
  /** Every change of a coordinator's /readyz answer after the disruption began: "c1:503@1200". */
  readiness?: string[];
  /** ms until every member runs again with a synchronous standby (the old leader rejoined). */
  wholeAgainMs: number;
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

async function withDb<T>(url: string, fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5000 });
  c.on("error", () => {});
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end().catch(() => {});
  }
}

/** Kills the leader's postmaster (or asks Patroni to switch over) and measures the way back. */
async function disrupt(rig: RigState, served: Served, kind: Event["kind"], onStart: () => void): Promise<Event> {
  const members = await until("a whole cluster", 120_000, () => clusterHealthy(rig), 500);
  const leader = members.find((m) => m.role === "leader")!;
  const sync = members.find((m) => m.role === "sync_standby")!;
  const member = rig.members.find((m) => m.name === leader.name)!;
  const t0 = Date.now();
  if (kind === "kill") {
    const pid = postmasterPid(member);
    expect(pid, `postmaster of ${leader.name}`).toBeDefined();
    process.kill(pid!, "SIGKILL");
  } else {
    const res = await fetch(`${member.restUrl}/switchover`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ leader: leader.name, candidate: sync.name }),
    });
    expect(res.status, await res.text()).toBe(200);
  }
  onStart();
  log(`${kind}: leader ${leader.name} (sync standby ${sync.name})`);
  const to = await until(
    "another leader",
    60_000,
    async () => {
      const now = await clusterView(rig);
      const l = now.find((m) => m.role === "leader" && m.state === "running");
      return l && l.name !== leader.name ? l.name : undefined;
    },
    100,
  );
  const newLeaderMs = Date.now() - t0;
  const firstClaimMs = await until(
    "a claim answered on every coordinator",
    90_000,
    async () => {
      const firsts = served.map((claims) => claims.find((c) => c.asked > t0));
      return firsts.every((c) => c !== undefined) ? firsts.map((c) => c!.answered - t0) : undefined;
    },
    50,
  );
  await until("the old leader back as a replica", 120_000, () => clusterHealthy(rig), 500);
  const wholeAgainMs = Date.now() - t0;
  const event = { kind, at: t0, from: leader.name, to, newLeaderMs, firstClaimMs, wholeAgainMs };
  log(JSON.stringify(event));
  return event;
}

describe("failover on the HA rig", () => {
  it("a SIGKILL of the leader's postmaster and a planned switchover under load lose nothing, double nothing, and show clients only 503/504", async () => {
    const r = rig!;
    const bases = r.coordinators.map((c) => c.url);
    const pids = r.coordinators.map((c) => c.pid);
    expect((await call(bases[0], "PUT", `/workloads/${WORKLOAD}`, { lease_seconds: 5, max_attempts: 50 })).status).toBe(200);
    expect((await call(bases[0], "PUT", `/workloads/${PROBE_WORKLOAD}`, {})).status).toBe(200);

    const state = newLoadState(bases.length);
    const first = await Promise.all([createJob(state, bases[0], "initial-0", 400), createJob(state, bases[1], "initial-1", 400)]);
    let drained = false;
    const drainCheck = (async () => {
      while (!drained) {
        if (state.stop) {
          drained = await withDb(r.haproxy.url, async (c) => {
            const { rows } = await c.query("SELECT count(*)::int AS n FROM tasks WHERE status <> 'completed'");
            return rows[0].n === 0;
          }).catch(() => false);
        }
        await pause(500);
      }
    })();
    const readiness: Array<{ i: number; status: number; at: number; detail?: string }> = [];
    const served: Served = bases.map(() => []);
    const watches = first.map((id) => watch(state, bases, id!));
    const load = Promise.all([
      ...[0, 1].map((p) => producer(state, bases, p, 20, 1000)),
      ...Array.from({ length: 9 }, (_, w) => worker(state, bases, w, w % 3 === 0 ? 1 : 4, () => drained)),
      probeReadiness(state, bases, readiness),
      probeClaims(state, bases, served),
    ]);
    const completed = () => state.accepted.size;

    const events: Event[] = [];
    const gaps: Array<{ kind: string; from: number; to: number }> = [];
    // Tasks leased before the kill and accepted after it: on the lease they had (the result asked
    // again through the gap) or, once that lease expired in the gap, on a later attempt.
    const movedThroughKill = { total: 0, sameLease: 0, reclaimed: 0 };
    let completedAcrossKill = 0;
    try {
      for (const kind of ["kill", "switchover"] as const) {
        const before = completed();
        await until("progress before the disruption", 120_000, async () => (completed() >= before + 300 ? true : undefined), 100);
        // Watch again while the leader is away: the streams resume from their last event id.
        // A job that spans the disruption (ahead of the backlog), watched from before it: the stream is cut in the gap and
        // resumes from its last event id.
        const spanning = watch(state, bases, (await createJob(state, bases[0], `watched-${kind}`, 600, 10))!);
        watches.push(spanning);
        await until("the watched job's first event", 60_000, async () => (spanning.watch.ids.length > 0 ? true : undefined), 50);
        const cutWatches = () => setTimeout(() => watches.forEach((w) => w.watch.cut()), 300);
        const doneBefore = completed();
        const event = await disrupt(r, served, kind, cutWatches);
        events.push(event);
        const t0 = event.at;
        // Readiness per coordinator: when it last turned ready (200) after turning unready, if it did.
        event.readiness = readiness
          .filter((x) => x.at > t0)
          .map((x) => `c${x.i + 1}:${x.status}@${x.at - t0}${x.detail ? ` (${x.detail})` : ""}`);
        event.readyAgainMs = bases.map((_, i) => {
          const after = readiness.filter((x) => x.i === i && x.at > t0);
          const back = after.filter((x) => x.status === 200).at(-1);
          return back ? back.at - t0 : 0;
        });
        // The real outage per coordinator: the longest stretch without a served probe claim.
        event.longestGapMs = served.map((claims) => {
          const times = claims.map((c) => c.answered).filter((t) => t > t0 - 5000 && t < t0 + event.wholeAgainMs);
          return times.slice(1).reduce((m, t, j) => Math.max(m, t - times[j]), 0);
        });
        gaps.push({ kind, from: t0, to: t0 + Math.max(...event.firstClaimMs) });
        if (kind === "kill") {
          completedAcrossKill = completed() - doneBefore;
          for (const [id, [a]] of state.accepted) {
            const lease = state.firstLease.get(id);
            if (!lease || lease.at >= t0 || a.acceptedAt <= t0) continue;
            movedThroughKill.total++;
            if (a.attempt === lease.attempt) movedThroughKill.sameLease++;
            else movedThroughKill.reclaimed++;
          }
          // The kill hit work in flight, or it proved nothing about it.
          expect(movedThroughKill.total).toBeGreaterThan(0);
        }
        // No lease outlives its expiry by more than a few reaper passes.
        const stuck = await withDb(r.haproxy.url, async (c) => {
          const { rows } = await c.query(
            "SELECT count(*)::int AS n FROM tasks WHERE status = 'leased' AND lease_expires_at < now() - interval '3 seconds'",
          );
          return rows[0].n as number;
        });
        expect(stuck).toBe(0);
      }
    } finally {
      state.stop = true;
    }
    await until("every task completed", 180_000, async () => (drained ? true : undefined), 200);
    await load;
    await drainCheck;
    await Promise.all(watches.map((w) => w.done));

    // The same coordinator processes, each ready.
    for (const [i, c] of r.coordinators.entries()) {
      expect(alive(c.pid), `coordinator ${c.url}`).toBe(true);
      expect(c.pid).toBe(pids[i]);
      expect((await call(c.url, "GET", "/readyz")).status).toBe(200);
    }
    // Clients saw 200/201/204/409 or, in the gaps, 503/504: no 500, no 4xx, no lost connection.
    expect(state.ledger.unexpected.slice(0, 10)).toEqual([]);
    const statuses = state.ledger.summary();
    expect(Object.keys(statuses).filter((k) => k.endsWith(" 0"))).toEqual([]);

    const db = await withDb(r.haproxy.url, async (c) => {
      const jobs = await c.query(
        "SELECT id, idempotency_key, status, (SELECT count(*)::int FROM tasks t WHERE t.job_id = j.id) AS n FROM jobs j",
      );
      const tasks = await c.query("SELECT id, status, lease_owner, attempt, result_uri FROM tasks");
      return { jobs: jobs.rows, tasks: tasks.rows };
    });
    // Every acknowledged CreateJob is there with its tasks, once (a retried key found its job).
    expect(db.jobs.length).toBe(state.jobs.size);
    const jobsById = new Map(db.jobs.map((j) => [j.id as string, j]));
    for (const [id, j] of state.jobs) {
      expect(jobsById.get(id), `job ${j.key}`).toMatchObject({ idempotency_key: j.key, status: "completed", n: j.tasks });
    }
    // Each task completed exactly once, by the (worker, attempt) and with the manifest the row holds.
    const total = [...state.jobs.values()].reduce((s, j) => s + j.tasks, 0);
    expect(db.tasks.length).toBe(total);
    expect(db.tasks.filter((t) => t.status !== "completed")).toEqual([]);
    const doubled = [...state.accepted].filter(([, a]) => a.length !== 1);
    expect(doubled).toEqual([]);
    expect(state.accepted.size).toBe(total);
    for (const t of db.tasks) {
      const [a] = state.accepted.get(t.id)!;
      expect({ owner: t.lease_owner, attempt: t.attempt, uri: t.result_uri }).toEqual({
        owner: a.worker,
        attempt: a.attempt,
        uri: a.resultUri,
      });
    }
    // An accepted result is still accepted: its replay answers 200 (those around the kill first).
    const t0 = gaps[0].from;
    const sample = [...state.accepted]
      .sort(([, a], [, b]) => Math.abs(a[0].acceptedAt - t0) - Math.abs(b[0].acceptedAt - t0))
      .slice(0, 200);
    for (const [id, [a]] of sample) {
      const res = await call(bases[0], "POST", `/tasks/${id}/result`, {
        worker_id: a.worker,
        attempt: a.attempt,
        result_uri: a.resultUri,
        result_sha256: SHA,
      });
      expect(res.status, `replay of ${id}`).toBe(200);
    }
    // The watch streams resumed with Last-Event-ID, saw their jobs finish, and no event twice.
    expect(watches.filter((w) => w.watch.cutWhileOpen).length).toBeGreaterThan(0);
    for (const { watch: w } of watches) {
      expect(w.final, `watch of ${w.jobId}`).toBe("JOB_STATUS_COMPLETED");
      if (w.cutWhileOpen) expect(w.resumes, `resumes of the watch of ${w.jobId}`).toBeGreaterThan(0);
      expect(new Set(w.ids).size).toBe(w.ids.length);
    }

    const firstClaims = events.flatMap((e) => e.firstClaimMs);
    const figures = {
      events,
      firstClaimP50Ms: median(firstClaims),
      firstClaimMaxMs: Math.max(...firstClaims),
      tasksCompleted: total,
      jobs: state.jobs.size,
      completedAcrossKill,
      movedThroughKill,
      lost: 0,
      doubled: doubled.length,
      statuses,
      watches: watches.map(({ watch: w }) => ({ cutWhileOpen: w.cutWhileOpen, opens: w.opens, resumes: w.resumes, events: w.ids.length })),
    };
    log(JSON.stringify(figures));
    const artifacts = path.join(ROOT, "test-artifacts");
    mkdirSync(artifacts, { recursive: true });
    writeFileSync(path.join(artifacts, `ha-failover-${Date.now()}.json`), JSON.stringify(figures, null, 2) + "\n");
  });
});
