// The array literals CREATE_JOB sends (src/store/postgres/sql/arrays.ts) read back, in PostgreSQL, as the
// arrays they were made from, whatever the characters: quotes, backslashes, braces, commas, spaces,
// the word NULL, non-ASCII and astral characters; and as pg's own serialisation of the same array.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createRequire } from "node:module";
import { intArrayLiteral, textArrayLiteral } from "../../src/store/postgres/sql/arrays.js";
import { queueFixture, type QueueFixture } from "../support/queue.js";

/** pg's own serialisation of a parameter (untyped in @types/pg). */
const { prepareValue } = createRequire(import.meta.url)("pg/lib/utils.js") as { prepareValue(v: unknown): unknown };

let f: QueueFixture;
beforeAll(async () => {
  f = await queueFixture();
});
afterAll(async () => {
  await f?.close();
});

const TEXTS = [
  "",
  "plain",
  'quote " inside',
  "back\\slash",
  '\\"',
  '"',
  "\\",
  "{braces}",
  "a,b",
  " leading and trailing ",
  "NULL",
  "null",
  "ünïcødé ✓ 𝄞",
  "tab\tnewline\ncr\r",
  '{"json": "object", "n": [1, 2]}',
  "\u0001\u001f\u007f",
];

describe("array literals", () => {
  it("read back as the same text[] (with NULLs), as pg's own literal does", async () => {
    const values: (string | null)[] = [...TEXTS, null, ...TEXTS.map((t) => t + t)];
    const literal = textArrayLiteral(values);
    const { rows } = await f.pool.query("SELECT $1::text[] AS mine, $2::text[] AS theirs", [literal, values]);
    expect(rows[0].mine).toEqual(values);
    expect(rows[0].theirs).toEqual(values);
    expect(textArrayLiteral([])).toBe(prepareValue([]));
  });

  it("read back as the same jsonb[] and uuid[]", async () => {
    const json = [{}, { a: 'x"y\\z' }, { "k\"'": ["ü", null, 1.5] }].map((o) => JSON.stringify(o));
    const ids = ["0193a1b2-0000-7000-8000-000000000001", "0193a1b2-0000-7000-8000-000000000002"];
    const { rows } = await f.pool.query("SELECT $1::text[]::jsonb[] AS json, $2::uuid[] AS ids", [
      textArrayLiteral(json),
      textArrayLiteral(ids),
    ]);
    expect(rows[0].json).toEqual(json.map((j) => JSON.parse(j)));
    expect(rows[0].ids).toEqual(ids);
  });

  it("reads back int[] as the same numbers", async () => {
    const values = [0, 1, -1, 2147483647, -2147483648, 42];
    const { rows } = await f.pool.query("SELECT $1::int[] AS v", [intArrayLiteral(values)]);
    expect(rows[0].v).toEqual(values);
    const { rows: empty } = await f.pool.query("SELECT $1::int[] AS v", [intArrayLiteral([])]);
    expect(empty[0].v).toEqual([]);
  });

  it("is pg's own literal, character for character", () => {
    for (const t of TEXTS) expect(textArrayLiteral([t])).toBe(prepareValue([t]));
  });
});
