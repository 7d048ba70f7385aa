-- Up Migration

-- An account's unfinished jobs, for the count of its pending tasks that GetAccount, ListAccounts
-- and CreateJob's quota read (each such job's pending tasks then through tasks_job_unfinished_idx):
-- small, as a job leaves it when it ends, where jobs_account_idx holds every job the account ever had.
CREATE INDEX jobs_account_open_idx ON jobs (account)
  WHERE account IS NOT NULL AND status IN ('pending', 'running');

-- Down Migration

DROP INDEX jobs_account_open_idx;
