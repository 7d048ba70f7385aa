// The direct paths' compiled codecs (src/api/direct/) against protobuf-es on random messages of
// every message type of the contract: the binary writer must write toBinary's bytes, the JSON
// writer toJsonString's text (or both refuse), and the JSON reader must read toJson's output back
// to the message fromJson reads. Values are drawn from a seeded generator (so a failure names a
// seed that reproduces it): strings empty, long, non-ASCII, astral and with lone surrogates;
// int32 and int64 at their extremes and negative; doubles NaN, ±Infinity, -0 and subnormal;
// Timestamps before 1970; Structs nested with lists, nulls and unicode keys; lists empty and long.
import {
  create,
  fromBinary,
  fromJson,
  ScalarType,
  toBinary,
  toJsonString,
  type DescField,
  type DescMessage,
  type JsonObject,
  type JsonValue,
  type MessageShape,
} from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { file_leasehold_queue_v1_queue } from "../../gen/leasehold/queue/v1/queue_pb.js";
import { writeBinary } from "../../src/api/direct/binary-writer.js";
import { readJson } from "../../src/api/direct/json-reader.js";
import { writeJson } from "../../src/api/direct/json-writer.js";

/** The server's JSON options (server.ts). */
const JSON_OPTIONS = { ignoreUnknownFields: false, useProtoFieldName: true as const, alwaysEmitImplicit: true as const };
const MESSAGES_PER_TYPE = 60;

/** mulberry32: a small seeded generator, so a failing seed can be replayed. */
function generator(seed: number) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const int = (n: number) => Math.floor(next() * n);
  const pick = <T>(xs: readonly T[]): T => xs[int(xs.length)];
  return { next, int, pick };
}
type Rng = ReturnType<typeof generator>;

const PIECES = ["a", "Z", "0", " ", "é", "ß", "✓", "€", "中", "🚀", "𝄞", "\u0000", "\n", '"', "\\", "\u2028", "\ud800", "\udfff", "\uffff"];

function randomString(r: Rng): string {
  switch (r.int(6)) {
    case 0:
      return "";
    case 1:
      return "x".repeat(r.int(8) === 0 ? 70_000 : 1 + r.int(200));
    case 2:
      return "s3://bucket/" + r.int(1e9).toString(36);
    default: {
      let s = "";
      const n = r.int(3) === 0 ? 64 + r.int(300) : r.int(40);
      for (let i = 0; i < n; i++) s += r.pick(PIECES);
      return s;
    }
  }
}

const INT32 = [0, 1, -1, 127, 128, 255, 16383, 16384, 2 ** 31 - 1, -(2 ** 31), -300, 2 ** 21];
const INT64 = [0n, 1n, -1n, 2n ** 53n, -(2n ** 53n), 2n ** 63n - 1n, -(2n ** 63n), 1_764_500_000n, -62_135_596_800n];
const DOUBLES = [0, -0, 0.1, -1.5, 1e300, -1e-300, 5e-324, Number.MAX_VALUE, NaN, Infinity, -Infinity, 2 ** 53 + 2];

function randomScalar(r: Rng, type: ScalarType): unknown {
  switch (type) {
    case ScalarType.STRING:
      return randomString(r);
    case ScalarType.BOOL:
      return r.int(2) === 0;
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT:
      return type === ScalarType.FLOAT ? Math.fround(r.pick(DOUBLES)) : r.pick(DOUBLES);
    case ScalarType.INT64:
    case ScalarType.SINT64:
    case ScalarType.SFIXED64:
      return r.pick(INT64);
    case ScalarType.UINT64:
    case ScalarType.FIXED64:
      return BigInt.asUintN(64, r.pick(INT64));
    case ScalarType.UINT32:
    case ScalarType.FIXED32:
      return r.pick(INT32) >>> 0;
    case ScalarType.BYTES:
      return Uint8Array.from({ length: r.int(20) }, () => r.int(256));
    default:
      return r.pick(INT32);
  }
}

/** A JSON value for a Struct: nested objects and lists, nulls, unicode keys, numbers JSON can hold. */
function randomJson(r: Rng, depth: number): JsonValue {
  switch (r.int(depth > 3 ? 4 : 6)) {
    case 0:
      return null;
    case 1:
      return r.int(2) === 0;
    case 2:
      return r.pick([0, -1, 1.5, 1e21, -(2 ** 53), 123456789]);
    case 3:
      return randomString(r).slice(0, 100);
    case 4:
      return Array.from({ length: r.int(4) }, () => randomJson(r, depth + 1));
    default:
      return randomObject(r, depth + 1);
  }
}

function randomObject(r: Rng, depth: number): JsonObject {
  const o: JsonObject = {};
  for (let i = r.int(5); i > 0; i--) o[r.pick(["k", "mesh", "ключ", "🔑", "", "a.b", "n"]) + String(r.int(9))] = randomJson(r, depth);
  return o;
}

