// The typed SQL boundary: each statement of the store is defined once with its parameters by name
// and the type of its rows, and run through that definition, so a call site writes
// `await LIST_TASKS.run(c, { jobId, afterChunk, limit })` and gets `TaskRow[]`, never pg's `any`.
//
// The SQL keeps PostgreSQL's positional `$1..$N`: statements are composed from fragments that
// number their parameters (claim.ts), and tests and benchmarks EXPLAIN or PREPARE the same text.
// The order of the parameters is written in one place, the definition's `values` function
// (`(p) => [p.jobId, p.limit]`: element i is `$i+1`), typed against the parameters; a call that
// sends another number of values than the text has placeholders throws before it is sent.
//
// The hot path's cost stays what it was: the name of a prepared statement is kept (PostgreSQL
// parses and plans it once per connection), and a call does no string work, only the values
// array. Why a function and not a list of names: a loop reading `p[names[i]]` is a megamorphic
// keyed load, 58 ns a call for five parameters against 1.7 ns for `(p) => [p.a, …]` (node 20,
// median of 9 rounds); bench/define-query.ts measures the whole call against a hand-written one.

/** What runs a statement: a pool, a checked-out client or a standalone client. */
export interface Queryable {
  query(config: { name?: string; text: string; values?: unknown[] }): Promise<{ rows: unknown[] }>;
}

/** The parameters of a statement that takes none. */
export type NoParams = Record<never, never>;

/** A statement's parameters as a call passes them: none for a statement without. */
type ParamsArg<P> = [keyof P] extends [never] ? [params?: P] : [params: P];

export interface Query<P, R> {
  /**
   * The prepared statement's name, or undefined for a statement sent unnamed (parsed and planned
   * on each call): one run rarely, whose plan is not worth a slot on every connection, and whose
   * `SELECT *` would fail as a kept plan once a migration adds a column.
   */
  readonly name: string | undefined;
  readonly text: string;
  /** How many placeholders ($1..$N) the text has. */
  readonly arity: number;
  /** Every row of the answer. */
  run(c: Queryable, ...params: ParamsArg<P>): Promise<R[]>;
  /** The answer's one row (a statement that always answers one: an aggregate, `SELECT … FROM (SELECT 1) LEFT JOIN`). */
  one(c: Queryable, ...params: ParamsArg<P>): Promise<R>;
  /** The answer's first row, or undefined when there is none (a lookup by key, an UPDATE … RETURNING that may match nothing). */
  maybe(c: Queryable, ...params: ParamsArg<P>): Promise<R | undefined>;
}

/**
 * A statement with named parameters and typed rows. `name` null sends it unnamed (see Query.name);
 * `values` maps the parameters to `$1..$N` in order (omitted for a statement without any).
 *
 *   const JOB_EXISTS = defineQuery<{ jobId: string }, { found: boolean }>(
 *     null, `SELECT EXISTS (SELECT 1 FROM jobs WHERE id = $1) AS found`, (p) => [p.jobId]);
 *   const { found } = await JOB_EXISTS.one(c, { jobId });
 */
export function defineQuery<P = NoParams, R = never>(name: string | null, text: string, values?: (p: P) => unknown[]): Query<P, R> {
  const pgName = name ?? undefined;
  const label = name ?? text.trim().slice(0, 60);
  const arity = placeholders(label, text);
  if (arity > 0 && values === undefined) throw new Error(`defineQuery ${JSON.stringify(label)}: the text has $1..$${arity} but no values`);
  const send = (c: Queryable, p: P | undefined): Promise<R[]> => {
    if (values === undefined) return c.query({ name: pgName, text }).then(rowsOf) as Promise<R[]>;
    const v = values(p!);
    if (v.length !== arity) return Promise.reject(new Error(`${label}: ${v.length} values for $1..$${arity}`));
    return c.query({ name: pgName, text, values: v }).then(rowsOf) as Promise<R[]>;
  };
  return {
    name: pgName,
    text,
    arity,
    // (c, p) rather than (c, ...params): no rest array per call.
    run: send as Query<P, R>["run"],
    one: ((c: Queryable, p?: P) =>
      send(c, p).then((rows) => {
        if (rows.length !== 1) throw new Error(`${label} answered ${rows.length} rows where it always answers one`);
        return rows[0];
      })) as Query<P, R>["one"],
    maybe: ((c: Queryable, p?: P) => send(c, p).then(first)) as Query<P, R>["maybe"],
  };
}

const rowsOf = (res: { rows: unknown[] }) => res.rows;
const first = <T>(rows: T[]): T | undefined => rows[0];

/** The number of placeholders: the text uses exactly $1..$N (a gap is a mistake PostgreSQL would only report at the first call). */
function placeholders(label: string, text: string): number {
  const used = new Set<number>();
  for (const m of text.matchAll(/\$(\d+)/g)) used.add(Number(m[1]));
  const n = used.size === 0 ? 0 : Math.max(...used);
  if (used.has(0) || used.size !== n) {
    const list = [...used].sort((a, b) => a - b).join(", $");
    throw new Error(`defineQuery ${JSON.stringify(label)}: the text's placeholders ($${list}) are not $1..$${n}`);
  }
  return n;
}
