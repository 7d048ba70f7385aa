-- Up Migration

/*
 * The event log in time partitions (range on created_at), so retention drops a whole partition (a
 * file unlinked, a few hundred bytes of WAL) instead of deleting its rows in batches (a WAL record
 * and a dead tuple per row, and the vacuum after). docs/scaling.md has the measurement.
 * - Partitions: one day each to start with; the maintenance loop (event-partitions.ts) creates them
 *   ahead of time with the interval it is configured with, each starting where the last one ends,
 *   and drops those wholly older than RETENTION_DAYS.
 * - task_events_default catches a row whose partition does not exist (the loop was down for longer
 *   than it creates ahead); the loop moves such rows into their partition when it creates it.
 * - The table as it was becomes the first partition (everything up to the end of today, UTC):
 *   attached, not copied, so the migration reads it once and writes none of it.
 * - Still no primary key (the index on id measured ~8% of claim + complete throughput; on a
 *   partitioned table it would have to be (id, created_at) anyway). Ids stay one sequence, carried
 *   over from the old table, so a resumed watch stream's Last-Event-ID keeps its meaning.
 * - The statements that insert events are unchanged; each insert is routed to its partition by
 *   created_at (its default, now()).
 */
DO $$
DECLARE
  seq text := pg_get_serial_sequence('task_events', 'id');
  last_id bigint;
  today timestamptz := date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
  boundary timestamptz;
  lower_bound timestamptz;
BEGIN
  EXECUTE format('SELECT greatest((SELECT coalesce(max(id), 0) FROM task_events), (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM %s))', seq)
    INTO last_id;
  SELECT greatest(today + interval '1 day', date_trunc('day', max(created_at) AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' + interval '1 day')
    INTO boundary FROM task_events;

  ALTER TABLE task_events RENAME TO task_events_history;
  ALTER INDEX task_events_job_xid_idx RENAME TO task_events_history_job_xid_idx;
  -- Its sequence goes with the identity; the new table's takes over from last_id.
  ALTER TABLE task_events_history ALTER COLUMN id DROP IDENTITY;

  CREATE TABLE task_events (
    id                 bigint GENERATED ALWAYS AS IDENTITY,
    job_id             uuid NOT NULL,
    task_id            uuid,
    chunk_index        integer,
    kind               text NOT NULL,
    status             text,
    previous_status    text,
    attempt            integer,
    worker_id          text,
    progress           double precision,
    message            text,
    partial_result_uri text,
    error_code         text,
    xid                xid8 NOT NULL DEFAULT pg_current_xact_id(),
    created_at         timestamptz NOT NULL DEFAULT now(),
    error_message      text
  ) PARTITION BY RANGE (created_at);
  IF last_id > 0 THEN
    PERFORM setval(pg_get_serial_sequence('task_events', 'id'), last_id);
  END IF;

  EXECUTE format('ALTER TABLE task_events ATTACH PARTITION task_events_history FOR VALUES FROM (MINVALUE) TO (%L)', boundary);
  EXECUTE format('ALTER TABLE task_events_history RENAME TO %I', 'task_events_until_' || to_char(boundary AT TIME ZONE 'UTC', 'YYYYMMDD_HH24MI'));
  -- Finds the old table's index on (job_id, xid) and attaches it rather than building another.
  CREATE INDEX task_events_job_xid_idx ON task_events (job_id, xid);

  -- Three days ahead; the maintenance loop keeps it so from now on.
  lower_bound := boundary;
  FOR i IN 1..3 LOOP
    EXECUTE format(
      'CREATE TABLE %I PARTITION OF task_events FOR VALUES FROM (%L) TO (%L) '
      'WITH (autovacuum_vacuum_insert_scale_factor = 0.05, autovacuum_vacuum_insert_threshold = 10000)',
      'task_events_' || to_char(lower_bound AT TIME ZONE 'UTC', 'YYYYMMDD_HH24MI'), lower_bound, lower_bound + interval '1 day');
    lower_bound := lower_bound + interval '1 day';
  END LOOP;
END $$;

CREATE TABLE task_events_default PARTITION OF task_events DEFAULT
  WITH (autovacuum_vacuum_insert_scale_factor = 0.05, autovacuum_vacuum_insert_threshold = 10000);

/*
 * Watermarks of the log, for the watch reads: every event with created_at < upper has an xid below
 * xid_bound. A watch stream reads "events committed since snapshot S" (xid >= xmin(S)), which
 * without a time bound probes every partition's index; with the newest watermark whose xid_bound
 * <= xmin(S), it may add created_at >= upper, which PostgreSQL uses to skip the older partitions
 * (run-time pruning; the coordinator caches the watermarks and passes the bound as a parameter:
 * src/store/postgres/state/event-floors.ts). The maintenance pass records one at a partition boundary
 * once no transaction that started before it is still running (an event's created_at is its
 * transaction's start, so none can be written below the boundary after that), with the xid
 * horizon of that moment.
 */
CREATE TABLE task_event_watermarks (
  upper     timestamptz PRIMARY KEY,
  xid_bound xid8 NOT NULL
);

-- Down Migration

DROP TABLE task_event_watermarks;

/*
 * Back to one table: every partition's rows copied into it, ids and the sequence as they were.
 */
ALTER TABLE task_events RENAME TO task_events_partitioned;
ALTER INDEX task_events_job_xid_idx RENAME TO task_events_partitioned_job_xid_idx;
DO $$
BEGIN
  EXECUTE format('ALTER SEQUENCE %s RENAME TO task_events_partitioned_id_seq', pg_get_serial_sequence('task_events_partitioned', 'id'));
END $$;

CREATE TABLE task_events (
  id                 bigint GENERATED ALWAYS AS IDENTITY,
  job_id             uuid NOT NULL,
  task_id            uuid,
  chunk_index        integer,
  kind               text NOT NULL,
  status             text,
  previous_status    text,
  attempt            integer,
  worker_id          text,
  progress           double precision,
  message            text,
  partial_result_uri text,
  error_code         text,
  xid                xid8 NOT NULL DEFAULT pg_current_xact_id(),
  created_at         timestamptz NOT NULL DEFAULT now(),
  error_message      text
);
INSERT INTO task_events OVERRIDING SYSTEM VALUE
  SELECT id, job_id, task_id, chunk_index, kind, status, previous_status, attempt, worker_id, progress, message,
         partial_result_uri, error_code, xid, created_at, error_message
  FROM task_events_partitioned;
SELECT setval(pg_get_serial_sequence('task_events', 'id'), s.last_value, s.is_called) FROM task_events_partitioned_id_seq s;
DROP TABLE task_events_partitioned;
CREATE INDEX task_events_job_xid_idx ON task_events (job_id, xid);
ALTER TABLE task_events SET (autovacuum_vacuum_insert_scale_factor = 0.05, autovacuum_vacuum_insert_threshold = 10000);
