import type {
  CallOptions,
  CancelJobInput,
  ClaimTasksInput,
  CompleteOutcome,
  CompleteTaskInput,
  CreateJobInput,
  CreateJobResult,
  ExpireLeasesResult,
  FailTaskInput,
  Job,
  JobStatusResult,
  ListCompletedResultsInput,
  ListCompletedResultsResult,
  PutWorkloadInput,
  RenewLeaseInput,
  Task,
  Workload,
} from "./types.js";

/**
 * The one surface every transport calls. Implementations validate their input
 * (throwing ValidationError before touching the database) and throw only the
 * typed errors of ./errors.ts.
 */
export interface QueueService {
  createJob(input: CreateJobInput, opts?: CallOptions): Promise<CreateJobResult>;
  /** Leases up to maxTasks tasks; an empty array when nothing is claimable. */
  claimTasks(input: ClaimTasksInput, opts?: CallOptions): Promise<Task[]>;
  renewLease(input: RenewLeaseInput, opts?: CallOptions): Promise<Task>;
  completeTask(input: CompleteTaskInput, opts?: CallOptions): Promise<Task>;
  /** Completes many leased tasks in one statement, each under the same lease and replay rules as completeTask. */
  completeTasks(inputs: CompleteTaskInput[], opts?: CallOptions): Promise<CompleteOutcome[]>;
  failTask(input: FailTaskInput, opts?: CallOptions): Promise<Task>;
  expireLeases(opts?: CallOptions): Promise<ExpireLeasesResult>;
  getJobStatus(jobId: string, opts?: CallOptions): Promise<JobStatusResult>;
  listCompletedResults(input: ListCompletedResultsInput, opts?: CallOptions): Promise<ListCompletedResultsResult>;
  cancelJob(input: CancelJobInput, opts?: CallOptions): Promise<Job>;
  putWorkload(input: PutWorkloadInput, opts?: CallOptions): Promise<Workload>;
  listWorkloads(opts?: CallOptions): Promise<Workload[]>;
}
