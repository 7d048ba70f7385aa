// The `leasehold` command line: the commands of commands/*.ts as one commander program, the global
// options anywhere on the line, and main(), which turns every outcome into an exit code. Every
// command except `token new` talks to a running coordinator through the generated Connect client
// (Connect protocol over HTTP/1.1). The coordinator's address comes from --url; the token from
// --token, --token-file or LEASEHOLD_TOKEN, a CA to trust from --ca-file or LEASEHOLD_CA_FILE (the
// variables read by src/config, like every other, and handed to main()).
import { readFileSync } from "node:fs";
import { rootCertificates } from "node:tls";
import { X509Certificate } from "node:crypto";
import { ConnectError, createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { Command as Program, CommanderError } from "commander";
import { QueueService } from "../../gen/leasehold/queue/v1/queue_pb.js";
import { intOption } from "./args.js";
import { camelCase, DEFAULT_URL, GLOBAL_OPTIONS, type CommandSpec, type Invocation } from "./command.js";
import { accountCommands } from "./commands/account.js";
import { accountUsageCommands } from "./commands/account-usage.js";
import { inspectCommands } from "./commands/inspect.js";
import { jobCommands } from "./commands/job.js";
import { scheduleCommands } from "./commands/schedule.js";
import { settlementCommands } from "./commands/settlement.js";
import { adjustmentCommands } from "./commands/adjustment.js";
import { tokenCommands } from "./commands/token.js";
import { workloadCommands } from "./commands/workload.js";
import { workflowCommands } from "./commands/workflow.js";
import type { CliEnvironment } from "../config/index.js";
import { CliError, describeConnectError, describeTlsFailure, UsageError } from "./errors.js";
import { commandUsage, usage } from "./usage.js";

/** Every command, in the order the usage text lists them. */
export const COMMANDS: readonly CommandSpec[] = [
  ...tokenCommands,
  ...workloadCommands,
  ...jobCommands,
  ...inspectCommands,
  ...workflowCommands,
  ...scheduleCommands,
  ...accountCommands,
  ...settlementCommands,
  ...adjustmentCommands,
  ...accountUsageCommands,
];

export const USAGE = usage(COMMANDS);

/** The global options, as commander parses them wherever they stand on the line. */
interface GlobalOptions {
  url?: string;
  token?: string;
  tokenFile?: string;
  caFile?: string;
  json?: boolean;
  timeoutMs?: string;
}

/** A file named by an option or a variable, read whole; a failure names both. */
function readNamedFile(source: string, file: string): string {
  try {
    return readFileSync(file, "utf8");
  } catch (err) {
    throw new CliError(`${source}: cannot read ${file} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
  }
}

/** --token, else --token-file's first line, else LEASEHOLD_TOKEN; undefined: no token at all. */
function tokenOf(globals: GlobalOptions, env: CliEnvironment): string | undefined {
  if (globals.token !== undefined && globals.tokenFile !== undefined) throw new UsageError("--token and --token-file: give one of them");
  if (globals.token !== undefined) return globals.token;
  if (globals.tokenFile !== undefined) {
    const token = readNamedFile("--token-file", globals.tokenFile).split(/\r?\n/)[0].trim();
    if (token === "") throw new CliError(`--token-file: ${globals.tokenFile} has no token on its first line`);
    return token;
  }
  return env.token;
}

/** The PEM text of --ca-file (else LEASEHOLD_CA_FILE), checked to hold a certificate. */
function caOf(globals: GlobalOptions, env: CliEnvironment): string | undefined {
  const [source, file] = globals.caFile !== undefined ? ["--ca-file", globals.caFile] : ["LEASEHOLD_CA_FILE", env.caFile];
  if (file === undefined) return undefined;
  const pem = readNamedFile(source, file);
  try {
    new X509Certificate(pem);
  } catch {
    throw new CliError(`${source}: ${file} is not a PEM certificate`);
  }
  return pem;
}

function transportFor(url: string, token: string | undefined, ca: string | undefined) {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new UsageError(`--url is not a URL: ${JSON.stringify(url)}`);
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:") throw new UsageError(`--url must be http:// or https://, not ${url}`);
  const interceptors: Interceptor[] = [];
  if (token !== undefined) {
    interceptors.push((next) => (req) => {
      req.header.set("Authorization", `Bearer ${token}`);
      return next(req);
    });
  }
  // The system's CAs stay trusted: --ca-file adds one, so a public certificate keeps working.
  const nodeOptions = ca === undefined ? undefined : { ca: [...rootCertificates, ca] };
  return createConnectTransport({ baseUrl: url, httpVersion: "1.1", interceptors, nodeOptions });
}

async function runCommand(
  cmd: CommandSpec,
  positionals: string[],
  parsed: Record<string, unknown>,
  globals: GlobalOptions,
  env: CliEnvironment,
): Promise<number> {
  if (positionals.some((p) => p === "")) throw new UsageError(`${cmd.name}: empty ${cmd.positionals.join(" ")}`);
  const timeoutMs = intOption("timeout-ms", globals.timeoutMs, 1);
  const opts: Invocation["opts"] = {};
  for (const { name } of cmd.options) opts[name] = parsed[camelCase(name)] as Invocation["opts"][string];
  let client: Client<typeof QueueService> | undefined;
  const inv: Invocation = {
    get client() {
      return (client ??= createClient(QueueService, transportFor(globals.url ?? DEFAULT_URL, tokenOf(globals, env), caOf(globals, env))));
    },
    callOptions: timeoutMs === undefined ? {} : { timeoutMs },
    json: globals.json === true,
    args: positionals,
    opts,
  };
  return cmd.run(inv);
}

/**
 * The command line as a commander program: the global options (anywhere on the line) and one
 * subcommand per entry of COMMANDS ("job get" is `job` → `get`). Every command's action stores its
 * exit code in `result`; help is the one USAGE text.
 */
function buildProgram(result: { code: number }, env: CliEnvironment): Program {
  const configure = (p: Program) =>
    p
      .exitOverride()
      .configureOutput({ writeOut: (str) => process.stdout.write(str), writeErr: () => {} })
      .configureHelp({ formatHelp: () => USAGE })
      .allowExcessArguments(false)
      .helpCommand(false);
  const program = configure(new Program("leasehold"));
  for (const o of GLOBAL_OPTIONS) program.option(o.value ? `--${o.name} <${o.value}>` : `--${o.name}`);
  const group = (name: string) => program.commands.find((c) => c.name() === name) ?? configure(program.command(name));

  for (const cmd of COMMANDS) {
    const [groupName, commandName] = cmd.name.split(" ");
    const sub = configure(group(groupName).command(commandName));
    for (const positional of cmd.positionals) sub.argument(`<${positional}>`);
    for (const o of cmd.options) {
      const flags = `${o.short ? `-${o.short}, ` : ""}--${o.name}`;
      if (o.repeatable) sub.option(`${flags} <VALUE>`, "", (v: string, all: string[] = []) => [...all, v]);
      else sub.option(o.value ? `${flags} <VALUE>` : flags);
    }
    sub.action(async (...args: unknown[]) => {
      const command = args[args.length - 1] as Program;
      const positionals = args.slice(0, cmd.positionals.length) as string[];
      result.code = await runCommand(cmd, positionals, command.opts(), command.optsWithGlobals<GlobalOptions>(), env);
    });
  }
  return program;
}

/** The global options that take a value, so their value is not read as a command word. */
const VALUE_OPTIONS = new Set(GLOBAL_OPTIONS.filter((o) => o.value).map((o) => `--${o.name}`));

/**
 * The usage of what the line asks for: its command's ("jobs list --status done"), its group's
 * commands ("job frobnicate"), or all of them when not even the group is known.
 */
export function usageFor(argv: string[]): string {
  const words: string[] = [];
  for (let i = 0; i < argv.length && words.length < 2; i++) {
    if (argv[i].startsWith("-")) {
      if (VALUE_OPTIONS.has(argv[i])) i++;
      continue;
    }
    words.push(argv[i]);
  }
  const command = COMMANDS.find((c) => c.name === words.join(" "));
  if (command) return commandUsage([command]);
  const group = COMMANDS.filter((c) => c.name.split(" ")[0] === words[0]);
  return group.length > 0 ? commandUsage(group) : USAGE;
}

/** Runs one command line; `env` is what src/config read of the CLI's variables. */
export async function main(argv: string[], env: CliEnvironment = {}): Promise<number> {
  if (argv.length === 0) {
    process.stdout.write(USAGE);
    return 2;
  }
  if (argv[0] === "help") {
    process.stdout.write(USAGE);
    return 0;
  }
  const result = { code: 0 };
  try {
    await buildProgram(result, env).parseAsync(argv, { from: "user" });
    return result.code;
  } catch (err) {
    if (err instanceof ConnectError) {
      process.stderr.write(`leasehold: ${describeTlsFailure(err) ?? describeConnectError(err)}\n`);
      return 1;
    }
    if (err instanceof CommanderError) {
      if (err.code === "commander.helpDisplayed" || err.code === "commander.version") return 0;
      // "job" alone (a group without its command) asks commander for help: that is bad usage too.
      const message = err.code === "commander.help" ? "missing command" : err.message.replace(/^error: /, "");
      process.stderr.write(`leasehold: ${message}\n${usageFor(argv)}`);
      return 2;
    }
    if (err instanceof UsageError) {
      process.stderr.write(`leasehold: ${err.message}\n${usageFor(argv)}`);
      return 2;
    }
    if (err instanceof CliError) {
      process.stderr.write(`leasehold: ${err.message}\n`);
      return 1;
    }
    throw err;
  }
}
