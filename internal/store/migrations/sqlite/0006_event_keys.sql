-- An event's key names it within its workflow run (run id and sequence):
-- a workflow task that is retried runs its local activities again, and an
-- event recorded again under the same key is stored once. Empty for events
-- from before it.
ALTER TABLE job_events ADD COLUMN event_key VARCHAR(80) NOT NULL DEFAULT '';
CREATE INDEX idx_job_events_job_key ON job_events (job_id, event_key);
