// Periodic schedules: `schedule put|get|list|delete|pause|resume` (admin RPCs).
import { fromJson } from "@bufbuild/protobuf";
import {
  CatchUpPolicy,
  CreateJobRequestSchema,
  DeleteScheduleResponseSchema,
  GetScheduleResponseSchema,
  ListSchedulesResponseSchema,
  OverlapPolicy,
  PauseScheduleResponseSchema,
  PutScheduleResponseSchema,
  ResumeScheduleResponseSchema,
  type Schedule,
} from "../../../gen/leasehold/queue/v1/queue_pb.js";
import { intOption, readInput, readJsonFile, stringOption } from "../args.js";
import type { CommandSpec } from "../command.js";
import { CliError, UsageError } from "../errors.js";
import { jsonOf, out, printJson, table, time } from "../format.js";

const OVERLAP: Record<string, OverlapPolicy> = { allow: OverlapPolicy.ALLOW, skip: OverlapPolicy.SKIP };
const CATCH_UP: Record<string, CatchUpPolicy> = { skip: CatchUpPolicy.SKIP, one: CatchUpPolicy.ONE, all: CatchUpPolicy.ALL };

function policy<T>(option: string, value: string | string[] | boolean | undefined, table: Record<string, T>): T | undefined {
  const v = stringOption(value);
  if (v === undefined) return undefined;
  if (!(v in table)) throw new UsageError(`--${option} must be one of ${Object.keys(table).join(", ")}, not ${JSON.stringify(v)}`);
  return table[v];
}

const overlapName = (p: OverlapPolicy) => Object.keys(OVERLAP).find((k) => OVERLAP[k] === p) ?? "allow";
const catchUpName = (p: CatchUpPolicy) => Object.keys(CATCH_UP).find((k) => CATCH_UP[k] === p) ?? "one";

/** A schedule as lines: its settings, its template's workload, its next fire times. */
function describe(s: Schedule | undefined): void {
  if (!s) return;
  out(`schedule ${s.name}${s.paused ? " (paused)" : ""}: ${s.cron} in ${s.timezone}, workload ${s.job?.workload ?? "?"}`);
  out(
    `overlap ${overlapName(s.overlap)}, catch-up ${catchUpName(s.catchUp)}${s.catchUp === CatchUpPolicy.ALL ? ` (at most ${s.maxCatchUp})` : ""}`,
  );
  if (s.lastFireTime) out(`last fired ${time(s.lastFireTime)}: job ${s.lastJobId}`);
  out(s.nextFireTimes.length === 0 ? "next: none" : `next: ${s.nextFireTimes.map(time).join(", ")}`);
}

export const scheduleCommands: CommandSpec[] = [
  {
    name: "schedule put",
    positionals: ["NAME"],
    options: [
      { name: "cron", value: "EXPR" },
      { name: "timezone", value: "TZ" },
      { name: "job", value: "FILE.json|-" },
      { name: "overlap", value: "allow|skip" },
      { name: "catch-up", value: "skip|one|all" },
      { name: "max-catch-up", value: "N" },
    ],
    summary: [
      "create or replace a periodic schedule: --cron (5 fields, or 6 with seconds),",
      "--job a CreateJobRequest in proto JSON made on each tick",
    ],
    async run({ client, callOptions, json, args: [name], opts }) {
      const cron = stringOption(opts.cron);
      if (cron === undefined) throw new UsageError("schedule put: --cron is required");
      const file = stringOption(opts.job);
      if (file === undefined) throw new UsageError("schedule put: --job FILE.json (or - for stdin) is required");
      const source = file === "-" ? "stdin" : file;
      let job;
      try {
        job = fromJson(CreateJobRequestSchema, readJsonFile(source, await readInput(file)));
      } catch (err) {
        if (err instanceof CliError) throw err;
        throw new CliError(`${source}: not a CreateJobRequest: ${(err as Error).message}`);
      }
      const res = await client.putSchedule(
        {
          name,
          cron,
          timezone: stringOption(opts.timezone) ?? "",
          job,
          overlap: policy("overlap", opts.overlap, OVERLAP),
          catchUp: policy("catch-up", opts["catch-up"], CATCH_UP),
          maxCatchUp: intOption("max-catch-up", opts["max-catch-up"], 1),
        },
        callOptions,
      );
      if (json) printJson(jsonOf(PutScheduleResponseSchema, res));
      else {
        out(res.created ? `created schedule ${name}` : `replaced schedule ${name}`);
        describe(res.schedule);
      }
      return 0;
    },
  },
  {
    name: "schedule get",
    positionals: ["NAME"],
    options: [],
    summary: ["a schedule with its next fire times"],
    async run({ client, callOptions, json, args: [name] }) {
      const res = await client.getSchedule({ name }, callOptions);
      if (json) printJson(jsonOf(GetScheduleResponseSchema, res));
      else describe(res.schedule);
      return 0;
    },
  },
  {
    name: "schedule list",
    positionals: [],
    options: [],
    summary: ["list the schedules with their next fire time"],
    async run({ client, callOptions, json }) {
      const res = await client.listSchedules({}, callOptions);
      if (json) printJson(jsonOf(ListSchedulesResponseSchema, res));
      else if (res.schedules.length === 0) out("no schedules");
      else {
        const rows = res.schedules.map((s) => [
          s.name,
          s.cron,
          s.timezone,
          s.job?.workload ?? "",
          s.paused ? "paused" : "active",
          s.nextFireTimes.length > 0 ? time(s.nextFireTimes[0]) : "-",
          s.lastFireTime ? time(s.lastFireTime) : "-",
        ]);
        out(table([["NAME", "CRON", "TIMEZONE", "WORKLOAD", "STATE", "NEXT", "LAST"], ...rows]));
      }
      return 0;
    },
  },
  {
    name: "schedule delete",
    positionals: ["NAME"],
    options: [],
    summary: ["delete a schedule (the jobs it created stay)"],
    async run({ client, callOptions, json, args: [name] }) {
      const res = await client.deleteSchedule({ name }, callOptions);
      if (json) printJson(jsonOf(DeleteScheduleResponseSchema, res));
      else out(`deleted schedule ${name}`);
      return 0;
    },
  },
  {
    name: "schedule pause",
    positionals: ["NAME"],
    options: [],
    summary: ["stop a schedule's ticks until it is resumed (missed ticks are not caught up)"],
    async run({ client, callOptions, json, args: [name] }) {
      const res = await client.pauseSchedule({ name }, callOptions);
      if (json) printJson(jsonOf(PauseScheduleResponseSchema, res));
      else out(`paused schedule ${name}`);
      return 0;
    },
  },
  {
    name: "schedule resume",
    positionals: ["NAME"],
    options: [],
    summary: ["resume a paused schedule from its next tick"],
    async run({ client, callOptions, json, args: [name] }) {
      const res = await client.resumeSchedule({ name }, callOptions);
      if (json) printJson(jsonOf(ResumeScheduleResponseSchema, res));
      else {
        out(`resumed schedule ${name}`);
        describe(res.schedule);
      }
      return 0;
    },
  },
];
