// Migrations: up from an empty database to the latest, down one at a time, and up again.
import pg from "pg";
import { afterAll, beforeAll, expect, it } from "vitest";
import { expectedMigrations, migrate, pendingMigrations } from "../src/store/postgres/migrate.js";
import { createEmptyDatabase, type TestDatabase } from "./support/db.js";

let db: TestDatabase;
let client: pg.Client;

beforeAll(async () => {
  db = await createEmptyDatabase();
  client = new pg.Client({ connectionString: db.url });
  await client.connect();
});
afterAll(async () => {
  await client?.end();
  await db?.drop();
});

// Tables, not the partitions of the event log (those are checked on their own).
async function tables(): Promise<string[]> {
  const { rows } = await client.query(
    `SELECT tablename FROM pg_tables t JOIN pg_class c ON c.oid = (quote_ident(t.schemaname) || '.' || quote_ident(t.tablename))::regclass
     WHERE schemaname = 'public' AND NOT c.relispartition ORDER BY tablename`,
  );
  return rows.map((r) => r.tablename);
}

it("migrates an empty database up to the latest, down by one to eight, and up again", async () => {
  expect(await pendingMigrations(client)).toEqual(expectedMigrations());
  await migrate(db.url, "up");
  expect(await tables()).toEqual([
    "due_wakeups",
    "flow_keys",
    "job_watchers",
    "jobs",
    "pgmigrations",
    "schedule_ticks",
    "schedules",
    "task_event_watermarks",
    "task_events",
    "tasks",
    "worker_sightings",
    "workload_key_limits",
    "workload_rate_buckets",
    "workload_slot_waits",
    "workloads",
  ]);
  expect(await pendingMigrations(client)).toEqual([]);
  const { rows } = await client.query(`SELECT indexname FROM pg_indexes WHERE tablename = 'tasks' ORDER BY indexname`);
  expect(rows.map((r) => r.indexname)).toEqual(
    expect.arrayContaining(["tasks_claim_pending_idx", "tasks_lease_expiry_idx", "tasks_job_unfinished_idx", "tasks_job_chunk_idx"]),
  );

  // The latest: a finalizer job and its task get time-ordered ids (UUID version 7) like every
  // other job; its down migration puts back the random (version 4) ones.
  const finalizerIds = expectedMigrations().at(-1)!;
  expect(finalizerIds).toMatch(/finalizer_uuidv7$/);
  const finalizerSource = async () =>
    (await client.query(`SELECT prosrc FROM pg_proc WHERE proname = 'leasehold_enqueue_finalizer'`)).rows.map((r) => r.prosrc as string);
  const v7 = (await client.query(`SELECT leasehold_uuidv7()::text AS id`)).rows[0].id as string;
  expect(v7).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  expect(await finalizerSource()).toEqual([expect.stringContaining("fin_id uuid := leasehold_uuidv7()")]);
  await migrate(db.url, "down");
  expect(await pendingMigrations(client)).toEqual([finalizerIds]);
  expect(await finalizerSource()).toEqual([expect.stringContaining("fin_id uuid := gen_random_uuid()")]);
  expect((await client.query(`SELECT 1 FROM pg_proc WHERE proname = 'leasehold_uuidv7'`)).rows).toEqual([]);

  // The one before: the claim's counts of live leases read the workload's own index (their expiry test
  // is one no index answers); its down migration puts back the tests an index of every workload's
  // leases could answer.
  const claimSource = async () =>
    (await client.query(`SELECT prosrc FROM pg_proc WHERE proname = 'leasehold_flow_claim'`)).rows.map((r) => r.prosrc as string);
  const counts = expectedMigrations().at(-2)!;
  expect(counts).toMatch(/flow_claim_counts$/);
  expect(await claimSource()).toEqual([expect.stringContaining("AND (t.lease_expires_at > now()) IS TRUE")]);
  await migrate(db.url, "down");
  expect(await pendingMigrations(client)).toEqual([counts, finalizerIds]);
  expect(await claimSource()).toEqual([expect.not.stringContaining("IS TRUE")]);

  // The one before: a cap far away costs no count before the gates, no per-key query and no wake per
  // completion; its down migration puts back the gated claim and drops the record of short claims.
  const far = expectedMigrations().at(-3)!;
  expect(far).toMatch(/flow_claim_far$/);
  expect(await claimSource()).toEqual([expect.stringContaining("PERFORM leasehold_slot_wanted(n)")]);
  await migrate(db.url, "down");
  expect(await pendingMigrations(client)).toEqual([far, counts, finalizerIds]);
  expect(await tables()).not.toContain("workload_slot_waits");
  expect(await claimSource()).toEqual([expect.not.stringContaining("leasehold_slot_wanted")]);

  // The one before: the capped claim's gates; its down migration puts back the claim with one advisory lock per workload.
  const gates = expectedMigrations().at(-4)!;
  expect(gates).toMatch(/flow_claim_shards$/);
  expect(await claimSource()).toEqual([expect.stringContaining("pg_try_advisory_xact_lock(v_lock")]);
  await migrate(db.url, "down");
  expect(await pendingMigrations(client)).toEqual([gates, far, counts, finalizerIds]);
  expect(await claimSource()).toEqual([expect.stringContaining("pg_advisory_xact_lock(hashtextextended('leasehold.flow:'")]);

  // The one before: the event log in time partitions (the table as it was attached as the first one,
  // a default partition, days ahead); down makes it one table again with every row and the same ids.
  const eventPartitions = expectedMigrations().at(-5)!;
  expect(eventPartitions).toMatch(/event_partitions$/);
  const eventLog = async () => {
    const { rows } = await client.query(
      `SELECT c.relkind, (SELECT count(*)::int FROM pg_inherits i WHERE i.inhparent = c.oid) AS partitions FROM pg_class c WHERE c.oid = 'task_events'::regclass`,
    );
    return rows[0];
  };
  const jobId = "00000000-0000-4000-8000-000000000001";
  const insertEvent = async (at: string) =>
    (
      await client.query(
        `INSERT INTO task_events (job_id, kind, status, created_at) VALUES ($1, 'job_status', 'running', ${at}) RETURNING id::int`,
        [jobId],
      )
    ).rows[0].id as number;
  const events = async () =>
    (
      await client.query(`SELECT id::int, created_at < now() - interval '1 day' AS old FROM task_events WHERE job_id = $1 ORDER BY id`, [
        jobId,
      ])
    ).rows;
  expect(await eventLog()).toEqual({ relkind: "p", partitions: 5 });
  const first = await insertEvent("now()");
  const second = await insertEvent("now() - interval '30 days'");
  const third = await insertEvent("now() + interval '1 day'");
  await migrate(db.url, "down");
  expect(await pendingMigrations(client)).toEqual([eventPartitions, gates, far, counts, finalizerIds]);
  expect(await eventLog()).toEqual({ relkind: "r", partitions: 0 });
  expect(await tables()).not.toContain("task_event_watermarks");
  expect(await events()).toEqual([
    { id: first, old: false },
    { id: second, old: true },
    { id: third, old: false },
  ]);
  const fourth = await insertEvent("now() - interval '2 days'");
  expect(fourth).toBeGreaterThan(third);
  // Up again over a table with rows: every row kept (the old table becomes a partition), ids go on.
  await migrate(db.url, "up");
  expect(await eventLog()).toEqual({ relkind: "p", partitions: 5 });
  expect((await events()).map((e) => e.id)).toEqual([first, second, third, fourth]);
  expect(await insertEvent("now()")).toBeGreaterThan(fourth);
  await client.query(`DELETE FROM task_events WHERE job_id = $1`, [jobId]);
  await migrate(db.url, "down");
  await migrate(db.url, "down");
  await migrate(db.url, "down");
  await migrate(db.url, "down");
  await migrate(db.url, "down");
  expect(await pendingMigrations(client)).toEqual([eventPartitions, gates, far, counts, finalizerIds]);

  // The one before: periodic schedules, their ticks, and the schedule a job was made by; down drops them.
  const schedules = expectedMigrations().at(-6)!;
  expect(schedules).toMatch(/schedules$/);
  await migrate(db.url, "down");
  expect(await pendingMigrations(client)).toEqual([schedules, eventPartitions, gates, far, counts, finalizerIds]);
  expect(await tables()).not.toContain("schedules");
  const jobColumns = await client.query(
    `SELECT 1 FROM information_schema.columns WHERE table_name = 'jobs' AND column_name = 'schedule_name'`,
  );
  expect(jobColumns.rows).toEqual([]);

  // The one before: flow control puts fair_rank in the claim order; its down migration takes it out
  // with the flow tables and columns.
  const claimIndex = async () =>
    (await client.query(`SELECT indexdef FROM pg_indexes WHERE indexname = 'tasks_claim_pending_idx'`)).rows.map((r) => r.indexdef);
  expect(await claimIndex()).toEqual([
    expect.stringMatching(/\(workload, priority DESC, fair_rank, created_at, chunk_index, run_after\) WHERE/),
  ]);
  // Then delayed jobs and finalizers; their down migration drops due_wakeups, the trigger and the columns.
  const delayedFinalizer = expectedMigrations().at(-7)!;
  expect(delayedFinalizer).toMatch(/delayed_finalizer$/);
  await migrate(db.url, "down");
  expect(await pendingMigrations(client)).toEqual([delayedFinalizer, schedules, eventPartitions, gates, far, counts, finalizerIds]);
  expect(await tables()).not.toContain("due_wakeups");
  const { rows: finalizerColumns } = await client.query(`SELECT column_name FROM information_schema.columns WHERE table_name = 'jobs'`);
  expect(finalizerColumns.map((r) => r.column_name)).not.toContain("parent_job_id");

  const flowControl = expectedMigrations().at(-8)!;
  expect(flowControl).toMatch(/flow_control$/);
  await migrate(db.url, "down");
  expect(await pendingMigrations(client)).toEqual([
    flowControl,
    delayedFinalizer,
    schedules,
    eventPartitions,
    gates,
    far,
    counts,
    finalizerIds,
  ]);
  expect(await tables()).toEqual(["job_watchers", "jobs", "pgmigrations", "task_events", "tasks", "workloads"]);
  const older = expectedMigrations().slice(0, -8);

  // The one before: the failure policy's columns on workloads and jobs; its down migration drops them and their type.
  const policyColumns = async () =>
    (
      await client.query(
        `SELECT table_name || '.' || column_name AS c FROM information_schema.columns WHERE column_name IN ('failure_policy', 'max_failed_tasks') ORDER BY 1`,
      )
    ).rows.map((r) => r.c);
  expect(await policyColumns()).toEqual([
    "jobs.failure_policy",
    "jobs.max_failed_tasks",
    "workloads.failure_policy",
    "workloads.max_failed_tasks",
  ]);
  await migrate(db.url, "down");
  const policy = older.at(-1)!;
  expect(policy).toMatch(/failure_policy$/);
  expect(await pendingMigrations(client)).toEqual([
    policy,
    flowControl,
    delayedFinalizer,
    schedules,
    eventPartitions,
    gates,
    far,
    counts,
    finalizerIds,
  ]);
  expect(await policyColumns()).toEqual([]);

  // The one before: the claim index ends with run_after, so a task in retry backoff is passed over in
  // the index; its down migration takes the column back out.
  expect(await claimIndex()).toEqual([expect.stringMatching(/\(workload, priority DESC, created_at, chunk_index, run_after\) WHERE/)]);
  await migrate(db.url, "down");
  const runAfter = older.at(-2)!;
  expect(runAfter).toMatch(/claim_index_run_after$/);
  expect(await pendingMigrations(client)).toEqual([
    runAfter,
    policy,
    flowControl,
    delayedFinalizer,
    schedules,
    eventPartitions,
    gates,
    far,
    counts,
    finalizerIds,
  ]);
  expect(await claimIndex()).toEqual([expect.stringMatching(/\(workload, priority DESC, created_at, chunk_index\) WHERE/)]);

  // The one before: a job's chunks are found through a plain index (CreateJob keeps them unique);
  // its down migration makes them a UNIQUE constraint again.
  const chunkKey = async () =>
    (await client.query(`SELECT conname FROM pg_constraint WHERE conrelid = 'tasks'::regclass AND contype = 'u'`)).rows.map(
      (r) => r.conname,
    );
  expect(await chunkKey()).toEqual([]);
  await migrate(db.url, "down");
  const plain = older.at(-3)!;
  expect(plain).toMatch(/plain_chunk_index$/);
  expect(await pendingMigrations(client)).toEqual([
    plain,
    runAfter,
    policy,
    flowControl,
    delayedFinalizer,
    schedules,
    eventPartitions,
    gates,
    far,
    counts,
    finalizerIds,
  ]);
  expect(await chunkKey()).toEqual(["tasks_job_chunk_key"]);

  // The lean hot path: the claim and completions write their own events (the trigger
  // skips rows whose update flips event_flip), no BEFORE INSERT trigger on the log, no foreign keys
  // or sha256 regexes on tasks. Its down migration puts all of that back.
  const triggers = async () =>
    (await client.query(`SELECT tgname FROM pg_trigger WHERE NOT tgisinternal ORDER BY tgname`)).rows.map((r) => r.tgname);
  const taskConstraints = async () =>
    (
      await client.query(`SELECT conname FROM pg_constraint WHERE conrelid = 'tasks'::regclass AND contype IN ('f', 'c') ORDER BY conname`)
    ).rows.map((r) => r.conname);
  const flipColumn = async () =>
    (await client.query(`SELECT column_name FROM information_schema.columns WHERE table_name = 'tasks' AND column_name = 'event_flip'`))
      .rows.length;
  expect(await triggers()).toEqual(["jobs_status_events", "tasks_status_events"]);
  expect(await taskConstraints()).not.toContain("tasks_job_id_fkey");
  expect(await taskConstraints()).not.toContain("tasks_input_sha256_check");
  expect(await flipColumn()).toBe(1);
  await migrate(db.url, "down");
  expect(await triggers()).toEqual(["jobs_status_events", "task_events_error_message", "tasks_status_events"]);
  expect(await taskConstraints()).toEqual(
    expect.arrayContaining(["tasks_input_sha256_check", "tasks_job_id_fkey", "tasks_result_sha256_check", "tasks_workload_fkey"]),
  );
  expect(await flipColumn()).toBe(0);
  const [storage, lean] = older.slice(-5, -3);
  expect(lean).toMatch(/lean_hot_path$/);
  expect(await pendingMigrations(client)).toEqual([
    lean,
    plain,
    runAfter,
    policy,
    flowControl,
    delayedFinalizer,
    schedules,
    eventPartitions,
    gates,
    far,
    counts,
    finalizerIds,
  ]);

  // The storage settings of the hot tables are set, and the migration before takes them back.
  const reloptions = async () =>
    (await client.query(`SELECT relname, reloptions FROM pg_class WHERE relname IN ('tasks', 'jobs') ORDER BY relname`)).rows.map((r) => [
      r.relname,
      r.reloptions,
    ]);
  expect(await reloptions()).toEqual([
    ["jobs", expect.arrayContaining(["autovacuum_vacuum_scale_factor=0.02"])],
    ["tasks", expect.arrayContaining(["autovacuum_vacuum_scale_factor=0.01", "autovacuum_vacuum_threshold=1000"])],
  ]);
  await migrate(db.url, "down");
  expect(await pendingMigrations(client)).toEqual([
    storage,
    lean,
    plain,
    runAfter,
    policy,
    flowControl,
    delayedFinalizer,
    schedules,
    eventPartitions,
    gates,
    far,
    counts,
    finalizerIds,
  ]);
  expect(await reloptions()).toEqual([
    ["jobs", null],
    ["tasks", null],
  ]);

  // The one before (inspection) takes back only its own column and index; the event log and its triggers stay.
  await migrate(db.url, "down");
  const previous = older.at(-6)!;
  expect(await pendingMigrations(client)).toEqual([
    previous,
    storage,
    lean,
    plain,
    runAfter,
    policy,
    flowControl,
    delayedFinalizer,
    schedules,
    eventPartitions,
    gates,
    far,
    counts,
    finalizerIds,
  ]);
  expect(await tables()).toEqual(["job_watchers", "jobs", "pgmigrations", "task_events", "tasks", "workloads"]);
  const { rows: columns } = await client.query(
    `SELECT column_name FROM information_schema.columns WHERE table_name = 'task_events' AND column_name = 'error_message'`,
  );
  expect(columns).toEqual([]);
  expect(await triggers()).toEqual(["jobs_status_events", "tasks_status_events"]);

  await migrate(db.url, "up");
  expect(await pendingMigrations(client)).toEqual([]);
});
