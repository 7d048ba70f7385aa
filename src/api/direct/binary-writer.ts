// Messages → protobuf binary without reflection per call, for the gRPC and Connect binary answers
// of the direct paths (grpc.ts, connect.ts): per message type, a size function and a
// write function worked out once from the descriptor, writing straight into one Buffer (sizes
// first, so every length prefix is known). The bytes are exactly toBinary's (fields in number
// order, proto3 zero values left out, packed repeated scalars, strings as UTF-8 with lone
// surrogates as U+FFFD); test/api/binary-writer.test.ts checks that for every message type of the
// contract. A type with something this writer does not know (maps other than string → string or
// int64, oneofs, groups, 64-bit
// integers outside Timestamp, bytes, floats, other well-known types) or a message carrying
// unknown fields keeps toBinary.
//
// Why: toBinary costs ~12.6 µs for a one-task claim answer in a tight loop, ~120 µs for the
// ten tasks of a batched claim, and 173 ms for a 10,000-task CreateJob answer; a writer over
// protobuf-es' own BinaryWriter only got to 9.5 µs and 141 ms. See docs/performance.md.

import { fromJson, ScalarType, toBinary, type DescField, type DescMessage, type JsonObject, type MessageShape } from "@bufbuild/protobuf";
import { StructSchema, type Timestamp } from "@bufbuild/protobuf/wkt";

type Msg = Record<string, unknown>;

interface Codec {
  size(m: Msg): number;
  /** Writes m at pos; returns the position after it. */
  write(m: Msg, buf: Buffer, pos: number): number;
}

class Unsupported extends Error {}

/** google.protobuf.FeatureSet.FieldPresence.IMPLICIT (proto3 fields without `optional`). */
const IMPLICIT = 2;
const VARINT = 0;
const BIT64 = 1;
const LEN = 2;

const compiled = new WeakMap<DescMessage, Codec | null>();

/** toBinary(schema, message), faster for the types it knows. */
export function writeBinary(schema: DescMessage, message: MessageShape<DescMessage>): Uint8Array {
  const codec = codecOf(schema);
  if (codec === null) return toBinary(schema, message);
  try {
    const m = message as unknown as Msg;
    const buf = Buffer.allocUnsafe(codec.size(m));
    const end = codec.write(m, buf, 0);
    if (end !== buf.length) throw new Error(`binary writer: wrote ${end} of ${buf.length} bytes for ${schema.typeName}`);
    return buf;
  } catch (err) {
    if (err instanceof Unsupported) return toBinary(schema, message);
    throw err;
  }
}

/** Whether writeBinary has a compiled writer for the type (false: it uses toBinary). */
export function hasCompiledBinaryWriter(schema: DescMessage): boolean {
  return codecOf(schema) !== null;
}

function codecOf(schema: DescMessage): Codec | null {
  let codec = compiled.get(schema);
  if (codec === undefined) {
    try {
      codec = compileMessage(schema, new Set());
    } catch (err) {
      if (!(err instanceof Unsupported)) throw err;
      codec = null;
    }
    compiled.set(schema, codec);
  }
  return codec;
}

function checkKnown(m: Msg): void {
  const unknown = m.$unknown as unknown[] | undefined;
  if (unknown !== undefined && unknown.length > 0) throw new Unsupported("unknown fields");
}

function compileMessage(schema: DescMessage, seen: Set<DescMessage>): Codec {
  if (seen.has(schema)) throw new Unsupported(`recursive ${schema.typeName}`);
  seen.add(schema);
  if (schema.typeName.startsWith("google.protobuf.")) throw new Unsupported(schema.typeName);
  if (schema.oneofs.length > 0) throw new Unsupported(`${schema.typeName} has a oneof`);
  const fields = [...schema.fields].sort((a, b) => a.number - b.number).map((f) => fieldCodec(f, seen));
  seen.delete(schema);
  return {
    size(m) {
      checkKnown(m);
      let n = 0;
      for (let i = 0; i < fields.length; i++) n += fields[i].size(m);
      return n;
    },
    write(m, buf, pos) {
      for (let i = 0; i < fields.length; i++) pos = fields[i].write(m, buf, pos);
      return pos;
    },
  };
}

