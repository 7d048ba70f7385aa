// The `leasehold` command line: the commands of commands/*.ts as one commander program, the global
// options anywhere on the line, and main(), which turns every outcome into an exit code. Every
// command except `token new` talks to a running coordinator through the generated Connect client
// (Connect protocol over HTTP/1.1). The CLI reads no environment variables: the coordinator's
// address and token come from --url and --token.
import { ConnectError, createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { Command as Program, CommanderError } from "commander";
import { QueueService } from "../../gen/leasehold/queue/v1/queue_pb.js";
import { intOption } from "./args.js";
import { camelCase, DEFAULT_URL, GLOBAL_OPTIONS, type CommandSpec, type Invocation } from "./command.js";
import { inspectCommands } from "./commands/inspect.js";
import { jobCommands } from "./commands/job.js";
import { scheduleCommands } from "./commands/schedule.js";
import { tokenCommands } from "./commands/token.js";
import { workloadCommands } from "./commands/workload.js";
import { CliError, describeConnectError, UsageError } from "./errors.js";
import { usage } from "./usage.js";

/** Every command, in the order the usage text lists them. */
export const COMMANDS: readonly CommandSpec[] = [
  ...tokenCommands,
  ...workloadCommands,
  ...jobCommands,
  ...inspectCommands,
  ...scheduleCommands,
];

export const USAGE = usage(COMMANDS);

/** The global options, as commander parses them wherever they stand on the line. */
interface GlobalOptions {
  url?: string;
  token?: string;
  json?: boolean;
  timeoutMs?: string;
}

function transportFor(url: string, token: string | undefined) {
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
  return createConnectTransport({ baseUrl: url, httpVersion: "1.1", interceptors });
}

async function runCommand(
  cmd: CommandSpec,
  positionals: string[],
  parsed: Record<string, unknown>,
  globals: GlobalOptions,
): Promise<number> {
  if (positionals.some((p) => p === "")) throw new UsageError(`${cmd.name}: empty ${cmd.positionals.join(" ")}`);
  const timeoutMs = intOption("timeout-ms", globals.timeoutMs, 1);
  const opts: Invocation["opts"] = {};
  for (const { name } of cmd.options) opts[name] = parsed[camelCase(name)] as Invocation["opts"][string];
  let client: Client<typeof QueueService> | undefined;
  const inv: Invocation = {
    get client() {
      return (client ??= createClient(QueueService, transportFor(globals.url ?? DEFAULT_URL, globals.token)));
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
function buildProgram(result: { code: number }): Program {
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
      if (o.repeatable) sub.option(`--${o.name} <VALUE>`, "", (v: string, all: string[] = []) => [...all, v]);
      else sub.option(o.value ? `--${o.name} <VALUE>` : `--${o.name}`);
    }
    sub.action(async (...args: unknown[]) => {
      const command = args[args.length - 1] as Program;
      const positionals = args.slice(0, cmd.positionals.length) as string[];
      result.code = await runCommand(cmd, positionals, command.opts(), command.optsWithGlobals<GlobalOptions>());
    });
  }
  return program;
}

export async function main(argv: string[]): Promise<number> {
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
    await buildProgram(result).parseAsync(argv, { from: "user" });
    return result.code;
  } catch (err) {
    if (err instanceof ConnectError) {
      process.stderr.write(`leasehold: ${describeConnectError(err)}\n`);
      return 1;
    }
    if (err instanceof CommanderError) {
      if (err.code === "commander.helpDisplayed" || err.code === "commander.version") return 0;
      // "job" alone (a group without its command) asks commander for help: that is bad usage too.
      const message = err.code === "commander.help" ? "missing command" : err.message.replace(/^error: /, "");
      process.stderr.write(`leasehold: ${message}\n${USAGE}`);
      return 2;
    }
    if (err instanceof UsageError) {
      process.stderr.write(`leasehold: ${err.message}\n${USAGE}`);
      return 2;
    }
    if (err instanceof CliError) {
      process.stderr.write(`leasehold: ${err.message}\n`);
      return 1;
    }
    throw err;
  }
}
