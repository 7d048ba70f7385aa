// namedQuery (src/store/postgres/sql/query.ts): composed statements name their parameters (@jobId)
// and the names become $1..$N once, at definition. No database: what is checked is the text and
// the values each call sends, on a client that records them.
import { describe, expect, it } from "vitest";
import { CREATE_JOB, CREATE_JOB_ALONE } from "../../src/store/postgres/operations/create-job-core.js";
import { namedQuery, numberParameters, type Queryable } from "../../src/store/postgres/sql/query.js";

function recorder(): Queryable & { sent: { text: string; values?: unknown[] }[] } {
  const sent: { text: string; values?: unknown[] }[] = [];
  return {
    sent,
    query(config) {
      sent.push({ text: config.text, values: config.values });
      return Promise.resolve({ rows: [] });
    },
  };
}

describe("namedQuery", () => {
  it("numbers each name by its place in the order, wherever and however often the text uses it", () => {
    const text = numberParameters("t", "SELECT @b, @a, @b::int FROM x WHERE y = @a", ["a", "b"]);
    expect(text).toBe("SELECT $2, $1, $2::int FROM x WHERE y = $1");
  });

  it("leaves quoted text, jsonb's <@ and @> operators and @@ alone", () => {
    const text = numberParameters("t", `SELECT '@a', "@a", x <@ @a::jsonb, y @> '{}', z @@ q, 'it''s @a' FROM t`, ["a"]);
    expect(text).toBe(`SELECT '@a', "@a", x <@ $1::jsonb, y @> '{}', z @@ q, 'it''s @a' FROM t`);
  });

  it("refuses a name the order lacks, a listed name the text never uses, and a name listed twice", () => {
    expect(() => numberParameters("t", "SELECT @a, @c", ["a"])).toThrow(/@c is not among its parameters/);
    expect(() => numberParameters("t", "SELECT @a", ["a", "b"])).toThrow(/@b never used/);
    expect(() => numberParameters("t", "SELECT @a", ["a", "a"])).toThrow(/listed twice/);
  });

  it("sends each value by its name, so the order of the object's keys does not matter", async () => {
    const q = namedQuery<{ limit: number; jobId: string }, never>("named_test", "SELECT * FROM tasks WHERE job_id = @jobId LIMIT @limit", [
      "jobId",
      "limit",
    ]);
    const c = recorder();
    await q.run(c, { limit: 5, jobId: "j" });
    expect(q.text).toBe("SELECT * FROM tasks WHERE job_id = $1 LIMIT $2");
    expect(q.arity).toBe(2);
    expect(c.sent).toEqual([{ text: q.text, values: ["j", 5] }]);
  });

  it("refuses a parameter name that is not an identifier (nothing else is ever compiled)", () => {
    expect(() => namedQuery<Record<string, unknown>, never>(null, "SELECT 1", [])).not.toThrow();
    expect(() => numberParameters("t", "SELECT @a", ["a"])).not.toThrow();
    expect(() => namedQuery<Record<string, unknown>, never>(null, "SELECT @a", ["a];process.exit(1);//" as "a"])).toThrow();
  });

  it("CreateJob's statements have no placeholder left unnamed: $1..$33 and $1..$24, every one sent", () => {
    for (const q of [CREATE_JOB, CREATE_JOB_ALONE]) {
      expect(q.text).not.toMatch(/(?<![<>@\w])@[A-Za-z_]/);
      const used = new Set([...q.text.matchAll(/\$(\d+)/g)].map((m) => Number(m[1])));
      expect(used.size).toBe(q.arity);
    }
    expect(CREATE_JOB.arity).toBe(33);
    expect(CREATE_JOB_ALONE.arity).toBe(24);
  });
});
