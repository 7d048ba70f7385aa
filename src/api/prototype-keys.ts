// A "__proto__" key in a request: refused, never dropped. protobuf-es keeps a map field (usage
// counters, required_labels, a Struct's keys) as a plain object, where assigning "__proto__" sets
// the object's prototype (or nothing) instead of a key: the key vanished between the wire and the
// handler, and a worker's counter named so was answered 200 and never recorded. So the decoders
// look for one before protobuf-es sees the request, only when the raw request holds the text at
// all (a byte search, so the plain case costs a scan and nothing more), and the call is refused
// with INVALID_ARGUMENT naming where it was. Other names an object has (constructor, prototype)
// reach the handler and are refused by the rules of the field that holds them (queue/usage.ts).
//
// Where: the REST body (rest-routes.ts, either way through the server) and the direct gRPC and
// Connect paths (direct/). A request the router decodes itself (gRPC-Web, a compressed one, every
// call with DIRECT_UNARY=false) is not looked at: connect-es offers no hook before its decoder.

import { ScalarType, type DescMessage } from "@bufbuild/protobuf";
import { BinaryReader, WireType } from "@bufbuild/protobuf/wire";
import { ValidationError } from "../queue/errors.js";

export const PROTO_KEY = "__proto__";
const PROTO_KEY_BYTES = Buffer.from(PROTO_KEY);

/** The error for a "__proto__" key found at `path` (e.g. "usage.__proto__"). */
export function prototypeKeyError(path: string): ValidationError {
  return new ValidationError(path, `"${PROTO_KEY}" is not a key this API takes (an object's prototype, not a name)`);
}

/** Where the first "__proto__" key of request JSON is, as a field path; undefined when there is none. `text`: the raw JSON, to skip the walk. */
export function prototypeKeyInJson(json: unknown, text?: string): string | undefined {
  if (text !== undefined && !text.includes(PROTO_KEY)) return undefined;
  return walkJson(json, "");
}

function walkJson(v: unknown, path: string): string | undefined {
  if (v === null || typeof v !== "object") return undefined;
  if (Array.isArray(v)) {
    for (let i = 0; i < v.length; i++) {
      const found = walkJson(v[i], `${path}[${i}]`);
      if (found) return found;
    }
    return undefined;
  }
  for (const key of Object.keys(v)) {
    const at = path ? `${path}.${key}` : key;
    if (key === PROTO_KEY) return at;
    const found = walkJson((v as Record<string, unknown>)[key], at);
    if (found) return found;
  }
  return undefined;
}

/**
 * Where the first "__proto__" key of a map field is in a binary message of type `schema`, as a
 * field path; undefined when there is none. Reads the wire format by the descriptor (only map
 * entries' keys and nested messages; everything else is skipped), and only when the bytes hold the
 * text. Bytes that are not a valid message are left to the decoder, which refuses them.
 */
export function prototypeKeyInBinary(schema: DescMessage, bytes: Uint8Array): string | undefined {
  if (Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).indexOf(PROTO_KEY_BYTES) < 0) return undefined;
  try {
    return walkBinary(schema, bytes, "", 0);
  } catch {
    return undefined;
  }
}

function walkBinary(schema: DescMessage, bytes: Uint8Array, path: string, depth: number): string | undefined {
  if (depth > 32) return undefined;
  const reader = new BinaryReader(bytes);
  const counts = new Map<number, number>();
  while (reader.pos < reader.len) {
    const [no, wireType] = reader.tag();
    const field = schema.fields.find((f) => f.number === no);
    if (!field || wireType !== WireType.LengthDelimited) {
      reader.skip(wireType, no);
      continue;
    }
    const at = path ? `${path}.${field.name}` : field.name;
    const data = reader.bytes();
    if (field.fieldKind === "map") {
      const entry = new BinaryReader(data);
      while (entry.pos < entry.len) {
        const [n, t] = entry.tag();
        if (n === 1 && field.mapKey === ScalarType.STRING && t === WireType.LengthDelimited) {
          const key = entry.string();
          if (key === PROTO_KEY) return `${at}.${PROTO_KEY}`;
          continue;
        }
        if (n === 2 && field.mapKind === "message" && t === WireType.LengthDelimited) {
          const found = walkBinary(field.message, entry.bytes(), `${at}.?`, depth + 1);
          if (found) return found;
          continue;
        }
        entry.skip(t, n);
      }
    } else if (field.fieldKind === "message" || (field.fieldKind === "list" && field.listKind === "message")) {
      const i = counts.get(no) ?? 0;
      counts.set(no, i + 1);
      const found = walkBinary(field.message, data, field.fieldKind === "list" ? `${at}[${i}]` : at, depth + 1);
      if (found) return found;
    }
  }
  return undefined;
}
