// The event log in time partitions: where inserts land, partitions created ahead by the maintenance
// pass (and rows of the default partition moved into them), whole partitions dropped past the
// retention (and a drop that cannot get its lock given up, not waited for), ids that stay one
// sequence across partitions for a resumed watch stream. Real PostgreSQL, a database of its own.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { JobUpdate, Task } from "../../src/queue/types.js";
import { EventFloors, NO_FLOOR } from "../../src/store/postgres/state/event-floors.js";
import { EventPartitions, LIST_EVENT_PARTITIONS } from "../../src/store/postgres/background/event-partitions.js";
import { WATCHED_JOBS_WITH_EVENTS } from "../../src/store/postgres/state/watch-hub.js";
import { JOB_EVENTS_SINCE } from "../../src/store/postgres/operations/watch.js";
import { queueFixture, sha, type QueueFixture } from "../support/queue.js";

const W = "parts";
let fx: QueueFixture;

beforeAll(async () => {
  fx = await queueFixture();
  await fx.queue.putWorkload({ name: W, maxAttempts: 3, leaseSeconds: 60 });
});
afterAll(async () => {
  await fx?.close();
});

interface Part {
  name: string;
  is_default: boolean;
  lower: Date | null;
  upper: Date | null;
}

async function partitions(): Promise<Part[]> {
  const rows = await LIST_EVENT_PARTITIONS.run(fx.pool);
  const date = (us: string | null) => (us === null ? null : new Date(Number(BigInt(us) / 1000n)));
  return rows.map((r) => ({ name: r.name, is_default: r.is_default, lower: date(r.lower_us), upper: date(r.upper_us) }));
}

async function rowsIn(table: string): Promise<number> {
  const { rows } = await fx.pool.query(`SELECT count(*)::int AS n FROM "${table}"`);
  return rows[0].n;
}

async function newJob(tasks: number): Promise<string> {
  const r = await fx.queue.createJob({
    workload: W,
    tasks: Array.from({ length: tasks }, (_, i) => ({ chunkIndex: i, inputUri: `s3://in/${i}`, inputSha256: sha(i) })),
  });
  return r.job.id;
}

async function runJob(jobId: string, n: number): Promise<void> {
  const tasks: Task[] = [];
  while (tasks.length < n) {
    const got = await fx.queue.claimTasks({ workerId: "w1", workloads: [W], maxTasks: n });
    if (got.length === 0) throw new Error("nothing to claim");
    tasks.push(...got.filter((t) => t.jobId === jobId));
  }
  for (const t of tasks)
    await fx.queue.completeTask({
      taskId: t.id,
      workerId: "w1",
      attempt: t.attempt,
      resultUri: `s3://o/${t.chunkIndex}`,
      resultSha256: sha(t.chunkIndex),
    });
}

