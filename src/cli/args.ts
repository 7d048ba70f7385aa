// Option values and input files, checked: a bad one is a UsageError (exit 2) or a CliError (exit 1)
// that names it.
import { readFileSync } from "node:fs";
import type { JsonValue } from "@bufbuild/protobuf";
import { JobStatus, TaskStatus } from "../../gen/leasehold/queue/v1/queue_pb.js";
import { JOB_STATUSES, TASK_STATUSES } from "../queue/types.js";
import { CliError, UsageError } from "./errors.js";

/** An option's value as the command gets it (a repeatable option's: string[]). */
type OptionValue = string | string[] | boolean | undefined;

/** A non-negative int32 option (or a positive one with min 1). */
export function intOption(name: string, value: OptionValue, min = 0): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== "string" || !/^\d+$/.test(value) || Number(value) > 2 ** 31 - 1 || Number(value) < min) {
    throw new UsageError(`--${name} must be an integer ≥ ${min}, not ${JSON.stringify(value)}`);
  }
  return Number(value);
}

/** A string option's value, or undefined when absent. */
export function stringOption(value: OptionValue): string | undefined {
  return typeof value === "string" ? value : undefined;
}

/** A positive number option (a rate: 0.5 is allowed). */
export function positiveNumberOption(name: string, value: OptionValue): number | undefined {
  if (value === undefined) return undefined;
  const n = typeof value === "string" && /^\d+(\.\d+)?$/.test(value) ? Number(value) : NaN;
  if (!(n > 0) || !Number.isFinite(n)) throw new UsageError(`--${name} must be a number > 0, not ${JSON.stringify(value)}`);
  return n;
}

/** A repeatable KEY=VALUE option ("--required-label gpu=a100 --required-label region=eu") as a map. */
export function pairsOption(name: string, value: OptionValue): Record<string, string> | undefined {
  if (value === undefined) return undefined;
  const pairs: Record<string, string> = {};
  for (const item of Array.isArray(value) ? value : [String(value)]) {
    const eq = item.indexOf("=");
    if (eq < 1) throw new UsageError(`--${name} must be KEY=VALUE, not ${JSON.stringify(item)}`);
    const key = item.slice(0, eq);
    if (key in pairs) throw new UsageError(`--${name} ${key} is given twice`);
    pairs[key] = item.slice(eq + 1);
  }
  return pairs;
}

/** "failed" → JobStatus.FAILED. */
export function parseJobStatus(name: string): JobStatus {
  const i = JOB_STATUSES.indexOf(name.toLowerCase() as (typeof JOB_STATUSES)[number]);
  if (i < 0) throw new UsageError(`--status must be one of ${JOB_STATUSES.join(", ")}, not ${JSON.stringify(name)}`);
  return JobStatus[name.toUpperCase() as keyof typeof JobStatus];
}

/** "failed" → TaskStatus.FAILED. */
export function parseTaskStatus(name: string): TaskStatus {
  const i = TASK_STATUSES.indexOf(name.toLowerCase() as (typeof TASK_STATUSES)[number]);
  if (i < 0) throw new UsageError(`--status must be one of ${TASK_STATUSES.join(", ")}, not ${JSON.stringify(name)}`);
  return TaskStatus[name.toUpperCase() as keyof typeof TaskStatus];
}

export function readJsonFile(file: string, text: string): JsonValue {
  try {
    return JSON.parse(text) as JsonValue;
  } catch (err) {
    throw new CliError(`${file}: not JSON: ${(err as Error).message}`);
  }
}

/** A file's text, or stdin's for "-". */
export async function readInput(file: string): Promise<string> {
  if (file === "-") {
    const chunks: Buffer[] = [];
    for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
    return Buffer.concat(chunks).toString("utf8");
  }
  try {
    return readFileSync(file, "utf8");
  } catch (err) {
    throw new CliError(`cannot read ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
}
