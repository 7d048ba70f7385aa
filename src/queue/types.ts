// Where the domain's types live: one file a family under src/queue/types/ (jobs and tasks,
// workers' calls, workloads, accounts, schedules), each importing only the families it builds on.
// Every module imports them from here, so a type's home is found in one hop. Plain objects only:
// no pg rows and no generated proto types cross this boundary. Rules (validation) live beside, in
// src/queue/*-validation.ts and *-rules.ts; the interfaces the layers implement in service.ts.

export * from "./types/jobs.js";
export * from "./types/tasks.js";
export * from "./types/workloads.js";
export * from "./types/accounts.js";
export * from "./types/schedules.js";
export * from "./types/workflows.js";
