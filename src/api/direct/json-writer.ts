// Messages → JSON text without reflection per call: for a message type, a writer compiled once
// from its descriptor (one small function per field), producing exactly what protobuf-es'
// toJsonString produces with the server's options (proto field names, implicit fields always
// emitted): fields in field-number order, int32 as numbers, enums by name, Timestamps as RFC 3339,
// Structs as their JSON. A type with something this writer does not know (maps, oneofs, 64-bit
// integers, bytes, other well-known types) keeps toJsonString. test/api/json-writer.test.ts checks the
// output against toJsonString, byte for byte, for every message type of the contract.
//
// Why: REST answers are the coordinator's hottest JSON. toJsonString on a one-task claim answer
// costs ~11 µs in a tight loop (reflection: a ReflectMessage per message, isSet/get per field,
// an intermediate JSON object, then JSON.stringify); this writer ~2 µs.

import { ScalarType, toJsonString, type DescEnum, type DescField, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import type { Timestamp } from "@bufbuild/protobuf/wkt";

export interface JsonWriteOptions {
  useProtoFieldName: true;
  alwaysEmitImplicit: true;
}

type Writer = (message: MessageShape<DescMessage>, sink: Sink, lead: string) => void;

class Unsupported extends Error {}

/** google.protobuf.FeatureSet.FieldPresence.IMPLICIT (proto3 fields without `optional`). */
const IMPLICIT = 2;

/**
 * Where the compiled writers put their text: pieces (one or a few per message) joined at the end,
 * or, for a chunked write once a list of messages has grown long, UTF-8 bytes written into Buffers
 * of CHUNK_BYTES, BATCH_PIECES pieces at a time.
 */
class Sink {
  pieces: string[] = [];
  /** Pieces joined already, of a long string write. */
  private groups: string[] = [];
  /** The Buffers written so far (null: not chunked, or not yet). */
  buffers: Buffer[] | null = null;
  private chunk: Buffer | null = null;
  private pos = 0;

  constructor(private readonly chunked: boolean) {}

  add(s: string): void {
    this.pieces.push(s);
  }

  /** Called between the items of a list of messages: a chunked write turns to Buffers past SWITCH_PIECES, then writes batches. */
  maybeFlush(): void {
    if (this.buffers !== null) {
      if (this.pieces.length >= BATCH_PIECES) {
        this.write(this.pieces.join(""));
        this.pieces = [];
      }
      return;
    }
    if (this.pieces.length < SWITCH_PIECES) return;
    const text = this.pieces.join("");
    if (this.chunked) {
      this.buffers = [];
      this.write(text);
      this.pieces = [];
    } else {
      // Joined as it goes: one join of 10,000 message ropes into a 4.9 MB string cost twice as much.
      this.groups.push(text);
      this.pieces = [];
    }
  }

  private write(s: string): void {
    const most = s.length * 3; // UTF-8 bytes of a UTF-16 code unit
    if (this.chunk === null || this.chunk.length - this.pos < most) {
      this.seal();
      this.chunk = Buffer.allocUnsafe(Math.max(CHUNK_BYTES, most));
      this.pos = 0;
    }
    this.pos += this.chunk.write(s, this.pos, "utf8");
  }

  private seal(): void {
    if (this.chunk !== null && this.pos > 0) this.buffers!.push(this.chunk.subarray(0, this.pos));
    this.chunk = null;
  }

  text(): string {
    if (this.groups.length > 0) return [...this.groups, this.pieces.join("")].join("");
    return this.pieces.length === 1 ? this.pieces[0] : this.pieces.join("");
  }

  /** The text as bytes when it was written to Buffers, else as a string. */
  result(): string | Buffer[] {
    if (this.buffers === null) return this.text();
    if (this.pieces.length > 0) this.write(this.pieces.join(""));
    this.pieces = [];
    this.seal();
    return this.buffers;
  }
}

/** A chunked write turns to Buffers when a list has made this many pieces (a task is one). */
const SWITCH_PIECES = 256;
const CHUNK_BYTES = 128 * 1024;
/**
 * Pieces joined per Buffer write once writing Buffers: each write flattens its rope and crosses into
 * C++; 16 tasks at a time took the 10,000-task answer from ~17.8 to ~16 ms (one per task).
 */
const BATCH_PIECES = 16;

const compiled = new WeakMap<DescMessage, Writer>();

function writerOf(schema: DescMessage, options: JsonWriteOptions): Writer {
  let writer = compiled.get(schema);
  if (writer === undefined) {
    try {
      writer = compileMessage(schema);
    } catch (err) {
      if (!(err instanceof Unsupported)) throw err;
      writer = (m, sink, lead) => sink.add(lead + toJsonString(schema, m, options));
    }
    compiled.set(schema, writer);
  }
  return writer;
}

/** The JSON text of a message as toJsonString(schema, message, options) writes it. */
export function writeJson(schema: DescMessage, message: MessageShape<DescMessage>, options: JsonWriteOptions): string {
  const sink = new Sink(false);
  writerOf(schema, options)(message, sink, "");
  return sink.text();
}

/**
 * The same text, for an answer that may be large: a string when it is small (its lists of messages
 * short), else its UTF-8 bytes in Buffers of 128 KB, written message by message. A 10,000-task
 * CreateJob answer is ~4.9 MB: as one string it was its pieces, the joined text, and the bytes
 * Node made of it to send; as Buffers, one task's text at a time and the bytes.
 */
export function writeJsonChunks(schema: DescMessage, message: MessageShape<DescMessage>, options: JsonWriteOptions): string | Buffer[] {
  const sink = new Sink(true);
  writerOf(schema, options)(message, sink, "");
  return sink.result();
}

/** Whether writeJson has a compiled writer for the type (false: it uses toJsonString). */
export function hasCompiledWriter(schema: DescMessage): boolean {
  try {
    compileMessage(schema);
    return true;
  } catch (err) {
    if (err instanceof Unsupported) return false;
    throw err;
  }
}

/**
 * One function per message type, generated from its descriptor: each field one statement, so V8
 * sees straight-line code rather than a loop over per-field closures (measured: a 10,000-task
 * CreateJob answer 48 ms with closures, see docs/performance.md for this). A message's own fields
 * are one string concatenation (a rope V8 copies once, when the pieces are joined), handed to the
 * sink before and after each nested message. Measured in a loop (CPU per answer, medians): as an
 * array of `"key":value` strings joined per message and again per list, a 10,000-task CreateJob
 * answer 38.5 ms (47 ms with its UTF-8 bytes), a one-task claim answer 4.8 µs, ten tasks 48 µs;
 * this way (with the string and Timestamp shortcuts below) 23.5–25.5 ms as a string, 16–19 ms as
 * Buffers, 3.5 µs, 33 µs.
 */
function compileMessage(schema: DescMessage, seen = new Set<DescMessage>()): Writer {
  if (seen.has(schema)) throw new Unsupported(`recursive ${schema.typeName}`);
  seen.add(schema);
  if (schema.typeName.startsWith("google.protobuf.")) throw new Unsupported(schema.typeName);
  if (schema.oneofs.length > 0) throw new Unsupported(`${schema.typeName} has a oneof`);
  const helpers: unknown[] = [];
  const ref = (helper: unknown) => {
    helpers.push(helper);
    return `h[${helpers.length - 1}]`;
  };
  const lines: string[] = ['let s = lead + "{";'];
  // Whether a field has certainly been written before this one ("yes"), certainly not ("no"), or
  // it depends on the message ("maybe": the comma is the variable c, "" until a field is written).
  let before: "no" | "yes" | "maybe" = "no";
  let usesC = false;
  for (const field of [...schema.fields].sort((a, b) => a.number - b.number)) {
    const get = `m[${JSON.stringify(field.localName)}]`;
    const key = JSON.stringify(field.name) + ":";
    // Implicit presence: always written (alwaysEmitImplicit). Explicit (optional, messages): only when set.
    const always =
      field.fieldKind === "list" || field.fieldKind === "map" || (field.fieldKind !== "message" && field.presence === IMPLICIT);
    const comma = before === "yes" ? JSON.stringify("," + key) : before === "no" ? JSON.stringify(key) : `c + ${JSON.stringify(key)}`;
    if (before === "maybe") usesC = true;
    let statement: string;
    const nested = field.fieldKind === "message" ? nestedWriter(field.message, seen) : undefined;
    if (nested !== undefined) {
      // A message of the contract: written by its own writer, into the sink.
      statement = `{ sink.add(s); ${ref(nested)}(${get}, sink, ${comma}); s = ""; }`;
    } else if (field.fieldKind === "list" && field.listKind === "message" && nestedWriter(field.message, seen) !== undefined) {
      statement = `{ sink.add(s + ${comma} + "["); ${ref(messageListWriter(nestedWriter(field.message, seen)!))}(${get}, sink); s = "]"; }`;
    } else {
      statement = `s += ${comma} + ${valueExpression(field, get, ref, seen)};`;
    }
    if (!always) statement = `if (${get} !== undefined) { ${statement}${before === "yes" ? "" : ' c = ",";'} }`;
    else if (before === "maybe") statement = `${statement} c = ",";`;
    lines.push(statement);
    if (always) before = "yes";
    else if (before === "no") before = "maybe";
  }
  if (usesC || lines.some((l) => l.includes(' c = ",";'))) lines.splice(1, 0, 'let c = "";');
  lines.push('sink.add(s + "}");');
  seen.delete(schema);
  const factory = new Function("h", `return function write_${schema.name}(m, sink, lead) {\n${lines.join("\n")}\n};`) as (
    h: typeof helpers,
  ) => Writer;
  return factory(helpers);
}

/** The writer of a nested message of the contract (undefined: a well-known type, written as a value). */
function nestedWriter(schema: DescMessage, seen: Set<DescMessage>): Writer | undefined {
  if (schema.typeName === "google.protobuf.Timestamp" || schema.typeName === "google.protobuf.Struct") return undefined;
  return compileMessage(schema, seen);
}

/** The text of a non-message field's value, as an expression over `get`. */
function valueExpression(field: DescField, get: string, ref: (helper: unknown) => string, seen: Set<DescMessage>): string {
  switch (field.fieldKind) {
    case "scalar":
      // The common ones inline; the rest through their writer.
      if (field.scalar === ScalarType.STRING) return `${ref(stringJson)}(${get})`;
      if (INT32_TYPES.has(field.scalar)) return `("" + ${get})`;
      return `${ref(scalarWriter(field.scalar))}(${get})`;
    case "enum":
      return `${ref(enumWriter(field.enum))}(${get})`;
    case "message":
      return `${ref(valueWriter(field.message, seen))}(${get})`;
    case "list": {
      let item: (v: unknown) => string;
      if (field.listKind === "scalar") item = scalarWriter(field.scalar);
      else if (field.listKind === "enum") {
        const e = enumWriter(field.enum);
        item = (v) => e(v as number);
      } else item = valueWriter(field.message, seen);
      return `${ref(listWriter(item))}(${get})`;
    }
    case "map":
      // map<string, string> (labels): its JSON object, keys in the order protobuf-es holds them.
      // map<string, int64> (usage counters): the same, each value a JSON string as proto3 JSON has int64.
      if (field.mapKey !== ScalarType.STRING || field.mapKind !== "scalar") throw new Unsupported(`map field ${field.name}`);
      if (field.scalar === ScalarType.STRING) return `${ref(stringMapJson)}(${get})`;
      if (field.scalar === ScalarType.INT64) return `${ref(int64MapJson)}(${get})`;
      throw new Unsupported(`map field ${field.name}`);
  }
}

function int64MapJson(m: Record<string, bigint>): string {
  let out = "";
  for (const k in m) out += (out === "" ? "{" : ",") + JSON.stringify(k) + ':"' + String(m[k]) + '"';
  return out === "" ? "{}" : out + "}";
}

function stringMapJson(m: Record<string, string>): string {
  for (const _ in m) return JSON.stringify(m);
  return "{}";
}

function messageListWriter(write: Writer): (list: MessageShape<DescMessage>[], sink: Sink) => void {
  return (list, sink) => {
    for (let i = 0; i < list.length; i++) {
      write(list[i], sink, i === 0 ? "" : ",");
      sink.maybeFlush();
    }
  };
}

function listWriter(item: (v: unknown) => string): (list: unknown[]) => string {
  return (list) => {
    if (list.length === 0) return "[]";
    const items = new Array<string>(list.length);
    for (let i = 0; i < list.length; i++) items[i] = item(list[i]);
    return "[" + items.join(",") + "]";
  };
}

/** A well-known type written as a value: Timestamp as RFC 3339, Struct as its JSON. */
function valueWriter(schema: DescMessage, seen: Set<DescMessage>): (v: unknown) => string {
  if (schema.typeName === "google.protobuf.Timestamp") return (v) => timestampJson(v as Timestamp);
  // protobuf-es represents a Struct field as its JSON object.
  if (schema.typeName === "google.protobuf.Struct") return (v) => JSON.stringify(v);
  // Not reached for the contract's own messages (nestedWriter writes them into the sink).
  const write = compileMessage(schema, seen);
  return (v) => {
    const sink = new Sink(false);
    write(v as MessageShape<DescMessage>, sink, "");
    return sink.text();
  };
}

/** What JSON.stringify escapes in a string: quote, backslash, control characters, and surrogates (a lone one is escaped). */
// eslint-disable-next-line no-control-regex
const NEEDS_ESCAPE = /["\\\u0000-\u001f\ud800-\udfff]/;

/**
 * JSON.stringify(s), skipping the call for a string with nothing to escape (ids, URIs, hashes):
 * a regular expression test and a concatenation cost about a third of it.
 */
function stringJson(s: string): string {
  return NEEDS_ESCAPE.test(s) ? JSON.stringify(s) : '"' + s + '"';
}

const INT32_TYPES = new Set([ScalarType.INT32, ScalarType.SINT32, ScalarType.SFIXED32, ScalarType.UINT32, ScalarType.FIXED32]);

function scalarWriter(type: ScalarType): (v: unknown) => string {
  switch (type) {
    case ScalarType.STRING:
      return (v) => JSON.stringify(v);
    case ScalarType.BOOL:
      return (v) => (v ? "true" : "false");
    case ScalarType.INT32:
    case ScalarType.SINT32:
    case ScalarType.SFIXED32:
    case ScalarType.UINT32:
    case ScalarType.FIXED32:
      return (v) => String(v);
    // 64-bit integers (usage counters, billing units): a JSON string, as proto3 JSON has them.
    case ScalarType.INT64:
    case ScalarType.SINT64:
    case ScalarType.SFIXED64:
    case ScalarType.UINT64:
    case ScalarType.FIXED64:
      return (v) => `"${String(v)}"`;
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT:
      return (v) => (Number.isFinite(v) ? String(v) : Number.isNaN(v) ? '"NaN"' : (v as number) > 0 ? '"Infinity"' : '"-Infinity"');
    default:
      throw new Unsupported(`scalar type ${type}`);
  }
}

function enumWriter(desc: DescEnum): (v: number) => string {
  if (desc.typeName === "google.protobuf.NullValue") throw new Unsupported(desc.typeName);
  const names = new Map(desc.values.map((v) => [v.number, JSON.stringify(v.name)]));
  return (v) => names.get(v) ?? String(v);
}

const MIN_MS = Date.parse("0001-01-01T00:00:00Z");
const MAX_MS = Date.parse("9999-12-31T23:59:59Z");

/**
 * Timestamps written recently, by milliseconds: the tasks of one answer mostly share theirs (one
 * job's creation, one statement's now(); a CreateJob's all do), five to a task.
 */
const recentJson = new Map<number, string>();
const MAX_RECENT = 512;

/** protobuf-es' timestampToJson, in a string. */
function timestampJson(t: Timestamp): string {
  // Whole milliseconds (every Timestamp the coordinator makes from a Date) are remembered.
  const key = t.nanos >= 0 && t.nanos % 1_000_000 === 0 ? Number(t.seconds) * 1000 + t.nanos / 1_000_000 : undefined;
  if (key !== undefined) {
    const known = recentJson.get(key);
    if (known !== undefined) return known;
  }
  const ms = Number(t.seconds) * 1000;
  if (ms < MIN_MS || ms > MAX_MS || t.nanos < 0 || t.nanos > 999_999_999) {
    throw new Error(`cannot encode message ${t.$typeName} to JSON: out of range`);
  }
  let z = "Z";
  if (t.nanos > 0) {
    const nanos = (t.nanos + 1_000_000_000).toString().substring(1);
    if (nanos.substring(3) === "000000") z = "." + nanos.substring(0, 3) + "Z";
    else if (nanos.substring(6) === "000") z = "." + nanos.substring(0, 6) + "Z";
    else z = "." + nanos + "Z";
  }
  const json = '"' + new Date(ms).toISOString().replace(".000Z", z) + '"';
  if (key !== undefined) {
    if (recentJson.size >= MAX_RECENT) recentJson.clear();
    recentJson.set(key, json);
  }
  return json;
}
