-- A job's events of one kind, newest first, are what every status read
-- and every recorded event (its trim to the newest few) asks for. With only
-- (kind, created_at) and (job_id) indexes, SQLite answered the status read
-- by walking every event of that kind in the database, newest first, until
-- it had found the job's: a cost that grew with the table. This
-- index answers it from the job's own entries; it also serves every query
-- that the single-column job_id index served, which goes.
CREATE INDEX idx_job_events_job_kind_created ON job_events (job_id, kind, created_at);
DROP INDEX idx_job_events_job_id;
