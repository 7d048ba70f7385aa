// Rows in COPY's text format, for copy-in.ts: columns separated by a tab, rows ended by a newline,
// NULL written as \N, and inside a column a backslash before the backslash itself and before the
// tab, newline and carriage return (COPY reads a backslash sequence as the one character).
// Nothing else is special: the data is sent in the client encoding (UTF-8), and a line of "\."
// cannot occur because every backslash of a value is doubled.

/** A column that is NULL. */
export const COPY_NULL = "\\N";

const SPECIAL = /[\\\t\n\r]/;
const SPECIAL_ALL = /[\\\t\n\r]/g;
const ESCAPES: Record<string, string> = { "\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r" };

/** A text value as a COPY column. */
export function copyText(v: string): string {
  return SPECIAL.test(v) ? v.replace(SPECIAL_ALL, (c) => ESCAPES[c]) : v;
}

/**
 * `count` rows, `row(i)` each (its columns joined by tabs, no newline), as UTF-8 Buffers of up to
 * `perChunk` rows: one CopyData message each, made when taken (copy-in.ts sends each as it comes).
 */
export function* copyChunks(count: number, row: (i: number) => string, perChunk = 1000): Generator<Buffer> {
  for (let start = 0; start < count; start += perChunk) {
    const end = Math.min(count, start + perChunk);
    const lines = new Array<string>(end - start + 1);
    for (let i = start; i < end; i++) lines[i - start] = row(i);
    lines[end - start] = "";
    yield Buffer.from(lines.join("\n"), "utf8");
  }
}
