-- An event with a key is stored once (AddEvent): a unique index makes that
-- the database's rule, so that recording one is a single INSERT … ON
-- CONFLICT DO NOTHING instead of a transaction that counted the key first
-- (five round trips per event, two events per small job). Copies
-- left by a race of the old count-then-insert are dropped first, the oldest
-- kept. Events without a key (from before keys) are not constrained.
DELETE FROM job_events WHERE event_key <> '' AND id NOT IN (
  SELECT MIN(id) FROM job_events WHERE event_key <> '' GROUP BY job_id, event_key);
DROP INDEX idx_job_events_job_key;
CREATE UNIQUE INDEX idx_job_events_job_key ON job_events (job_id, event_key) WHERE event_key <> '';
