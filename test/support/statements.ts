// The text of store statements that tests EXPLAIN or PREPARE themselves, with positional parameters
// as the store sends them.
import * as inspection from "../../src/store/postgres/operations/inspection.js";
import * as jobs from "../../src/store/postgres/operations/jobs.js";
import * as watch from "../../src/store/postgres/operations/watch.js";

export { CLAIM_TASKS } from "../../src/store/postgres/operations/claim.js";
export { COMPLETE_TASKS } from "../../src/store/postgres/operations/complete.js";
export { REAPER_DUE } from "../../src/store/postgres/background/lease-reaper.js";
export const LIST_FAILED_TASKS = inspection.LIST_FAILED_TASKS.text;
export const LIST_TASKS = inspection.LIST_TASKS.text;
export const TASK_ATTEMPT_EVENTS = inspection.TASK_ATTEMPT_EVENTS.text;
export const JOB_FAILURE = jobs.JOB_FAILURE.text;
export const LIST_JOBS = jobs.LIST_JOBS.text;
export const LIST_JOBS_BY_STATUS = jobs.LIST_JOBS_BY_STATUS.text;
export const LIST_JOBS_BY_ACCOUNT = jobs.LIST_JOBS_BY_ACCOUNT.text;
export const SELECT_ACCOUNT_TASK = inspection.SELECT_ACCOUNT_TASK.text;
export const JOB_EVENTS_SINCE = watch.JOB_EVENTS_SINCE.text;
