// Every message type of the contract filled in with varied values, for the binary codecs' tests
// (test/api/binary-writer.test.ts): negative numbers, non-ASCII and
// lone-surrogate strings, optional fields set to zero, packed lists, Structs, Timestamps before 1970.
import { create, type DescField, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";

const STRINGS = ["", "plain", "ünïcødé ✓", "𝄞 pair", "lone \ud800 surrogate", "x".repeat(70), "é".repeat(80), "\u0000"];
const INTS = [0, 1, -1, 127, 128, 16383, 16384, 2147483647, -2147483648, 300];
const DOUBLES = [0, 0.5, -1.25, 1e21, NaN, Infinity, -0];
const MILLIS = [0, 1_764_500_000_123, -62_135_596_800_000, -1];

export function filled(schema: DescMessage, seed: number, depth = 0): MessageShape<DescMessage> {
  const init: Record<string, unknown> = {};
  for (const f of schema.fields) init[f.localName] = valueFor(f, seed + f.number, depth);
  return create(schema, init as never);
}

function valueFor(f: DescField, seed: number, depth: number): unknown {
  switch (f.fieldKind) {
    case "scalar":
      return scalar(f.scalar, seed);
    case "enum":
      return f.enum.values[seed % f.enum.values.length].number;
    case "message":
      return depth > 2 ? undefined : message(f.message, seed, depth);
    case "list":
      if (f.listKind === "scalar") return [scalar(f.scalar, seed), scalar(f.scalar, seed + 1), scalar(f.scalar, seed + 2)];
      if (f.listKind === "enum") return [0, f.enum.values[seed % f.enum.values.length].number];
      return depth > 2 ? [] : [message(f.message, seed, depth), message(f.message, seed + 1, depth)];
    case "map":
      return {};
  }
}

function scalar(type: number, seed: number): unknown {
  switch (type) {
    case 9:
      return STRINGS[seed % STRINGS.length];
    case 8:
      return seed % 2 === 0;
    case 1:
    case 2:
      return DOUBLES[seed % DOUBLES.length];
    case 13: // uint32
      return Math.abs(INTS[seed % INTS.length]);
    default:
      return INTS[seed % INTS.length];
  }
}

function message(schema: DescMessage, seed: number, depth: number): unknown {
  if (schema.typeName === "google.protobuf.Timestamp") {
    const t = timestampFromMs(MILLIS[seed % MILLIS.length]);
    if (seed % 3 === 1) t.nanos += 789;
    return t;
  }
  if (schema.typeName === "google.protobuf.Struct") return seed % 2 ? {} : { a: 1, b: [true, null, "x"], c: { d: 2.5 } };
  return filled(schema, seed, depth + 1);
}
