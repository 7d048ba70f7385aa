// The store's connections memoize timestamptz values by their text (src/store/postgres/sql/pg-types.ts):
// every value still reads as the instant PostgreSQL holds, past the memo's size, whatever the
// session's time zone, with the other types parsed as pg parses them.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { queueFixture, type QueueFixture } from "../support/queue.js";

let f: QueueFixture;
beforeAll(async () => {
  f = await queueFixture();
});
afterAll(async () => {
  await f?.close();
});

describe("timestamptz through the store's pool", () => {
  it("reads every value as its instant, repeated and distinct, beyond the memo's size", async () => {
    // 1,500 rows over 700 distinct instants (some a microsecond apart, some before 1970), read
    // twice so the second pass meets remembered and cleared entries alike.
    const sql = `
      SELECT ts, (extract(epoch FROM ts) * 1000)::float8 AS ms
      FROM (SELECT timestamptz '2026-11-30 12:34:56.789+00' + make_interval(secs => (i % 700) * 0.007001)
                   - CASE WHEN i % 11 = 0 THEN interval '60 years' ELSE interval '0' END AS ts
            FROM generate_series(0, 1499) i) s`;
    for (let pass = 0; pass < 2; pass++) {
      const { rows } = await f.pool.query<{ ts: Date; ms: number }>(sql);
      expect(rows).toHaveLength(1500);
      for (const r of rows) {
        expect(r.ts).toBeInstanceOf(Date);
        // pg's Date keeps milliseconds: the instant truncated to them.
        expect(r.ts.getTime()).toBe(Math.floor(r.ms));
      }
    }
  });

  it("reads the same instant written in another time zone, and leaves other types as pg does", async () => {
    const c = await f.pool.connect();
    try {
      await c.query("SET TIME ZONE 'America/St_Johns'");
      const { rows } = await c.query<{ ts: Date; d: string; n: number; j: unknown; b: string }>(
        `SELECT timestamptz '2026-11-30 12:34:56.789+00' AS ts, date '2026-11-30' AS d, 7::int AS n, '{"a": [1]}'::jsonb AS j, 9007199254740993::bigint AS b`,
      );
      expect(rows[0].ts.toISOString()).toBe("2026-11-30T12:34:56.789Z");
      expect(rows[0].n).toBe(7);
      expect(rows[0].j).toEqual({ a: [1] });
      expect(rows[0].b).toBe("9007199254740993");
      expect(rows[0].d).toBeInstanceOf(Date);
    } finally {
      await c.query("RESET TIME ZONE");
      c.release();
    }
  });
});
