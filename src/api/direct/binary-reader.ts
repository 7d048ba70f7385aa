// Protobuf binary → message without reflection per call, for the plain case: the gRPC and Connect
// binary requests of the direct paths (grpc.ts, connect.ts). Per message type, a reader worked out
// once from the descriptor builds the same message protobuf-es' fromBinary builds, for requests
// made of what the workers' hot calls hold: known fields with their own wire types, ASCII strings,
// varints of the usual lengths, nested messages each given once, Timestamps, lists (packed or not)
// and maps of strings or int64 by string. Anything else (an unknown field, which fromBinary keeps;
// a string outside ASCII, whose UTF-8 fromBinary checks; a message field given twice, which it
// merges; a Struct; a negative or long int64; a truncated or malformed input) makes it give up, and
// fromBinary decides, accepting or refusing with its own message. test/api/binary-reader.test.ts
// checks both agree for every message type of the contract.
//
// Why: fromBinary takes ~5–6 µs for a CompleteTask request with its claim_next in a tight loop
// (a reflective message per level, a field lookup and a set per field); this reader ~1 µs. It was
// most of what a gRPC call cost the coordinator beyond a REST one besides the HTTP/2 framing.

import { create, fromBinary, ScalarType, type DescField, type DescMessage, type MessageShape } from "@bufbuild/protobuf";

type Msg = Record<string, unknown>;

/** Gives up on the fast path; fromBinary decides. */
class GiveUp extends Error {}
const GIVE_UP = new GiveUp("give up");

class Unsupported extends Error {}

/** The bytes being read and the position in them: one read at a time (readBinary is synchronous). */
const EMPTY = Buffer.alloc(0);
const input: { buf: Buffer; pos: number } = { buf: EMPTY, pos: 0 };

type Read = (end: number) => unknown;
type MessageReader = (end: number) => Msg;

const compiled = new WeakMap<DescMessage, MessageReader | null>();

/** fromBinary(schema, bytes), faster for the plain case. */
export function readBinary(schema: DescMessage, bytes: Uint8Array): MessageShape<DescMessage> {
  return readCompiled(schema, bytes) ?? fromBinary(schema, bytes);
}

/** The message when the compiled reader takes the bytes; undefined: it gave up (readBinary then asks fromBinary). */
export function readCompiled(schema: DescMessage, bytes: Uint8Array): MessageShape<DescMessage> | undefined {
  const read = readerOf(schema);
  if (read === null) return undefined;
  input.buf = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  input.pos = 0;
  try {
    const m = read(bytes.length);
    return input.pos === bytes.length ? (m as MessageShape<DescMessage>) : undefined;
  } catch (err) {
    if (!(err instanceof GiveUp)) throw err;
    return undefined;
  } finally {
    input.buf = EMPTY;
  }
}

/** Whether `schema` has a compiled reader (false: every request of it goes to fromBinary). */
export function hasCompiledBinaryReader(schema: DescMessage): boolean {
  return readerOf(schema) !== null;
}

function readerOf(schema: DescMessage): MessageReader | null {
  let reader = compiled.get(schema);
  if (reader === undefined) {
    try {
      reader = compileMessage(schema, new Set());
    } catch (err) {
      if (!(err instanceof Unsupported)) throw err;
      reader = null;
    }
    compiled.set(schema, reader);
  }
  return reader;
}

const VARINT = 0;
const BIT64 = 1;
const LEN = 2;

interface FieldReader {
  /** the wire type the field is written with (a packed list: also its items' own) */
  wire: number;
  /** reads the value at the position and stores it in m */
  read(m: Msg, wire: number): void;
}

function compileMessage(schema: DescMessage, seen: Set<DescMessage>): MessageReader {
  if (seen.has(schema)) throw new Unsupported(`recursive ${schema.typeName}`);
  seen.add(schema);
  if (schema.typeName.startsWith("google.protobuf.")) throw new Unsupported(schema.typeName);
  if (schema.oneofs.length > 0) throw new Unsupported(`${schema.typeName} has a oneof`);
  const template = create(schema) as unknown as Msg;
  const lists: string[] = [];
  const maps: string[] = [];
  const byNumber: (FieldReader | undefined)[] = [];
  for (const field of schema.fields) {
    if (field.fieldKind === "list") lists.push(field.localName);
    if (field.fieldKind === "map") maps.push(field.localName);
    byNumber[field.number] = fieldReader(field, seen);
  }
  seen.delete(schema);
  return (end) => {
    const m: Msg = { ...template };
    for (const name of lists) m[name] = [];
    for (const name of maps) m[name] = {};
    while (input.pos < end) {
      const tag = varint32();
      const field = byNumber[tag >>> 3];
      if (field === undefined) throw GIVE_UP;
      field.read(m, tag & 7);
    }
    if (input.pos !== end) throw GIVE_UP;
    return m;
  };
}

