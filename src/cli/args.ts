// Option values and input files, checked: a bad one is a UsageError (exit 2) or a CliError (exit 1)
// that names it.
import { readFileSync } from "node:fs";
import type { JsonValue } from "@bufbuild/protobuf";
import { JobStatus, TaskStatus } from "../../gen/leasehold/queue/v1/queue_pb.js";
import { JOB_STATUSES, TASK_STATUSES } from "../queue/types.js";
import { CliError, UsageError } from "./errors.js";

/** A non-negative int32 option (or a positive one with min 1). */
export function intOption(name: string, value: string | boolean | undefined, min = 0): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== "string" || !/^\d+$/.test(value) || Number(value) > 2 ** 31 - 1 || Number(value) < min) {
    throw new UsageError(`--${name} must be an integer ≥ ${min}, not ${JSON.stringify(value)}`);
  }
  return Number(value);
}

/** A string option's value, or undefined when absent. */
export function stringOption(value: string | boolean | undefined): string | undefined {
  return typeof value === "string" ? value : undefined;
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