interface ValueCodec {
  size(v: unknown): number;
  write(v: unknown, buf: Buffer, pos: number): number;
}

function fieldCodec(field: DescField, seen: Set<DescMessage>): Codec {
  const name = field.localName;
  switch (field.fieldKind) {
    case "scalar":
    case "enum": {
      const type = field.fieldKind === "enum" ? ScalarType.INT32 : field.scalar;
      const value = scalarCodec(type);
      const tag = tagBytes(field.number, value.wire);
      // Implicit presence: the zero value is not written (protobuf-es' isScalarZeroValue: a double's
      // -0 is not zero). Explicit: written when set.
      const present =
        field.presence !== IMPLICIT
          ? (v: unknown) => v !== undefined
          : type === ScalarType.DOUBLE
            ? (v: unknown) => !Object.is(v, 0)
            : type === ScalarType.INT64
              ? (v: unknown) => v !== 0n && v !== 0 && v !== "0"
              : (v: unknown) => v !== "" && v !== 0 && v !== false;
      return {
        size: (m) => (present(m[name]) ? tag.length + value.size(m[name]) : 0),
        write: (m, buf, pos) => (present(m[name]) ? value.write(m[name], buf, copy(tag, buf, pos)) : pos),
      };
    }
    case "message": {
      if (field.delimitedEncoding) throw new Unsupported(`group ${field.name}`);
      const value = lengthDelimited(messageCodec(field.message, seen));
      const tag = tagBytes(field.number, LEN);
      return {
        size: (m) => (m[name] === undefined ? 0 : tag.length + value.size(m[name])),
        write: (m, buf, pos) => (m[name] === undefined ? pos : value.write(m[name], buf, copy(tag, buf, pos))),
      };
    }
    case "list": {
      if (field.listKind === "message" && field.delimitedEncoding) throw new Unsupported(`group ${field.name}`);
      if (field.listKind === "message" || !field.packed) {
        const item =
          field.listKind === "message"
            ? { wire: LEN, ...lengthDelimited(messageCodec(field.message, seen)) }
            : scalarCodec(field.listKind === "enum" ? ScalarType.INT32 : field.scalar);
        const tag = tagBytes(field.number, item.wire);
        return {
          size(m) {
            const list = m[name] as unknown[];
            let n = 0;
            for (let i = 0; i < list.length; i++) n += tag.length + item.size(list[i]);
            return n;
          },
          write(m, buf, pos) {
            const list = m[name] as unknown[];
            for (let i = 0; i < list.length; i++) pos = item.write(list[i], buf, copy(tag, buf, pos));
            return pos;
          },
        };
      }
      const item = scalarCodec(field.listKind === "enum" ? ScalarType.INT32 : field.scalar);
      const tag = tagBytes(field.number, LEN);
      const body = (list: unknown[]) => {
        let n = 0;
        for (let i = 0; i < list.length; i++) n += item.size(list[i]);
        return n;
      };
      return {
        size(m) {
          const list = m[name] as unknown[];
          if (list.length === 0) return 0;
          const n = body(list);
          return tag.length + varintSize(n) + n;
        },
        write(m, buf, pos) {
          const list = m[name] as unknown[];
          if (list.length === 0) return pos;
          pos = writeVarint(body(list), buf, copy(tag, buf, pos));
          for (let i = 0; i < list.length; i++) pos = item.write(list[i], buf, pos);
          return pos;
        },
      };
    }
    case "map": {
      if (field.mapKey !== ScalarType.STRING || field.mapKind !== "scalar") throw new Unsupported(`map field ${field.name}`);
      const tag = tagBytes(field.number, LEN);
      // map<string, string> (labels): the value is field 2, length-delimited.
      if (field.scalar === ScalarType.STRING) return stringKeyMapCodec(name, tag, 0x12, scalarCodec(ScalarType.STRING));
      // map<string, int64> (usage counters): the value is field 2, a varint.
      if (field.scalar === ScalarType.INT64)
        return stringKeyMapCodec(name, tag, 0x10, {
          size: (v) => int64Size(big(v)),
          write: (v, buf, pos) => writeInt64(big(v), buf, pos),
        });
      throw new Unsupported(`map field ${field.name}`);
    }
  }
}