function fieldReader(field: DescField, seen: Set<DescMessage>): FieldReader {
  const name = field.localName;
  switch (field.fieldKind) {
    case "scalar":
    case "enum": {
      const type = field.fieldKind === "enum" ? ScalarType.INT32 : field.scalar;
      const { wire, read } = scalarReader(type);
      return {
        wire,
        read(m, w) {
          if (w !== wire) throw GIVE_UP;
          m[name] = read(0);
        },
      };
    }
    case "message": {
      if (field.delimitedEncoding) throw new Unsupported(`group ${field.name}`);
      const read = messageReader(field.message, seen);
      return {
        wire: LEN,
        read(m, w) {
          // Given twice, fromBinary merges the two.
          if (w !== LEN || m[name] !== undefined) throw GIVE_UP;
          m[name] = read(lengthEnd());
        },
      };
    }
    case "list": {
      if (field.listKind === "message") {
        if (field.delimitedEncoding) throw new Unsupported(`group ${field.name}`);
        const read = messageReader(field.message, seen);
        return {
          wire: LEN,
          read(m, w) {
            if (w !== LEN) throw GIVE_UP;
            (m[name] as unknown[]).push(read(lengthEnd()));
          },
        };
      }
      const type = field.listKind === "enum" ? ScalarType.INT32 : field.scalar;
      const item = scalarReader(type);
      return {
        wire: item.wire,
        read(m, w) {
          const list = m[name] as unknown[];
          if (w === item.wire) list.push(item.read(0));
          else if (w === LEN && item.wire !== LEN) {
            // Packed: the items one after another, within the length.
            const end = lengthEnd();
            while (input.pos < end) list.push(item.read(0));
            if (input.pos !== end) throw GIVE_UP;
          } else throw GIVE_UP;
        },
      };
    }
    case "map": {
      if (
        field.mapKey !== ScalarType.STRING ||
        field.mapKind !== "scalar" ||
        (field.scalar !== ScalarType.STRING && field.scalar !== ScalarType.INT64)
      )
        throw new Unsupported(`map field ${field.name}`);
      const value = scalarReader(field.scalar);
      const zero = field.scalar === ScalarType.STRING ? "" : 0n;
      return {
        wire: LEN,
        read(m, w) {
          if (w !== LEN) throw GIVE_UP;
          const end = lengthEnd();
          let key = "";
          let v: unknown = zero;
          while (input.pos < end) {
            const tag = varint32();
            if (tag === 0x0a) key = readString();
            else if (tag === ((2 << 3) | value.wire)) v = value.read(0);
            else throw GIVE_UP;
          }
          if (input.pos !== end || key === "__proto__") throw GIVE_UP;
          (m[name] as Msg)[key] = v;
        },
      };
    }
  }
}

function messageReader(schema: DescMessage, seen: Set<DescMessage>): Read {
  if (schema.typeName === "google.protobuf.Timestamp") {
    const template = create(schema) as unknown as Msg;
    return (end) => {
      const t: Msg = { ...template };
      while (input.pos < end) {
        const tag = varint32();
        if (tag === 0x08) t.seconds = int64();
        else if (tag === 0x10) t.nanos = varint32() | 0;
        else throw GIVE_UP;
      }
      if (input.pos !== end) throw GIVE_UP;
      return t;
    };
  }
  // A Struct (parameters, metrics) is held as its JSON object: an empty one is {}, and fromBinary
  // makes any other.
  if (schema.typeName === "google.protobuf.Struct")
    return (end) => {
      if (end !== input.pos) throw GIVE_UP;
      return {};
    };
  return compileMessage(schema, seen);
}

function scalarReader(type: ScalarType): { wire: number; read: Read } {
  switch (type) {
    case ScalarType.STRING:
      return { wire: LEN, read: readString };
    case ScalarType.BOOL:
      // 0 or 1 in one byte; any other varint is true to fromBinary, whatever its low 32 bits: it decides.
      return {
        wire: VARINT,
        read: () => {
          const b = input.buf[input.pos];
          if (b !== 0 && b !== 1) throw GIVE_UP;
          input.pos++;
          return b === 1;
        },
      };
    case ScalarType.INT32:
      return { wire: VARINT, read: () => varint32() | 0 };
    case ScalarType.UINT32:
      return { wire: VARINT, read: () => varint32() };
    case ScalarType.INT64:
      return { wire: VARINT, read: int64 };
    case ScalarType.DOUBLE:
      return {
        wire: BIT64,
        read: () => {
          const { buf, pos } = input;
          if (pos + 8 > buf.length) throw GIVE_UP;
          input.pos = pos + 8;
          return new DataView(buf.buffer, buf.byteOffset + pos, 8).getFloat64(0, true);
        },
      };
    default:
      throw new Unsupported(`scalar type ${type}`);
  }
}

/**
 * A varint's low 32 bits, unsigned (an int32's caller makes it signed). Ten bytes at most, as a
 * negative int32 is written; longer or cut off: give up.
 */
function varint32(): number {
  const { buf } = input;
  let pos = input.pos;
  let b = buf[pos++];
  if (b < 0x80) {
    input.pos = pos;
    return b;
  }
  let v = b & 0x7f;
  for (let shift = 7; shift < 70; shift += 7) {
    if (pos >= buf.length) throw GIVE_UP;
    b = buf[pos++];
    if (shift < 32) v |= (b & 0x7f) << shift;
    if (b < 0x80) {
      input.pos = pos;
      return v >>> 0;
    }
  }
  throw GIVE_UP;
}

/** An int64 within 0 … 2^49 (seven bytes) as bigint; anything else: give up. */
function int64(): bigint {
  const { buf } = input;
  let pos = input.pos;
  let v = 0;
  let scale = 1;
  for (let i = 0; i < 7; i++) {
    if (pos >= buf.length) throw GIVE_UP;
    const b = buf[pos++];
    v += (b & 0x7f) * scale;
    if (b < 0x80) {
      input.pos = pos;
      return BigInt(v);
    }
    scale *= 128;
  }
  throw GIVE_UP;
}

/** The end of a length-delimited value that starts here (after its length), within the input. */
function lengthEnd(): number {
  const n = varint32();
  const end = input.pos + n;
  if (n > 0x7fffffff || end > input.buf.length) throw GIVE_UP;
  return end;
}

/** An ASCII string (its text is its bytes, and no UTF-8 check can fail); others: give up. */
function readString(): string {
  const end = lengthEnd();
  const { buf } = input;
  const start = input.pos;
  for (let i = start; i < end; i++) if (buf[i] >= 0x80) throw GIVE_UP;
  input.pos = end;
  return buf.toString("latin1", start, end);
}
