// The type parsers the store's connections use: pg's own, except that timestamptz values are
// memoized by their text. The rows of one statement mostly share their timestamps (a claim's
// tasks were created together and leased by one now(); a batch completes at one now()), and
// pg's parser spends ~0.5 µs and a Date on each of a task row's five. The Dates handed out are
// shared between rows: nothing in the coordinator mutates a Date it did not create.
import pg from "pg";

const TIMESTAMPTZ = 1184;
/** Enough for every distinct timestamp of a large batch; cleared, not evicted, when full. */
const MAX_MEMO = 512;

const parseTimestamptz = pg.types.getTypeParser(TIMESTAMPTZ, "text") as (text: string) => Date;
const memo = new Map<string, Date>();

function memoTimestamptz(text: string): Date {
  let d = memo.get(text);
  if (d === undefined) {
    if (memo.size >= MAX_MEMO) memo.clear();
    d = parseTimestamptz(text);
    memo.set(text, d);
  }
  return d;
}

/** pg's `types` option: the default parsers, with timestamptz memoized. */
export const pgTypes = {
  getTypeParser(oid: number, format?: "text" | "binary"): unknown {
    if (oid === TIMESTAMPTZ && format !== "binary") return memoTimestamptz;
    return format === undefined ? pg.types.getTypeParser(oid) : pg.types.getTypeParser(oid, format);
  },
} as pg.CustomTypesConfig;
