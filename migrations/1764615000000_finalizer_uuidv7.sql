-- Up Migration

/*
 * A finalizer job and its task get time-ordered ids (UUID version 7), as every other job and task
 * does (the coordinator makes those, src/store/postgres/uuidv7.ts): ids that ascend with time land
 * at the primary key's right edge, and sort by creation like the rest. The finalizer is made by
 * the trigger below, inside the statement that ends its parent, so its ids are made in SQL:
 * leasehold_uuidv7 writes the milliseconds of clock_timestamp() over the first 48 bits of a
 * random (version 4) UUID and turns its version nibble from 4 into 7 (bits 52 and 53); the
 * variant bits stay. PostgreSQL 18's own uuidv7() is not in 15 and 17.
 */
CREATE FUNCTION leasehold_uuidv7() RETURNS uuid LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
  SELECT encode(
    set_bit(set_bit(
      overlay(uuid_send(gen_random_uuid())
              PLACING substring(int8send((extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
              FROM 1 FOR 6),
      52, 1), 53, 1),
    'hex')::uuid
$$;

-- The function of the delayed_finalizer migration, but for the two ids.
CREATE OR REPLACE FUNCTION leasehold_enqueue_finalizer() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  fin_id uuid := leasehold_uuidv7();
  params jsonb;
  w workloads%ROWTYPE;
BEGIN
  IF NEW.status <> 'completed' AND NOT NEW.finalizer_on_failure THEN
    RETURN NEW;
  END IF;
  SELECT * INTO w FROM workloads WHERE name = NEW.finalizer_workload;
  IF NOT FOUND THEN
    RETURN NEW;
  END IF;
  params := coalesce(NEW.finalizer_parameters, '{}'::jsonb)
    || jsonb_build_object('parent_job_id', NEW.id::text, 'parent_status', NEW.status::text);
  INSERT INTO jobs (id, workload, input_uri, input_sha256, parameters, priority, traceparent, failure_policy, max_failed_tasks, parent_job_id)
  VALUES (fin_id, w.name, 'leasehold:jobs/' || NEW.id::text, encode(sha256(convert_to(NEW.id::text, 'UTF8')), 'hex'), params,
    NEW.priority, NEW.traceparent, w.failure_policy, 0, NEW.id)
  ON CONFLICT DO NOTHING;
  IF NOT FOUND THEN
    RETURN NEW;
  END IF;
  INSERT INTO tasks (id, job_id, chunk_index, workload, input_uri, input_sha256, parameters, max_attempts, priority, traceparent)
  VALUES (leasehold_uuidv7(), fin_id, 0, w.name, 'leasehold:jobs/' || NEW.id::text, encode(sha256(convert_to(NEW.id::text, 'UTF8')), 'hex'), params,
    w.max_attempts, NEW.priority, NEW.traceparent);
  -- The wake-up a new job sends (channels.ts), delivered at commit.
  PERFORM pg_notify('leasehold_tasks', w.name || ':1');
  NEW.finalizer_job_id := fin_id;
  RETURN NEW;
END $$;

-- Down Migration

CREATE OR REPLACE FUNCTION leasehold_enqueue_finalizer() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  fin_id uuid := gen_random_uuid();
  params jsonb;
  w workloads%ROWTYPE;
BEGIN
  IF NEW.status <> 'completed' AND NOT NEW.finalizer_on_failure THEN
    RETURN NEW;
  END IF;
  SELECT * INTO w FROM workloads WHERE name = NEW.finalizer_workload;
  IF NOT FOUND THEN
    RETURN NEW;
  END IF;
  params := coalesce(NEW.finalizer_parameters, '{}'::jsonb)
    || jsonb_build_object('parent_job_id', NEW.id::text, 'parent_status', NEW.status::text);
  INSERT INTO jobs (id, workload, input_uri, input_sha256, parameters, priority, traceparent, failure_policy, max_failed_tasks, parent_job_id)
  VALUES (fin_id, w.name, 'leasehold:jobs/' || NEW.id::text, encode(sha256(convert_to(NEW.id::text, 'UTF8')), 'hex'), params,
    NEW.priority, NEW.traceparent, w.failure_policy, 0, NEW.id)
  ON CONFLICT DO NOTHING;
  IF NOT FOUND THEN
    RETURN NEW;
  END IF;
  INSERT INTO tasks (job_id, chunk_index, workload, input_uri, input_sha256, parameters, max_attempts, priority, traceparent)
  VALUES (fin_id, 0, w.name, 'leasehold:jobs/' || NEW.id::text, encode(sha256(convert_to(NEW.id::text, 'UTF8')), 'hex'), params,
    w.max_attempts, NEW.priority, NEW.traceparent);
  -- The wake-up a new job sends (channels.ts), delivered at commit.
  PERFORM pg_notify('leasehold_tasks', w.name || ':1');
  NEW.finalizer_job_id := fin_id;
  RETURN NEW;
END $$;

DROP FUNCTION leasehold_uuidv7();