/**
 * A map with string keys: one entry message per pair, key (1) and value (2, after its one-byte
 * tag `valueTag`) always written, as protobuf-es writes them.
 */
function stringKeyMapCodec(name: string, tag: Uint8Array, valueTag: number, value: ValueCodec): Codec {
  const str = scalarCodec(ScalarType.STRING);
  const entrySize = (k: string, v: unknown) => 1 + str.size(k) + 1 + value.size(v);
  return {
    size(m) {
      const map = m[name] as Record<string, unknown>;
      let n = 0;
      for (const k in map) {
        const e = entrySize(k, map[k]);
        n += tag.length + varintSize(e) + e;
      }
      return n;
    },
    write(m, buf, pos) {
      const map = m[name] as Record<string, unknown>;
      for (const k in map) {
        pos = writeVarint(entrySize(k, map[k]), buf, copy(tag, buf, pos));
        pos = str.write(k, buf, writeByte(0x0a, buf, pos));
        pos = value.write(map[k], buf, writeByte(valueTag, buf, pos));
      }
      return pos;
    },
  };
}

/** A message value without its length prefix. */
function messageCodec(schema: DescMessage, seen: Set<DescMessage>): ValueCodec {
  if (schema.typeName === "google.protobuf.Timestamp") {
    return {
      size(v) {
        const t = v as Timestamp;
        return (t.seconds !== 0n ? 1 + int64Size(t.seconds) : 0) + (t.nanos !== 0 ? 1 + int32Size(t.nanos) : 0);
      },
      write(v, buf, pos) {
        const t = v as Timestamp;
        if (t.seconds !== 0n) pos = writeInt64(t.seconds, buf, writeByte(0x08, buf, pos));
        if (t.nanos !== 0) pos = writeInt32(t.nanos, buf, writeByte(0x10, buf, pos));
        return pos;
      },
    };
  }
  if (schema.typeName === "google.protobuf.Struct") {
    // protobuf-es holds a Struct field as its JSON object; an empty one (the common case) is an
    // empty message, any other is encoded by protobuf-es.
    const encoded = (v: unknown) => {
      for (const _ in v as JsonObject) return toBinary(StructSchema, fromJson(StructSchema, v as JsonObject));
      return EMPTY;
    };
    return {
      size: (v) => encoded(v).length,
      write: (v, buf, pos) => copy(encoded(v), buf, pos),
    };
  }
  const codec = compileMessage(schema, seen);
  return { size: (v) => codec.size(v as Msg), write: (v, buf, pos) => codec.write(v as Msg, buf, pos) };
}

const EMPTY = new Uint8Array(0);

/** A value with its length prefix (the value's size is worked out twice: once for the prefix). */
function lengthDelimited(value: ValueCodec): ValueCodec {
  return {
    size(v) {
      const n = value.size(v);
      return varintSize(n) + n;
    },
    write(v, buf, pos) {
      return value.write(v, buf, writeVarint(value.size(v), buf, pos));
    },
  };
}

