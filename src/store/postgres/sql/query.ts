// The typed SQL boundary: each statement of the store is defined once with its parameters by name
// and the type of its rows, and run through that definition, so a call site writes
// `await LIST_TASKS.run(c, { jobId, afterChunk, limit })` and gets `TaskRow[]`, never pg's `any`.
//
// A statement of one piece keeps PostgreSQL's positional `$1..$N`, and the order of its parameters
// is written in one place, the definition's `values` function (`(p) => [p.jobId, p.limit]`:
// element i is `$i+1`), typed against the parameters; a call that sends another number of values
// than the text has placeholders throws before it is sent. A statement composed from fragments
// (CreateJob's, the claim's) names its parameters instead (`@jobId`, namedQuery below): each
// fragment writes the names it reads, and the names become `$1..$N` once, when the statement is
// defined, so tests and benchmarks EXPLAIN or PREPARE the same numbered text PostgreSQL runs.
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

/**
 * A statement whose text names its parameters (`@jobId`) instead of numbering them: for statements
 * composed from fragments, where numbered placeholders had to be handed to each fragment as strings
 * and kept in order by comments. At definition (once, at import) each name becomes `$i`, its
 * position in `order`, and the values function is made from the same list, so a call costs what
 * defineQuery's does. `order` is typed against the parameters, and a name the text uses that
 * `order` lacks, or one `order` lists that the text never uses, throws here; each value is taken
 * by its name, so two parameters cannot be swapped. A name is `@` and a letter, not after `<`, `>`
 * or `@` (jsonb's `<@` and `@>` are operators), outside quotes.
 *
 *   const JOB_TASKS = namedQuery<{ jobId: string; limit: number }, TaskRow>(
 *     "leasehold_job_tasks", `SELECT * FROM tasks WHERE job_id = @jobId LIMIT @limit`, ["jobId", "limit"]);
 */
export function namedQuery<P, R = never>(name: string | null, text: string, order: readonly (keyof P & string)[]): Query<P, R> {
  const numbered = numberParameters(name ?? text.trim().slice(0, 60), text, order);
  return defineQuery<P, R>(name, numbered, order.length === 0 ? undefined : valuesByName<P>(order));
}

/** `text` with each `@name` replaced by `$i`, i its position in `order` (1-based). */
export function numberParameters(label: string, text: string, order: readonly string[]): string {
  const position = new Map(order.map((n, i) => [n, i + 1]));
  if (position.size !== order.length) throw new Error(`namedQuery ${JSON.stringify(label)}: a name is listed twice in ${order.join(", ")}`);
  const used = new Set<string>();
  // Quoted text ('…', "…") is copied as it is; outside it, @name (not <@, @>, @@) is a parameter.
  const out = text.replace(/'(?:[^']|'')*'|"(?:[^"]|"")*"|(?<![<>@\w])@([A-Za-z_][A-Za-z0-9_]*)/g, (m, n: string | undefined) => {
    if (n === undefined) return m;
    const i = position.get(n);
    if (i === undefined) throw new Error(`namedQuery ${JSON.stringify(label)}: @${n} is not among its parameters (${order.join(", ")})`);
    used.add(n);
    return `$${i}`;
  });
  const unused = order.filter((n) => !used.has(n));
  if (unused.length > 0)
    throw new Error(`namedQuery ${JSON.stringify(label)}: ${unused.map((n) => "@" + n).join(", ")} never used in its text`);
  return out;
}

/**
 * `(p) => [p.a, p.b, …]` for the names in order, made once per statement. Written out as a
 * function's source because a loop reading `p[names[i]]` is a megamorphic keyed load (58 ns a call
 * for five parameters against 1.7 ns, measured in the header of this file); the names are checked
 * to be identifiers first, so nothing but property reads is ever compiled.
 */
function valuesByName<P>(order: readonly string[]): (p: P) => unknown[] {
  for (const n of order)
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(n)) throw new Error(`namedQuery: ${JSON.stringify(n)} is not a parameter name`);
  return new Function("p", `return [${order.map((n) => `p.${n}`).join(", ")}];`) as (p: P) => unknown[];
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
