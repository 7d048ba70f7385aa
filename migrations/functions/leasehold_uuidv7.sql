/*
 * A finalizer job and its task get time-ordered ids (UUID version 7), as every other job and task
 * does (the coordinator makes those, src/store/postgres/sql/uuidv7.ts): ids that ascend with time land
 * at the primary key's right edge, and sort by creation like the rest. The finalizer is made by
 * leasehold_enqueue_finalizer (its own file), inside the statement that ends its parent, so its
 * ids are made in SQL: leasehold_uuidv7 writes the milliseconds of clock_timestamp() over the first 48 bits of a
 * random (version 4) UUID and turns its version nibble from 4 into 7 (bits 52 and 53); the
 * variant bits stay. PostgreSQL 18's own uuidv7() is not in 15 and 17.
 */
CREATE OR REPLACE FUNCTION leasehold_uuidv7() RETURNS uuid LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
  SELECT encode(
    set_bit(set_bit(
      overlay(uuid_send(gen_random_uuid())
              PLACING substring(int8send((extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
              FROM 1 FOR 6),
      52, 1), 53, 1),
    'hex')::uuid
$$;
