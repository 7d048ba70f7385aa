// COPY FROM STDIN as a large CreateJob sends its tasks (src/store/postgres/sql/copy-in.ts, copy-text.ts):
// values read back as they were written, whatever the characters (the escaped backslash, tab,
// newline and carriage return, a value that looks like \N or \., non-ASCII and astral
// characters), NULL as NULL, rows split over several CopyData messages; and a failing COPY
// rejects with the server's error and leaves the connection usable, also when it fails before
// the server takes the data sent right behind the statement.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type pg from "pg";
import { copyIn } from "../../src/store/postgres/sql/copy-in.js";
import { COPY_NULL, copyChunks, copyText } from "../../src/store/postgres/sql/copy-text.js";
import { queueFixture, type QueueFixture } from "../support/queue.js";

let f: QueueFixture;
let c: pg.PoolClient;
beforeAll(async () => {
  f = await queueFixture();
  c = await f.pool.connect();
  await c.query("CREATE TEMP TABLE copied (i int PRIMARY KEY, t text, j jsonb)");
});
afterAll(async () => {
  c?.release();
  await f?.close();
});

const TEXTS = [
  "",
  "plain",
  "back\\slash",
  "\\",
  "\\.",
  "\\N",
  "tab\tnewline\ncr\r",
  "\t",
  "\n",
  "ünïcødé ✓ 𝄞",
  '{"json": "object", "n": [1, 2]}',
  "\u0001\u001f\u007f",
];

describe("COPY FROM STDIN", () => {
  it("reads every value back as written, over several chunks, NULL as NULL", async () => {
    await c.query("TRUNCATE copied");
    const values: (string | null)[] = [...TEXTS, null];
    const n = 2500;
    const value = (i: number) => values[i % values.length];
    const json = (i: number) => JSON.stringify({ s: TEXTS[i % TEXTS.length] });
    const chunks = [
      ...copyChunks(n, (i) => {
        const v = value(i);
        return i + "\t" + (v === null ? COPY_NULL : copyText(v)) + "\t" + copyText(json(i));
      }),
    ];
    expect(chunks.length).toBe(3);
    expect(await copyIn(c, "COPY copied (i, t, j) FROM STDIN", chunks)).toBe(n);
    const { rows } = await c.query("SELECT i, t, j::text AS j FROM copied ORDER BY i");
    expect(rows).toHaveLength(n);
    for (const r of rows) {
      expect(r.t).toBe(value(r.i));
      expect(JSON.parse(r.j)).toEqual(JSON.parse(json(r.i)));
    }
  });

  it("rejects with the server's error, and the connection answers the next query", async () => {
    await c.query("TRUNCATE copied");
    const chunks = copyChunks(1500, (i) => `${i % 1200}\tx\t{}`);
    await expect(copyIn(c, "COPY copied (i, t, j) FROM STDIN", chunks)).rejects.toThrow(/duplicate key/);
    expect((await c.query("SELECT count(*)::int AS n FROM copied")).rows[0].n).toBe(0);
    await expect(copyIn(c, "COPY copied (i, t, j) FROM STDIN", [Buffer.from("1\tnot json\t{\n")])).rejects.toThrow(/json/i);
    expect((await c.query("SELECT 1 AS one")).rows[0].one).toBe(1);
  });

  it("a statement that fails before copy-in mode drops the data sent behind it, and the connection answers the next query", async () => {
    const chunks = [...copyChunks(1500, (i) => `${i}\tx\t{}`)];
    await expect(copyIn(c, "COPY copied (i, nope) FROM STDIN", chunks)).rejects.toThrow(/nope/);
    expect((await c.query("SELECT count(*)::int AS n FROM copied")).rows[0].n).toBe(0);
    expect(await copyIn(c, "COPY copied (i, t, j) FROM STDIN", chunks)).toBe(1500);
  });

  it("data that fails to be made fails the COPY: nothing is written, the promise rejects with that error", async () => {
    await c.query("TRUNCATE copied");
    const chunks = copyChunks(3000, (i) => {
      if (i === 2500) throw new Error("no row 2500");
      return `${i}\tx\t{}`;
    });
    await expect(copyIn(c, "COPY copied (i, t, j) FROM STDIN", chunks)).rejects.toThrow("no row 2500");
    expect((await c.query("SELECT count(*)::int AS n FROM copied")).rows[0].n).toBe(0);
  });
});
