// What a command is: its words, positionals and options, declared once. The parser (program.ts)
// and the usage text (usage.ts) are both made from these declarations.
import type { CallOptions, Client } from "@connectrpc/connect";
import type { QueueService } from "../../gen/leasehold/queue/v1/queue_pb.js";

/** "--name VALUE" when `value` names the placeholder, else a flag. */
export interface OptionSpec {
  name: string;
  /** A one-letter alias ("f" for -f), shown in the usage text in place of the long name. */
  short?: string;
  value?: string;
  /** Shown without brackets in the usage text (the command checks it: commander does not). */
  required?: boolean;
  /** A line for the usage text's option list (the global options have one). */
  help?: string;
  /** May be given more than once: the command gets every value, in order, as a string[]. */
  repeatable?: boolean;
}

export interface Invocation {
  /** The coordinator's client (made on first use, so `token new` needs no --url). */
  readonly client: Client<typeof QueueService>;
  callOptions: CallOptions;
  json: boolean;
  /** Positionals after the command words. */
  args: string[];
  /** Command options by their --long-name (a repeatable one's values as a string[]). */
  opts: Record<string, string | string[] | boolean | undefined>;
}

export interface CommandSpec {
  /** The command words, "job get". */
  name: string;
  positionals: string[];
  options: OptionSpec[];
  /** The usage text's description, one or two lines. */
  summary: string[];
  /** The exit code. */
  run(inv: Invocation): Promise<number>;
}

export const DEFAULT_URL = "http://127.0.0.1:8080";

/** Options accepted anywhere on the line, by every command. */
export const GLOBAL_OPTIONS: OptionSpec[] = [
  { name: "url", value: "URL", help: `coordinator address (default ${DEFAULT_URL})` },
  {
    name: "token",
    value: "T",
    help: 'bearer token sent as "Authorization: Bearer T" (seen by ps and\nshell history: prefer --token-file or LEASEHOLD_TOKEN)',
  },
  { name: "token-file", value: "FILE", help: "read the bearer token from FILE (its first line)" },
  {
    name: "ca-file",
    value: "FILE",
    help: "also trust the PEM certificate(s) in FILE for an https:// --url\n(a self-signed coordinator); default LEASEHOLD_CA_FILE",
  },
  {
    name: "json",
    help: 'machine output: one JSON document per command with the proto\nfield names (job watch: one JSON line per stream message);\ntoken new: {"token": …, "config_line": …}',
  },
  { name: "timeout-ms", value: "N", help: "deadline of each call (job watch: of the whole stream)" },
];

/** "--max-attempts" → "maxAttempts", the key commander stores an option under. */
export function camelCase(long: string): string {
  return long.replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());
}
