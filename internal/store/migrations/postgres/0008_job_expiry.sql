-- Retention of job folders: when a finished job's folder was
-- removed after KINFLOW_JOB_RETENTION_DAYS. The index finds the finished
-- jobs that are due.
ALTER TABLE jobs ADD COLUMN expired_at TIMESTAMPTZ;
CREATE INDEX idx_jobs_completed_at ON jobs (completed_at);
