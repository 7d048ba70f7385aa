// The NOTIFY channels the store raises and the coordinator's LISTEN connection (listener.ts) hears.

// Wake-ups of claims: payload "<workload>:<count>", the workload whose tasks became claimable and
// how many (so a coordinator wakes no more parked claims than there is work). pg_notify inside the
// writing transaction is delivered only at commit, so a woken claimer always finds the rows.
export const NOTIFY_CHANNEL = "leasehold_tasks";
// Channel of job events (payload: the job id), raised by the status-event triggers and by
// REPORT_PROGRESS, only for jobs with a row in job_watchers (see the migration for why).
export const EVENTS_CHANNEL = "leasehold_events";