describe("the event log in partitions", () => {
  it("is partitioned by created_at, with a default partition and days ahead, and the claim path's events land in today's", async () => {
    const { rows } = await fx.pool.query(
      `SELECT c.relkind, pg_get_partkeydef(c.oid) AS key FROM pg_class c WHERE c.oid = 'task_events'::regclass`,
    );
    expect(rows).toEqual([{ relkind: "p", key: "RANGE (created_at)" }]);
    const parts = await partitions();
    expect(parts.filter((p) => p.is_default).map((p) => p.name)).toEqual(["task_events_default"]);
    const latest = Math.max(...parts.filter((p) => p.upper).map((p) => p.upper!.getTime()));
    expect(latest).toBeGreaterThan(Date.now() + 2 * 86_400_000);

    const jobId = await newJob(3);
    await runJob(jobId, 3);
    const { rows: where } = await fx.pool.query(
      `SELECT tableoid::regclass::text AS part, count(*)::int AS n FROM task_events WHERE job_id = $1 GROUP BY 1`,
      [jobId],
    );
    expect(where).toHaveLength(1);
    expect(where[0].part).not.toBe("task_events_default");
    expect(where[0].n).toBe(1 + 3 + 3 + 1); // job running, 3 claims, 3 completions, job completed
  });

  it("creates partitions ahead on the configured interval, each from where the last ends, once across coordinators", async () => {
    const before = await partitions();
    const lastUpper = Math.max(...before.filter((p) => p.upper).map((p) => p.upper!.getTime()));
    const ahead = Math.ceil((lastUpper - Date.now()) / 6 / 3_600_000) + 4; // 6-hour partitions, reaching past the day ones
    const a = new EventPartitions(fx.pool, { intervalHours: 6, ahead });
    const b = new EventPartitions(fx.newPool(), { intervalHours: 6, ahead });
    const [ra, rb] = await Promise.all([a.runOnce(undefined, true), b.runOnce(undefined, true)]);
    // One of the two passes held the lock; the other's pass (or a second one) finds nothing to do.
    const again = await b.runOnce(undefined, true);
    expect(ra.created + rb.created).toBeGreaterThanOrEqual(3);
    expect(again.created).toBe(0);
    const after = await partitions();
    const ranges = after.filter((p) => !p.is_default).sort((x, y) => (x.upper!.getTime() ?? 0) - (y.upper!.getTime() ?? 0));
    for (let i = 1; i < ranges.length; i++) expect(ranges[i].lower!.getTime()).toBe(ranges[i - 1].upper!.getTime());
    const created = ranges.filter((p) => p.upper!.getTime() > lastUpper);
    expect(created.length).toBe(ra.created + rb.created);
    for (const p of created) {
      expect(p.upper!.getTime() - p.lower!.getTime()).toBe(6 * 3_600_000);
      expect(p.upper!.getTime() % (6 * 3_600_000)).toBe(0);
    }
    expect(created.at(-1)!.upper!.getTime()).toBeGreaterThanOrEqual(Date.now() + (ahead - 1) * 6 * 3_600_000);
  });

  it("moves rows of the default partition into the partition created for them, ids unchanged", async () => {
    const parts = await partitions();
    const lastUpper = Math.max(...parts.filter((p) => p.upper).map((p) => p.upper!.getTime()));
    const jobId = crypto.randomUUID();
    // Past every partition: the default partition takes it (a maintenance loop down for that long).
    const { rows } = await fx.pool.query(
      `INSERT INTO task_events (job_id, kind, status, created_at) VALUES ($1, 'job_status', 'running', $2) RETURNING id, tableoid::regclass::text AS part`,
      [jobId, new Date(lastUpper + 3_600_000)],
    );
    expect(rows[0].part).toBe("task_events_default");
    const ahead = Math.ceil((lastUpper + 2 * 3_600_000 - Date.now()) / 86_400_000) + 1;
    const r = await new EventPartitions(fx.pool, { intervalHours: 24, ahead }).runOnce(undefined, true);
    expect(r.created).toBeGreaterThanOrEqual(1);
    expect(r.movedFromDefault).toBe(1);
    expect(await rowsIn("task_events_default")).toBe(0);
    const { rows: moved } = await fx.pool.query(`SELECT id, tableoid::regclass::text AS part FROM task_events WHERE job_id = $1`, [jobId]);
    expect(moved).toEqual([{ id: rows[0].id, part: expect.stringMatching(/^task_events_\d{8}_\d{4}$/) }]);
  });

  it("keeps ids one sequence across partitions, and a resumed watch reads on from its Last-Event-ID through both", async () => {
    const jobId = await newJob(2);
    await runJob(jobId, 2);
    // All but the job's first event moved to tomorrow's partition (an update of created_at moves a row).
    await fx.pool.query(
      `UPDATE task_events SET created_at = created_at + interval '1 day' WHERE job_id = $1 AND id > (SELECT min(id) FROM task_events WHERE job_id = $1)`,
      [jobId],
    );
    const { rows: all } = await fx.pool.query(
      `SELECT id::text, tableoid::regclass::text AS part FROM task_events WHERE job_id = $1 ORDER BY id`,
      [jobId],
    );
    expect(new Set(all.map((r) => r.part)).size).toBe(2);
    const ids = all.map((r) => BigInt(r.id));
    for (let i = 1; i < ids.length; i++) expect(ids[i] > ids[i - 1]).toBe(true);

    const seen: JobUpdate[] = [];
    for await (const u of fx.queue.watchJob(jobId, { afterEventId: all[0].id })) seen.push(u);
    expect(seen.map((u) => u.event?.id)).toEqual(all.slice(1).map((r) => r.id));
  });

  it("drops whole partitions past the retention, keeps the rest, and deletes old rows of the default partition", async () => {
    // A history of its own: the partition up to tomorrow replaced by one ten days old and one up to tomorrow.
    const parts = await partitions();
    const first = parts.find((p) => !p.is_default && p.lower === null)!;
    const boundary = first.upper!;
    const client = await fx.pool.connect();
    try {
      await client.query(`ALTER TABLE task_events DETACH PARTITION ${client.escapeIdentifier(first.name)}`);
      await client.query(`DROP TABLE ${client.escapeIdentifier(first.name)}`);
      await client.query(
        `CREATE TABLE task_events_old PARTITION OF task_events FOR VALUES FROM ($1::timestamptz - interval '12 days') TO ($1::timestamptz - interval '9 days')`.replaceAll(
          "$1",
          client.escapeLiteral(boundary.toISOString()),
        ),
      );
      await client.query(
        `CREATE TABLE task_events_recent PARTITION OF task_events FOR VALUES FROM ($1::timestamptz - interval '9 days') TO ($1::timestamptz - interval '1 day')`.replaceAll(
          "$1",
          client.escapeLiteral(boundary.toISOString()),
        ),
      );
      await client.query(
        `CREATE TABLE task_events_today PARTITION OF task_events FOR VALUES FROM ($1::timestamptz - interval '1 day') TO ($1::timestamptz)`.replaceAll(
          "$1",
          client.escapeLiteral(boundary.toISOString()),
        ),
      );
    } finally {
      client.release();
    }
    const oldJob = crypto.randomUUID();
    const recentJob = crypto.randomUUID();
    const insert = (job: string, ago: string) =>
      fx.pool.query(
        `INSERT INTO task_events (job_id, kind, status, created_at) SELECT $1, 'task_status', 'completed', now() - $2::interval FROM generate_series(1, 50)`,
        [job, ago],
      );
    await insert(oldJob, "10 days");
    await insert(recentJob, "3 days");
    // Older than any partition: the default takes them, and retention deletes them there.
    await insert(oldJob, "20 days");
    expect(await rowsIn("task_events_old")).toBe(50);
    expect(await rowsIn("task_events_default")).toBe(50);

    // A reader holding the log (any lock on it) makes the drop give up within lockTimeoutMs, not queue inserts behind it.
    const reader = await fx.pool.connect();
    const retention = new EventPartitions(fx.pool, { retentionDays: 5, lockTimeoutMs: 50 });
    try {
      await reader.query(`BEGIN; LOCK TABLE task_events IN ACCESS SHARE MODE`);
      const t0 = Date.now();
      const blocked = await retention.runOnce(undefined, true);
      expect(blocked.dropped).toBe(0);
      expect(Date.now() - t0).toBeLessThan(4000);
      expect(await rowsIn("task_events_old")).toBe(50);
    } finally {
      await reader.query("ROLLBACK");
      reader.release();
    }

    const r = await retention.runOnce(undefined, true);
    expect(r.dropped).toBe(1);
    expect(r.deletedFromDefault).toBe(50);
    const names = (await partitions()).map((p) => p.name);
    expect(names).not.toContain("task_events_old");
    expect(names).toContain("task_events_recent");
    expect(await fx.count("task_events", `job_id = '${oldJob}'`)).toBe(0);
    expect(await fx.count("task_events", `job_id = '${recentJob}'`)).toBe(50);
    // Without a retention nothing is dropped.
    expect((await new EventPartitions(fx.pool, {}).runOnce(undefined, true)).dropped).toBe(0);
  });

  it("reads a watch stream's news only from the partitions between its floor (the newest watermark below its snapshot) and now", async () => {
    // The pass records a watermark at today's boundary (every running transaction started after it).
    // (The passes of the tests before recorded it already.)
    await new EventPartitions(fx.pool, {}).runOnce(undefined, true);
    const parts = await partitions();
    const today = parts.find((p) => p.name === "task_events_today")!;
    // A snapshot whose xmin is past the watermark's xid bound: a transaction of another test file
    // (the server is shared) may hold the cluster's xmin back for a moment, and then the floor is
    // rightly none.
    const { rows: bound } = await fx.pool.query(`SELECT xid_bound::text AS x FROM task_event_watermarks ORDER BY upper DESC LIMIT 1`);
    let snapshot = "";
    for (let i = 0; i < 500; i++) {
      snapshot = (await fx.pool.query(`SELECT pg_current_snapshot()::text AS s`)).rows[0].s as string;
      if (BigInt(snapshot.split(":")[0]) >= BigInt(bound[0].x)) break;
      await new Promise((r) => setTimeout(r, 20));
    }
    const floors = new EventFloors();
    expect(floors.floor(snapshot)).toBe(NO_FLOOR); // nothing read yet: every partition
    await floors.refresh(fx.pool);
    const floor = floors.floor(snapshot);
    const asTime = async (t: string) => ((await fx.pool.query(`SELECT $1::timestamptz AS t`, [t])).rows[0].t as Date).getTime();
    expect(await asTime(floor)).toBe(today.lower!.getTime());
    // A snapshot older than every watermark's xid bound has no floor; the hub reads from the lowest of its streams'.
    expect(floors.floor("3:3:")).toBe(NO_FLOOR);
    expect(floors.lowest([snapshot, "3:3:"])).toBe(NO_FLOOR);
    expect(floors.lowest([snapshot, snapshot])).toBe(floor);

    const jobId = crypto.randomUUID();
    const { rows: written } = await fx.pool.query(
      `INSERT INTO task_events (job_id, kind, status) VALUES ($1, 'job_status', 'running') RETURNING id::text`,
      [jobId],
    );
    const since = await JOB_EVENTS_SINCE.one(fx.pool, { jobId, since: snapshot, floor });
    expect(since.events.map((e) => String(e.id))).toEqual([written[0].id]);
    const hub = await WATCHED_JOBS_WITH_EVENTS.run(fx.pool, {
      jobIds: [crypto.randomUUID(), jobId],
      snapshots: [snapshot, snapshot],
      floor,
    });
    expect(hub).toEqual([{ i: 2 }]);
    // Only the partitions that hold [floor, now + 5 minutes) are read: not the older ones, not those
    // created ahead, not the default partition (the window is covered by partitions).
    const soon = Date.now() + 6 * 60_000;
    for (const [text, values] of [
      [JOB_EVENTS_SINCE.text, [jobId, snapshot, floor]],
      [WATCHED_JOBS_WITH_EVENTS.text, [[jobId], [snapshot], floor]],
    ] as const) {
      const { rows } = await fx.pool.query(`EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) ${text}`, [...values]);
      const executed = rows
        .map((p) => p["QUERY PLAN"] as string)
        .filter((l) => / on task_events/.test(l) && !/never executed/.test(l))
        .map((l) => / on (task_events\w*)/.exec(l)![1]);
      expect(executed).toContain("task_events_today");
      for (const name of executed) {
        const p = parts.find((x) => x.name === name)!;
        expect(p.is_default).toBe(false);
        expect(p.upper!.getTime()).toBeGreaterThan(today.lower!.getTime() - 1);
        expect(p.lower!.getTime()).toBeLessThan(soon);
      }
    }
  });

  it("reads a job's events after an id through the (job_id, xid) index of every partition, never a sequential scan", async () => {
    // Enough rows in one partition (and statistics) that a scan of it would be the planner's choice if the index were unusable.
    await fx.pool.query(
      `INSERT INTO task_events (job_id, kind, status) SELECT gen_random_uuid(), 'task_status', 'completed' FROM generate_series(1, 20000)`,
    );
    await fx.pool.query(`ANALYZE task_events`);
    const { rows } = await fx.pool.query(
      `EXPLAIN (FORMAT JSON) SELECT * FROM task_events WHERE job_id = $1 AND id > $2::bigint ORDER BY id`,
      [crypto.randomUUID(), "1"],
    );
    const nodes: string[] = [];
    const walk = (n: { "Node Type": string; "Relation Name"?: string; Plans?: unknown[] }) => {
      if (n["Relation Name"]) nodes.push(`${n["Node Type"]} ${n["Relation Name"]}`);
      for (const c of (n.Plans ?? []) as (typeof n)[]) walk(c);
    };
    walk(rows[0]["QUERY PLAN"][0].Plan);
    expect(nodes.length).toBeGreaterThan(1);
    // The coordinator's sessions leave sequential scans on: a partition of a few pages (one just
    // created ahead, an old one nearly empty) may be read whole, which costs what an index descent
    // does. Every other partition, and the one with the 20,000 rows, goes through the index.
    const { rows: sizes } = await fx.pool.query<{ name: string; pages: number }>(
      `SELECT c.relname AS name, (pg_relation_size(c.oid) / current_setting('block_size')::int)::int AS pages
       FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'task_events'::regclass`,
    );
    const pages = new Map(sizes.map((r) => [r.name, r.pages]));
    expect(Math.max(...sizes.map((r) => r.pages))).toBeGreaterThan(100);
    for (const n of nodes) {
      const [, relation] = / (\S+)$/.exec(n)!;
      if ((pages.get(relation) ?? Infinity) > 8) expect(n).toMatch(/^(Index|Index Only|Bitmap Heap) Scan /);
      else expect(n).toMatch(/^(Index|Index Only|Bitmap Heap|Seq) Scan /);
    }
  });
});
