// Messages → JSON text without reflection per call: for a message type, a writer compiled once
// from its descriptor (one small function per field), producing exactly what protobuf-es'
// toJsonString produces with the server's options (proto field names, implicit fields always
// emitted): fields in field-number order, int32 as numbers, enums by name, Timestamps as RFC 3339,
// Structs as their JSON. A type with something this writer does not know (maps, oneofs, 64-bit
// integers, bytes, other well-known types) keeps toJsonString. test/json-writer.test.ts checks the
// output against toJsonString, byte for byte, for every message type of the contract.
//
// Why: REST answers are the coordinator's hottest JSON. toJsonString on a one-task claim answer
// costs ~11 µs in a tight loop (reflection: a ReflectMessage per message, isSet/get per field,
// an intermediate JSON object, then JSON.stringify); this writer ~2 µs.

import { ScalarType, toJsonString, type DescEnum, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import type { Timestamp } from "@bufbuild/protobuf/wkt";

export interface JsonWriteOptions {
  useProtoFieldName: true;
  alwaysEmitImplicit: true;
}

type Writer = (message: MessageShape<DescMessage>) => string;

class Unsupported extends Error {}

/** google.protobuf.FeatureSet.FieldPresence.IMPLICIT (proto3 fields without `optional`). */
const IMPLICIT = 2;

const compiled = new WeakMap<DescMessage, Writer>();

/** The JSON text of a message as toJsonString(schema, message, options) writes it. */
export function writeJson(schema: DescMessage, message: MessageShape<DescMessage>, options: JsonWriteOptions): string {
  let writer = compiled.get(schema);
  if (writer === undefined) {
    try {
      writer = compileMessage(schema);
    } catch (err) {
      if (!(err instanceof Unsupported)) throw err;
      writer = (m) => toJsonString(schema, m, options);
    }
    compiled.set(schema, writer);
  }
  return writer(message);
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
 * CreateJob answer 48 ms with closures, see docs/performance.md for this).
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
  const lines: string[] = ["const p = [];"];
  for (const field of [...schema.fields].sort((a, b) => a.number - b.number)) {
    const key = JSON.stringify(JSON.stringify(field.name) + ":");
    const get = `m[${JSON.stringify(field.localName)}]`;
    let value: string;
    switch (field.fieldKind) {
      case "scalar":
        // The common ones inline; the rest through their writer.
        if (field.scalar === ScalarType.STRING) value = `JSON.stringify(${get})`;
        else if (INT32_TYPES.has(field.scalar)) value = `("" + ${get})`;
        else value = `${ref(scalarWriter(field.scalar))}(${get})`;
        break;
      case "enum":
        value = `${ref(enumWriter(field.enum))}(${get})`;
        break;
      case "message":
        value = `${ref(messageWriter(field.message, seen))}(${get})`;
        break;
      case "list": {
        let item: (v: unknown) => string;
        if (field.listKind === "scalar") item = scalarWriter(field.scalar);
        else if (field.listKind === "enum") {
          const e = enumWriter(field.enum);
          item = (v) => e(v as number);
        } else item = messageWriter(field.message, seen);
        value = `${ref(listWriter(item))}(${get})`;
        break;
      }
      case "map":
        throw new Unsupported(`map field ${field.name}`);
    }
    // Implicit presence: always written (alwaysEmitImplicit). Explicit (optional, messages): only when set.
    const always = field.fieldKind === "list" || (field.fieldKind !== "message" && field.presence === IMPLICIT);
    const statement = `p.push(${key} + ${value});`;
    lines.push(always ? statement : `if (${get} !== undefined) ${statement}`);
  }
  lines.push('return "{" + p.join(",") + "}";');
  seen.delete(schema);
  return new Function("h", `return function write_${schema.name}(m) {\n${lines.join("\n")}\n};`)(helpers) as Writer;
}

function listWriter(item: (v: unknown) => string): (list: unknown[]) => string {
  return (list) => {
    if (list.length === 0) return "[]";
    const items = new Array<string>(list.length);
    for (let i = 0; i < list.length; i++) items[i] = item(list[i]);
    return "[" + items.join(",") + "]";
  };
}

function messageWriter(schema: DescMessage, seen: Set<DescMessage>): (v: unknown) => string {
  if (schema.typeName === "google.protobuf.Timestamp") return (v) => timestampJson(v as Timestamp);
  // protobuf-es represents a Struct field as its JSON object.
  if (schema.typeName === "google.protobuf.Struct") return (v) => JSON.stringify(v);
  const write = compileMessage(schema, seen);
  return (v) => write(v as MessageShape<DescMessage>);
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

/** protobuf-es' timestampToJson, in a string. */
function timestampJson(t: Timestamp): string {
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
  return '"' + new Date(ms).toISOString().replace(".000Z", z) + '"';
}
