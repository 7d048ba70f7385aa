// `account put`, `account get` and `account list` (admin RPCs: PutAccount, GetAccount,
// ListAccounts): an account's quota of pending tasks and the priority of its jobs that set none.
import {
  GetAccountResponseSchema,
  ListAccountsResponseSchema,
  PutAccountResponseSchema,
  type Account,
} from "../../../gen/leasehold/queue/v1/queue_pb.js";
import { intOption } from "../args.js";
import type { CommandSpec } from "../command.js";
import { UsageError } from "../errors.js";
import { jsonOf, out, printJson, table, time } from "../format.js";

/** A signed integer option (a priority may be negative); undefined when absent. */
function signedIntOption(name: string, value: unknown): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== "string" || !/^-?\d+$/.test(value) || Math.abs(Number(value)) > 2 ** 31 - 1) {
    throw new UsageError(`--${name} must be an integer, not ${JSON.stringify(value)}`);
  }
  return Number(value);
}

/** "account acme: max_pending_tasks 100, priority 5, pending_tasks 3". */
function accountLine(a: Account | undefined): string {
  if (a === undefined) return "account ?";
  const quota = a.maxPendingTasks > 0 ? String(a.maxPendingTasks) : "none";
  return `account ${a.name}: max_pending_tasks ${quota}, priority ${a.priority}, pending_tasks ${a.pendingTasks}`;
}

export const accountCommands: CommandSpec[] = [
  {
    name: "account put",
    positionals: ["NAME"],
    options: [
      { name: "max-pending-tasks", value: "N" },
      { name: "priority", value: "N" },
    ],
    summary: [
      "register an account or change its settings (both",
      "are replaced: one left out goes back to its default,",
      "no quota and priority 0)",
    ],
    async run({ client, callOptions, json, args: [name], opts }) {
      const maxPendingTasks = intOption("max-pending-tasks", opts["max-pending-tasks"]) ?? 0;
      const priority = signedIntOption("priority", opts.priority) ?? 0;
      const res = await client.putAccount({ name, maxPendingTasks, priority }, callOptions);
      if (json) printJson(jsonOf(PutAccountResponseSchema, res));
      else out(accountLine(res.account));
      return 0;
    },
  },
  {
    name: "account get",
    positionals: ["NAME"],
    options: [],
    summary: ["an account's settings and its pending tasks now"],
    async run({ client, callOptions, json, args: [name] }) {
      const res = await client.getAccount({ name }, callOptions);
      if (json) printJson(jsonOf(GetAccountResponseSchema, res));
      else out(accountLine(res.account));
      return 0;
    },
  },
  {
    name: "account list",
    positionals: [],
    options: [],
    summary: ["the accounts: quota (- for none), priority and", "pending tasks of each"],
    async run({ client, callOptions, json }) {
      const res = await client.listAccounts({}, callOptions);
      if (json) printJson(jsonOf(ListAccountsResponseSchema, res));
      else if (res.accounts.length === 0) out("no accounts");
      else {
        const rows = res.accounts.map((a) => [
          a.name,
          a.maxPendingTasks > 0 ? String(a.maxPendingTasks) : "-",
          String(a.priority),
          String(a.pendingTasks),
          time(a.updatedAt),
        ]);
        out(table([["NAME", "MAX_PENDING_TASKS", "PRIORITY", "PENDING", "UPDATED"], ...rows]));
      }
      return 0;
    },
  },
];