function randomField(r: Rng, f: DescField, depth: number): unknown {
  switch (f.fieldKind) {
    case "scalar":
      return randomScalar(r, f.scalar);
    case "enum":
      return r.int(8) === 0 ? 0 : r.pick(f.enum.values).number;
    case "message":
      return r.int(4) === 0 ? undefined : randomMessageValue(r, f.message, depth + 1);
    case "list": {
      const n = r.int(6) === 0 ? 0 : r.int(4) === 0 ? 30 + r.int(40) : 1 + r.int(4);
      if (f.listKind === "scalar") return Array.from({ length: n }, () => randomScalar(r, f.scalar));
      if (f.listKind === "enum") return Array.from({ length: n }, () => r.pick(f.enum.values).number);
      return depth > 2 ? [] : Array.from({ length: Math.min(n, 8) }, () => randomMessageValue(r, f.message, depth + 1));
    }
    case "map": {
      const m: Record<string, unknown> = {};
      for (let i = r.int(4); i > 0; i--) {
        const key = randomString(r).slice(0, 10);
        m[key] =
          f.mapKind === "scalar"
            ? randomScalar(r, f.scalar)
            : f.mapKind === "enum"
              ? r.pick(f.enum.values).number
              : randomMessageValue(r, f.message, depth + 1);
      }
      return m;
    }
  }
}

function randomMessageValue(r: Rng, schema: DescMessage, depth: number): unknown {
  switch (schema.typeName) {
    case "google.protobuf.Timestamp":
      // Valid RFC 3339 range (JSON refuses the rest), from year 1 to 9999.
      return {
        seconds: BigInt(-62_135_596_800 + r.int(253_402_300_799 + 62_135_596_800)),
        nanos: r.pick([0, 1, 999_999_999, 500_000_000, 123_000]),
      };
    case "google.protobuf.Struct":
      return r.int(3) === 0 ? {} : randomObject(r, 0);
    case "google.protobuf.Value":
      return randomJson(r, 0);
    case "google.protobuf.ListValue":
      return Array.from({ length: r.int(4) }, () => randomJson(r, 1));
  }
  return randomMessage(r, schema, depth);
}

function randomMessage(r: Rng, schema: DescMessage, depth = 0): MessageShape<DescMessage> {
  const init: Record<string, unknown> = {};
  for (const f of schema.fields) {
    if (f.oneof) continue;
    if (r.int(5) === 0) continue; // left at its default
    init[f.localName] = randomField(r, f, depth);
  }
  for (const oneof of schema.oneofs) {
    if (r.int(3) === 0) continue;
    const f = r.pick(oneof.fields);
    init[oneof.localName] = { case: f.localName, value: randomField(r, f, depth) };
  }
  return create(schema, init as never);
}

const hex = (b: Uint8Array) => Buffer.from(b).toString("hex");

function outcome(f: () => string): { ok: string } | { error: true } {
  try {
    return { ok: f() };
  } catch {
    return { error: true };
  }
}

const types = file_leasehold_queue_v1_queue.messages;

describe("the direct paths' codecs against protobuf-es on random messages", () => {
  it.each(types.map((t, i) => [t.typeName, t, i] as const))("%s", (_name, schema, index) => {
    for (let i = 0; i < MESSAGES_PER_TYPE; i++) {
      const seed = index * 100_000 + i;
      const message = randomMessage(generator(seed), schema);
      const where = `${schema.typeName}, seed ${seed}`;

      // Binary: the same bytes, and bytes that read back as the message.
      const bytes = writeBinary(schema, message);
      expect(hex(bytes), where).toBe(hex(toBinary(schema, message)));
      expect(hex(toBinary(schema, fromBinary(schema, bytes))), where).toBe(hex(bytes));

      // JSON: the same text, or both refuse (a NaN inside a Struct has no JSON).
      const written = outcome(() => {
        const out = writeJson(schema, message, JSON_OPTIONS);
        return typeof out === "string" ? out : "";
      });
      const expected = outcome(() => toJsonString(schema, message, JSON_OPTIONS));
      expect(written, where).toEqual(expected);

      // The reader: toJson's output reads back to what fromJson reads (or both refuse: a lone
      // surrogate is not UTF-8, and protobuf-es refuses it in a request).
      if ("ok" in expected) {
        const json = JSON.parse(expected.ok) as JsonValue;
        const read = outcome(() => hex(toBinary(schema, readJson(schema, structuredClone(json), JSON_OPTIONS))));
        const want = outcome(() => hex(toBinary(schema, fromJson(schema, structuredClone(json), JSON_OPTIONS))));
        expect(read, where).toEqual(want);
      }
    }
  });
});