function scalarCodec(type: ScalarType): ValueCodec & { wire: number } {
  switch (type) {
    case ScalarType.STRING:
      return {
        wire: LEN,
        size(v) {
          const n = utf8Length(v as string);
          return varintSize(n) + n;
        },
        write(v, buf, pos) {
          const s = v as string;
          const n = utf8Length(s);
          pos = writeVarint(n, buf, pos);
          if (n === s.length && n < 64) {
            for (let i = 0; i < n; i++) buf[pos + i] = s.charCodeAt(i);
            return pos + n;
          }
          return pos + buf.write(s, pos, n, "utf8");
        },
      };
    case ScalarType.BOOL:
      return { wire: VARINT, size: () => 1, write: (v, buf, pos) => writeByte(v ? 1 : 0, buf, pos) };
    case ScalarType.INT32:
      return { wire: VARINT, size: (v) => int32Size(v as number), write: (v, buf, pos) => writeInt32(v as number, buf, pos) };
    case ScalarType.UINT32:
      return { wire: VARINT, size: (v) => varintSize(v as number), write: (v, buf, pos) => writeVarint(v as number, buf, pos) };
    case ScalarType.INT64:
      // protobuf-es holds int64 as bigint (billing and settlement units).
      return { wire: VARINT, size: (v) => int64Size(big(v)), write: (v, buf, pos) => writeInt64(big(v), buf, pos) };
    case ScalarType.DOUBLE:
      return { wire: BIT64, size: () => 8, write: (v, buf, pos) => buf.writeDoubleLE(v as number, pos) };
    default:
      throw new Unsupported(`scalar type ${type}`);
  }
}

/** UTF-8 length of a string as Buffer and TextEncoder encode it (a lone surrogate: 3 bytes, U+FFFD). */
function utf8Length(s: string): number {
  let n = s.length;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) continue;
    if (c < 0x800) n += 1;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      n += 2; // a pair: 2 UTF-16 units, 4 bytes
      i++;
    } else n += 2;
  }
  return n;
}

function tagBytes(no: number, wire: number): Uint8Array {
  const buf = Buffer.allocUnsafe(varintSize((no << 3) | wire));
  writeVarint((no << 3) | wire, buf, 0);
  return buf;
}

function copy(bytes: Uint8Array, buf: Buffer, pos: number): number {
  if (bytes.length === 1) buf[pos] = bytes[0];
  else buf.set(bytes, pos);
  return pos + bytes.length;
}

function writeByte(b: number, buf: Buffer, pos: number): number {
  buf[pos] = b;
  return pos + 1;
}

/** Size of an unsigned varint (0 ≤ n < 2^32). */
function varintSize(n: number): number {
  return n < 0x80 ? 1 : n < 0x4000 ? 2 : n < 0x200000 ? 3 : n < 0x10000000 ? 4 : 5;
}

function writeVarint(n: number, buf: Buffer, pos: number): number {
  while (n > 0x7f) {
    buf[pos++] = (n & 0x7f) | 0x80;
    n >>>= 7;
  }
  buf[pos++] = n;
  return pos;
}

/** int32 as protobuf writes it: a negative value sign-extended to 64 bits (10 bytes). */
function int32Size(n: number): number {
  return n < 0 ? 10 : varintSize(n);
}

function writeInt32(n: number, buf: Buffer, pos: number): number {
  if (n >= 0) return writeVarint(n, buf, pos);
  return writeInt64(BigInt(n), buf, pos);
}

function int64Size(n: bigint): number {
  if (n >= 0n && n <= MAX_SAFE) {
    let v = Number(n);
    let size = 1;
    while (v > 0x7f) {
      v = Math.floor(v / 128);
      size++;
    }
    return size;
  }
  let u = BigInt.asUintN(64, n);
  let size = 1;
  while (u > 0x7fn) {
    u >>= 7n;
    size++;
  }
  return size;
}

const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);

/** An int64 value as bigint: protobuf-es holds bigint, and its init shapes also take a number or a decimal string. */
function big(v: unknown): bigint {
  return typeof v === "bigint" ? v : BigInt(v as number | string);
}

function writeInt64(n: bigint, buf: Buffer, pos: number): number {
  if (n >= 0n && n <= MAX_SAFE) {
    let v = Number(n);
    while (v > 0x7f) {
      buf[pos++] = (v % 128) | 0x80;
      v = Math.floor(v / 128);
    }
    buf[pos++] = v;
    return pos;
  }
  let u = BigInt.asUintN(64, n);
  while (u > 0x7fn) {
    buf[pos++] = Number(u & 0x7fn) | 0x80;
    u >>= 7n;
  }
  buf[pos++] = Number(u);
  return pos;
}
