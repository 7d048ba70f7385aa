// The usage text, made from the commands' and the global options' declarations (command.ts), so a
// new option appears in the parser and in the help at once.
import { GLOBAL_OPTIONS, type CommandSpec, type OptionSpec } from "./command.js";

/** Where the descriptions start, and the width synopses wrap at. */
const COLUMN = 33;
const WIDTH = 80;

function optionWord(o: OptionSpec): string {
  const flag = o.short ? `-${o.short}` : `--${o.name}`;
  const word = `${o.value ? `${flag} ${o.value}` : flag}${o.repeatable ? " …" : ""}`;
  return o.required ? word : `[${word}]`;
}

/** "  job tasks ID [--status …]" wrapped under its first argument, then the summary at COLUMN. */
function commandLines(cmd: CommandSpec): string[] {
  const indent = " ".repeat(2 + cmd.name.length + 1);
  const lines = [`  ${cmd.name}`];
  for (const word of [...cmd.positionals, ...cmd.options.map(optionWord)]) {
    const last = lines[lines.length - 1];
    if (last.length + 1 + word.length > WIDTH && last.trim() !== "") lines.push(`${indent}${word}`);
    else lines[lines.length - 1] = `${last} ${word}`;
  }
  const [first, ...more] = cmd.summary;
  const last = lines[lines.length - 1];
  if (last.length < COLUMN) lines[lines.length - 1] = `${last.padEnd(COLUMN)}${first}`;
  else lines.push(`${" ".repeat(COLUMN)}${first}`);
  return [...lines, ...more.map((m) => `${" ".repeat(COLUMN)}${m}`)];
}

function optionLines(o: OptionSpec): string[] {
  const [first, ...more] = (o.help ?? "").split("\n");
  const name = `${o.short ? `-${o.short}, ` : ""}--${o.name}`;
  return [`  ${name.padEnd(12)}  ${first}`, ...more.map((m) => `${" ".repeat(16)}${m}`)];
}

export function usage(commands: readonly CommandSpec[]): string {
  const global = GLOBAL_OPTIONS.map(optionWord).join(" ");
  const explained = [...GLOBAL_OPTIONS, ...commands.flatMap((c) => c.options)].filter((o) => o.help);
  return [
    `usage: leasehold ${global} COMMAND …`,
    "",
    ...commands.flatMap(commandLines),
    "",
    ...explained.flatMap(optionLines),
    "",
    "exit codes: 0 success (job or workflow watch: it completed), 1 error or it failed,",
    "            2 bad usage, 3 the watched job or workflow was cancelled",
    "",
  ].join("\n");
}

/**
 * What a bad option value or a missing argument prints after its one-line message: the synopsis
 * of the commands meant (one, or a group's when only the group is known) and their options'
 * help, not the whole usage text.
 */
export function commandUsage(commands: readonly CommandSpec[]): string {
  const global = GLOBAL_OPTIONS.map(optionWord).join(" ");
  const explained = commands.flatMap((c) => c.options).filter((o) => o.help);
  return [
    `usage: leasehold ${global} COMMAND …`,
    ...commands.flatMap(commandLines),
    ...explained.flatMap(optionLines),
    "(leasehold help: every command and option)",
    "",
  ].join("\n");
}
