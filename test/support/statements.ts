// The text of store statements that tests EXPLAIN or PREPARE themselves, with positional parameters
// as the store sends them.
export { CLAIM_TASKS } from "../../src/store/postgres/claim.js";
export { COMPLETE_TASKS } from "../../src/store/postgres/complete.js";
export { LIST_FAILED_TASKS, LIST_TASKS, TASK_ATTEMPT_EVENTS } from "../../src/store/postgres/inspection.js";
export { JOB_FAILURE, LIST_JOBS, LIST_JOBS_BY_STATUS } from "../../src/store/postgres/jobs.js";
export { JOB_EVENTS_SINCE } from "../../src/store/postgres/watch.js";
