// REST's error answers that need the request to word them: a request JSON the message type
// refuses, named by field (protobuf-es names a scalar field that fails to decode, but not a
// message field, and for an enum only the value it refused), and a Connect error answer read back
// from the router (REST's server streams, and every call with DIRECT_UNARY=false) in REST's form.

import { fromBinary, fromJson, type DescEnum, type DescMessage, type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import { base64Decode } from "@bufbuild/protobuf/wire";
import { Code } from "@connectrpc/connect";
import { codeFromString } from "@connectrpc/connect/protocol-connect";
import { BadRequestSchema, ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { ValidationError } from "../queue/errors.js";
import { HttpError, recordFailure, WORKLOAD_NOT_FOUND, type MappedError } from "./errors.js";
import type { RequestInfo } from "./request-info.js";

/** "must be one of pending, running, … (or JOB_STATUS_PENDING, …)" for an enum field, without the UNSPECIFIED zero. */
function enumExpectation(e: DescEnum): string {
  const values = e.values.filter((v) => v.number !== 0);
  const short = values.map((v) => v.localName.toLowerCase());
  return `must be one of ${short.join(", ")} (or ${values.map((v) => v.name).join(", ")})`;
}

/**
 * protobuf-es names a scalar field that fails to decode, but not a message-typed one
 * ("cannot decode message google.protobuf.Struct from JSON Array(2)"), and for an enum only
 * the value it refused: find the field (and list index) that fails on its own, and refuse it as
 * a ValidationError naming it (with the accepted values of an enum). An error no field explains
 * stays an HttpError with protobuf-es' message.
 */
export function decodeError(schema: DescMessage, json: JsonValue, err: Error, path = ""): Error {
  if (json === null || typeof json !== "object" || Array.isArray(json)) {
    return path ? new ValidationError(path, err.message) : new HttpError(Code.InvalidArgument, err.message);
  }
  for (const [key, value] of Object.entries(json)) {
    const field = schema.fields.find((f) => f.name === key || f.jsonName === key);
    if (!field) return new ValidationError(path ? `${path}.${key}` : key, unknownKey(schema));
    const at = path ? `${path}.${field.name}` : field.name;
    try {
      fromJson(schema, { [key]: value });
      continue;
    } catch (fieldErr) {
      if (field.fieldKind === "list" && field.listKind === "message" && Array.isArray(value)) {
        for (let i = 0; i < value.length; i++) {
          try {
            fromJson(field.message, value[i]);
          } catch (itemErr) {
            return decodeError(field.message, value[i], itemErr as Error, `${at}[${i}]`);
          }
        }
      }
      if (field.fieldKind === "message" && field.message.typeName.startsWith("leasehold.")) {
        return decodeError(field.message, value, fieldErr as Error, at);
      }
      if (field.fieldKind === "enum" && typeof value === "string") {
        return new ValidationError(at, `${JSON.stringify(value)} is not a value: ${enumExpectation(field.enum)}`);
      }
      return new ValidationError(at, (fieldErr as Error).message);
    }
  }
  return path ? new ValidationError(path, err.message) : new HttpError(Code.InvalidArgument, err.message);
}

/** A Connect JSON error answer: `{"code", "message", "details": [{"type", "value"}]}`. */
export interface ConnectErrorJson {
  code?: string;
  message?: string;
  details?: { type?: string; value?: string }[];
}

/**
 * The REST form of a Connect error answer, recorded on the RequestInfo when no interceptor saw it
 * (the router refused the request JSON before the call). A request JSON the message type refuses
 * is named by field, as protobuf-es does not for message fields; the field violations of a
 * google.rpc.BadRequest detail become the REST body's `violations`, and an unknown workload's
 * google.rpc.ErrorInfo its `reason` and `known_workloads`, as the direct path writes them.
 */
export function connectFailure(error: ConnectErrorJson | undefined, schema: DescMessage, json: JsonObject, info: RequestInfo): MappedError {
  const codeName = error?.code ?? "unknown";
  const code = codeFromString(codeName) ?? Code.Unknown;
  if (code === Code.InvalidArgument && info.code === undefined) {
    try {
      fromJson(schema, json);
    } catch (err) {
      return recordFailure(info, decodeError(schema, json, err as Error));
    }
  }
  const m = recordFailure(info, new HttpError(code, error?.message ?? ""));
  const badRequest = error?.details?.find((d) => d.type === BadRequestSchema.typeName);
  if (badRequest?.value !== undefined) {
    const violations = fromBinary(BadRequestSchema, base64Decode(badRequest.value)).fieldViolations;
    return { ...m, violations: violations.map((v) => ({ field: v.field, description: v.description })) };
  }
  const errorInfo = error?.details?.find((d) => d.type === ErrorInfoSchema.typeName);
  if (errorInfo?.value !== undefined) {
    const { reason, metadata } = fromBinary(ErrorInfoSchema, base64Decode(errorInfo.value));
    if (reason === WORKLOAD_NOT_FOUND.reason) {
      const known = metadata.known_workloads;
      const total = metadata.known_workloads_total;
      const listed = {
        ...(known === undefined ? {} : { known: known === "" ? [] : known.split(",") }),
        ...(total === undefined ? {} : { knownTotal: Number(total) }),
      };
      return { ...m, unknownWorkload: { workload: metadata.workload ?? "", field: metadata.field ?? "", ...listed } };
    }
  }
  return m;
}

/** What an unknown key of a request object is told: the fields the message has. */
function unknownKey(schema: DescMessage): string {
  return `is not a field of ${schema.name} (its fields: ${schema.fields.map((f) => f.name).join(", ")})`;
}
