// Workloads' parameter schemas (JSON Schema, by ajv): checked when a workload is registered,
// compiled once per workload version, and a failure reported as every violation with its path.
import { Ajv, type ErrorObject, type ValidateFunction } from "ajv";
import { ValidationError, type FieldViolation } from "./errors.js";
import type { JsonObject, Workload } from "./types.js";
import { LIMITS } from "./validation.js";

export class ParameterSchemas {
  // allErrors: a client fixing its parameters wants every problem at once, not one per round trip.
  private readonly ajv = new Ajv({ allErrors: true, strict: false });
  /** Compiled parameter schemas, keyed by workload name and its updated_at. */
  private readonly validators = new Map<string, ValidateFunction>();

  /** Throws a ValidationError on parameters_schema unless schema is a JSON Schema ajv can compile. */
  check(schema: JsonObject): void {
    try {
      this.ajv.compile(schema);
    } catch (err) {
      throw new ValidationError("parameters_schema", `is not a valid JSON Schema: ${(err as Error).message}`);
    }
  }

  /** Throws a ValidationError on field listing every violation when parameters break w's schema. */
  validate(w: Workload, parameters: unknown, field: string): void {
    if (!w.parametersSchema) return;
    const key = `${w.name}@${w.updatedAt.getTime()}`;
    let validate = this.validators.get(key);
    if (!validate) {
      validate = this.ajv.compile(w.parametersSchema);
      this.validators.set(key, validate);
    }
    if (!validate(parameters)) throw schemaError(field, w.name, validate.errors ?? []);
  }
}

/**
 * A parameters-schema failure as one ValidationError listing every violation (up to
 * LIMITS.violations), each named by its path in the request ("parameters.lr",
 * "tasks[2].parameters.batch") with what the schema expected there.
 */
function schemaError(field: string, workload: string, errors: readonly ErrorObject[]): ValidationError {
  const at = (instancePath: string, property?: string) => {
    const parts = instancePath
      .split("/")
      .slice(1)
      .map((p) => p.replace(/~1/g, "/").replace(/~0/g, "~"));
    if (property !== undefined) parts.push(property);
    return (
      field +
      parts.map((p) => (/^\d+$/.test(p) ? `[${p}]` : /^[A-Za-z_][A-Za-z0-9_]*$/.test(p) ? `.${p}` : `[${JSON.stringify(p)}]`)).join("")
    );
  };
  const all: FieldViolation[] = errors.map((e) => {
    const params = e.params as Record<string, unknown>;
    if (e.keyword === "required") return { field: at(e.instancePath, String(params.missingProperty)), description: "is required" };
    if (e.keyword === "additionalProperties") {
      return {
        field: at(e.instancePath, String(params.additionalProperty)),
        description: "is not allowed (the schema has no such property)",
      };
    }
    if (e.keyword === "enum") return { field: at(e.instancePath), description: `must be one of ${JSON.stringify(params.allowedValues)}` };
    return { field: at(e.instancePath), description: e.message ?? `breaks the schema's ${e.keyword} rule` };
  });
  const shown = all.slice(0, LIMITS.violations);
  const more = all.length - shown.length;
  const list = shown.map((v) => `${v.field} ${v.description}`).join("; ");
  return new ValidationError(
    field,
    `does not match the ${workload} schema (${all.length} problem${all.length === 1 ? "" : "s"}): ${list}${more > 0 ? `; and ${more} more` : ""}`,
    shown,
  );
}
